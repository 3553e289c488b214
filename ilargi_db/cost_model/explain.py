"""``explain``: the physical plan ``train(strategy="auto")`` would run, the runner-up, and why."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import duckdb

from ilargi_db.byte_sizes import format_bytes
from ilargi_db.cost_model.features import JobShape, JobStats, job_shape, job_stats
from ilargi_db.cost_model.hardware import detect_hardware
from ilargi_db.cost_model.iterations import load_history
from ilargi_db.cost_model.kernels import kernel_costs, planning_load
from ilargi_db.cost_model.memory import array_bytes, memory_limit_bytes
from ilargi_db.cost_model.plan import PhysicalPlan, StepKind, candidate_plans, reuse_offer
from ilargi_db.cost_model.shape_rule import FACTORIZE_ABOVE, shape_strategy
from ilargi_db.cost_model.uncertainty import Confidence, regret_choice
from ilargi_db.models.catalog import STRATEGIES, Strategy, algorithm_facts
from ilargi_db.plan import JoinGraph

if TYPE_CHECKING:
    from ilargi_db.reuse.holdings import ReadHoldings


@dataclass(frozen=True)
class Explanation:
    """The cost model's decision for one training job.

    Attributes
    ----------
    strategy : {"factorized", "materialized"}
    predicted_seconds : dict
        Predicted seconds of the best plan of each strategy. A job that cannot be factorized (a feature
        mixes sources) has only ``"materialized"``.
    features : dict
        The job's shape (:attr:`shape` as a dict), the backend, the load and the hardware: JSON-serialisable
        scalars.
    reasons : list of str
        The top reasons, in plain words, most important first.
    model : str
        Where the kernel costs come from (roofline priors or this machine's calibration).
    plan : PhysicalPlan
        The plan ``train`` runs: strategy, solver, backend and the predicted seconds of each step.
    runner_up : PhysicalPlan or None
        The next-cheapest plan.
    decide_seconds : float
        What deciding cost (the statistics queries and the load probe).
    placed : PhysicalPlan or None
        The plan as it would run streamed over a memory budget (``ilargi_db.explain`` sets it when the job's
        data exceed the budget), priced.
    confidence : Confidence or None
        How sure the choice is: per plan, its expected regret, the share of the kernel models' error draws in
        which it is fastest, and the range of its seconds (:mod:`~ilargi_db.cost_model.uncertainty`).
    """

    strategy: str
    predicted_seconds: dict[str, float]
    features: dict[str, float | int | str]
    reasons: list[str]
    model: str
    plan: PhysicalPlan | None = None
    runner_up: PhysicalPlan | None = None
    decide_seconds: float = 0.0
    plans: tuple[PhysicalPlan, ...] = field(default=(), repr=False)
    placed: PhysicalPlan | None = None
    confidence: Confidence | None = None
    shape: JobShape | None = field(default=None, repr=False)  # the job's shape, typed (``features`` reports it)

    @property
    def sure(self) -> str:
        """How sure the choice is, in words (empty without a confidence)."""
        if self.confidence is None or self.plan is None or self.plan.label not in self.confidence.ranges:
            return ""
        return self.confidence.describe(self.plan.label)

    @property
    def solver(self) -> str | None:
        return self.plan.solver if self.plan is not None else None

    def to_dict(self) -> dict:
        return {
            "strategy": self.strategy,
            "solver": self.solver,
            "predicted_seconds": self.predicted_seconds,
            "plan": self.plan.to_dict() if self.plan else None,
            "runner_up": self.runner_up.to_dict() if self.runner_up else None,
            "placed": self.placed.to_dict() if self.placed else None,
            "decide_seconds": self.decide_seconds,
            "features": self.features,
            "reasons": self.reasons,
            "model": self.model,
            "confidence": self.confidence.to_dict() if self.confidence else None,
        }

    def __str__(self) -> str:
        times = ", ".join(f"{s} {t:.3g} s" for s, t in self.predicted_seconds.items())
        lines = [f"strategy: {self.strategy} (predicted {times})"]
        for title, plan in (("plan", self.plan), ("streamed", self.placed), ("runner-up", self.runner_up)):
            if plan is not None:
                lines.append(
                    f"{title}: {plan.label}, {plan.seconds:.3g} s predicted"
                    + ("" if plan.fits else f" (exceeds {plan.limit})")
                )
                lines.append(plan.describe("    "))
        if self.sure:
            lines.append(f"how sure: {self.sure}")
        lines += [f"kernel costs: {self.model}", "why:"]
        lines += [f"  - {r}" for r in self.reasons]
        return "\n".join(lines)


def scales_columns(algorithm: str, standardize: bool) -> bool:
    """Whether ``train(..., standardize=standardize)`` trains ``algorithm`` on standardized columns (linear
    models and k-means do; trees split on bins, and NMF needs its columns non-negative)."""
    return standardize and algorithm_facts(algorithm).standardizes


NEAR_TIE = 0.10  # plans predicted this close read as a near tie; a batch's strategies this close, its shape decides
DIRECT_SOLVER_COLUMNS = 1024  # up to this many columns a tie goes to the direct solver
PLANNING_PER_SOURCE = 0.004  # parsing and binding the training query, per source (sqlglot, DuckDB DESCRIBE)


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:.2g}"


def _seconds(x: float) -> str:
    return f"{x * 1e3:,.0f} ms" if x < 1 else f"{x:.3g} s"


def choose_plan(plans: list[PhysicalPlan], comp_ratio: float, columns: int) -> tuple[PhysicalPlan, str, Confidence]:
    """The plan of least expected regret (:func:`~ilargi_db.cost_model.uncertainty.regret_choice`); among
    plans within ``REGRET_TIE`` of it, the one the data's shape favours, then a narrow direct solver.

    ``plans`` as :func:`~ilargi_db.cost_model.plan.candidate_plans` gives them; the job's ``comp_ratio`` and
    ``columns`` (:class:`~ilargi_db.cost_model.features.JobShape`) decide a tie.
    Returns the plan, why when it is not the plan predicted fastest, and how sure the choice is.
    """
    best, confidence, tied = regret_choice(plans)
    chosen = best
    if len(tied) > 1:
        shape = shape_strategy(comp_ratio)
        narrow = columns <= DIRECT_SOLVER_COLUMNS  # a small direct solve is sure; a wide one may not be
        chosen = min(tied, key=lambda p: (p.strategy != shape, narrow and p.iterations.iterations > 1, p.seconds))
    fastest = min((p for p in plans if p.fits), key=lambda p: p.seconds, default=chosen)
    if chosen is fastest:
        return chosen, "", confidence
    regret = confidence.expected_regret
    if chosen is not best:
        why = (
            f"{chosen.label} and {best.label} are a tie on expected regret ({regret[chosen.label]:.1%} vs "
            f"{regret[best.label]:.1%}), closer than the kernel models can tell: "
        )
        if chosen.strategy != best.strategy:
            why += (
                f"the join holds {comp_ratio:.2g}x the sources' cells, so {shape} (factorize above {FACTORIZE_ABOVE}x)"
            )
        else:
            why += f"a direct solver ({columns:,} columns), whose cost does not hang on an iteration count"
        return chosen, why, confidence
    why = (
        f"{chosen.label} over {fastest.label}, predicted faster ({fastest.seconds:.3g} s vs {chosen.seconds:.3g} s) "
        f"but less sure: its expected regret is {regret[chosen.label]:.1%} against {regret[fastest.label]:.1%}"
        f" ({fastest.label} {confidence.describe_range(fastest.label)}, {chosen.label} "
        f"{confidence.describe_range(chosen.label)})"
    )
    return chosen, why, confidence


def step_reasons(chosen: PhysicalPlan, other: PhysicalPlan) -> list[tuple[float, str, str | None]]:
    """The steps that differ between two plans, in the plans' own terms: ``(weight, text, strategy favoured)``
    each, the weight the difference's share of the slower plan's seconds (steps within 10% read "either way")."""
    found = []
    # Paired by what they say (their names); planning is the same for every plan.
    mine = {s.name: s for s in chosen.steps if s.kind is not StepKind.PLANNING}
    theirs = {s.name: s for s in other.steps if s.kind is not StepKind.PLANNING}
    for name in dict.fromkeys([*mine, *theirs]):
        a, b = mine.get(name), theirs.get(name)
        sa, sb = (a.seconds if a else 0.0), (b.seconds if b else 0.0)
        if max(sa, sb) <= 0.01 * max(chosen.seconds, other.seconds):
            continue  # a step too small to matter either way
        weight = abs(sa - sb) / max(chosen.seconds, other.seconds, 1e-9)
        if a is None or b is None:
            step = a or b
            who = chosen.label if a else other.label
            text = f"only {who} runs {step.describe()} ({_seconds(step.seconds)})"
        elif abs(sa - sb) <= 0.1 * max(sa, sb):
            text = f"{name} takes about {_seconds(max(sa, sb))} either way"
        else:
            text = f"{name} takes {_seconds(sa)} {chosen.label} ({a.shape}) vs {_seconds(sb)} {other.label} ({b.shape})"
        favours = chosen.strategy if sa < sb else other.strategy if sb < sa else None
        found.append((weight, text, favours))
    return found


def _shape_reasons(f: JobShape) -> list[tuple[float, str, str | None]]:
    """What the data's shape says: tuple and feature ratios, fan-out, one-hot width."""
    found: list[tuple[float, str, str | None]] = []
    comp = f.comp_ratio
    if f.n_dimensions:
        low, high = _fmt(f.tuple_ratio_min), _fmt(f.tuple_ratio_max)
        times = low if low == high else f"{low} to {high}"
        where = (
            f"the join repeats each dimension row {times} times (tuple ratio) and the dimensions bring "
            f"{_fmt(f.feature_ratio)}x the fact's columns (feature ratio)"
        )
        favours = shape_strategy(comp)
        if favours == Strategy.FACTORIZED:
            text = (
                f"{where}: the joined matrix would hold {_fmt(f.cells_materialized)} cells, "
                f"{comp:.1f}x the {_fmt(f.cells_factorized)} of the sources plus their row indices"
            )
        else:
            text = (
                f"{where}: the joined matrix ({_fmt(f.cells_materialized)} cells) is no bigger than the sources "
                f"plus their row indices ({_fmt(f.cells_factorized)}), so factorizing saves little work"
            )
        found.append((0.05 + abs(math.log(max(comp, 1e-9))) / 10, text, favours))
    if f.fact_fanout > 1.2:  # HyperLogLog counts are within a few percent
        fanout = _fmt(f.fact_fanout)
        found.append(
            (0.04, f"an M:N join repeats fact rows {fanout}x: the join outgrows its sources", Strategy.FACTORIZED)
        )
    if f.categorical_features:
        found.append(
            (
                0.03,
                f"{f.categorical_features} categorical feature(s) one-hot encoded into {f.columns_onehot} "
                "columns: materializing encodes one value per joined row, factorizing one per source row",
                Strategy.FACTORIZED,
            )
        )
    return found


def explain_graph(
    con: duckdb.DuckDBPyConnection,
    graph: JoinGraph,
    algorithm: str = "linear_regression",
    backend: str = "auto",
    params: dict[str, Any] | None = None,
    cache: str | os.PathLike | None = None,
    strategies: tuple[str, ...] = STRATEGIES,
    stats: JobStats | None = None,
    load: float | None = None,
    spent: float = 0.0,
    reuse: ReadHoldings | None = None,
    standardize: bool = False,
) -> Explanation:
    """The plans of training ``algorithm`` on a planned join graph, priced, and the choice with its reasons
    (what ``train`` and ``ilargi_db.explain`` call); ``strategies`` limits the candidates.

    ``stats`` are the job's statistics and ``load`` the load probe's reading when the caller has them (a
    batch of models on one query shares both); ``spent`` is what getting them took, counted as deciding.
    ``reuse`` is what the artifact store holds for the job's factorized read, priced here
    (:func:`~ilargi_db.cost_model.plan.reuse_offer`). ``standardize``: ``train``'s option (a linear model then
    trains on standardized columns).
    """
    from ilargi_db.backend import get_backend

    start = time.perf_counter() - spent
    params = dict(params or {})  # checked by the caller (train's options, explain's edge)
    name = get_backend(backend).name
    hardware = detect_hardware(cache)
    stats = job_stats(con, graph) if stats is None else stats
    costs = kernel_costs(hardware, name, cache)
    load = planning_load(hardware.cores) if load is None else load
    needed = array_bytes(stats)
    limit = memory_limit_bytes(con)
    mixed = graph.cross_source_features
    allowed = (Strategy.MATERIALIZED,) if mixed else strategies
    # Planning: the join graph (before this call, about 4 ms a source) and the statistics just measured.
    planning = time.perf_counter() - start + PLANNING_PER_SOURCE * len(stats.sources)
    offer = reuse_offer(reuse)
    plans = candidate_plans(
        stats,
        algorithm,
        params,
        costs,
        backend=name,
        strategies=allowed,
        array_bytes=needed,
        memory_limit=limit,
        load=load,
        history=load_history(cache),
        planning_seconds=planning,
        reuse=offer,
        scaled=scales_columns(algorithm, standardize),
    )
    shape = job_shape(stats, algorithm, params)
    chosen, tie_break, confidence = choose_plan(plans, shape.comp_ratio, shape.columns)
    decided = time.perf_counter() - start
    runner_up = next((p for p in plans if p is not chosen), None)
    f = {**shape.as_dict(), "backend": name, "load": load, **hardware.as_features()}
    for s in STRATEGIES:
        f[f"array_bytes_{s}"] = needed[s]
    seconds = {s: min(p.seconds for p in plans if p.strategy == s) for s in allowed}
    gpu = f", GPU {hardware.gpu_name}" if name == "cupy" and hardware.gpu_name else ""
    hardware_line = (
        f"hardware: {hardware.cores} cores, {hardware.memory_bandwidth_gbs:.0f} GB/s memory, "
        f"{hardware.gflops:.0f} GFLOP/s{gpu}; backend {name}"
    )
    iterations = f"iterations: {chosen.iterations.iterations:g} expected ({chosen.iterations.source})"
    if mixed:
        why = "; ".join(feature.describe_sources() for feature in mixed)
        only = f"{why}, so it cannot be computed inside one source: only the materialized join can train it"
        return Explanation(
            Strategy.MATERIALIZED,
            seconds,
            f,
            [only, iterations, hardware_line],
            costs.source,
            chosen,
            runner_up,
            decided,
            tuple(plans),
            confidence=confidence,
            shape=shape,
        )
    reasons = _reasons(chosen, runner_up, shape, tie_break, load, offer) + [iterations, hardware_line]
    if offer is not None and offer.lines:
        reasons.append(
            f"reuses {'; '.join(offer.lines)}: {offer.saved_seconds * 1e3:,.0f} ms of earlier work (factorized plans)"
        )
    if runner_up is not None:
        reasons.insert(0, _lead(chosen, runner_up))
    return Explanation(
        chosen.strategy,
        seconds,
        f,
        reasons,
        costs.source,
        chosen,
        runner_up,
        decided,
        tuple(plans),
        None,
        confidence,
        shape=shape,
    )


def _reasons(
    chosen: PhysicalPlan, runner_up: PhysicalPlan | None, f: JobShape, tie_break: str, load: float, offer: Any
) -> list[str]:
    """The four weightiest reasons, those for the choice first: the data's shape, the steps that differ
    between the chosen plan and the runner-up, the tie-break, a busy machine."""
    weighted = _shape_reasons(f)
    if tie_break:
        weighted.append((1.0, tie_break, chosen.strategy))
    if runner_up is not None:
        weighted += step_reasons(chosen, runner_up)
    if load > 1.2:
        weighted.append(
            (
                0.2,
                f"other processes hold the cores: parallel steps run {load:.1f}x slower than on idle cores "
                "(a 2 ms probe of the runnable tasks), and are predicted so",
                None,
            )
        )
    weighted.sort(key=lambda w: (w[2] not in (chosen.strategy, None), -w[0]))  # for the choice first
    return [text for _, text, _ in weighted[:4]]


def _lead(chosen: PhysicalPlan, runner_up: PhysicalPlan) -> str:
    """The first reason: how the chosen plan compares with the runner-up (faster, a near tie, or it fits)."""
    speedup = runner_up.seconds / max(chosen.seconds, 1e-12)
    if not runner_up.fits:
        arrays = f" ({format_bytes(runner_up.array_bytes)} of arrays)" if runner_up.limit.startswith("DuckDB") else ""
        slower = "" if speedup >= 1 else f", though predicted {1 / speedup:.2f}x slower"
        return f"{runner_up.label} would exceed {runner_up.limit}{arrays}; {chosen.label} fits{slower}"
    if speedup < 1 - NEAR_TIE:
        return (
            f"{chosen.label} is predicted {1 / speedup:.2f}x slower than {runner_up.label} ({chosen.seconds:.3g} s "
            f"vs {runner_up.seconds:.3g} s) but is the safer bet: see its expected regret"
        )
    if speedup < 1 + NEAR_TIE:
        return (
            f"{chosen.label} and {runner_up.label} are a near tie ({chosen.seconds:.3g} s vs "
            f"{runner_up.seconds:.3g} s predicted)"
        )
    return f"{chosen.label} is predicted {speedup:.2f}x faster than {runner_up.label}"
