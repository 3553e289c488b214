"""The read phase, streamed: the fact read from DuckDB range by range on every pass, dimensions resident.

The training data come as a :class:`~ilargi_db.linalg.PartitionedMatrix` whose partitions are built on
demand from the stream (or from their spill files, :mod:`ilargi_db.pipeline.spill`).
"""

from __future__ import annotations

import os

import duckdb
import numpy as np
import sqlglot

from ilargi_db.backend.host_memory import give_back_freed_memory
from ilargi_db.errors import NotStreamable, SpillLost
from ilargi_db.linalg import PartitionedMatrix, PartitionSource
from ilargi_db.metadata.arrow_blocks import column_to_numpy, fetch_arrow
from ilargi_db.metadata.indicator import indicator_sql
from ilargi_db.metadata.scans import TARGET
from ilargi_db.metadata.stream import FactPartition, FactStream, open_stream
from ilargi_db.metadata.target_labels import labelled_sql, target_sql
from ilargi_db.metadata.value_range import check_values
from ilargi_db.pipeline.placement import StreamPlan
from ilargi_db.pipeline.readers import ReadSettings, TrainingData
from ilargi_db.pipeline.spill import SpillBuffers, read_spill, write_spill
from ilargi_db.plan import JoinGraph
from ilargi_db.preprocess import PartitionBuilder
from ilargi_db.sql_text import quote_identifier


def read_streamed(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, read: ReadSettings, plan: StreamPlan
) -> TrainingData:
    """The training data as a streamed :class:`PartitionedMatrix`: the fact read range by range on every pass.

    The encoder is fitted from sums, counts and categories DuckDB computes over the training rows (one
    aggregate query); the dimensions are scanned and encoded once and shared by every partition; the
    target (n numbers) is read once. With ``plan.spill`` (where the disk has room) the first pass spills
    each encoded partition to local disk and later passes load it back; otherwise every pass reads from
    DuckDB again, in the same snapshot. Close the data after the fits (it holds the stream).
    """
    encoder, backend, spill = read.encoder, read.backend, plan.spill
    categorical = frozenset(j for j, c in enumerate(encoder.categorical) if c)
    stream = open_stream(con, graph, categorical, plan.rows_per_partition)
    try:
        encoder.fit_query(con, graph)
        builder = PartitionBuilder.of(graph, stream.fact, encoder, *stream.dimension_blocks(categorical))
        builder = builder.on_device(backend)  # the dimensions uploaded once, for every partition and pass
        spilled: dict[int, list[tuple]] = {}  # partition -> where its arrays lie in its spill file
        buffers = SpillBuffers()  # what later passes read the spill into: the one computing, prefetched, one spare
        unread: dict[int, dict[str, np.ndarray]] = {}  # read and not yet used (without a spill)

        def load(k: int, part: FactPartition | None = None) -> dict[str, np.ndarray]:
            nonlocal spill  # switched off when the disk fails a write
            # The first pass reads from DuckDB and spills the partition to local disk; later passes load it
            # back, which costs a file read instead of a join (cedar's offloading). A spill file that is gone
            # (a temp cleaner) or cut short, or a disk that fails a write (full), costs a read from DuckDB
            # again, in the same snapshot: the rows are the same.
            path = os.path.join(stream.spill_dir, f"{k}.part")
            if k in spilled:
                try:
                    return read_spill(path, spilled[k], buffers)
                except (OSError, SpillLost):
                    del spilled[k]
                    if not stream.rereadable:
                        raise SpillLost(
                            f"the spill file of partition {k + 1} was removed or cut short while training read it, "
                            "and this fact (not a base table) cannot be read again by partition: train again, and "
                            "keep temp cleaners away from TMPDIR (or copy the fact into a DuckDB table)."
                        ) from None
            if k in unread:  # read for the template: the first pass takes it instead of reading it again
                return unread.pop(k)
            arrays = builder.encode(part if part is not None else stream.read(k))
            if spill:
                try:
                    spilled[k] = write_spill(path, arrays)
                except OSError:
                    if not stream.rereadable:
                        raise NotStreamable(
                            "the local disk failed a write while keeping a partition of a fact read once (it has "
                            "no rowid to read it again): free disk space, or copy the fact into a DuckDB table."
                        ) from None
                    spill = False
            return arrays

        if not stream.by_rowid:
            targets = _read_once(stream, builder, load, plan)
        # The template says the columns, names and backend: a partition of no rows, so that it holds nothing
        # of the budget (the partitions then take two shares of it: the one computing, the one prefetched).
        first = load(0)
        template = builder.matrix({name: a[:0].copy() if a.ndim else np.array(0) for name, a in first.items()}, backend)
        if not spill:
            unread[0] = first
        del first  # spilled (or held in unread): not kept here beside the budget's two partitions
        X = PartitionedMatrix(
            PartitionSource(lambda k: builder.matrix(load(k), backend), stream.partitions, backend=backend),
            sizes=stream.sizes,
            template=template,
        )
        if graph.target is None:
            y = None
        elif stream.by_rowid:
            y = _streamed_target(con, graph, stream)
        else:
            y = np.concatenate(targets) if targets else np.zeros(0)
        if y is not None:
            check_values(y, graph.target.name, "target")
    except BaseException:
        stream.close()
        raise
    return TrainingData(X, y, encoder, stream.unlabelled, stream)


def _read_once(stream: FactStream, builder: PartitionBuilder, load, plan: StreamPlan) -> list[np.ndarray]:
    """Read a fact that has no rowid in one pass, spilling every partition as it comes; the targets, in order.

    A fact read in one pass cannot be asked of DuckDB again, so every partition must reach the spill files; a
    disk that cannot hold them stops the job with the room it needs. Parquet files can be (by file and row
    range): without room to spill, this pass only collects the target, and every pass reads the files again.
    """
    if not plan.spill and stream.rereadable:
        if stream.graph.target is None:
            return []
        return [np.array(stream.read(k).target, dtype=np.float64) for k in range(stream.partitions)]
    if not plan.spill:
        raise NotStreamable(
            f"this query's fact is not a base table, so streaming reads it once and keeps its partitions on local "
            f"disk, but {plan.spill_why}. Free disk space (or point TMPDIR at a larger disk), copy the fact into a "
            "DuckDB table, or raise the memory budget."
        )
    targets = []
    for k in range(stream.partitions):
        part = stream.read(k)
        if part.target is not None:
            targets.append(np.array(part.target, dtype=np.float64))  # a copy: the partition's Arrow buffers go
        load(k, part)
        del part
        give_back_freed_memory()  # this partition's Arrow and encoding buffers, before the next one is read
    return targets


def _streamed_target(con: duckdb.DuckDBPyConnection, graph: JoinGraph, stream: FactStream) -> np.ndarray:
    """The target of every labelled row, in the partitions' order (the fact's rowid): one query, n numbers."""
    table = fetch_arrow(con, _only_target(graph, stream), what="the target")
    return column_to_numpy(table.column(TARGET))


def _only_target(graph: JoinGraph, stream: FactStream) -> str:
    """The key-only join of the whole fact with only the target selected, labelled rows, in rowid order."""
    select = sqlglot.parse_one(indicator_sql(graph, stream.registered, stream.fact, ()), read="duckdb")
    select.set("expressions", [sqlglot.parse_one(f"{target_sql(graph)} AS {TARGET}", read="duckdb")])
    select = select.where(labelled_sql(graph), dialect="duckdb")
    select.set("order", None)
    return select.order_by(f"{quote_identifier(stream.fact)}.rowid", dialect="duckdb").sql("duckdb")
