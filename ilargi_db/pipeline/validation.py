"""Held-out rows: ``train(..., validation=0.2)`` fits on a seeded share of the rows it read and scores the rest.

The split is a row selection of the one read (``X[rows]``): the rows of smallest key, each row keyed by a hash of
its values seeded with :data:`VALIDATION_SEED` (:mod:`ilargi_db.linalg.row_identity`), never by its position, so
a job holds out the same rows on every run, whatever order DuckDB's threads, a view over Parquet or ties in ORDER
BY deliver them in: the factorized read and the materialized join (whose row order changes between runs) hold
out the same rows. The encoding
(categories, imputation means) is learned from every row read, as it is for ``predict`` on new rows; the fit
sees only the training share. ``validation="SELECT ..."`` scores another query instead (``ilargi_db.evaluate``
after the fit; the query is planned with the training query, :func:`check_validation_query`). Either way the
model's ``validation_metrics_`` holds what ``evaluate`` reports.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import duckdb
import numpy as np

from ilargi_db.errors import IlargiError, PlanError, speaking_of
from ilargi_db.linalg.row_identity import first_by_key, row_keys
from ilargi_db.pipeline.metrics import metrics_of
from ilargi_db.pipeline.readers import TrainingData
from ilargi_db.pipeline.scoring import evaluate, grouped_metrics
from ilargi_db.plan import JoinGraph, build_join_graph, split_kept_columns

VALIDATION_SEED = 0  # the held-out rows of a job are the same on every run


def check_validation_query(con: duckdb.DuckDBPyConnection, graph: JoinGraph, validation: Any) -> None:
    """Plan a validation query beside the training query, before anything is read: it selects the features by
    name, in any order (and the target; the group column of a model per group), and may select other columns,
    as a query ``evaluate`` scores; or it is refused in its own terms."""
    if not isinstance(validation, str):
        return
    group = graph.group.name if graph.group is not None else None
    try:
        with speaking_of("the validation query"):
            others = [name for name in (graph.target.name if graph.target else None, group) if name is not None]
            scored = split_kept_columns(validation, graph.feature_names, others).query  # as evaluate reads it
            columns = [c.lower() for c in build_join_graph(con, scored, read_once=True).feature_names]
            target = graph.target.name if graph.target is not None and graph.target.name.lower() in columns else None
            found = build_join_graph(con, scored, target, group, read_once=True)
    except PlanError as err:
        said = str(err)
        raise type(err)(said if "the validation query" in said else f"the validation query: {said}") from None
    if graph.target is not None and target is None:
        raise PlanError(
            f"the validation query does not select the target {graph.target.name!r}: select it, its rows are "
            "scored against it."
        )
    if [n.lower() for n in found.feature_names] != [n.lower() for n in graph.feature_names]:
        raise PlanError(
            f"the validation query selects the features {', '.join(found.feature_names)}, and the training query "
            f"{', '.join(graph.feature_names)}: select each of the training's features, named as in training."
        )


def held_out_rows(keys: np.ndarray, share: float) -> tuple[np.ndarray, np.ndarray]:
    """The training rows and the held-out rows (``share`` of the rows, at least one each, those of smallest
    ``keys``: :func:`training_keys`), both sorted positions."""
    n_rows = len(keys)
    held = int(round(n_rows * share))
    if held < 1 or held >= n_rows:
        raise IlargiError(
            f"validation={share:g} of {n_rows} rows leaves no rows to {'score' if held < 1 else 'train on'}: "
            "hold out a share that leaves rows on both sides, or pass a query to score."
        )
    chosen = first_by_key(keys, held)
    kept = np.ones(n_rows, dtype=bool)
    kept[chosen] = False  # the complement in order, without sorting again
    return np.flatnonzero(kept), chosen


def training_keys(data: TrainingData) -> np.ndarray:
    """Each row's key: a hash of its features, its label and its group, seeded with :data:`VALIDATION_SEED`."""
    groups = None if data.groups is None else data.groups.codes
    return row_keys(data.X, (data.y, groups), VALIDATION_SEED)


def rows_of(data: TrainingData, rows: np.ndarray) -> TrainingData:
    """``data``'s selected rows (a row selection: nothing copied but the labels and groups)."""
    return TrainingData(
        data.X[rows],
        None if data.y is None else data.y[rows],
        data.encoder,
        groups=None if data.groups is None else data.groups.take(rows),
    )


def split(data: TrainingData, share: float) -> tuple[TrainingData, TrainingData]:
    """The rows to train on and the held-out rows to score, as :func:`held_out_rows` draws them."""
    train, held = held_out_rows(training_keys(data), share)
    return replace(rows_of(data, train), unlabelled=data.unlabelled), rows_of(data, held)


def held_out_metrics(model: Any, held: TrainingData) -> dict[str, Any]:
    """What ``evaluate`` reports of ``model`` on the held-out rows (each group's, for a model per group)."""
    if held.groups is not None:
        return grouped_metrics(model, held)
    return {**metrics_of(model, held.X, held.y), "rows": int(held.X.shape[0])}


def validated_on_query(con: duckdb.DuckDBPyConnection, models: list[Any], validation: Any) -> list[Any]:
    """``models``, each scored on the rows of ``validation`` when it is a query (read after the training's
    snapshot closed, by :func:`~ilargi_db.pipeline.scoring.evaluate`): never a stored model's old scores."""
    if isinstance(validation, str):
        for model in models:
            model.validation_metrics_ = evaluate(con, model, validation)
    return models


__all__ = [
    "VALIDATION_SEED",
    "check_validation_query",
    "held_out_metrics",
    "held_out_rows",
    "split",
    "training_keys",
    "validated_on_query",
]
