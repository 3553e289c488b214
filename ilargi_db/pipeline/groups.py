"""Per-group models: ``train(..., group_by="store")`` fits one model per value of a column, from one read.

The group column rides along the key-only join (or the materialized join) as text, one value per output row
(:class:`~ilargi_db.metadata.GroupCodes`), so the read is the job's one read. Each group's rows are then a row
selection of the training matrix (``X[rows]``: a small group copies the dimension rows it takes) and its model is
fitted there by :func:`~ilargi_db.pipeline.fit.fit_model`, as a training of its own would fit it, so a group's
model equals the model trained on ``WHERE group = value`` with the job's encoding: the categories and
imputation means learned from all rows (one macro encodes every group alike). Rows whose group is NULL train
no model (``ungrouped_rows_``); a group whose rows all have a NULL target (or are all held out) has none either,
and ``warnings_`` names it. Every group's model must answer the same kind of question (the same classes, the
same boosting objective): the macro is one. Groups compare by their text (DuckDB's VARCHAR cast), byte for byte.

Held in memory only: a streamed or distributed job is refused when it is planned
(:func:`~ilargi_db.pipeline.planning.place`).
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from ilargi_db.errors import IlargiError
from ilargi_db.limits import NodeBounded
from ilargi_db.models.estimator import clone
from ilargi_db.pipeline.fit import fit_model
from ilargi_db.pipeline.options import check_grouped_size
from ilargi_db.pipeline.planning import JobPlan, ModelPlan
from ilargi_db.pipeline.readers import TrainingData
from ilargi_db.trained_model import GroupedModel, TrainedModel


def fit_groups(job: JobPlan, model: ModelPlan, data: TrainingData, shared: dict[str, float]) -> GroupedModel:
    """One :class:`TrainedModel` per group of ``data``, each fitted on the group's rows; returned as one model."""
    began = time.perf_counter()
    groups, column = data.groups, job.graph.group.name
    models: dict[str, TrainedModel] = {}
    without = []  # groups the read saw whose rows were all left out (a NULL target, or held out for validation)
    each = groups.rows_of_each()
    fitted_nodes = 0  # one macro holds every group's trees: the nodes grown so far, counted after each group
    for label, rows in each.items():
        if not len(rows):
            without.append(label)
            continue
        part = TrainingData(data.X[rows], None if data.y is None else data.y[rows], data.encoder)
        try:
            models[label] = fit_model(job, replace(model, estimator=clone(model.estimator)), part, shared)
        except (IlargiError, ValueError) as err:  # e.g. a group whose rows hold one class only
            raise IlargiError(
                f"the model of group {column} = {label!r} ({len(rows)} rows) cannot be fitted: {err} Leave the group "
                f"out (WHERE {column} IS DISTINCT FROM ...) or change the parameters."
            ) from err
        fitted = models[label].estimator_
        if model.spec.as_macro and isinstance(fitted, NodeBounded):
            fitted_nodes += fitted.node_count()
            check_grouped_size(model.spec.algorithm, fitted_nodes, len(models), len(each) - len(without))
    if not models:
        raise IlargiError(f"no row has a group: every value of group_by {column!r} is NULL. Group by another column.")
    GroupedModel.check_groups_agree(models, column)
    first = next(iter(models.values()))
    n_rows = sum(m.n_rows_ for m in models.values())
    grouped = GroupedModel(
        clone(model.estimator),
        data.encoder,
        first.algorithm_,
        job.query,
        first.target_,
        target_type_=first.target_type_,
        target_classes_=first.target_classes_,
        feature_types_=first.feature_types_,
        standardize_=first.standardize_,
        strategy_=first.strategy_,
        decision_=first.decision_,
        plan_=first.plan_,
        explanation_=first.explanation_,
        n_rows_=n_rows,
        unlabelled_rows_=data.unlabelled,
        warnings_=[f"group {label!r}: {w}" for label, m in models.items() for w in m.warnings_]
        + [
            f"group {label!r} has no model: all of its rows were left out (a NULL target, or held out)"
            for label in without
        ],
        reused_=first.reused_,
        group_by_=job.graph.group.name,
        group_type_=job.graph.group.duckdb_type,
        models_=models,
        ungrouped_rows_=int(np.count_nonzero(groups.codes < 0)),
    )
    grouped.training_metrics_ = weighted_metrics(models)
    fitting = time.perf_counter() - began
    grouped.timings_ = {
        "planning": shared["planning"],
        "data": shared["data"],
        "training": sum(m.timings_["training"] for m in models.values()),
        "metrics": sum(m.timings_["metrics"] for m in models.values()),
        "total": fitting + shared["planning"] + shared["data"],
    }
    return grouped


def weighted_metrics(models: dict[str, TrainedModel]) -> dict[str, float]:
    """Each training metric's mean over the groups' models, weighted by their rows."""
    rows = {label: m.n_rows_ for label, m in models.items()}
    total = sum(rows.values())
    names = [
        name
        for name in next(iter(models.values())).training_metrics_
        if all(name in m.training_metrics_ for m in models.values())
    ]
    return {
        name: float(sum(rows[label] * m.training_metrics_[name] for label, m in models.items()) / total)
        for name in names
    }


__all__ = ["fit_groups", "weighted_metrics"]
