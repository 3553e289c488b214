"""The read phase, streamed: the fact read from DuckDB range by range on every pass, dimensions resident.

The training data come as a :class:`~ilargi_db.linalg.PartitionedMatrix` whose partitions are built on
demand from the stream (or from their spill files, :mod:`ilargi_db.pipeline.spill`).
"""

from __future__ import annotations

import os

import duckdb
import numpy as np
import scipy.sparse as sp
import sqlglot

from ilargi_db.errors import SpillLost
from ilargi_db.linalg import Block, NormalizedMatrix, PartitionedMatrix, PartitionSource
from ilargi_db.metadata import BlockMetadata, CategoricalMetadata
from ilargi_db.metadata.arrow_blocks import arrow_to_block, column_to_numpy, fetch_arrow
from ilargi_db.metadata.indicator import indicator_sql
from ilargi_db.metadata.scans import TARGET, part_column, quote
from ilargi_db.metadata.stream import FactStream, open_stream
from ilargi_db.metadata.value_range import check_values
from ilargi_db.pipeline.placement import StreamPlan
from ilargi_db.pipeline.readers import ReadSettings, TrainingData
from ilargi_db.pipeline.spill import read_spill, write_spill
from ilargi_db.plan import JoinGraph


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
        dims, dim_cats = stream.dimension_blocks(categorical)
        for block in dims:  # inf, or values whose squares overflow, before they turn into NaN
            for i, j in enumerate(block.columns):
                check_values(block.data[:, i], graph.features[j].name)
        shared = encoder.transform_dimensions(dims, dim_cats)
        fact_numeric = [
            j for j, f in enumerate(graph.features) if f.parts[0].source == stream.fact and j not in categorical
        ]
        fact_text = [j for j, f in enumerate(graph.features) if f.parts[0].source == stream.fact and j in categorical]

        def read(k: int) -> dict[str, np.ndarray]:
            """Partition ``k``'s own arrays, encoded: the fact's numbers, its category codes, every indicator."""
            part = stream.read(k)
            rows = np.arange(part.n_rows)
            arrays = {"n_rows": np.array(part.n_rows)}
            if fact_numeric:
                data = arrow_to_block(part.fact, [part_column(j, 0) for j in fact_numeric])
                for i, j in enumerate(fact_numeric):
                    check_values(data[:, i], graph.features[j].name)
                fill = np.full(len(fact_numeric), np.nan)
                meta = BlockMetadata(stream.fact, data, rows, np.array(fact_numeric), fill)
                arrays["fact"] = encoder.transform_block(meta).data
            for j in fact_text:
                values = part.fact.column(part_column(j, 0)).combine_chunks()
                block = encoder.transform_categorical(CategoricalMetadata(stream.fact, j, values, rows, None), 2)
                if block is not None:
                    arrays[f"codes/{j}"] = block.index
            arrays.update({f"index/{alias}": index for alias, index in part.indicators.items()})
            return arrays

        spilled: dict[int, list[tuple]] = {}  # partition -> where its arrays lie in its spill file
        unread: dict[int, dict[str, np.ndarray]] = {}  # read and not yet used (without a spill)

        def load(k: int) -> dict[str, np.ndarray]:
            nonlocal spill  # switched off when the disk fails a write
            # The first pass reads from DuckDB and spills the partition to local disk; later passes load it
            # back, which costs a file read instead of a join (cedar's offloading). A spill file that is gone
            # (a temp cleaner) or cut short, or a disk that fails a write (full), costs a read from DuckDB
            # again, in the same snapshot: the rows are the same.
            path = os.path.join(stream.spill_dir, f"{k}.part")
            if k in spilled:
                try:
                    return read_spill(path, spilled[k])
                except (OSError, SpillLost):
                    del spilled[k]
            if k in unread:  # read for the template: the first pass takes it instead of reading it again
                return unread.pop(k)
            arrays = read(k)
            if spill:
                try:
                    spilled[k] = write_spill(path, arrays)
                except OSError:
                    spill = False
            return arrays

        # A fact category's block: the identity over its one-hot columns, indexed by each row's code; built
        # once, shared by every partition as the dimensions are.
        code_blocks = {
            j: (
                sp.identity(encoder.specs_[j].width, format="csr"),
                encoder.offsets_[j] + np.arange(encoder.specs_[j].width),
            )
            for j in fact_text
        }

        def build(arrays: dict[str, np.ndarray]) -> NormalizedMatrix:
            blocks = []
            if "fact" in arrays:
                blocks.append(Block(arrays["fact"], columns=encoder.offsets_[fact_numeric]))  # row i is row i
            for j, (identity, columns) in code_blocks.items():
                if f"codes/{j}" in arrays:
                    blocks.append(Block(identity, columns=columns, index=arrays[f"codes/{j}"]))
            for alias, block in shared:
                blocks.append(Block(block.data, columns=block.columns, index=arrays[f"index/{alias}"], fill=block.fill))
            n = int(arrays["n_rows"])
            return NormalizedMatrix(blocks, n_rows=n, feature_names=encoder.feature_names_out_, backend=backend)

        # The template says the columns, names and backend: a partition of no rows, so that it holds nothing
        # of the budget (the partitions then take two shares of it: the one computing, the one prefetched).
        first = load(0)
        template = build({name: a[:0].copy() if a.ndim else np.array(0) for name, a in first.items()})
        if not spill:
            unread[0] = first
        del first  # spilled (or held in unread): not kept here beside the budget's two partitions
        X = PartitionedMatrix(
            PartitionSource(lambda k: build(load(k)), len(stream.bounds)), sizes=stream.sizes, template=template
        )
        y = _streamed_target(con, graph, stream) if graph.target is not None else None
        if y is not None:
            check_values(y, graph.target.name, "target")
    except BaseException:
        stream.close()
        raise
    return TrainingData(X, y, encoder, stream.unlabelled, stream)


def _streamed_target(con: duckdb.DuckDBPyConnection, graph: JoinGraph, stream: FactStream) -> np.ndarray:
    """The target of every labelled row, in the partitions' order (the fact's rowid): one query, n numbers."""
    table = fetch_arrow(con, _only_target(graph, stream), what="the target")
    return column_to_numpy(table.column(TARGET))


def _only_target(graph: JoinGraph, stream: FactStream) -> str:
    """The key-only join of the whole fact with only the target selected, labelled rows, in rowid order."""
    select = sqlglot.parse_one(indicator_sql(graph, stream.registered, stream.fact, ()), read="duckdb")
    select.set("expressions", [sqlglot.parse_one(f"CAST(({graph.target.sql}) AS DOUBLE) AS {TARGET}", read="duckdb")])
    value = f"CAST(({graph.target.sql}) AS DOUBLE)"
    select = select.where(f"{value} IS NOT NULL AND NOT isnan({value})", dialect="duckdb")
    select.set("order", None)
    return select.order_by(f"{quote(stream.fact)}.rowid", dialect="duckdb").sql("duckdb")
