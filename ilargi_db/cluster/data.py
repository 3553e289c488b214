"""The training data on a cluster: one partition per Parquet file of the fact, built and kept by the worker
that reads the file, over the dimensions the driver scanned, encoded and broadcast."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ilargi_db.cluster.parquet import file_sql, file_stamp, parquet_files
from ilargi_db.cluster.remote import RemotePartitions, identity
from ilargi_db.errors import IlargiError
from ilargi_db.linalg import NormalizedMatrix, PartitionedMatrix
from ilargi_db.metadata import joins_cannot_repeat_rows
from ilargi_db.metadata.arrow_blocks import column_to_numpy, numpy_to_arrow
from ilargi_db.metadata.indicator import row_column
from ilargi_db.metadata.scans import TARGET, cast_part, join_columns, part_column, scan_source
from ilargi_db.metadata.stream import FactPartition, dimension_metadata
from ilargi_db.plan.join_graph import JoinGraph
from ilargi_db.preprocess import PartitionBuilder


@dataclass(frozen=True)
class PartitionLabels:
    """A partition's target, beside its matrix: the labelled rows' values in order (None: unsupervised), and
    the rows a NULL (or NaN) target left out."""

    target: np.ndarray | None
    unlabelled: int


@dataclass(frozen=True)
class SharedRead:
    """What the driver broadcasts to every worker: the dimensions' join keys and the partition builder."""

    keys: dict[str, pa.Table]  # name -> a dimension's join keys, registered for the key-only join
    builder: PartitionBuilder  # the fitted encoder and the dimensions, encoded once
    rows: dict[str, str]  # dimension alias -> the column of a file's join giving its row per output row


def build_partition(
    sql: str, shared: SharedRead, file: str, stamp: tuple, backend: str = "numpy"
) -> tuple[NormalizedMatrix, PartitionLabels]:
    """On a worker: read one file's rows with DuckDB and build its partition over the broadcast dimensions.

    Refuses a file that changed since the driver read it (its size and modification time): the encoder was
    fitted on the old one, and the target the driver holds lines up with the old rows.
    """
    if file_stamp(file) != tuple(stamp):
        raise IlargiError(f"{file} changed during training (size or modification time): train again.")
    con = duckdb.connect()
    for name, table in shared.keys.items():
        con.register(name, table)
    table = con.sql(sql).to_arrow_table()
    con.close()
    target, unlabelled = None, 0
    if TARGET in table.column_names:  # rows whose target is NULL (or NaN) teach nothing, as in memory
        target = column_to_numpy(table.column(TARGET))
        keep = ~np.isnan(target)
        unlabelled = int((~keep).sum())
        if unlabelled:
            table, target = table.filter(numpy_to_arrow(keep)), target[keep]
    builder = shared.builder
    fact = table.select([part_column(j, 0) for j in (*builder.numeric, *builder.text)])
    indicators = {
        alias: column_to_numpy(table.column(column)).astype(np.int64) for alias, column in shared.rows.items()
    }
    part = FactPartition(table.num_rows, fact, indicators, target)
    return builder.build(part, backend), PartitionLabels(target, unlabelled)


def _matrix(built: tuple[NormalizedMatrix, PartitionLabels]) -> NormalizedMatrix:
    return built[0]


def _labels(built: tuple[NormalizedMatrix, PartitionLabels]) -> PartitionLabels:
    return built[1]


def _n_rows(p: NormalizedMatrix) -> int:
    return p.shape[0]


def cluster_data(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, encoder: Any, client: Any
) -> tuple[PartitionedMatrix, np.ndarray | None, int]:
    """The training data as a :class:`PartitionedMatrix` held by ``client``'s workers, one partition per file.

    Returns (X, y, the rows left out for a NULL target). The driver reads the files too (the encoder's
    aggregate query); each worker reads its own.
    """
    fact = graph.sources[0]
    if not graph.factorizable or any(f.kind != "source" for f in graph.features):
        raise IlargiError("on a cluster each source is read on its own: a feature may not mix sources.")
    if fact.nullable or not joins_cannot_repeat_rows(con, graph):
        raise IlargiError(
            "on a cluster the fact (the first FROM source) is split by file, so no outer join may empty it and no "
            "join may repeat its rows (each joined table unique on its join keys)."
        )
    call, files = parquet_files(con, graph)
    categorical = frozenset(j for j, c in enumerate(encoder.categorical) if c)
    text = frozenset(part_column(j, 0) for j in categorical)
    keys = join_columns(graph)
    parts: dict[str, dict[str, str]] = {s.alias: {} for s in graph.sources}
    for j, feature in enumerate(graph.features):
        parts[feature.parts[0].source][part_column(j, 0)] = feature.parts[0].sql
    encoder.fit_query(con, graph)
    registered, key_tables, scans, rows = {}, {}, {}, {}
    for position, source in enumerate(graph.sources):
        if source.alias != fact.alias:
            scan = scan_source(con, graph, source, keys[source.alias], parts[source.alias], (), text, native=False)
            scans[source.alias] = scan
            registered[source.alias] = name = f"__ilargi_dimension_{position}"
            key_tables[name] = scan.keys
            rows[source.alias] = row_column(position)
    for name, table in key_tables.items():  # registered here too, for the rows the training uses
        con.register(name, table)
    try:
        dims, dim_cats = dimension_metadata(con, graph, registered, fact.alias, scans, categorical)
    finally:
        for name in key_tables:
            con.unregister(name)
    shared = SharedRead(key_tables, PartitionBuilder.of(graph, fact.alias, encoder, dims, dim_cats), rows)
    # A task that returns the shared payload (not scattered data): if the worker holding it is lost, Dask
    # recomputes it, and the partitions built from it, elsewhere.
    broadcast = client.submit(identity, shared, pure=False)
    fact_items = tuple(cast_part(n, sql, text) for n, sql in parts[fact.alias].items())
    sqls = [file_sql(graph, registered, fact_items, call, file) for file in files]
    built = [
        client.submit(build_partition, sql, broadcast, file, file_stamp(file), pure=True)
        for sql, file in zip(sqls, files)
    ]
    partitions = RemotePartitions(client, [client.submit(_matrix, b) for b in built])
    sizes = client.gather([client.submit(_n_rows, f) for f in partitions.futures])
    labels = client.gather([client.submit(_labels, b) for b in built])
    y = np.concatenate([found.target for found in labels]) if graph.target is not None else None
    unlabelled = sum(found.unlabelled for found in labels)
    X = PartitionedMatrix(partitions, sizes=sizes, template=partitions[0])
    return X, y, unlabelled


__all__ = ["PartitionLabels", "SharedRead", "build_partition", "cluster_data"]
