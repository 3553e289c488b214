"""The read phase for tree models: the training rows binned, factorized or from the materialized join.

The bins come from the training rows each reader reads (:meth:`FeatureBinner.fit_metadata`, the factorized
way; :meth:`FeatureBinner.fit_table`, the join's rows): the same rows, so both strategies bin the same values
alike and grow the same trees. The factorized reader reads the key-only join and each
source's scan through the artifact store (another ``learning_rate`` or more trees on the same query
reads nothing again); the materialized one the join DuckDB builds.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import duckdb

from ilargi_db.models.catalog import Rows, Strategy
from ilargi_db.pipeline.readers import (
    READERS,
    ReadSettings,
    TrainingData,
    labelled_metadata,
    materialized_rows,
    source_metadata,
)
from ilargi_db.plan import JoinGraph
from ilargi_db.reuse.job import JobReuse


def _binned(graph: JoinGraph, read: ReadSettings, job: JobReuse | None, fit: Callable[[Any], Any]) -> Any:
    """The reader's binner: fitted on the training rows by ``fit`` (or its bins from the artifact store), or as
    the model fitted it."""
    binner = read.encoder
    if not read.fit:
        binner.check_features(graph.feature_names)
        return binner
    if job is None or not job.enabled:
        return fit(binner)
    key, _ = job.bins_keys(graph, binner.categorical, binner.max_bins, read.labelled_only)
    found = job.find_bins(key)
    if found is not None:
        try:
            binner.set_state(found)
            return binner
        except (KeyError, TypeError, ValueError):  # stored damaged: bin again
            job.unuse_last()
    began = time.perf_counter()
    fit(binner)
    job.keep_bins(key, binner.to_state(), time.perf_counter() - began)
    return binner


def _on(data: TrainingData, read: ReadSettings) -> TrainingData:
    """``data`` whose trees grow on ``read``'s backend (the binned rows stay on the host until the grower uploads
    what its kernels read)."""
    return dataclasses.replace(data, X=dataclasses.replace(data.X, backend=read.backend))


def read_binned_factorized(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, read: ReadSettings, job: JobReuse | None = None
) -> TrainingData:
    """Each source's features binned once per source row, and the source row each training row takes; with
    ``job``, the bins and the binned rows from (and into) the artifact store."""
    return _on(_read_binned_factorized(con, graph, read, job), read)


def _read_binned_factorized(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, read: ReadSettings, job: JobReuse | None
) -> TrainingData:
    began = time.perf_counter()
    binned_key = None
    if job is not None and job.enabled and read.fit:
        _, binned_key = job.bins_keys(graph, read.encoder.categorical, read.encoder.max_bins, read.labelled_only)
        found = job.find_binned(binned_key)
        if found is not None:
            return found
    meta, unlabelled = labelled_metadata(source_metadata(con, graph, read.encoder.categorical, job), read.labelled_only)
    binner = _binned(graph, read, job, lambda b: b.fit_metadata(meta, graph.feature_names))
    coalesced = frozenset(j for j, f in enumerate(graph.features) if f.kind == "coalesce")
    data = TrainingData(binner.transform_metadata(meta, coalesced), meta.target, binner, unlabelled, groups=meta.groups)
    if binned_key is not None:
        job.keep_binned(binned_key, data, time.perf_counter() - began)
    return data


def read_binned_materialized(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, read: ReadSettings, job: JobReuse | None = None
) -> TrainingData:
    """The materialized join's rows binned (one block), the bins from those rows; ``job`` accepted so both
    readers take the same arguments."""
    rows = materialized_rows(con, graph, read.encoder.categorical, read)
    binner = _binned(graph, read, job, lambda b: b.fit_table(rows.table, graph.feature_names))
    binned = binner.transform_table(rows.table, graph.feature_names)
    data = TrainingData(binned, rows.y, binner, rows.unlabelled, groups=rows.groups, kept=rows.kept)
    return _on(data, read)


BINNED_READERS = {Strategy.FACTORIZED: read_binned_factorized, Strategy.MATERIALIZED: read_binned_materialized}
# Every reader, by what the algorithm reads (its catalog entry's ``reads``) and the strategy.
ROW_READERS = {Rows.MATRIX: READERS, Rows.BINS: BINNED_READERS}

__all__ = ["BINNED_READERS", "ROW_READERS", "read_binned_factorized", "read_binned_materialized"]
