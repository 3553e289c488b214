"""The read phase, resident: the training rows as a normalized matrix, factorized or from the materialized join.

Both readers take the same encoder and give the same :class:`TrainingData`; the factorized one reads
through the artifact store when the job has one (:class:`~ilargi_db.reuse.job.JobReuse`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ilargi_db.backend import get_backend
from ilargi_db.linalg import NormalizedMatrix
from ilargi_db.metadata import DIMetadata, GroupCodes, clear_unused_nonfinite, extract_metadata
from ilargi_db.metadata.arrow_blocks import column_to_numpy, fetch_arrow, numpy_to_arrow
from ilargi_db.metadata.scans import GROUP, TARGET, kept_column, materialized_sql
from ilargi_db.metadata.stream import FactStream
from ilargi_db.metadata.value_range import check_metadata_values, check_table_values
from ilargi_db.models.catalog import Strategy
from ilargi_db.plan import JoinGraph, categorical_flags
from ilargi_db.preprocess import FeatureEncoder
from ilargi_db.reuse.job import JobReuse


@dataclass(frozen=True)
class TrainingData:
    """The model's input, built by one strategy."""

    X: NormalizedMatrix
    y: Any
    encoder: FeatureEncoder
    unlabelled: int = 0  # rows left out because their target is NULL
    stream: FactStream | None = None  # where a streamed X reads its partitions from, on every pass
    groups: GroupCodes | None = None  # each row's group, when the query has a group_by column
    kept: pa.Table | None = None  # a scored query's columns that are not features, row for row (ReadSettings.kept)

    @property
    def nbytes(self) -> int:
        return int(self.X.nbytes) + int(getattr(self.y, "nbytes", 0))

    def close(self) -> None:
        """Let go of the stream a streamed X reads from (after the fits; again is harmless)."""
        if self.stream is not None:
            self.stream.close()


@dataclass(frozen=True)
class ReadSettings:
    """How a reader encodes the rows: the encoder (fitted here, or as trained), the backend and the checks."""

    encoder: FeatureEncoder
    fit: bool  # fit the encoder on these rows (training), or use it as fitted (scoring)
    backend: Any  # an array backend (:func:`ilargi_db.backend.get_backend`)
    check: bool = False  # refuse inf and values whose squares overflow, before they turn into NaN
    labelled_only: bool = True  # leave out rows whose target is NULL
    kept: tuple[tuple[str, str], ...] = ()  # (name, SQL) of columns read beside the features (the materialized join)


def read_factorized(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, read: ReadSettings, job: JobReuse | None = None
) -> TrainingData:
    """The normalized matrix of ``graph``; with ``job``, from (and into) the artifact store where it can."""
    if job is None or not job.enabled:
        return _read_factorized(con, graph, read)
    began = time.perf_counter()
    encoder = read.encoder
    key = job.matrix_key(graph, encoder.categorical, encoder.impute, read.backend.name, read.check, read.labelled_only)
    found = job.find_matrix(key)
    if found is not None:
        return found
    data = _read_factorized(con, graph, read, job)
    job.keep_matrix(key, data, time.perf_counter() - began)
    return data


def source_metadata(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, categorical: list[bool], job: JobReuse | None
) -> DIMetadata:
    """The key-only join and the sources' scans of ``graph`` (through the artifact store with an enabled ``job``)."""
    features = frozenset(j for j, c in enumerate(categorical) if c)

    def extract() -> Any:
        return extract_metadata(con, graph, categorical=features)

    return extract() if job is None or not job.enabled else job.metadata(graph, features, extract)


def labelled_metadata(meta: DIMetadata, labelled_only: bool) -> tuple[DIMetadata, int]:
    """``meta`` without the rows whose target is NULL (when ``labelled_only``), and how many those were."""
    if not labelled_only or meta.target is None or not np.isnan(meta.target).any():
        return meta, 0
    labelled = np.flatnonzero(~np.isnan(meta.target))
    return meta.take_rows(labelled), meta.n_rows - len(labelled)  # unlabelled rows teach nothing


@dataclass(frozen=True)
class MaterializedRows:
    """The materialized join's features, its target (None without one), the rows left out for a NULL target,
    each row's group (None without group_by) and the kept columns (None without them)."""

    table: pa.Table
    y: Any
    unlabelled: int
    groups: GroupCodes | None
    kept: pa.Table | None


def materialized_rows(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, categorical: list[bool], read: ReadSettings
) -> MaterializedRows:
    """The materialized join's rows (a group whose rows were all left out keeps its label, as in the factorized
    read, so the fit can name it)."""
    # DuckDB casts every value, as it does for the scans: both strategies read the same numbers.
    sql = materialized_sql(graph, categorical, [text for _, text in read.kept])
    table = fetch_arrow(con, sql, what="the materialized join")
    kept = None
    if read.kept:
        names = [kept_column(i) for i in range(len(read.kept))]
        kept = table.select(names).rename_columns([name for name, _ in read.kept])
        table = table.drop_columns(names)
    groups = None
    if graph.group is not None:
        groups = GroupCodes.from_arrow(table.column(GROUP))
        table = table.drop_columns([GROUP])
    if graph.target is None:
        return MaterializedRows(table, None, 0, groups, kept)
    y = column_to_numpy(table.column(TARGET))
    unlabelled = 0
    if read.labelled_only and np.isnan(y).any():
        keep = ~np.isnan(y)
        unlabelled = int((~keep).sum())
        kept_rows = numpy_to_arrow(keep)
        table, y = table.filter(kept_rows), y[keep]  # unlabelled rows teach nothing
        groups = None if groups is None else groups.take(np.flatnonzero(keep))
        kept = None if kept is None else kept.filter(kept_rows)
    return MaterializedRows(table.drop_columns([TARGET]), y, unlabelled, groups, kept)


def _read_factorized(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, read: ReadSettings, job: JobReuse | None = None
) -> TrainingData:
    encoder = read.encoder
    meta, unlabelled = labelled_metadata(source_metadata(con, graph, encoder.categorical, job), read.labelled_only)
    if unlabelled:
        for block in meta.blocks:  # rows only unlabelled rows used must not leak NaN * 0
            clear_unused_nonfinite(block)
    if read.check:
        check_metadata_values(meta, graph.target.name if graph.target is not None else None)
    if read.fit:
        encoder.fit_metadata(meta)
    blocks = encoder.transform_metadata(meta)
    X = NormalizedMatrix(blocks, n_rows=meta.n_rows, feature_names=encoder.feature_names_out_, backend=read.backend)
    if job is not None:
        job.restore_sums(X)
    return TrainingData(X, meta.target, encoder, unlabelled, groups=meta.groups)


def read_materialized(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, read: ReadSettings, job: JobReuse | None = None
) -> TrainingData:
    """The materialized join of ``graph`` as a one-block matrix, encoded as the factorized reader encodes.

    ``job`` is accepted so that both readers take the same arguments; the join itself is never stored.
    """
    encoder = read.encoder
    rows = materialized_rows(con, graph, encoder.categorical, read)
    table, y, names = rows.table, rows.y, graph.feature_names
    if read.check:
        check_table_values(table, names, encoder.categorical, y, graph.target.name if graph.target else None)
    if read.fit:
        encoder.fit_table(table, names)
    blocks = encoder.transform_table(table, names)
    X = NormalizedMatrix(blocks, n_rows=table.num_rows, feature_names=encoder.feature_names_out_, backend=read.backend)
    return TrainingData(X, y, encoder, rows.unlabelled, groups=rows.groups, kept=rows.kept)


READERS = {Strategy.FACTORIZED: read_factorized, Strategy.MATERIALIZED: read_materialized}


def read_training_data(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, strategy: str, backend: str = "numpy"
) -> TrainingData:
    """Read ``graph``'s training set the way ``train`` does with ``strategy`` (what calibration times)."""
    read = ReadSettings(FeatureEncoder(categorical_flags(graph)), fit=True, backend=get_backend(backend))
    return READERS[Strategy(strategy)](con, graph, read)
