"""Held-out rows: ``train(..., validation=0.2)`` fits on a seeded share of the rows it read and scores the rest.

The split is a row selection of the one read (``X[rows]``: the dimension blocks shared), drawn by a generator
seeded with :data:`VALIDATION_SEED`, so a job holds out the same rows on every run. The encoding (categories,
imputation means) is learned from every row read, as it is for ``predict`` on new rows; the fit sees only the
training share. ``validation="SELECT ..."`` scores another query instead (``ilargi_db.evaluate`` after the fit).
Either way the model's ``validation_metrics_`` holds what ``evaluate`` reports.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import duckdb
import numpy as np

from ilargi_db.errors import IlargiError
from ilargi_db.pipeline.metrics import metrics_of
from ilargi_db.pipeline.readers import TrainingData
from ilargi_db.pipeline.scoring import evaluate, grouped_metrics

VALIDATION_SEED = 0  # the held-out rows of a job are the same on every run


def held_out_rows(n_rows: int, share: float) -> tuple[np.ndarray, np.ndarray]:
    """The training rows and the held-out rows (``share`` of ``n_rows``, at least one each), both sorted."""
    held = int(round(n_rows * share))
    if held < 1 or held >= n_rows:
        raise IlargiError(
            f"validation={share:g} of {n_rows} rows leaves no rows to {'score' if held < 1 else 'train on'}: "
            "hold out a share that leaves rows on both sides, or pass a query to score."
        )
    order = np.random.default_rng(VALIDATION_SEED).permutation(n_rows)
    return np.sort(order[held:]), np.sort(order[:held])


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
    train, held = held_out_rows(data.X.shape[0], share)
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


__all__ = ["VALIDATION_SEED", "held_out_metrics", "held_out_rows", "split", "validated_on_query"]
