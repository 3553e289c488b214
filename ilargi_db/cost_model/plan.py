"""Physical plans: each way a training job can run, as a list of steps with predicted seconds.

A candidate is a strategy (factorized or materialized) x a solver (where the
algorithm has a choice) on the job's backend. Its steps are the one-off data
steps (the key-only join and source scans, or the materialized join; the copy
to a GPU) and the per-iteration kernels with their shapes, times the expected
iterations. Each step's seconds come from the kernel cost models
(:mod:`~ilargi_db.cost_model.kernels`); a plan's seconds are their sum, scaled
for how busy the cores are. ``train`` runs the cheapest plan that fits in
memory and records it.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from ilargi_db.cost_model.features import JobStats, SourceStats
from ilargi_db.cost_model.iterations import IterationEstimate, expected_iterations
from ilargi_db.cost_model.kernels import (
    DataShape,
    GatheredPart,
    Kernel,
    KernelCosts,
    MatrixShape,
    data_terms,
    matrix_terms,
    sdca_terms,
    solve_terms,
    solver_terms,
    transfer_terms,
)
from ilargi_db.models.catalog import (
    DUHL_HELD_PARTITIONS,
    GRAM_SOLVERS,
    MAX_GRAM_BYTES,
    STRATEGIES,
    SolverName,
    Strategy,
    algorithm_facts,
    duhl_reads_entries,
    duhl_row_bytes,
    duhl_working_set,
    solver_applies,
)

if TYPE_CHECKING:  # the store's facts, priced here; the store never imports the cost model
    from ilargi_db.reuse.holdings import ReadHoldings

# A boosted tree's passes over the rows: partitions per level, and histograms (the root's, then the smaller
# child's per level: about half the rows) for a tree of about six levels (LightGBM's 31 to 63 leaves).
TREE_LEVELS = 6.0
TREE_HISTOGRAM_PASSES = 1.0 + 0.5 * (TREE_LEVELS - 1.0)
MEMORY_LIMIT = "DuckDB's memory_limit"  # what a plan exceeds when its arrays do not fit DuckDB's memory_limit
LBFGS_EVALUATIONS = 1.15  # loss and gradient evaluations per L-BFGS iteration (line search), measured
STANDARDIZE_PASSES = 3.0  # column sums of X, then of X squared (squaring writes the dense block first): ~3 X.T @ v


class StepKind(enum.Enum):
    """What a step does, for the rules that rewrite plans (reuse, streaming, a cluster); its name is for display."""

    PLANNING = "planning"
    READ = "read"  # reading the data: the key-only join and scans, or the materialized join
    TO_DEVICE = "to_device"  # the read copied to the GPU
    GRAM = "gram"  # X^T X
    READ_AGAIN = "read_again"  # a streamed job's later passes over its partitions
    WORK = "work"  # any other step: kernels, solves, bookkeeping


@dataclass(frozen=True)
class Step:
    """One step of a plan: ``count`` runs of ``kernel`` on ``shape``, ``seconds`` in all; ``name`` says it in words."""

    name: str
    kernel: Kernel
    shape: str
    count: float
    seconds: float
    per_iteration: bool = False
    spread: float = 0.0  # how unsure ``seconds`` is: sd of log(measured / predicted), the kernel model's
    iterative: bool = False  # runs once per iteration of the solver: the iteration count's error scales it
    kind: StepKind = StepKind.WORK

    @property
    def parallel(self) -> bool:
        """Whether the step uses every core (a busy machine slows it)."""
        return self.kernel.parallel

    def describe(self) -> str:
        times = f" x {self.count:g}" if self.count != 1 else ""
        return f"{self.name}: {self.shape}{times}"


@dataclass(frozen=True)
class ReuseOffer:
    """What the artifact store holds for a job's factorized read, and what the plans should price instead."""

    data_seconds: float | None = None  # reading the data from the store (None: not all of it is stored)
    data_what: str = ""
    sums: bool = False  # X^T X and the column sums are stored
    saved_seconds: float = 0.0  # what making the stored artifacts took
    lines: tuple[str, ...] = ()  # what would be reused, in words


def reuse_offer(held: ReadHoldings | None) -> ReuseOffer | None:
    """What the plans price instead, for what the artifact store holds for a job's factorized read.

    The encoded matrix in memory replaces the whole read (and X^T X where it has it memoized). Otherwise
    the read is priced as loading only when every data artifact is held; stored sums replace X^T X alone.
    None when nothing is held.
    """
    if held is None:
        return None
    if held.matrix is not None:
        lines = ("the encoded matrix (in memory)",) + (("X^T X",) if held.matrix_gram else ())
        what = "the encoded matrix, kept in memory"
        return ReuseOffer(0.0, what, held.matrix_gram, held.matrix.compute_seconds, lines)
    if not held.data and held.gram is None:
        return None
    tiers = " and ".join(sorted({h.tier for h in held.data}))
    whole = len(held.data) == held.needed
    saved = sum(h.compute_seconds for h in held.data) + (held.gram.compute_seconds if held.gram else 0.0)
    lines = ((f"{len(held.data)} of {held.needed} data artifacts (from {tiers})",) if held.data else ()) + (
        ("X^T X",) if held.gram else ()
    )
    return ReuseOffer(
        sum(h.load_seconds for h in held.data) if whole else None,
        f"{len(held.data)} stored artifacts from {tiers}" if whole else "",
        held.gram is not None,
        saved,
        lines,
    )


@dataclass(frozen=True)
class PhysicalPlan:
    """One way to run a training job, with the predicted seconds of each step."""

    strategy: str
    solver: str
    backend: str
    steps: tuple[Step, ...]
    iterations: IterationEstimate
    load: float  # how much slower than idle the cores ran when it was predicted
    array_bytes: int
    fits: bool  # within DuckDB's memory_limit and the solver's max_gram_bytes
    limit: str = ""  # what it exceeds when it does not fit
    placement: str = "memory"  # where the rows are: "memory", "streamed" (read per pass) or "distributed"
    k: int = 1  # the iterate's columns (clusters, components)
    held_bytes: int = 0  # the rows DuHL holds (its working set: all of them in memory), dense or as their entries
    streamed_iterations: IterationEstimate | None = None  # where they differ streamed (DuHL's), learned apart

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)

    @property
    def label(self) -> str:
        return (
            f"{self.strategy}/{self.solver}"
            + ("" if self.backend == "numpy" else f"/{self.backend}")
            + ("" if self.placement == "memory" else f"/{self.placement}")
        )

    def phase_seconds(self) -> dict[str, float]:
        """Seconds of planning, of the one-off data steps and of the iterations (as ``train``'s ``timings_``)."""
        planning = sum(s.seconds for s in self.steps if s.kind is StepKind.PLANNING)
        data = sum(s.seconds for s in self.steps if not s.per_iteration) - planning
        return {"planning": planning, "data": data, "iterations": self.seconds - data - planning}

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for step in out["steps"]:
            step["kind"] = step["kind"].value
        out["seconds"] = self.seconds
        out["label"] = self.label
        return out

    def describe(self, indent: str = "  ") -> str:
        """The plan's steps, one per line, with their predicted seconds."""
        width = max(len(s.describe()) for s in self.steps)
        lines = [f"{indent}{s.describe():<{width}}  {s.seconds:9.4f} s" for s in self.steps]
        return "\n".join(lines)


# -- shapes of each strategy -------------------------------------------------------------------


def _numeric(source: SourceStats) -> int:
    return source.width - source.categorical_width


def _categorical_parts(source: SourceStats) -> list[GatheredPart]:
    """One identity block per categorical feature of ``source`` (its categories, one entry each)."""
    if not source.categorical_features:
        return []
    categories = max(source.categorical_width // source.categorical_features, 1)
    return [GatheredPart(categories, categories, categories)] * source.categorical_features


def matrix_shape(stats: JobStats, strategy: str) -> MatrixShape:
    """What ``strategy`` builds for this job: its dense block and gathered parts."""
    n = stats.n_rows
    with_features = [s for s in stats.sources if s.width]
    if strategy == Strategy.MATERIALIZED:
        dense = sum(_numeric(s) for s in with_features) + stats.cross_width
        parts = [p for s in with_features for p in _categorical_parts(s)]
        return MatrixShape(n, dense, tuple(parts))
    fact = stats.source(stats.fact)
    parts = _categorical_parts(fact)
    for s in with_features:
        if s.alias != stats.fact:  # a dimension: one block of its rows, numeric and one-hot columns together
            parts.append(GatheredPart(s.rows, s.width, s.rows * (_numeric(s) + s.categorical_features)))
    return MatrixShape(n, _numeric(fact), tuple(parts))


def data_shape(stats: JobStats, strategy: str) -> DataShape:
    """What ``strategy`` reads out of DuckDB for this job."""
    n, sources = stats.n_rows, len(stats.sources)
    with_features = [s for s in stats.sources if s.width]
    if strategy == Strategy.MATERIALIZED:
        numeric = sum(_numeric(s) for s in with_features) + stats.cross_width
        strings = sum(s.categorical_features for s in with_features)
        return DataShape(n, sources, n * numeric, n * strings, 0)
    return DataShape(
        n,
        sources,
        sum(s.rows * _numeric(s) for s in with_features),
        sum(s.rows * s.categorical_features for s in with_features),
        n * len(with_features),
        1 + len(with_features),  # the key-only join, then a scan of each source with features
    )


# -- the steps of each candidate ----------------------------------------------------------------


def _matrix_step(costs: KernelCosts, name: str, kernel: Kernel, shape: MatrixShape, count: float, k: int = 1) -> Step:
    seconds = costs.seconds(kernel, matrix_terms(kernel, shape, k), count)
    what = shape.describe() + (f", {k} columns" if k > 1 else "")
    return Step(name, kernel, what, count, seconds, per_iteration=True)


def plan_steps(
    stats: JobStats,
    strategy: str,
    solver: str,
    algorithm: str,
    params: dict[str, Any],
    iterations: float,
    costs: KernelCosts,
    backend: str = "numpy",
    scaled: bool = False,
) -> list[Step]:
    """The steps of one candidate, their seconds not yet scaled for load (``scaled``: on standardized columns)."""
    shape = matrix_shape(stats, strategy)
    data = data_shape(stats, strategy)
    kernel = Kernel.data(strategy)
    how = "key-only join and source scans" if strategy == Strategy.FACTORIZED else "the materialized join"
    read = costs.seconds(kernel, data_terms(data))
    steps = [Step("reading the data", kernel, f"{how}, {data.describe()}", 1, read, kind=StepKind.READ)]
    if backend == "cupy":
        nbytes = 8 * (data.numeric_cells + data.index_entries) + 4 * data.string_values
        steps.append(
            Step(
                "copy to the GPU",
                Kernel.TO_DEVICE,
                f"{nbytes / 2**20:,.0f} MiB",
                1,
                costs.seconds(Kernel.TO_DEVICE, transfer_terms(nbytes)),
                kind=StepKind.TO_DEVICE,
            )
        )
    k = algorithm_facts(algorithm).width(params)
    if scaled:  # the column means and spreads: sums of X and of X squared (an n-row copy of the dense block)
        steps.append(
            _matrix_step(costs, "standardizing (column means and spreads)", Kernel.RMM, shape, STANDARDIZE_PASSES)
        )
    steps += iteration_steps(shape, solver, iterations, k, costs, singular_gram(stats, params))
    what = f"{iterations:g} iteration{'s' * (iterations != 1)}, {shape.n:,} rows"
    steps.append(
        Step(
            "solver bookkeeping (loss, updates, Python)",
            Kernel.overhead(solver),
            what,
            1,
            costs.seconds(Kernel.overhead(solver), solver_terms(shape, iterations, k)),
            True,
            iterative=True,
        )
    )
    steps.append(
        _matrix_step(
            costs,
            "training metrics (X @ w)",
            Kernel.LMM,
            shape,
            1,
            k if solver in (SolverName.LLOYD, SolverName.MU) else 1,
        )
    )
    return steps


def singular_gram(stats: JobStats, params: dict[str, Any]) -> bool:
    """Whether the normal equations' Gram matrix would be singular (only the normal equations' solve reads it):
    unregularized, with a full one-hot encoding (its columns sum to one) beside the intercept or beside another
    one-hot encoding."""
    if float(params.get("alpha", 0.0)) > 0:
        return False
    encodings = sum(s.categorical_features for s in stats.sources)
    return encodings >= 1 and (bool(params.get("fit_intercept", True)) or encodings >= 2)


def iteration_steps(
    shape: MatrixShape, solver: str, iterations: float, k: int, costs: KernelCosts, singular: bool = False
) -> list[Step]:
    """The matrix kernels ``solver`` runs on ``shape`` over ``iterations`` (``k``: the iterate's columns;
    ``singular``: the normal equations' Gram matrix is, see :func:`singular_gram`)."""
    steps: list[Step] = []
    d = shape.columns + 1
    if solver == SolverName.NORMAL:
        how = " (singular: least squares)" if singular else ""
        seconds = costs.seconds(Kernel.SOLVE, solve_terms(d, singular))
        return [
            replace(_matrix_step(costs, "X.T @ X", Kernel.CROSSPROD, shape, 1), kind=StepKind.GRAM),
            _matrix_step(costs, "X.T @ y", Kernel.RMM, shape, 1),
            Step("solve", Kernel.SOLVE, f"{d:,} x {d:,}{how}", 1, seconds, True),
        ]
    elif solver in (SolverName.CG, SolverName.GD, SolverName.LBFGS):
        evaluations = iterations * (LBFGS_EVALUATIONS if solver == SolverName.LBFGS else 1.0)
        steps += [
            _matrix_step(costs, "X @ w", Kernel.LMM, shape, evaluations),
            _matrix_step(costs, "X.T @ v", Kernel.RMM, shape, evaluations),
        ]
    elif solver == SolverName.DUHL:  # per iteration: an epoch's worth of coordinate steps, then every row's gap
        # The rows as DuHL holds them (with the intercept's column): their stored entries where those are few.
        entries = shape.entries_per_row
        width = entries + 1.0 if duhl_reads_entries(entries, d) else float(d)
        held = f"{shape.n:,} rows x {width:,.0f} {'stored entries' if width < d else 'dense columns'}"
        steps += [
            Step(
                "coordinate steps (an epoch on the working set)",
                Kernel.SDCA,
                held,
                iterations,
                costs.seconds(Kernel.SDCA, sdca_terms(shape.n, width, epochs=1.0), iterations),
                True,
            ),
            _matrix_step(costs, "duality gaps (X @ w)", Kernel.LMM, MatrixShape(shape.n, round(width)), iterations),
        ]
        copy = costs.seconds(Kernel.SDCA, sdca_terms(shape.n, width, copies=1.0))  # once, whatever the iterations
        holding = Step("holding the rows", Kernel.SDCA, held, 1, copy, True)
        return [replace(s, iterative=True) for s in steps] + [holding]
    elif solver == SolverName.NEWTON:
        steps += [
            _matrix_step(costs, "X.T @ diag(w) @ X", Kernel.CROSSPROD, shape, iterations),
            _matrix_step(costs, "X @ w", Kernel.LMM, shape, iterations),
            _matrix_step(costs, "X.T @ v", Kernel.RMM, shape, iterations),
            Step(
                "solve",
                Kernel.SOLVE,
                f"{d:,} x {d:,}",
                iterations,
                costs.seconds(Kernel.SOLVE, solve_terms(d), iterations),
                True,
            ),
        ]
    elif solver == SolverName.LLOYD:
        steps += [
            _matrix_step(costs, "nearest centroid", Kernel.NEAREST, shape, iterations, k),
            _matrix_step(costs, "cluster sums", Kernel.GROUP_SUMS, shape, iterations, k),
        ]
    elif solver == SolverName.MU:
        steps += [
            _matrix_step(costs, "X @ H.T", Kernel.LMM, shape, iterations, k),
            _matrix_step(costs, "W.T @ X", Kernel.RMM, shape, iterations, k),
        ]
    elif solver == SolverName.HISTOGRAM:  # per tree: histograms of (g, h) per node, rows partitioned per level
        steps += [
            _matrix_step(costs, "histograms (X.T @ [g, h])", Kernel.RMM, shape, iterations * TREE_HISTOGRAM_PASSES, 2),
            _matrix_step(costs, "row partitions (X @ w)", Kernel.LMM, shape, iterations * TREE_LEVELS),
        ]
    else:
        raise ValueError(f"no plan for solver {solver!r}")
    return [replace(s, iterative=True) for s in steps]


def _reusing(steps: list[Step], reuse: ReuseOffer) -> list[Step]:
    """``steps`` with what the artifact store holds loaded instead of computed."""
    out = []
    for step in steps:
        if reuse.data_seconds is not None and step.kind in (StepKind.READ, StepKind.TO_DEVICE):
            if step.kind is StepKind.READ:
                out.append(
                    Step("reading the data", Kernel.REUSE, reuse.data_what, 1, reuse.data_seconds, kind=step.kind)
                )
            continue
        if reuse.sums and step.kind is StepKind.GRAM:
            out.append(Step("X.T @ X", Kernel.REUSE, "stored by an earlier job", 1, 0.0, True, kind=step.kind))
            continue
        out.append(step)
    return out


def candidate_plans(
    stats: JobStats,
    algorithm: str,
    params: dict[str, Any],
    costs: KernelCosts,
    *,
    backend: str = "numpy",
    strategies: tuple[str, ...] = STRATEGIES,
    array_bytes: dict[str, int] | None = None,
    memory_limit: int | None = None,
    load: float = 1.0,
    history: Any = None,
    planning_seconds: float = 0.0,
    reuse: ReuseOffer | None = None,
    scaled: bool = False,
) -> list[PhysicalPlan]:
    """Every plan the job may run, cheapest first (those that fit in memory before those that do not).

    ``reuse`` replaces the factorized plans' read (and X^T X) by what loading the stored artifacts costs;
    ``scaled``: the model trains on standardized columns (their statistics priced, their iterations learned apart).
    """
    facts = algorithm_facts(algorithm)
    named = params.get("solver", "auto")  # the estimators that take a solver call the parameter "solver"
    solvers = (
        (named,) if named != "auto" else tuple(s.name for s in facts.solvers if solver_applies(algorithm, s, params))
    )
    max_gram = int(params.get("max_gram_bytes", MAX_GRAM_BYTES))
    plans = []
    for strategy in strategies:
        shape = matrix_shape(stats, strategy)
        shape_columns = shape.columns + 1
        for solver in solvers:
            estimate = expected_iterations(algorithm, solver, params, history, scaled)
            apart = facts.solver(solver).iterations_by_placement if solver in facts.solver_names else False
            streamed = expected_iterations(algorithm, solver, params, history, scaled, True) if apart else None
            steps = plan_steps(stats, strategy, solver, algorithm, params, estimate.iterations, costs, backend, scaled)
            if reuse is not None and strategy == Strategy.FACTORIZED:
                steps = _reusing(steps, reuse)
            if planning_seconds:  # the same for every plan: it makes the prediction whole, not the choice
                what = f"{len(stats.sources)} sources, statistics queries measured"
                steps.insert(0, Step("planning", Kernel.PLANNING, what, 1, planning_seconds, kind=StepKind.PLANNING))
            steps = [
                replace(s, seconds=s.seconds * (load if s.parallel else 1.0), spread=costs.spread(s.kernel))
                for s in steps
            ]
            held = duhl_row_bytes(shape.entries_per_row, shape_columns) if solver == SolverName.DUHL else 0.0
            held_rows = int(stats.n_rows * held)
            needed = (array_bytes or {}).get(strategy, 0) + held_rows
            limit = ""
            if memory_limit is not None and needed > memory_limit:
                limit = MEMORY_LIMIT
            elif solver in GRAM_SOLVERS and 8 * shape_columns**2 > max_gram:
                limit = "max_gram_bytes"
            plans.append(
                PhysicalPlan(
                    strategy,
                    solver,
                    backend,
                    tuple(steps),
                    estimate,
                    load,
                    needed,
                    not limit,
                    limit,
                    k=facts.width(params),
                    held_bytes=held_rows,
                    streamed_iterations=streamed,
                )
            )
    return sorted(plans, key=lambda p: (not p.fits, p.seconds))


# -- where the rows are: streamed from DuckDB, or held by a cluster's workers (issue 14) -------------------

# Reading spilled partitions back, bytes a second: from the page cache, or from disk when the spill is more
# than half the memory. Measured here: bench_stream (a pass over 186 MiB of spill costs 22 ms more than in
# memory) and a 2 GB direct read (1.3 GB/s).
SPILL_READ_BYTES_PER_SECOND = {"memory": 8e9, "disk": 1.2e9}
SPILL_WRITE_BYTES_PER_SECOND = 1.5e9
# Each partition's own key-only join on the first read (DuckDB's fixed cost of a query: binding, the dimensions'
# hash tables, the Arrow result), and each partition's fixed cost on a later pass (a file opened and read, its
# matrix built): measured here at 2.6-9 ms a query (5,000-row ranges of a table or a Parquet file) and 0.3 ms
# (bench_stream: 40 partitions of 50,000 rows, a pass 13 ms slower than in memory).
PARTITION_QUERY_SECONDS = 0.004
PARTITION_PASS_SECONDS = 0.0003
# Dask, per pass (the driver's round trip through the scheduler) and per task (one per worker), measured
# here by bench_cluster with passes that compute nothing.
CLUSTER_PASS_SECONDS = 0.011
CLUSTER_TASK_SECONDS = 0.003


def solver_passes(solver: str, iterations: float, k: int = 1) -> float:
    """Passes over the rows ``solver`` makes when each row partition computes its share of a step at once
    (``reduce_rows``), the training metrics' pass included: what a stream reads, or a cluster schedules.
    ``k``: clusters (k-means++ seeding reads the rows twice per center)."""
    passes = {
        SolverName.NORMAL: 2.0,  # the sufficient statistics; the loss
        SolverName.CG: iterations + 4.0,  # X^T b, sum(b) and ||b||^2; the column sums; the column norms; the loss
        SolverName.GD: 2.0 * iterations + 52.0,  # a gradient and a loss per iteration; the power iteration's 50
        SolverName.LBFGS: LBFGS_EVALUATIONS * iterations + 1.0,
        SolverName.NEWTON: 3.0 * iterations,  # the loss and gradient, the curvature, about one line-search step
        SolverName.LLOYD: iterations + 3.0 + 2.0 * k,  # the row norms, column sums, final labels; the seeding
        SolverName.MU: 2.0 * iterations + 2.0,
        SolverName.HISTOGRAM: iterations * (TREE_LEVELS + TREE_HISTOGRAM_PASSES),
        SolverName.DUHL: 3.0,  # all held; a stream's reads are duhl_passes, for its working set
    }
    if solver not in passes:
        raise ValueError(f"no pass count for solver {solver!r}")
    return passes[solver] + 1.0


# Partitions DuHL loads into its working set per iteration, per partition not held: measured 1.4-1.9 with a
# sixteenth to a quarter of the partitions held, 1.1-1.2 with half, 0.4-0.6 with three quarters (ridge and
# logistic regression, 32,000 rows of 10 columns in 16 partitions, a tenth of the rows 8x, as
# tests/test_models_duhl.py's skewed data).
DUHL_LOADS_PER_PARTITION_OUT = 1.75


def duhl_passes(iterations: float, partitions: int, held: int) -> float:
    """DuHL's passes over a stream of ``partitions`` holding ``held``: the column means (ridge's centering),
    per iteration the working set loaded as the gaps move it and the certificate's read of those not held
    (both in proportion to the partitions not held), then the loss and the training metrics."""
    out = 1.0 - min(held, partitions) / max(partitions, 1)
    return 1.0 + iterations * (1.0 + DUHL_LOADS_PER_PARTITION_OUT) * out + 2.0


def streamed_plan(plan: PhysicalPlan, needed: int, partitions: int, spill: bool, memory: int) -> PhysicalPlan:
    """``plan`` (factorized, in memory) as it runs streamed: the same kernels, and every pass after the first
    reads all ``partitions`` again, from the spill (the page cache, or disk when ``needed`` is more than
    half of ``memory``) or, without a spill, from DuckDB. DuHL holds as many partitions as fit the
    room of the :data:`DUHL_HELD_PARTITIONS` the budget holds; it does not fit when not even one does."""
    if plan.streamed_iterations is not None:  # the per-iteration steps at the count learned streamed
        plan = _at_iterations(plan, plan.streamed_iterations)
    passes = solver_passes(plan.solver, plan.iterations.iterations, plan.k)
    # Streaming lifts DuckDB's memory_limit, not the solver's own bound (max_gram_bytes).
    limit = plan.limit if plan.limit and plan.limit != MEMORY_LIMIT else ""
    fits, held = not limit, 0
    if plan.solver == SolverName.DUHL:
        room, rows = DUHL_HELD_PARTITIONS * needed / max(partitions, 1), plan.held_bytes / max(partitions, 1)
        held = duhl_working_set(partitions, room, rows)
        passes = duhl_passes(plan.iterations.iterations, partitions, held)
        if rows > room:
            fits, limit = False, "the memory budget (DuHL's working set: one partition as it holds the rows)"
    steps, again = [], 0.0
    for step in plan.steps:
        if step.kind is StepKind.READ:
            seconds = step.seconds + partitions * PARTITION_QUERY_SECONDS
            name = "reading the fact, partition by partition"
            steps.append(Step(name, step.kernel, step.shape, 1, seconds, kind=StepKind.READ))
            if spill:
                seconds = needed / SPILL_WRITE_BYTES_PER_SECOND
                steps.append(Step("spilling the partitions", Kernel.SPILL, f"{needed / 2**20:,.0f} MiB", 1, seconds))
            again = step.seconds
        else:
            steps.append(step)
    if spill:
        tier = "memory" if needed <= memory / 2 else "disk"
        where = "page cache" if tier == "memory" else "disk"
        what = f"{partitions:,} partitions, {needed / 2**20:,.0f} MiB from the spill ({where})"
        again = needed / SPILL_READ_BYTES_PER_SECOND[tier] + partitions * PARTITION_PASS_SECONDS
    else:
        what = f"{partitions:,} partitions from DuckDB"
        again += partitions * PARTITION_QUERY_SECONDS
    if held:
        what += f", {held:,} held by DuHL"
    again_seconds, kind = (passes - 1) * again, StepKind.READ_AGAIN
    steps.append(Step("reading the partitions again", Kernel.STREAM, what, passes - 1, again_seconds, True, kind=kind))
    return replace(plan, steps=tuple(steps), placement="streamed", fits=fits, limit=limit)


def _at_iterations(plan: PhysicalPlan, estimate: IterationEstimate) -> PhysicalPlan:
    """``plan`` with its iterative steps scaled to ``estimate``'s count."""
    ratio = estimate.iterations / max(plan.iterations.iterations, 1e-12)
    steps = tuple(
        replace(s, count=s.count * ratio if s.count != 1 else 1, seconds=s.seconds * ratio) if s.iterative else s
        for s in plan.steps
    )
    return replace(plan, steps=steps, iterations=estimate, streamed_iterations=None)


def cheapest_streamed(streamed: list[PhysicalPlan]) -> tuple[PhysicalPlan, str]:
    """The cheapest of the plans priced streamed (those that fit first), and why: each solver's seconds and
    passes over the partitions, or what it would exceed ("" with one plan)."""
    ranked = sorted(streamed, key=lambda p: (not p.fits, p.seconds))
    if len(ranked) == 1:
        return ranked[0], ""

    def said(p: PhysicalPlan) -> str:
        if not p.fits:
            return f"{p.solver} would exceed {p.limit}"
        step = next((s for s in p.steps if s.kind is StepKind.READ_AGAIN), None)
        return f"{p.solver} {p.seconds:.3g} s ({1 + (step.count if step else 0):.3g} passes over the partitions)"

    return ranked[0], f"streamed, {ranked[0].solver} chosen: " + "; ".join(said(p) for p in ranked)


def distributed_plan(plan: PhysicalPlan, workers: int) -> PhysicalPlan:
    """``plan`` (factorized) on ``workers`` workers: the reading and the matrix kernels split over them, and
    per pass one round trip through the scheduler and one task per worker."""
    workers = max(int(workers), 1)
    passes = solver_passes(plan.solver, plan.iterations.iterations, plan.k)
    steps = [
        replace(s, seconds=s.seconds / workers, shape=f"{s.shape}, over {workers} workers")
        if s.kind is StepKind.READ or s.parallel and s.per_iteration
        else s
        for s in plan.steps
    ]
    seconds = passes * (CLUSTER_PASS_SECONDS + CLUSTER_TASK_SECONDS * workers)
    steps.append(Step("scheduling", Kernel.CLUSTER, f"{passes:g} passes x {workers} tasks", passes, seconds, True))
    return replace(plan, steps=tuple(steps), placement="distributed", fits=True, limit="")
