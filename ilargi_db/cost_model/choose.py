"""The strategy a training runs: the caller's, the cost model's plan for ``"auto"``, or a rule when it fails."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import duckdb

from ilargi_db.cost_model.explain import NEAR_TIE, explain_graph
from ilargi_db.cost_model.features import JobStats, job_stats, source_rows
from ilargi_db.cost_model.hardware import detect_hardware
from ilargi_db.cost_model.kernels import pinned_load, probe_load
from ilargi_db.cost_model.shape_rule import cell_ratio, join_cells, shape_strategy
from ilargi_db.models.catalog import STRATEGIES, Strategy
from ilargi_db.plan import JoinGraph, check_single_source
from ilargi_db.read_snapshot import renew_snapshot

if TYPE_CHECKING:
    from ilargi_db.reuse.holdings import ReadHoldings


def choose_batch_strategy(
    con: duckdb.DuckDBPyConnection,
    graph: JoinGraph,
    strategy: str,
    models: list[tuple[str, dict]],
    backend: str = "auto",
    stats: JobStats | None = None,
    reuse: ReadHoldings | None = None,
    standardize: bool = False,
) -> tuple[str, str, list[Any]]:
    """``(strategy, why, explanations)`` for models trained together on one read of the data.

    With ``"auto"`` each model's plans are priced on the job's statistics (gathered once, or ``stats``
    when the caller has them); the batch takes the strategy whose plans cost least in sum, the data read
    once. ``reuse`` says what the artifact store holds for the factorized read (the cost model prices it);
    ``standardize`` is ``train``'s option.
    """
    none: list[Any] = [None] * len(models)
    mixed = graph.cross_source_features
    if mixed:
        why = "; ".join(feature.describe_sources() for feature in mixed)
        if strategy == Strategy.FACTORIZED:
            check_single_source(graph)  # raises the planner's message
        return Strategy.MATERIALIZED, f"materialized: {why}, so it cannot be computed inside one source.", none
    if strategy != "auto":
        return strategy, f"{strategy}: chosen by the caller.", none
    began = time.perf_counter()
    pinned = pinned_load()  # a bad $ILARGI_PLAN_LOAD is the caller's to fix, not a fallback
    try:
        stats = job_stats(con, graph) if stats is None else stats
        load = probe_load(detect_hardware().cores) if pinned is None else pinned
        spent = time.perf_counter() - began  # deciding's cost, in every model's explanation
        explanations = [
            explain_graph(
                con, graph, a, backend, p, stats=stats, load=load, spent=spent, reuse=reuse, standardize=standardize
            )
            for a, p in models
        ]
    except (duckdb.Error, OSError, ValueError) as err:  # the cost model must never stop a training that can run
        renew_snapshot(con)  # a failed statement aborts the transaction it ran in
        chosen, why = cell_ratio_rule(con, graph)
        return chosen, f"{why} (the cost model failed: {err})", none
    if len(models) == 1:
        (explanation,) = explanations
        seconds = explanation.predicted_seconds
        why = (
            f"{explanation.plan.label}: predicted {seconds[Strategy.FACTORIZED]:.3g} s factorized vs "
            f"{seconds[Strategy.MATERIALIZED]:.3g} s materialized; {'; '.join(explanation.reasons[:2])}"
            + (f"; {explanation.sure}." if explanation.sure else ".")
        )
        return explanation.strategy, why, explanations
    totals = batch_seconds(explanations)
    if not totals:  # no strategy fits every model: each model's own choice is refused the same way alone
        return explanations[0].strategy, "no strategy fits every model of the batch", explanations
    chosen = min(totals, key=totals.get)
    # Within the models' error the data's shape decides, as for one model (explain.choose_plan).
    shape = shape_strategy(explanations[0].shape.comp_ratio)
    if shape in totals and totals[shape] <= totals[chosen] * (1 + NEAR_TIE):
        chosen = shape
    others = ", ".join(f"{totals[s]:.3g} s {s}" for s in totals if s != chosen)
    why = f"{chosen} for all {len(models)} models, the data read once: predicted {totals[chosen]:.3g} s" + (
        f" vs {others}" if others else ""
    )
    return chosen, why, explanations


def batch_seconds(explanations: list[Any]) -> dict[str, float]:
    """Predicted seconds of the batch per strategy: each model's best plan, planning and reading counted once."""
    totals: dict[str, float] = {}
    for strategy in STRATEGIES:
        best = [
            min((p for p in e.plans if p.strategy == strategy and p.fits), key=lambda p: p.seconds, default=None)
            for e in explanations
        ]
        if any(p is None for p in best):
            continue
        shared = max(p.phase_seconds()["planning"] + p.phase_seconds()["data"] for p in best)
        totals[strategy] = shared + sum(p.phase_seconds()["iterations"] for p in best)
    return totals


def plan_for(explanation: Any, strategy: str) -> Any:
    """The cheapest plan of ``explanation`` that runs ``strategy`` and fits (None without an explanation)."""
    if explanation is None:
        return None
    if explanation.plan is not None and explanation.plan.strategy == strategy:
        return explanation.plan
    fitting = [p for p in explanation.plans if p.strategy == strategy and p.fits]
    return min(fitting, key=lambda p: p.seconds, default=None)


def cell_ratio_rule(con: duckdb.DuckDBPyConnection, graph: JoinGraph) -> tuple[str, str]:
    """Amalur's rule (:mod:`~ilargi_db.cost_model.shape_rule`) on the sources' row counts alone: the fallback
    when the estimator cannot run."""
    rows = source_rows(con, graph)
    widths = {s.alias: 0 for s in graph.sources}
    for f in graph.features:
        for part in f.parts:
            widths[part.source] += 1
    # The join has (about) as many rows as its largest source, the fact table of a star or snowflake.
    n = max(rows.values())
    ratio = cell_ratio(*join_cells(n, [(rows[a], w) for a, w in widths.items()], sum(widths.values())))
    chosen = shape_strategy(ratio)
    return chosen, f"{chosen}: the join would hold {ratio:.1f}x the cells of the normalized matrix (Amalur's rule)"
