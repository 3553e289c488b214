"""The read phase for tree models: the training rows binned, factorized or from the materialized join.

The bins come first, from DuckDB per source (:meth:`FeatureBinner.fit_query`), so both strategies bin
the same values alike and grow the same trees. The factorized reader reads the key-only join and each
source's scan through the artifact store (another ``learning_rate`` or more trees on the same query
reads nothing again); the materialized one the join DuckDB builds.
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ilargi_db.metadata import extract_metadata
from ilargi_db.metadata.arrow_blocks import column_to_numpy, fetch_arrow
from ilargi_db.metadata.scans import TARGET, materialized_sql
from ilargi_db.models.catalog import Strategy
from ilargi_db.pipeline.readers import ReadSettings, TrainingData
from ilargi_db.plan import JoinGraph
from ilargi_db.reuse.job import JobReuse


def _binned(con: duckdb.DuckDBPyConnection, graph: JoinGraph, read: ReadSettings) -> Any:
    binner = read.encoder
    if read.fit:
        binner.fit_query(con, graph)
    else:
        binner.check_features(graph.feature_names)
    return binner


def read_binned_factorized(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, read: ReadSettings, job: JobReuse | None = None
) -> TrainingData:
    """Each source's features binned once per source row, and the source row each training row takes."""
    binner = _binned(con, graph, read)
    categorical = frozenset(j for j, c in enumerate(binner.categorical) if c)

    def extract() -> Any:
        return extract_metadata(con, graph, categorical=categorical)

    meta = extract() if job is None or not job.enabled else job.metadata(graph, categorical, extract)
    unlabelled = 0
    if read.labelled_only and meta.target is not None and np.isnan(meta.target).any():
        labelled = np.flatnonzero(~np.isnan(meta.target))
        unlabelled = meta.n_rows - len(labelled)
        meta = meta.take_rows(labelled)  # unlabelled rows teach nothing
    coalesced = frozenset(j for j, f in enumerate(graph.features) if f.kind == "coalesce")
    X = binner.transform_metadata(meta, coalesced)
    return TrainingData(X, meta.target, binner, unlabelled)


def read_binned_materialized(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, read: ReadSettings, job: JobReuse | None = None
) -> TrainingData:
    """The materialized join's rows binned (one block); ``job`` accepted so both readers take the same arguments."""
    binner = _binned(con, graph, read)
    table = fetch_arrow(con, materialized_sql(graph, binner.categorical), what="the materialized join")
    y, unlabelled = None, 0
    if graph.target is not None:
        y = column_to_numpy(table.column(TARGET))
        if read.labelled_only and np.isnan(y).any():
            keep = ~np.isnan(y)
            unlabelled = int((~keep).sum())
            table, y = table.filter(pa.array(keep)), y[keep]
        table = table.drop_columns([TARGET])
    return TrainingData(binner.transform_table(table, graph.feature_names), y, binner, unlabelled)


BINNED_READERS = {Strategy.FACTORIZED: read_binned_factorized, Strategy.MATERIALIZED: read_binned_materialized}

__all__ = ["BINNED_READERS", "read_binned_factorized", "read_binned_materialized"]
