"""A star's fact read in row partitions, for training data larger than the memory budget.

The dimensions are scanned once and stay whole (they are small next to the fact); the fact is read in
ranges of its rowid, one key-only join per range (the user's joins and filters, restricted to the range,
ordered by the fact's rowid), which returns the fact's feature columns, every dimension's row for each
output row and the target. A range always gives the same rows in the same order, so an iterative
solver can read the fact again on every pass and line its vectors up with the rows.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa
import sqlglot

from ilargi_db.errors import IlargiError, NotStreamable  # noqa: F401 - NotStreamable: raised here, defined with the others
from ilargi_db.metadata import joins_cannot_repeat_rows
from ilargi_db.metadata.arrow_blocks import arrow_to_block, column_to_numpy, fetch_arrow
from ilargi_db.metadata.di_metadata import BlockMetadata, CategoricalMetadata
from ilargi_db.metadata.indicator import indicator_sql, row_column
from ilargi_db.metadata.scans import (
    TARGET,
    SourceScan,
    cast_part,
    join_columns,
    part_column,
    quote,
    scan_source,
    supports_rowid,
)
from ilargi_db.plan.join_graph import JoinGraph
from ilargi_db.plan.sources import with_prefix

PARTITION = "__ilargi_partition"


@dataclass
class FactPartition:
    """One rowid range of the fact: its feature values, each dimension's rows, the target."""

    n_rows: int
    fact: pa.Table  # the fact's feature columns (numbers as DOUBLE, categories as VARCHAR)
    indicators: dict[str, np.ndarray]  # dimension alias -> its scan position per output row (-1: empty)
    target: np.ndarray | None


@dataclass
class FactStream:
    """The dimensions of a star, scanned, and the queries that read its fact range by range."""

    con: duckdb.DuckDBPyConnection
    graph: JoinGraph
    fact: str  # the fact's alias
    scans: dict[str, SourceScan]  # every other source's scan
    fact_parts: dict[str, str]  # fact feature column -> its select item
    bounds: list[tuple[int, int]]  # rowid ranges [low, high) of the partitions
    sizes: list[int]  # labelled output rows per partition
    registered: dict[str, str] = field(default_factory=dict)
    unlabelled: int = 0
    spill_dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="ilargi-stream-"))  # partitions read once

    def partition_sql(self, k: int) -> str:
        low, high = self.bounds[k]
        items = tuple(self.fact_parts.values())
        sql = indicator_sql(self.graph, self.registered, self.fact, items)
        select = sqlglot.parse_one(sql, read="duckdb")
        row = f"{quote(self.fact)}.rowid"
        select = select.where(f"{row} >= {int(low)} AND {row} < {int(high)}", dialect="duckdb")
        select = select.where(_labelled(self.graph), dialect="duckdb") if self.graph.target is not None else select
        select.set("order", None)
        return select.order_by(row, dialect="duckdb").sql("duckdb")

    def read(self, k: int) -> FactPartition:
        """Partition ``k`` (safe to call from a prefetching thread while no other query runs on ``con``)."""
        table = fetch_arrow(self.con, self.partition_sql(k), what=f"partition {k + 1} of the fact")
        indicators = {}
        for position, source in enumerate(self.graph.sources):
            if source.alias == self.fact:
                continue
            rows = column_to_numpy(table.column(row_column(position)))
            scan = self.scans[source.alias]
            indicators[source.alias] = scan.positions(rows) if scan.native else rows
        target = column_to_numpy(table.column(TARGET)) if TARGET in table.column_names else None
        return FactPartition(table.num_rows, table.select(list(self.fact_parts)), indicators, target)

    def dimension_blocks(self, categorical: frozenset[int]) -> tuple[list[BlockMetadata], list[CategoricalMetadata]]:
        """Every dimension's numeric block and categorical features (see :func:`dimension_metadata`)."""
        return dimension_metadata(self.con, self.graph, self.registered, self.fact, self.scans, categorical)

    def close(self) -> None:
        shutil.rmtree(self.spill_dir, ignore_errors=True)
        for name in self.registered.values():
            try:
                self.con.unregister(name)
            except duckdb.Error:  # pragma: no cover - already gone with a closed connection
                pass
        self.registered.clear()


def _labelled(graph: JoinGraph) -> str:
    """Rows whose target is set (NULL and NaN targets teach nothing, as in the in-memory read)."""
    value = f"CAST(({graph.target.sql}) AS DOUBLE)"
    return f"({value} IS NOT NULL AND NOT isnan({value}))"


def open_stream(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, categorical: frozenset[int], rows_per_partition: int
) -> FactStream:
    """Scan the dimensions, register the ones DuckDB cannot join natively, and cut the fact into rowid ranges.

    Raises :class:`NotStreamable` when the fact cannot be read range by range: it must be the first FROM
    source, a base table that no outer join can empty and whose rows no join repeats, and no feature may
    mix sources.
    """
    if not graph.factorizable or any(f.kind != "source" for f in graph.features):
        raise NotStreamable(
            "a feature mixes sources (or coalesces several): streaming reads each source on its own. Compute it "
            "in a view of one table, or raise the memory budget."
        )
    keys = join_columns(graph)
    parts: dict[str, dict[str, str]] = {s.alias: {} for s in graph.sources}
    for j, feature in enumerate(graph.features):
        parts[feature.parts[0].source][part_column(j, 0)] = feature.parts[0].sql
    first = graph.sources[0]
    streamable = not first.nullable and supports_rowid(con, first, with_prefix(graph.select))
    fact = first.alias if streamable and joins_cannot_repeat_rows(con, graph) else None
    if fact is None:
        raise NotStreamable(
            "streaming reads the fact table (the first source in FROM) range by range, so it must be a base "
            "table that no outer join can empty and whose rows no join repeats (each joined table unique on its "
            "join keys); this query's is not. Raise the memory budget, or filter the data."
        )
    text = frozenset(part_column(j, 0) for j in categorical)
    scans = {
        s.alias: scan_source(con, graph, s, keys[s.alias], parts[s.alias], (), text)
        for s in graph.sources
        if s.alias != fact
    }
    token = uuid.uuid4().hex
    stream = FactStream(con, graph, fact, scans, {n: cast_part(n, sql, text) for n, sql in parts[fact].items()}, [], [])
    try:
        for position, (alias, scan) in enumerate(scans.items()):
            if not scan.native:
                name = f"__ilargi_{token}_{position}"
                con.register(name, scan.keys)
                stream.registered[alias] = name
        source = graph.source(fact)
        prefix = with_prefix(graph.select)
        low, high = con.sql(f"{prefix}SELECT min(rowid), max(rowid) FROM {source.relation_sql}").fetchall()[0]
        low, high = (0, -1) if low is None else (int(low), int(high))
        step = max(int(rows_per_partition), 1)
        count = max(math.ceil((high - low + 1) / step), 1)
        stream.bounds = [(low + k * step, low + (k + 1) * step) for k in range(count)]
        stream.sizes, stream.unlabelled = _partition_sizes(con, stream, low, step, count)
    except BaseException:
        stream.close()
        raise
    return stream


def dimension_metadata(
    con: duckdb.DuckDBPyConnection,
    graph: JoinGraph,
    registered: dict[str, str],
    fact: str,
    scans: dict[str, SourceScan],
    categorical: frozenset[int],
) -> tuple[list[BlockMetadata], list[CategoricalMetadata]]:
    """Every dimension's numeric block and categorical features, with an empty indicator (each partition
    sets its own), for a read of the fact in partitions (streamed, or on a cluster's workers).

    NaN and inf in rows no labelled training row uses are zeroed, as the in-memory read does
    (``clear_unused_nonfinite``). The scans not joined natively must be registered under ``registered``.
    """
    used = used_dimension_rows(con, graph, registered, fact, scans)
    blocks, cats = [], []
    none = np.zeros(0, dtype=np.int64)
    for source in graph.sources:
        if source.alias == fact:
            continue
        scan = scans[source.alias]
        plain = [j for j, f in enumerate(graph.features) if f.parts[0].source == source.alias and j not in categorical]
        if plain:
            names = [part_column(j, 0) for j in plain]
            data = arrow_to_block(scan.values, names)
            unused = ~used[source.alias]
            data[unused] = np.nan_to_num(data[unused], nan=0.0, posinf=0.0, neginf=0.0)
            fill = np.array([scan.fill[name] for name in names], dtype=np.float64)
            blocks.append(BlockMetadata(source.alias, data, none, np.array(plain, dtype=np.int64), fill))
        for j in sorted(categorical):
            if graph.features[j].parts[0].source == source.alias:
                name = part_column(j, 0)
                values = scan.values.column(name).combine_chunks()
                cats.append(CategoricalMetadata(source.alias, j, values, none, scan.fill[name]))
    return blocks, cats


def used_dimension_rows(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, registered: dict[str, str], fact: str, scans: dict
) -> dict[str, np.ndarray]:
    """Per dimension, which of its scanned rows some labelled training row uses (one aggregate query).

    The in-memory read zeroes NaN and inf in rows no training row uses (they never reach the model but
    would leak into sums as NaN * 0); the partitioned reads must treat the same rows the same way.
    """
    positions = {s.alias: p for p, s in enumerate(graph.sources) if s.alias in scans}
    if not positions:  # the fact alone: no dimension rows to mark
        return {}
    sql = indicator_sql(graph, registered, fact, (), streamed_rowid=False)
    select = sqlglot.parse_one(sql, read="duckdb")
    items = [f"list(DISTINCT {row_column(p)})" for p in positions.values()]
    inner = select.copy()
    if graph.target is not None:
        inner = inner.where(_labelled(graph), dialect="duckdb")
    inner.set("order", None)
    found = con.sql(f"SELECT {', '.join(items)} FROM ({inner.sql('duckdb')})").fetchall()[0]
    used = {}
    for (alias, _), rows in zip(positions.items(), found):
        scan = scans[alias]
        rows = np.array([r for r in (rows or []) if r is not None and r >= 0], dtype=np.int64)
        at = scan.positions(rows) if scan.native else rows
        mask = np.zeros(scan.n_rows, dtype=bool)
        mask[at[at >= 0]] = True
        used[alias] = mask
    return used


def _partition_sizes(con: duckdb.DuckDBPyConnection, stream: FactStream, low: int, step: int, count: int) -> tuple:
    """Labelled output rows per partition and unlabelled rows in all, from one aggregate over the key-only join."""
    graph = stream.graph
    sql = indicator_sql(graph, stream.registered, stream.fact, ())
    select = sqlglot.parse_one(sql, read="duckdb")
    row = f"{quote(stream.fact)}.rowid"
    labelled = _labelled(graph) if graph.target is not None else "TRUE"
    select.set(
        "expressions",
        [
            sqlglot.parse_one(f"({row} - {low}) // {step} AS {PARTITION}", read="duckdb"),
            sqlglot.parse_one(f"count(*) FILTER (WHERE {labelled}) AS n", read="duckdb"),
            sqlglot.parse_one(f"count(*) FILTER (WHERE NOT ({labelled})) AS u", read="duckdb"),
        ],
    )
    select.set("order", None)
    found = fetch_arrow(con, select.sql("duckdb") + f" GROUP BY {PARTITION}", what="the partitions' row counts")
    sizes = [0] * count
    unlabelled = 0
    for part, n, u in zip(*(found.column(i).to_pylist() for i in range(3))):
        sizes[int(part)] = int(n)
        unlabelled += int(u)
    return sizes, unlabelled


__all__ = ["FactPartition", "FactStream", "NotStreamable", "dimension_metadata", "open_stream", "used_dimension_rows"]
