"""A job repeated in a later process: the models it trained, stored beside the database, given back.

A training job whose data (every column it reads, by content: :mod:`~ilargi_db.reuse.fingerprint`),
query, models, parameters and settings are those of an earlier job has that job's models as its
result: the earlier job keeps each model's record (what the registry stores, :meth:`TrainedModel.to_record`)
in the database tier, and the repeat reads it back through the registry's checks instead of reading
the data and fitting (``reused_`` says "the trained model (fit, from database ...)"). Only the database
tier holds them (a later process is what they serve; a repeat in this process finds them there too once
written), only for jobs held in memory, never with ``reuse=False``, and never for a model whose fit draws
random numbers with no seed (each run is another draw). Benchmarks that time a fit pass ``reuse=False``.
"""

from __future__ import annotations

import json
import time
from importlib.metadata import version

import numpy as np

import ilargi_db
from ilargi_db.errors import DamagedModelError
from ilargi_db.models.catalog import Placement
from ilargi_db.pipeline.planning import JobPlan
from ilargi_db.reuse.fingerprint import digest
from ilargi_db.trained_model import TrainedModel

FIT, FIT_WHAT = "fit", "the trained model"  # a model's record, as an artifact


def fit_keys(job: JobPlan) -> list[str] | None:
    """Each model's key (its data, query, parameters and the job's settings); None where a repeat must train."""
    fp = job.artifacts.fingerprint
    if not (job.artifacts.persist and fp.reusable and job.placement == Placement.MEMORY):
        return None
    if any(
        "random_state" in m.estimator.get_params() and m.estimator.get_params()["random_state"] is None
        for m in job.models
    ):
        return None  # a new draw each run
    graph = job.graph
    options = job.options
    # The code that fitted it too: another release's fit may give another model.
    # (scikit-learn's and SciPy's by their installed metadata: importing them would cost more than a small fit)
    settings = [ilargi_db.__version__, version("scikit-learn"), np.__version__, version("scipy")]
    settings += [job.target, graph.feature_names, job.flags, job.strategy.value, job.backend.name]
    settings += [bool(options.standardize), bool(options.impute), len(job.models), options.validation]
    data = [fp.rows_key, [fp.column_keys[j] for j in sorted(fp.column_keys)]]
    return [
        digest(FIT, data, settings, i, m.spec.algorithm, json.dumps(m.spec.params, sort_keys=True, default=repr))
        for i, m in enumerate(job.models)
    ]


def stored_models(job: JobPlan, query: str, planning_seconds: float) -> list[TrainedModel] | None:
    """The models an earlier run of this job stored, read back; None unless every one of them is there."""
    keys = fit_keys(job)
    if keys is None:
        return None
    began = time.perf_counter()
    models = job.artifacts.find_all_stored(FIT, keys, FIT_WHAT, _model_of)
    if models is None:
        return None
    seconds = time.perf_counter() - began
    for model in models:
        model.query_ = query
        model.reused_ = job.artifacts.describe()
        model.warnings_ = list(model.warnings_) + [w for w in job.artifacts.warnings if w not in model.warnings_]
        model.timings_ = {
            "planning": planning_seconds,
            "data": 0.0,
            "training": seconds,
            "metrics": 0.0,
            "total": planning_seconds + seconds,
        }
    return models


def _model_of(found: object) -> TrainedModel | None:
    try:
        return TrainedModel.from_record(found["record"]) if isinstance(found, dict) else None
    except (DamagedModelError, KeyError, TypeError):
        return None


def keep_models(job: JobPlan, models: list[TrainedModel], seconds: float) -> None:
    """Keep each trained model's record for a later process repeating the job (``seconds``: reading and fitting)."""
    keys = fit_keys(job)
    if keys is None:
        return
    for key, model in zip(keys, models):
        # What the store warned of then (its settings, a damaged artifact) is that run's; a repeat says its own.
        said = model.warnings_
        model.warnings_ = [w for w in said if w not in job.artifacts.warnings]
        try:
            record = model.to_record()
        finally:
            model.warnings_ = said
        job.artifacts.keep(
            FIT, key, FIT_WHAT, {"record": record}, seconds / len(models), in_memory=False, deferrable=True
        )


__all__ = ["keep_models", "stored_models"]
