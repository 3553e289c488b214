"""The strategy a training runs: the caller's, the cost model's plan for ``"auto"``, or a rule when it fails."""

from __future__ import annotations

from typing import Any

import duckdb

from ilargi_db.cost_model.explain import explain_graph
from ilargi_db.cost_model.features import FACTORIZE_ABOVE, source_rows
from ilargi_db.errors import IlargiError
from ilargi_db.plan import JoinGraph, check_single_source
from ilargi_db.read_snapshot import renew_snapshot

STRATEGIES = ("auto", "factorized", "materialized")


def choose_strategy(
    con: duckdb.DuckDBPyConnection,
    graph: JoinGraph,
    strategy: str,
    *,
    algorithm: str = "linear_regression",
    backend: str = "auto",
    params: dict | None = None,
) -> tuple[str, str, Any]:
    """``(strategy, why, explanation)``: the caller's strategy, or the cost estimator's choice for ``"auto"``.

    ``explanation`` is the estimator's :class:`~ilargi_db.cost_model.Explanation` (None when it was not asked).
    """
    if strategy not in STRATEGIES:
        raise IlargiError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}.")
    mixed = graph.cross_source_features
    if mixed:
        why = "; ".join(feature.describe_sources() for feature in mixed)
        if strategy == "factorized":
            check_single_source(graph)  # raises the planner's message
        return "materialized", f"materialized: {why}, so it cannot be computed inside one source.", None
    if strategy != "auto":
        return strategy, f"{strategy}: chosen by the caller.", None
    try:
        explanation = explain_graph(con, graph, algorithm, backend, params)
    except (duckdb.Error, OSError, ValueError) as err:  # the estimator must never stop a training that can run
        renew_snapshot(con)  # a failed statement aborts the transaction it ran in
        chosen, why = cell_ratio_rule(con, graph)
        return chosen, f"{why} (the cost estimator failed: {err})", None
    seconds = explanation.predicted_seconds
    why = (
        f"{explanation.plan.label}: predicted {seconds['factorized']:.3g} s factorized vs "
        f"{seconds['materialized']:.3g} s materialized; {'; '.join(explanation.reasons[:2])}."
    )
    return explanation.strategy, why, explanation


def cell_ratio_rule(con: duckdb.DuckDBPyConnection, graph: JoinGraph) -> tuple[str, str]:
    """Amalur's rule, the fallback when the estimator cannot run: factorize when the join holds 1.5x the cells."""
    rows = source_rows(con, graph)
    widths = {s.alias: 0 for s in graph.sources}
    for f in graph.features:
        for part in f.parts:
            widths[part.source] += 1
    # The join has (about) as many rows as its largest source, the fact table of a star or snowflake.
    n = max(rows.values())
    materialized = n * sum(widths.values())
    factorized = sum(rows[a] * w for a, w in widths.items() if w) + n * sum(1 for w in widths.values() if w)
    ratio = materialized / factorized
    chosen = "factorized" if ratio > FACTORIZE_ABOVE else "materialized"
    return chosen, f"{chosen}: the join would hold {ratio:.1f}x the cells of the normalized matrix (Amalur's rule)"
