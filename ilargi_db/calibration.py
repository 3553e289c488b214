"""``calibrate``: fit the kernel cost models to this machine with micro-benchmarks (under a minute).

Each kernel of a plan (:mod:`ilargi_db.cost_model.kernels`) is timed on a set of
shapes chosen to vary its work terms independently: the matrix operators on
normalized matrices built directly from random blocks, the data steps on a
small generated star schema read the way ``train`` reads it. Non-negative least
squares on relative error fits each kernel's coefficients; a kernel whose fit
fails keeps its roofline prior. The result goes to the user's cache, where
``explain`` and ``train`` find it. It reads the data through the training
pipeline, so it sits above :mod:`ilargi_db.pipeline`.
"""

from __future__ import annotations

import functools
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import scipy.optimize
import scipy.sparse

from ilargi_db._terminal import progress as progress_bar
from ilargi_db.backend import get_backend
from ilargi_db.cost_model.features import job_stats
from ilargi_db.cost_model.hardware import detect_hardware
from ilargi_db.cost_model.kernels import (
    GatheredPart,
    Kernel,
    KernelCosts,
    MatrixShape,
    Term,
    WorkTerms,
    data_terms,
    kernel_costs_path,
    matrix_terms,
    probe_load,
    solve_terms,
    solver_terms,
)
from ilargi_db.cost_model.plan import data_shape, iteration_steps
from ilargi_db.errors import IlargiError
from ilargi_db.linalg import Block, NormalizedMatrix, solve_normal_equations
from ilargi_db.models.catalog import STRATEGIES, SolverName, algorithm_facts, make_estimator
from ilargi_db.pipeline import read_training_data
from ilargi_db.plan import build_join_graph

GRIDS = ("tiny", "default")
BUSY = 1.3  # a load probe above this: other processes hold the cores


@dataclass
class Measurement:
    kernel: Kernel
    terms: WorkTerms
    seconds: float
    shape: str


@dataclass
class CalibrationResult:
    """What ``calibrate`` measured and fitted."""

    costs: KernelCosts
    path: Path
    backend: str
    grid: str
    seconds: float
    measurements: list[Measurement] = field(repr=False, default_factory=list)

    @property
    def n_measurements(self) -> int:
        return len(self.measurements)

    def __str__(self) -> str:
        lines = [
            f"calibrated {self.backend}: {self.n_measurements} kernel timings in {self.seconds:.1f} s "
            f"(grid {self.grid}), stored in {self.path}",
            "fit error per kernel (geometric mean of |predicted / measured - 1|):",
        ]
        lines += [
            f"  {kernel:<18} {error:6.1%}  {Kernel(kernel).description if kernel in set(Kernel) else ''}"
            for kernel, error in sorted(self.costs.errors.items())
        ]
        return "\n".join(lines)


# -- matrix kernels on random layouts -------------------------------------------------------------


def _layouts(grid: str, rng: np.random.Generator) -> list[tuple[int, int, list[tuple[str, int, int]]]]:
    """(n, dense columns, gathered parts as (kind, rows, width)) spanning the work terms."""
    if grid == "tiny":
        ns, count = (20_000,), 6
    else:
        ns, count = (40_000, 150_000, 400_000), 24
    kinds = [
        ("dense", 500, 4),
        ("dense", 20_000, 12),
        ("dense", 2_000, 40),
        ("dense", 150_000, 4),  # larger than the caches: gathers miss
        ("dense", 400_000, 8),
        ("identity", 30, 30),
        ("identity", 3_000, 3_000),
        ("identity", 40_000, 40_000),
    ]
    layouts = [(ns[-1], 8, []), (ns[0], 2, [kinds[0]])]  # a dense-only one and a small one
    while len(layouts) < count:
        n = int(rng.choice(ns))
        dense = int(rng.choice([0, 1, 4, 12, 30]))
        parts = [kinds[i] for i in rng.choice(len(kinds), size=int(rng.integers(0 if dense else 1, 4)))]
        layouts.append((n, dense, parts))
    return layouts


def _matrix(n: int, dense: int, parts: list[tuple[str, int, int]], rng: np.random.Generator, xp: Any, sparse: Any):
    blocks, column = [], 0
    if dense:
        blocks.append(Block(xp.asarray(rng.random((n, dense))), list(range(dense))))  # >= 0: NMF takes it too
        column += dense
    shape_parts = []
    for kind, rows, width in parts:
        if kind == "dense":
            data = xp.asarray(rng.random((rows, width)))
            nnz = rows * width
        else:
            data = sparse.csr_matrix(scipy.sparse.identity(rows, format="csr"))
            nnz = rows
        index = xp.asarray(rng.integers(0, rows, size=n).astype(np.int64))
        blocks.append(Block(data, list(range(column, column + width)), index))
        column += width
        shape_parts.append(GatheredPart(rows, width, nnz))
    return NormalizedMatrix(blocks, n_rows=n), MatrixShape(n, dense, tuple(shape_parts))


def _best_of(
    run: Callable[[], Any], repeats: int, sync: Callable[[], None], forget: Callable[[], None] = lambda: None
) -> float:
    """The best of ``repeats`` timed runs after a warm one; ``forget()`` before each drops what a run left for
    the next (a matrix memoizes X^T X and its column sums: a second run would time a copy, not the work)."""
    forget()
    run()
    sync()  # warm: caches, compiled kernels
    best = math.inf
    for _ in range(repeats):
        forget()
        start = time.perf_counter()
        run()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def measure_matrix_kernels(grid: str, backend: str, seed: int = 0) -> list[Measurement]:
    """Time X @ w, X.T @ v (one and eight columns) and X.T @ X on random layouts."""
    be = get_backend(backend)
    xp = be.xp
    sync = (lambda: xp.cuda.Stream.null.synchronize()) if be.name == "cupy" else (lambda: None)
    rng = np.random.default_rng(seed)
    found = []
    for n, dense, parts in _layouts(grid, rng):
        X, shape = _matrix(n, dense, parts, rng, xp, be.sparse)
        d = X.shape[1]
        w, v = xp.asarray(rng.standard_normal(d)), xp.asarray(rng.standard_normal(n))
        W, V = xp.asarray(rng.standard_normal((d, 8))), xp.asarray(rng.standard_normal((8, n)))
        offsets = xp.asarray(rng.standard_normal(8))
        labels = xp.asarray(rng.integers(0, 8, size=n).astype(np.int64))
        XT = X.T
        runs = [(Kernel.LMM, 1, X.__matmul__, w), (Kernel.RMM, 1, XT.__matmul__, v), (Kernel.LMM, 8, X.__matmul__, W)]
        runs.append((Kernel.RMM, 8, X.__rmatmul__, V))
        runs.append((Kernel.NEAREST, 8, functools.partial(X.nearest, W), offsets))
        runs.append((Kernel.GROUP_SUMS, 8, functools.partial(X.group_sums, labels), 8))
        if d <= 3_200:  # the Gram matrix of the widest layouts would take seconds: its terms are spanned anyway
            runs.append((Kernel.CROSSPROD, 1, X.crossprod, None))
        for kernel, k, operator, operand in runs:
            seconds = _best_of(functools.partial(operator, operand), 3, sync, X.memo.clear)
            found.append(Measurement(kernel, matrix_terms(kernel, shape, k), seconds, shape.describe()))
    found += measure_solves(rng)
    return found


def measure_solves(rng: np.random.Generator) -> list[Measurement]:
    """Time the normal equations' solve as the linear model runs it (on the host, BLAS on one thread): regular
    Gram matrices, and singular ones (a column repeated, as a full one-hot encoding beside an intercept)."""
    found = []
    with get_backend("numpy").hot_loop():
        for d, singular in ((50, False), (400, False), (1_200, False), (2_000, False), (400, True), (1_200, True)):
            a = rng.standard_normal((d + 10, d))
            if singular:
                a[:, -1] = a[:, 0]
            gram, rhs = a.T @ a + (0 if singular else d) * np.eye(d), rng.standard_normal(d)
            seconds = _best_of(functools.partial(solve_normal_equations, gram, rhs), 2, lambda: None)
            what = f"{d} x {d}" + (", singular" if singular else "")
            found.append(Measurement(Kernel.SOLVE, solve_terms(d, singular), seconds, what))
    return found


# -- what solvers do besides the kernels -------------------------------------------------------------

SOLVER_RUNS = {  # solver: (algorithm, parameters): fixed iteration counts where the solver allows
    SolverName.NORMAL: ("linear_regression", {"solver": "normal"}),
    SolverName.CG: ("linear_regression", {"solver": "cg", "max_iter": 8, "tol": 0.0}),
    SolverName.LBFGS: ("logistic_regression", {"max_iter": 8}),
    SolverName.LLOYD: ("kmeans", {"n_clusters": 8, "n_init": 1, "max_iter": 5, "tol": 0.0, "random_state": 0}),
    SolverName.MU: ("gnmf", {"n_components": 2, "max_iter": 5, "tol": 0.0, "random_state": 0}),
}


def measure_solver_overheads(grid: str, backend: str, costs: KernelCosts, seed: int = 1) -> list[Measurement]:
    """Each solver's fit time less what the (just fitted) kernel models predict for its matrix kernels."""
    be = get_backend(backend)
    rng = np.random.default_rng(seed)
    layouts = _layouts(grid, rng)[: 2 if grid == "tiny" else 10]  # tiny: two, for a few seconds
    found = []
    for n, dense, parts in layouts:
        X, shape = _matrix(n, dense, parts, rng, be.xp, be.sparse)
        y = rng.standard_normal(n)
        for solver, (algorithm, params) in SOLVER_RUNS.items():
            if solver == SolverName.NORMAL and X.shape[1] > 3_200:
                continue  # its Gram matrix alone would take seconds
            facts = algorithm_facts(algorithm)
            estimator = make_estimator(algorithm, params)
            if estimator.classifies():
                args = (X, (y > 0).astype(float))
            elif facts.supervised:
                args = (X, y)
            else:
                args = (X,)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a fixed, short max_iter stops before convergence on purpose
                seconds = _best_of(functools.partial(estimator.fit, *args), 1, lambda: None, X.memo.clear)
            iterations = float(getattr(estimator, "n_iter_", 1) or 1)
            k = facts.width(params)
            # An identity part is a full one-hot encoding: beside the intercept, its Gram matrix is singular.
            singular = any(kind == "identity" for kind, _, _ in parts)
            kernels = sum(s.seconds for s in iteration_steps(shape, solver, iterations, k, costs, singular))
            residual = max(seconds - kernels, 1e-5)
            terms = solver_terms(shape, iterations, k)
            found.append(Measurement(Kernel.overhead(solver), terms, residual, shape.describe()))
    return found


# -- data steps on a generated star ----------------------------------------------------------------


def _star(con: duckdb.DuckDBPyConnection, n: int, dims: int, numeric: int, strings: int) -> str:
    """A fact of ``n`` rows and ``dims`` dimensions; the training query over it."""
    select, joins = [], []
    fact_cols = ", ".join(f"random() AS x{j}" for j in range(numeric)) or "1 AS x0"
    keys = ", ".join(f"(hash(range + {i}) % 2000)::INTEGER AS k{i}" for i in range(dims))
    cats = ", ".join(f"'c' || (range % {17 + 40 * j}) AS s{j}" for j in range(strings))
    con.execute(
        f"CREATE OR REPLACE TABLE fact AS SELECT {', '.join(c for c in (fact_cols, keys, cats) if c)}, "
        f"random() AS y FROM range({n})"
    )
    select += [f"f.x{j}" for j in range(max(numeric, 1))] + [f"f.s{j}" for j in range(strings)]
    for i in range(dims):
        cols = ", ".join(f"random() AS z{j}" for j in range(4))
        con.execute(
            f"CREATE OR REPLACE TABLE dim{i} AS SELECT range::INTEGER AS k, {cols}, "
            f"'g' || (range % 25) AS g FROM range(2000)"
        )
        joins.append(f"JOIN dim{i} d{i} ON f.k{i} = d{i}.k")
        select += [f"d{i}.z{j}" for j in range(4)] + [f"d{i}.g"]
    return f"SELECT {', '.join(select)}, f.y FROM fact f {' '.join(joins)}"


def measure_data_steps(grid: str, backend: str) -> list[Measurement]:
    """Time reading a star schema both ways, as ``train`` reads it."""
    # (fact rows, dimensions, fact numeric columns, fact text columns): sizes, join widths and column types
    # varied apart, so that each work term (probes, numbers, category values, row numbers, queries) is fitted.
    tiny = [(30_000, 1, 2, 0), (30_000, 2, 1, 1)]
    default = [
        (50_000, 1, 2, 0), (200_000, 1, 8, 0), (200_000, 3, 2, 1), (400_000, 2, 1, 2), (100_000, 0, 12, 0),
        (400_000, 1, 4, 0), (20_000, 0, 2, 0), (20_000, 3, 1, 0), (100_000, 2, 0, 3), (300_000, 0, 1, 1),
        (150_000, 4, 2, 0), (60_000, 1, 20, 0), (250_000, 2, 6, 1), (80_000, 3, 3, 2),
    ]  # fmt: skip
    shapes = tiny if grid == "tiny" else default
    found = []
    con = duckdb.connect()
    try:
        for n, dims, numeric, strings in shapes:
            query = _star(con, n, dims, numeric, strings)
            graph = build_join_graph(con, query, "y")
            stats = job_stats(con, graph)
            for strategy in STRATEGIES:
                seconds = _best_of(
                    functools.partial(read_training_data, con, graph, strategy, backend), 2, lambda: None
                )
                shape = data_shape(stats, strategy)
                found.append(Measurement(Kernel.data(strategy), data_terms(shape), seconds, shape.describe()))
    finally:
        con.close()
    return found


# -- the fit ---------------------------------------------------------------------------------------


def fit_kernel(rows: list[Measurement], prior: dict[str, float]) -> tuple[dict[str, float], float]:
    """Coefficients minimising the relative error of ``rows`` (non-negative), and its geometric-mean error."""
    terms = [t for t in prior if t != Term.FIXED]
    design = np.array([[1.0] + [r.terms.get(t, 0.0) for t in terms] for r in rows])
    seconds = np.array([r.seconds for r in rows])
    scale = np.maximum(np.abs(design).max(axis=0), 1e-300)
    relative = design / scale / seconds[:, None]  # each row divided by its time: relative error
    solution, _ = scipy.optimize.nnls(relative, np.ones(len(rows)))
    coefficients = solution / scale
    # A term no measurement exercised keeps its prior.
    fitted = {Term.FIXED: float(coefficients[0])}
    for j, t in enumerate(terms, start=1):
        fitted[t] = float(coefficients[j]) if design[:, j].any() else prior[t]
    predicted = design @ np.array([fitted[Term.FIXED], *[fitted[t] for t in terms]])
    errors = np.maximum(np.abs(predicted / seconds - 1), 1e-3)
    return fitted, float(np.exp(np.log(errors).mean()))


def prior_error(rows: list[Measurement], coefficients: dict[str, float]) -> float:
    """Geometric-mean relative error of ``coefficients`` on ``rows`` (a kernel kept at its prior)."""
    predicted = [KernelCosts({r.kernel: coefficients}, "").seconds(r.kernel, r.terms) for r in rows]
    errors = [max(abs(p / r.seconds - 1), 1e-3) for p, r in zip(predicted, rows)]
    return float(np.exp(np.mean(np.log(errors))))


def _fit_all(measurements: list[Measurement], prior: KernelCosts, coefficients: dict, errors: dict[str, float]) -> None:
    for kernel in sorted({m.kernel for m in measurements}):
        rows = [m for m in measurements if m.kernel == kernel]
        if len(rows) >= 2 * len(prior.coefficients[kernel]):  # else the fit is underdetermined: keep the prior
            coefficients[kernel], errors[kernel] = fit_kernel(rows, prior.coefficients[kernel])
        else:
            errors[kernel] = prior_error(rows, prior.coefficients[kernel])


def calibrate(
    budget_seconds: float | None = None,
    grid: str = "default",
    backend: str = "numpy",
    cache_dir: str | os.PathLike | None = None,
    progress: bool | None = None,
) -> CalibrationResult:
    """Time each kernel on this machine, fit its cost model, and store the fit for ``explain`` and ``train``.

    Parameters
    ----------
    budget_seconds : float or None
        Only a limit on the checks (the default grid takes under a minute on two cores).
    grid : {"tiny", "default"}
        ``"tiny"`` takes a few seconds (for tests); ``"default"`` under a minute.
    backend : {"numpy", "cupy"}
        The backend to calibrate; ``explain`` uses the calibration of the backend it runs on.
    cache_dir : path or None
        Where to store it: default ``$ILARGI_CACHE_DIR`` or the platform's cache (``~/.cache/ilargi_db``).
    progress : bool or None
        Show a progress bar; None shows one in a terminal (stderr) or a Jupyter notebook.
    """
    if budget_seconds is not None and not (budget_seconds > 0):
        raise IlargiError(
            f"budget_seconds must be a positive number of seconds (or None for no limit), got {budget_seconds!r}."
        )
    if grid not in GRIDS:
        raise IlargiError(f"grid must be one of {', '.join(GRIDS)}, got {grid!r}.")
    if backend not in ("numpy", "cupy"):
        raise IlargiError(f"calibrate a concrete backend: 'numpy' or 'cupy', got {backend!r}.")
    get_backend(backend)  # raises with the install hint when CuPy or the GPU is missing
    hardware = detect_hardware(cache_dir)
    start = time.perf_counter()
    bar = progress_bar(2, f"calibrating {backend}", show=progress, leave=True)
    try:
        load = probe_load(hardware.cores, 0.05)
        if load > BUSY:
            warnings.warn(
                f"the cores run {load:.1f}x slower than idle (other processes are using them): kernel timings "
                "taken now would be fitted as this machine's speed. Calibrate when the machine is quiet.",
                stacklevel=2,
            )
        measurements = measure_matrix_kernels(grid, backend)
        bar.update(1)
        if budget_seconds is None or time.perf_counter() - start < budget_seconds:
            measurements += measure_data_steps(grid, backend)
        bar.update(1)
    finally:
        bar.close()
    prior = KernelCosts.prior(hardware, backend)
    coefficients, errors = dict(prior.coefficients), {}
    _fit_all(measurements, prior, coefficients, errors)
    # What solvers do besides the kernels is measured against the kernels just fitted.
    overheads = measure_solver_overheads(grid, backend, KernelCosts(coefficients, "", True))
    _fit_all(overheads, prior, coefficients, errors)
    measurements += overheads
    when = time.strftime("%Y-%m-%d %H:%M")
    costs = KernelCosts(
        coefficients,
        f"calibrated on this machine ({hardware.cores} cores, {when}, {len(measurements)} kernel timings)",
        True,
        errors,
    )
    path = costs.save(kernel_costs_path(backend, cache_dir))
    return CalibrationResult(costs, path, backend, grid, time.perf_counter() - start, measurements)


__all__ = ["CalibrationResult", "calibrate", "fit_kernel", "measure_data_steps", "measure_matrix_kernels"]
