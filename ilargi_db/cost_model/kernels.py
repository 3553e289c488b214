"""Kernel cost models: the seconds of each step a training runs, from its shape.

A plan (:mod:`~ilargi_db.cost_model.plan`) is a list of steps; each step is one
*kernel* run on a shape. A kernel's seconds are linear in a few *work terms* of
its shape (cells of a dense block, stored entries of a sparse one, rows
gathered per block, ...) plus a fixed cost per call:

    seconds = fixed + sum_t coefficient_t * term_t

so one model per kernel carries to shapes it never saw. The coefficients start
as roofline priors (bytes over the measured memory bandwidth, FLOPs over the
measured FLOP rate, per-row costs of DuckDB's hash joins and string encoding)
and are refitted per machine by micro-benchmarks (``ilargi calibrate``,
:mod:`ilargi_db.calibration`) with non-negative least squares.

The matrix kernels work on a :class:`MatrixShape`: what the normalized matrix
of either strategy is made of. Both strategies build the same kinds of parts:
a dense block in output order (the fact's numeric columns; all numeric columns
of the materialized join) and *gathered* parts, each a small block read through
an index of length n (a dimension's rows; a categorical feature's identity
block of its categories). Factorizing moves work from n-row dense blocks into
small blocks and gathers; the cost model weighs exactly that.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ilargi_db.backend.parallel import other_running_tasks
from ilargi_db.cost_model.hardware import Hardware, cache_dir
from ilargi_db.cost_model.spread import kernel_spread
from ilargi_db.errors import IlargiError
from ilargi_db.models.catalog import Choice, SolverName, Strategy

# 3: fits before it timed memoized X^T X (0 s); 4: solves timed as the normal solver runs them (one BLAS thread,
# singular Gram matrices too). A file of another format is ignored: the priors serve.
FORMAT_VERSION = 4
CACHE_BYTES = 8 << 20  # a gathered block larger than about this misses the caches (a server's L2 + share of L3)


class Term(Choice):
    """A work term: a count of one kind of work in a step, which a kernel's seconds are linear in. The calibration
    file stores each kernel's coefficients by these names (a member is its name: ``Term.PARTS == "parts"``)."""

    FIXED = "fixed"  # once per call (its coefficient is the fixed cost; no step counts it)
    # the gathered-matrix kernels (X @ W, X.T @ V, k-means' nearest centroid and group sums)
    DENSE_CELLS = "dense_cells"  # cells of the dense block, times the iterate's columns
    BLOCK_ENTRIES = "block_entries"  # stored entries of the small gathered blocks
    GATHERED_ROWS = "gathered_rows"  # rows read through an index, per gathered part
    UNCACHED_ROWS = "uncached_rows"  # of those, the ones from blocks larger than the caches
    PARTS = "parts"  # gathered parts (a call's per-part overhead)
    # X.T @ X
    DENSE_GRAM = "dense_gram"  # the dense block's Gram matrix, n p^2
    DENSE_BY_GATHERED = "dense_by_gathered"  # dense columns segment-summed into each gathered block's rows
    DENSE_BY_BLOCK = "dense_by_block"  # those sums times the blocks
    GATHERED_PAIRS = "gathered_pairs"  # co-occurrences of two gathered blocks' entries
    OUTPUT_CELLS = "output_cells"  # the d x d result
    BLOCK_GRAM = "block_gram"  # each block's own Gram matrix
    # a solver's work besides the matrix kernels
    ITERATIONS = "iterations"
    PART_ITERATIONS = "part_iterations"
    ROW_ITERATIONS = "row_iterations"
    # DuHL's coordinate steps
    CELLS = "cells"  # values of the held rows stepped over (dense cells, or stored entries)
    ROWS = "rows"  # rows stepped over
    COPIED_CELLS = "copied_cells"  # values written as the rows are held
    # a dense solve
    FLOPS = "flops"  # a Cholesky factorization's
    LSTSQ_FLOPS = "lstsq_flops"  # a least-squares solve's, where the matrix is singular
    # reading from DuckDB
    PROBES = "probes"  # hash-join probes
    NUMERIC_CELLS = "numeric_cells"  # numbers fetched through Arrow
    STRING_VALUES = "string_values"  # category values fetched and encoded
    INDEX_ENTRIES = "index_entries"  # row numbers of the key-only join fetched
    QUERIES = "queries"  # statements DuckDB runs
    BYTES = "bytes"  # bytes copied to a device


WorkTerms = dict[Term, float]  # a step's work: each term's count
COMPUTE_TERMS = frozenset({Term.DENSE_GRAM, Term.BLOCK_GRAM, Term.FLOPS, Term.LSTSQ_FLOPS})  # FLOP-bound, not bytes


@dataclass(frozen=True)
class GatheredPart:
    """A block read through an index of length n: ``rows`` x ``width``, ``nnz`` stored entries."""

    rows: int
    width: int
    nnz: int

    @property
    def density(self) -> float:
        """Stored entries per block row: what one gathered output row reads."""
        return self.nnz / max(self.rows, 1)


@dataclass(frozen=True)
class MatrixShape:
    """The parts of one strategy's matrix: ``n`` rows, a dense block of ``dense`` columns, gathered parts."""

    n: int
    dense: int
    parts: tuple[GatheredPart, ...] = ()

    @property
    def columns(self) -> int:
        return self.dense + sum(p.width for p in self.parts)

    @property
    def entries_per_row(self) -> float:
        """The entries a row stores: the dense columns, and each gathered block's per block row."""
        return self.dense + sum(p.density for p in self.parts)

    def describe(self) -> str:
        """E.g. ``336,776 rows: 3 dense columns, 2 gathered blocks (1,200 x 14)``."""
        text = f"{self.n:,} rows"
        pieces = []
        if self.dense:
            pieces.append(f"{self.dense} dense column{'s' * (self.dense != 1)}")
        if self.parts:
            rows = sum(p.rows for p in self.parts)
            width = sum(p.width for p in self.parts)
            pieces.append(f"{len(self.parts)} gathered block{'s' * (len(self.parts) != 1)} ({rows:,} x {width:,})")
        return text + (": " + ", ".join(pieces) if pieces else "")


def matrix_terms(kernel: Kernel, shape: MatrixShape, k: int = 1) -> WorkTerms:
    """The work terms of a matrix kernel on ``shape`` with an iterate of ``k`` columns.

    >>> shape = MatrixShape(1000, 2, (GatheredPart(10, 3, 30),))
    >>> matrix_terms(Kernel.LMM, shape)[Term.GATHERED_ROWS], matrix_terms(Kernel.CROSSPROD, shape)[Term.DENSE_GRAM]
    (1000.0, 4000.0)
    """
    n, p, parts = float(shape.n), float(shape.dense), shape.parts
    if kernel in GATHERING:
        # A gather from a block larger than the caches misses them on most rows: counted apart.
        uncached = sum(min(1.0, 8.0 * q.nnz / CACHE_BYTES) for q in parts)
        return {
            Term.DENSE_CELLS: n * p * k,
            Term.BLOCK_ENTRIES: float(sum(q.nnz for q in parts)) * k,
            Term.GATHERED_ROWS: n * len(parts) * k,
            Term.UNCACHED_ROWS: n * uncached * k,
            Term.PARTS: float(len(parts)),
        }
    if kernel == Kernel.CROSSPROD:
        densities = [q.density for q in parts]
        pairs = sum(a * b for i, a in enumerate(densities) for b in densities[i + 1 :])
        return {
            Term.DENSE_GRAM: n * p * p,
            # Each dense column segment-summed into each gathered block's rows, then times the block.
            Term.DENSE_BY_GATHERED: n * p * len(parts),
            Term.DENSE_BY_BLOCK: p * float(sum(q.nnz for q in parts)),
            Term.GATHERED_PAIRS: n * pairs,
            Term.OUTPUT_CELLS: float(shape.columns) ** 2,  # the d x d result, dense: wide one-hot makes it the cost
            Term.BLOCK_GRAM: float(sum(q.nnz * q.density for q in parts)),
            Term.PARTS: float(len(parts)) ** 2,
        }
    raise ValueError(f"unknown matrix kernel {kernel!r}")


def solver_terms(shape: MatrixShape, iterations: float, k: int = 1) -> WorkTerms:
    """What a solver does around the matrix kernels: per iteration, per part and per row (loss, updates, Python)."""
    return {
        Term.ITERATIONS: float(iterations),
        Term.PART_ITERATIONS: float(iterations) * (len(shape.parts) + 1),
        Term.ROW_ITERATIONS: float(iterations) * shape.n * k,
    }


SOLVERS = tuple(SolverName)


def sdca_terms(rows: float, columns: float, epochs: float = 0.0, copies: float = 0.0) -> WorkTerms:
    """DuHL's coordinate steps on rows of ``columns`` values each (dense columns, or stored entries): ``epochs``
    passes of one step a row (a dot product and an update of w: two reads of the row), and ``copies`` of the rows
    as held."""
    return {Term.CELLS: rows * columns * epochs, Term.ROWS: rows * epochs, Term.COPIED_CELLS: rows * columns * copies}


def solve_terms(d: int, singular: bool = False) -> WorkTerms:
    """A dense symmetric solve of order ``d``: a Cholesky factorization, and when the matrix is singular (a full
    one-hot encoding beside an intercept) the minimum-norm least-squares solve that follows it."""
    return {Term.FLOPS: float(d) ** 3 / 3, Term.LSTSQ_FLOPS: float(d) ** 3 if singular else 0.0}


@dataclass(frozen=True)
class DataShape:
    """What one strategy reads out of DuckDB."""

    join_rows: int  # rows the join produces (key-only or full)
    join_sources: int  # sources joined (probes per output row)
    numeric_cells: int  # numeric values fetched through Arrow
    string_values: int  # categorical values fetched and encoded
    index_entries: int  # row numbers of the key-only join (factorized) fetched
    queries: int = 1  # statements DuckDB runs (factorized: the key-only join and one scan per source)

    def describe(self) -> str:
        text = f"{self.join_rows:,} rows x {self.join_sources} source{'s' * (self.join_sources != 1)}"
        return text + f", {self.numeric_cells:,} numbers, {self.string_values:,} category values"


def data_terms(shape: DataShape) -> WorkTerms:
    return {
        Term.PROBES: float(shape.join_rows) * max(shape.join_sources - 1, 0),
        Term.NUMERIC_CELLS: float(shape.numeric_cells),
        Term.STRING_VALUES: float(shape.string_values),
        Term.INDEX_ENTRIES: float(shape.index_entries),
        Term.QUERIES: float(shape.queries),
    }


def transfer_terms(nbytes: float) -> WorkTerms:
    return {Term.BYTES: float(nbytes)}


class Kernel(Choice):
    """What a plan's step runs: the key its coefficients have in the cost models (and in the calibration file, which
    stores them by these names). A member is its name (``Kernel.LMM == "lmm"``)."""

    FACTORIZED_DATA = "factorized_data"
    MATERIALIZED_DATA = "materialized_data"
    TO_DEVICE = "to_device"
    LMM = "lmm"
    RMM = "rmm"
    NEAREST = "nearest"
    GROUP_SUMS = "group_sums"
    CROSSPROD = "crossprod"
    SOLVE = "solve"
    SDCA = "sdca"
    PLANNING = "planning"  # measured while it runs, never priced
    # Steps priced outside the kernel models (their own rates), with a prior's spread:
    REUSE = "reuse"  # what an earlier job stored, read back
    SPILL = "spill"  # partitions written to disk
    STREAM = "stream"  # the partitions read again on a streamed job's later passes
    CLUSTER = "cluster"  # a cluster's scheduling
    NORMAL_OVERHEAD = "normal_overhead"
    CG_OVERHEAD = "cg_overhead"
    GD_OVERHEAD = "gd_overhead"
    LBFGS_OVERHEAD = "lbfgs_overhead"
    NEWTON_OVERHEAD = "newton_overhead"
    LLOYD_OVERHEAD = "lloyd_overhead"
    MU_OVERHEAD = "mu_overhead"
    HISTOGRAM_OVERHEAD = "histogram_overhead"
    DUHL_OVERHEAD = "duhl_overhead"

    @classmethod
    def data(cls, strategy: str) -> Kernel:
        """Reading the training rows by ``strategy`` (factorized or materialized)."""
        return _DATA[strategy]

    @classmethod
    def overhead(cls, solver: str) -> Kernel:
        """What ``solver`` does besides the matrix kernels (its loss, its updates)."""
        return _OVERHEADS[solver]

    @property
    def description(self) -> str:
        """What the kernel is, for explanations and the calibration report."""
        if self in _SOLVER_OF:
            return f"what the {_SOLVER_OF[self]} solver does besides the matrix kernels (loss, updates)"
        return _DESCRIPTIONS[self]

    @property
    def parallel(self) -> bool:
        """Whether it uses every core: a busy machine slows it most (the solve runs with BLAS on one thread)."""
        return self in _PARALLEL


_DATA = {Strategy.FACTORIZED: Kernel.FACTORIZED_DATA, Strategy.MATERIALIZED: Kernel.MATERIALIZED_DATA}
_OVERHEADS = {
    SolverName.NORMAL: Kernel.NORMAL_OVERHEAD,
    SolverName.CG: Kernel.CG_OVERHEAD,
    SolverName.GD: Kernel.GD_OVERHEAD,
    SolverName.LBFGS: Kernel.LBFGS_OVERHEAD,
    SolverName.NEWTON: Kernel.NEWTON_OVERHEAD,
    SolverName.LLOYD: Kernel.LLOYD_OVERHEAD,
    SolverName.MU: Kernel.MU_OVERHEAD,
    SolverName.HISTOGRAM: Kernel.HISTOGRAM_OVERHEAD,
    SolverName.DUHL: Kernel.DUHL_OVERHEAD,
}
_SOLVER_OF = {kernel: solver for solver, kernel in _OVERHEADS.items()}
_DESCRIPTIONS = {
    Kernel.FACTORIZED_DATA: "the key-only join and a scan of each source, Arrow to arrays, categories encoded",
    Kernel.MATERIALIZED_DATA: "the joined rows from DuckDB, Arrow to arrays, categories encoded",
    Kernel.TO_DEVICE: "copying the arrays to the GPU",
    Kernel.LMM: "X @ W (dense block product, small-block products, gathers)",
    Kernel.RMM: "X.T @ V (dense block product, segment sums, small-block products)",
    Kernel.NEAREST: "each row's nearest centroid (k-means: X @ C.T and the arg-min, fused)",
    Kernel.GROUP_SUMS: "sums of the rows of each cluster (k-means)",
    Kernel.CROSSPROD: "X.T @ X (dense Gram, scatter of dense columns, co-occurrence of gathered blocks)",
    Kernel.SOLVE: "a dense d x d solve",
    Kernel.SDCA: "DuHL's dual coordinate steps, row by row on one core, and holding the rows (dense, or their entries)",
    Kernel.PLANNING: "choosing the plan (measured)",
    Kernel.REUSE: "reading back what an earlier job stored",
    Kernel.SPILL: "writing the partitions to disk",
    Kernel.STREAM: "reading the partitions again",
    Kernel.CLUSTER: "scheduling a cluster's tasks",
}
_PARALLEL = frozenset(
    {
        Kernel.FACTORIZED_DATA,
        Kernel.MATERIALIZED_DATA,
        Kernel.LMM,
        Kernel.RMM,
        Kernel.NEAREST,
        Kernel.GROUP_SUMS,
        Kernel.CROSSPROD,
    }
)
GATHERING = (Kernel.LMM, Kernel.RMM, Kernel.NEAREST, Kernel.GROUP_SUMS)  # the gathered-matrix kernels' shared terms


def _gather_prior(
    fixed: float,
    dense: float,
    block: float,
    gathered: float,
    uncached: float,
    parts: float,
    per_byte: float,
    per_core: float,
) -> dict[Term, float]:
    ns = 1e-9
    return {
        Term.FIXED: fixed,
        Term.DENSE_CELLS: dense * ns * per_byte,
        Term.BLOCK_ENTRIES: block * ns * per_byte,
        Term.GATHERED_ROWS: gathered * ns * per_core,
        Term.UNCACHED_ROWS: uncached * ns * per_core,
        Term.PARTS: parts,
    }


def prior_coefficients(hardware: Hardware, backend: str = "numpy") -> dict[Kernel, dict[Term, float]]:
    """Priors: seconds per unit of each work term, scaled to the measured cores, bandwidth and FLOP rate.

    Calibration on the machine replaces them.
    """
    # This code base's coefficients as calibrated on a 2-core machine measured at 50 GB/s and 123 GFLOP/s
    # (2026-11), scaled to this one: per-row costs by cores, streaming terms by bandwidth, arithmetic by FLOPs.
    cores = max(hardware.cores, 1)
    per_core = 2.0 / cores
    per_byte = 50.0 / max(hardware.memory_bandwidth_gbs, 1.0)
    per_flop = 123.0 / max(hardware.gflops, 1.0)
    flops = max(hardware.gflops, 1.0) * 1e9
    coefficients = {
        Kernel.FACTORIZED_DATA: {
            Term.FIXED: 0.002,
            Term.PROBES: 4e-9 * per_core,
            Term.NUMERIC_CELLS: 8e-9 * per_byte,
            Term.STRING_VALUES: 30e-9 * per_core,
            Term.INDEX_ENTRIES: 12e-9 * per_byte,
            Term.QUERIES: 0.002,
        },
        Kernel.MATERIALIZED_DATA: {
            Term.FIXED: 0.002,
            Term.PROBES: 4e-9 * per_core,
            Term.NUMERIC_CELLS: 8e-9 * per_byte,
            Term.STRING_VALUES: 35e-9 * per_core,
            Term.INDEX_ENTRIES: 0.0,
            Term.QUERIES: 0.002,
        },
        Kernel.TO_DEVICE: {Term.FIXED: 1e-4, Term.BYTES: 1 / 12e9},
        # The gathered-matrix kernels share their terms: fixed, dense cells, block entries, rows gathered,
        # rows gathered from blocks beyond the caches, parts (ns per unit, from the 2-core fit).
        Kernel.LMM: _gather_prior(20e-6, 0.11, 0.15, 0.25, 1.0, 8e-6, per_byte, per_core),
        Kernel.RMM: _gather_prior(40e-6, 0.38, 0.2, 0.55, 1.5, 5e-6, per_byte, per_core),
        Kernel.NEAREST: _gather_prior(40e-6, 0.3, 0.2, 0.5, 1.5, 8e-6, per_byte, per_core),
        Kernel.GROUP_SUMS: _gather_prior(40e-6, 0.3, 0.2, 0.5, 1.5, 8e-6, per_byte, per_core),
        Kernel.CROSSPROD: {
            Term.FIXED: 25e-6,
            Term.DENSE_GRAM: 0.08e-9 * per_flop,
            Term.DENSE_BY_GATHERED: 0.5e-9 * per_core,
            Term.DENSE_BY_BLOCK: 1 / flops,
            Term.OUTPUT_CELLS: 3e-9 * per_byte,
            Term.GATHERED_PAIRS: 0.11e-9 * per_core,
            Term.BLOCK_GRAM: 0.1e-9 * per_flop,
            Term.PARTS: 10e-6,
        },
        # A solve runs with BLAS on one thread (inside the fit's hot loop), a Cholesky near the measured rate;
        # an SVD least squares (per d^3, after the Cholesky failed) measured 7x slower at d = 1,200.
        Kernel.SOLVE: {Term.FIXED: 20e-6, Term.FLOPS: 1 / flops, Term.LSTSQ_FLOPS: 6 / flops},
        # One core, row after row (numba): about 1 ns a cell for the dot product and the update together, a
        # logistic step's few Newton iterations per row; a dense copy about a write and a gather a cell.
        Kernel.SDCA: {Term.FIXED: 20e-6, Term.CELLS: 1.0e-9, Term.ROWS: 30e-9, Term.COPIED_CELLS: 1.5e-9 * per_byte},
        **{
            Kernel.overhead(s): {
                Term.FIXED: 1e-3,
                Term.ITERATIONS: 100e-6,
                Term.PART_ITERATIONS: 20e-6,
                Term.ROW_ITERATIONS: 2e-9 * per_byte,
            }
            for s in SOLVERS
        },
    }
    if backend == "cupy":
        gpu_bandwidth = max(hardware.gpu_bandwidth_gbs, 100.0) * 1e9
        gpu_flops = max(hardware.gpu_gflops, 1000.0) * 1e9
        launch = 15e-6
        for kernel in (*GATHERING, Kernel.CROSSPROD, Kernel.SOLVE):
            c = coefficients[kernel]
            for term in c:
                if term == Term.FIXED:
                    c[term] = launch * 4
                elif term == Term.PARTS:
                    c[term] = launch * 3
                elif term in COMPUTE_TERMS:
                    c[term] *= flops / gpu_flops
                else:
                    c[term] *= hardware.memory_bandwidth_gbs * 1e9 / gpu_bandwidth
    return coefficients


@dataclass
class KernelCosts:
    """The coefficients of every kernel on one machine and backend, and where they came from."""

    coefficients: dict[str, dict[str, float]]  # by kernel, by term (Kernel and Term members, or their names read back)
    source: str  # "roofline priors ..." or "calibrated on this machine ..."
    calibrated: bool = False
    errors: dict[str, float] = field(default_factory=dict)  # per-kernel geomean relative error of the fit

    def spread(self, kernel: Kernel) -> float:
        """How unsure this kernel's predictions are (sd of the log of measured over predicted seconds): from the
        calibration's fit error where it fitted the kernel, else a roofline prior's. Planning is measured."""
        if kernel == Kernel.PLANNING:
            return 0.0
        return kernel_spread(self.errors.get(kernel) if self.calibrated else None)

    def seconds(self, kernel: Kernel, terms: WorkTerms, count: float = 1.0) -> float:
        """Predicted seconds of ``count`` runs of ``kernel`` with these work terms."""
        c = self.coefficients[kernel]
        one = c.get(Term.FIXED, 0.0) + sum(c.get(t, 0.0) * v for t, v in terms.items())
        return count * one

    @classmethod
    def prior(cls, hardware: Hardware, backend: str = "numpy") -> KernelCosts:
        where = f"GPU {hardware.gpu_name}" if backend == "cupy" and hardware.gpu_name else f"{hardware.cores} cores"
        return cls(
            prior_coefficients(hardware, backend),
            f"priors scaled to this machine ({where}, {hardware.memory_bandwidth_gbs:.0f} GB/s, "
            f"{hardware.gflops:.0f} GFLOP/s measured; run `ilargi calibrate` to fit the kernels to this machine)",
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": FORMAT_VERSION,
                "coefficients": self.coefficients,
                "source": self.source,
                "errors": self.errors,
            },
            indent=1,
        )

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.to_json())
        os.replace(tmp, path)  # a reader never sees half a file
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> KernelCosts | None:
        """The stored calibration, or None when there is none or it is of another format."""
        try:
            stored = json.loads(Path(path).read_text())
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(stored, dict) or stored.get("format") != FORMAT_VERSION:
            return None
        coefficients, source, errors = stored.get("coefficients"), stored.get("source"), stored.get("errors", {})
        if not (_numbers_by_name(coefficients, nested=True) and isinstance(source, str) and _numbers_by_name(errors)):
            return None  # damaged (edited, or written by something else): the priors serve instead
        return cls(coefficients, source, True, errors)


def _numbers_by_name(value: object, nested: bool = False) -> bool:
    """Whether ``value`` maps names to finite non-negative numbers (``nested``: to such maps)."""
    if not isinstance(value, dict):
        return False
    if nested:
        return all(isinstance(k, str) and _numbers_by_name(v) for k, v in value.items())
    return all(isinstance(k, str) and type(v) in (int, float) and math.isfinite(v) and v >= 0 for k, v in value.items())


def kernel_costs_path(backend: str = "numpy", cache: str | os.PathLike | None = None) -> Path:
    return cache_dir(cache) / f"kernel_costs_{backend}.json"


def kernel_costs(hardware: Hardware, backend: str = "numpy", cache: str | os.PathLike | None = None) -> KernelCosts:
    """This machine's calibrated kernel costs for ``backend``, else the roofline priors.

    A kernel the calibration did not fit keeps its prior.
    """
    prior = KernelCosts.prior(hardware, backend)
    stored = KernelCosts.load(kernel_costs_path(backend, cache))
    if stored is None:
        return prior
    merged = {k: {**v, **stored.coefficients.get(k, {})} for k, v in prior.coefficients.items()}
    return KernelCosts(merged, stored.source, True, stored.errors)


# -- how busy the cores are ---------------------------------------------------------------


PLAN_LOAD_VARIABLE = "ILARGI_PLAN_LOAD"  # pins the load plans are priced for (reproducible plans)


def planning_load(cores: int) -> float:
    """The load ``auto`` prices its plans for: ``$ILARGI_PLAN_LOAD`` where set, else :func:`probe_load`'s reading.

    Pinning it (``ILARGI_PLAN_LOAD=1``: idle cores) makes ``auto`` choose the same plan however busy the
    machine is, as a test suite or a shown ``explain`` output needs.
    """
    pinned = pinned_load()
    return probe_load(cores) if pinned is None else pinned


def pinned_load() -> float | None:
    """``$ILARGI_PLAN_LOAD`` (None where unset), or the caller's error naming it where it is not a load."""
    text = os.environ.get(PLAN_LOAD_VARIABLE, "").strip()
    if not text:
        return None
    try:
        load = float(text)
    except ValueError:
        load = math.nan
    if not 1.0 <= load <= 8.0:  # NaN fails too
        raise IlargiError(
            f"environment variable {PLAN_LOAD_VARIABLE}={text!r} must be a number from 1 (idle cores) to 8 "
            f"(each core shared eight ways); unset it to measure how busy the cores are."
        )
    return load


def probe_load(
    cores: int,
    budget_seconds: float = 0.002,
    read_others: Callable[[], float | None] = other_running_tasks,
) -> float:
    """How much slower than on idle cores a job's parallel steps run now (1.0 = idle), from ~2 ms of sampling.

    Samples ``read_others`` (the kernel's count of runnable tasks of other processes,
    :func:`other_running_tasks`) about once a millisecond; they compete for the cores, so a step that wants
    all ``cores`` gets cores / (cores + others) of them. Where the reading is None (no ``/proc``) it uses the
    one-minute load average. Clipped to [1, 8].
    """
    cores = max(cores, 1)
    samples = []
    start = time.perf_counter()
    while time.perf_counter() - start < budget_seconds:
        others = read_others()
        if others is None:
            break
        samples.append(others)
        time.sleep(0.001)
    if samples:
        others = sum(samples) / len(samples)
    else:
        others = max(os.getloadavg()[0] - 1.0, 0.0) if hasattr(os, "getloadavg") else 0.0
    return float(min(max((cores + others) / cores, 1.0), 8.0))
