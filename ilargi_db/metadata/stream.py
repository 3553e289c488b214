"""A star's fact read in row partitions, for training data larger than the memory budget.

The dimensions are scanned once and stay whole (they are small next to the fact). The fact is read by
one of two readers, both returning the fact's feature columns, every dimension's row for each output row
and the target, partition by partition:

- **by rowid range** (a base table): one key-only join per range (the user's joins and filters,
  restricted to the range, ordered by the fact's rowid). A range always gives the same rows in the same
  order, so any partition can be read again, on any pass.
- **by file and row range** (``read_parquet(...)`` or a quoted ``'f.parquet'``): one key-only join per
  range of one file's ``file_row_number`` (:mod:`~ilargi_db.metadata.fact_files`); DuckDB skips the row
  groups outside it. Any partition can be read again, like a base table's.
- **in one pass** (anything else: a view, ``read_parquet``/``read_csv``, a subquery, a registered
  frame): one key-only join over the whole fact, its result read batch by batch in DuckDB's order and
  cut into partitions of output rows (:attr:`FactStream.rereadable` is False). Such a source has no
  row name that a later query could ask for, so the caller keeps each partition as it comes (the
  streamed read spills it to local disk) and never asks DuckDB for it again.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import sqlglot

from ilargi_db.errors import IlargiError, NotStreamable  # noqa: F401 - NotStreamable: raised here, defined with the others
from ilargi_db.metadata import joins_cannot_repeat_rows
from ilargi_db.metadata.arrow_blocks import arrow_to_block, column_to_numpy, fetch_arrow
from ilargi_db.metadata.di_metadata import BlockMetadata, CategoricalMetadata
from ilargi_db.metadata.fact_files import FILE_ROW, ParquetFiles, file_sql, parquet_call, parquet_files
from ilargi_db.metadata.indicator import indicator_sql, row_column
from ilargi_db.metadata.scans import (
    TARGET,
    SourceScan,
    cast_part,
    join_columns,
    part_column,
    scan_source,
    supports_rowid,
)
from ilargi_db.metadata.target_labels import labelled_sql
from ilargi_db.plan.join_graph import JoinGraph
from ilargi_db.plan.sources import with_prefix
from ilargi_db.sql_text import quote_identifier

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
    bounds: list[tuple[int, int]]  # rowid ranges [low, high) of the partitions (none for a one-pass read)
    sizes: list[int]  # labelled output rows per partition
    registered: dict[str, str] = field(default_factory=dict)
    unlabelled: int = 0
    spill_dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="ilargi-stream-"))  # partitions read once
    rereadable: bool = True  # by rowid or file range; False: read once, in order (see the module's docstring)
    files: ParquetFiles | None = None  # the fact's Parquet files, read by file and row range
    bound_files: list[int] = field(default_factory=list)  # the file of each partition (with ``files``)
    _batches: Any = None  # the one-pass read's open Arrow batch reader
    _pending: list[pa.RecordBatch] = field(default_factory=list)  # rows read past the last partition's end
    _next: int = 0  # the partition the one-pass read gives next
    _queries: dict[int | None, str] = field(default_factory=dict)  # partition queries by file (-1: by rowid)

    @property
    def partitions(self) -> int:
        return len(self.sizes)

    @property
    def by_rowid(self) -> bool:
        return self.rereadable and self.files is None

    def partition_sql(self, k: int | None) -> str:
        """The key-only join of partition ``k``'s rows (of every row, in DuckDB's order, for ``None``), with
        its range as two parameters (``?``: low, high) for ``k``; built once per file and kept."""
        key = None if k is None else self.bound_files[k] if self.files is not None else -1
        if key not in self._queries:
            self._queries[key] = self._query(key)
        return self._queries[key]

    def _query(self, file: int | None) -> str:
        items = tuple(self.fact_parts.values())
        if file is not None and self.files is not None:
            sql = file_sql(self.graph, self.registered, items, self.files.call, self.files.files[file])
            row = f"{quote_identifier(self.fact)}.{FILE_ROW}"
        else:
            sql = indicator_sql(self.graph, self.registered, self.fact, items, streamed_rowid=self.by_rowid)
            row = f"{quote_identifier(self.fact)}.rowid"
        select = sqlglot.parse_one(sql, read="duckdb")
        if file is not None:
            select = select.where(f"{row} >= ? AND {row} < ?", dialect="duckdb")
        select = select.where(_labelled(self.graph), dialect="duckdb") if self.graph.target is not None else select
        select.set("order", None)
        return select.order_by(row, dialect="duckdb").sql("duckdb") if file is not None else select.sql("duckdb")

    def read(self, k: int) -> FactPartition:
        """Partition ``k`` (safe to call from a prefetching thread while no other query runs on ``con``).

        A one-pass stream gives its partitions once each, in order: 0, 1, 2...; it holds the connection
        from the first read to the last, so no other query may run on ``con`` between them.
        """
        table = self._next_in_pass(k) if not self.rereadable else None
        if table is None:
            low, high = self.bounds[k]
            what = f"partition {k + 1} of the fact"
            table = fetch_arrow(self.con, self.partition_sql(k), what=what, params=[int(low), int(high)])
        indicators = {}
        for position, source in enumerate(self.graph.sources):
            if source.alias == self.fact:
                continue
            rows = column_to_numpy(table.column(row_column(position)))
            scan = self.scans[source.alias]
            indicators[source.alias] = scan.positions(rows) if scan.native else rows
        target = column_to_numpy(table.column(TARGET)) if TARGET in table.column_names else None
        return FactPartition(table.num_rows, table.select(list(self.fact_parts)), indicators, target)

    def _next_in_pass(self, k: int) -> pa.Table:
        if k != self._next:
            raise IlargiError(
                f"partition {k + 1} of a fact read in one pass was asked for out of order (the next is "
                f"{self._next + 1}): its source has no rowid to read it again. Keep its partitions as they come."
            )
        if self._batches is None:
            self._batches = arrow_batches(self.con, self.partition_sql(None), self.sizes[0] if self.sizes else 1)
        want, rows, held = self.sizes[k], 0, []
        while rows < want:
            batch = self._pending.pop(0) if self._pending else _next_batch(self._batches)
            if batch is None:
                raise IlargiError(
                    f"the fact gave fewer rows than it counted ({rows} of {want} in partition {k + 1}): did it "
                    "change while training read it? Train again."
                )
            if rows + batch.num_rows > want:
                cut = want - rows
                self._pending.insert(0, batch.slice(cut))
                batch = batch.slice(0, cut)
            held.append(batch)
            rows += batch.num_rows
        schema = self._batches.schema
        self._next += 1
        if self._next == len(self.sizes):
            more = bool(self._pending) or _next_batch(self._batches) is not None
            self._batches = None  # every row given: the connection is free again
            self._pending.clear()
            if more:
                raise IlargiError(
                    "the fact gave more rows than it counted: did it change while training read it? Train again."
                )
        return pa.Table.from_batches(held, schema=schema)

    def dimension_blocks(self, categorical: frozenset[int]) -> tuple[list[BlockMetadata], list[CategoricalMetadata]]:
        """Every dimension's numeric block and categorical features (see :func:`dimension_metadata`)."""
        return dimension_metadata(self.con, self.graph, self.registered, self.fact, self.scans, categorical)

    def close(self) -> None:
        self._batches = None
        self._pending.clear()
        shutil.rmtree(self.spill_dir, ignore_errors=True)
        for name in self.registered.values():
            try:
                self.con.unregister(name)
            except duckdb.Error:  # pragma: no cover - already gone with a closed connection
                pass
        self.registered.clear()


def arrow_batches(con: duckdb.DuckDBPyConnection, sql: str, rows: int) -> pa.RecordBatchReader:
    """The result of ``sql`` as Arrow batches of about ``rows`` rows, computed as they are read."""
    try:
        return con.sql(sql).to_arrow_reader(max(int(rows), 1))  # a relation's reader streams; execute()'s copies
    except duckdb.Error as err:
        raise IlargiError(f"DuckDB failed while reading the fact: {str(err).strip()}") from None


def _next_batch(batches: pa.RecordBatchReader) -> pa.RecordBatch | None:
    try:
        return batches.read_next_batch()
    except StopIteration:
        return None
    except duckdb.Error as err:
        raise IlargiError(f"DuckDB failed while reading the fact: {str(err).strip()}") from None


def _labelled(graph: JoinGraph) -> str:
    """Rows whose target is set (NULL and NaN targets teach nothing, as in the in-memory read)."""
    return labelled_sql(graph)


def read_once(con: duckdb.DuckDBPyConnection, graph: JoinGraph) -> bool:
    """Whether a stream would read this query's fact in one pass (it is neither a base table nor Parquet files)."""
    first = graph.sources[0]
    return not supports_rowid(con, first, with_prefix(graph.select)) and parquet_call(graph) is None


def open_stream(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, categorical: frozenset[int], rows_per_partition: int
) -> FactStream:
    """Scan the dimensions, register the ones DuckDB cannot join natively, and cut the fact into partitions.

    A base table is cut into rowid ranges; any other fact (a view, ``read_parquet``, ``read_csv``, a
    subquery) is read in one pass, cut into partitions of ``rows_per_partition`` output rows (see the
    module's docstring). Raises :class:`NotStreamable` when the fact cannot be streamed: it must be the
    first FROM source, one that no outer join can empty and whose rows no join repeats, and no feature may
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
    if first.nullable or not joins_cannot_repeat_rows(con, graph):
        raise NotStreamable(
            "streaming reads the fact (the first source in FROM) in partitions with every other source resident, "
            "so no outer join may empty it and no join may repeat its rows (each joined table unique on its join "
            "keys); this query's may. Put the largest table first in FROM, raise the memory budget, or filter "
            "the data."
        )
    fact = first.alias
    by_rowid = supports_rowid(con, first, with_prefix(graph.select))
    files = None if by_rowid else parquet_files(con, graph)
    text = frozenset(part_column(j, 0) for j in categorical)
    scans = {
        s.alias: scan_source(con, graph, s, keys[s.alias], parts[s.alias], (), text)
        for s in graph.sources
        if s.alias != fact
    }
    token = uuid.uuid4().hex
    fact_parts = {n: cast_part(n, sql, text) for n, sql in parts[fact].items()}
    stream = FactStream(con, graph, fact, scans, fact_parts, [], [], rereadable=by_rowid or files is not None)
    stream.files = files
    try:
        for position, (alias, scan) in enumerate(scans.items()):
            if not scan.native:
                name = f"__ilargi_{token}_{position}"
                con.register(name, scan.keys)
                stream.registered[alias] = name
        step = max(int(rows_per_partition), 1)
        if files is not None:
            _cut_files(con, stream, files, step)
        elif by_rowid:
            source = graph.source(fact)
            prefix = with_prefix(graph.select)
            low, high = con.sql(f"{prefix}SELECT min(rowid), max(rowid) FROM {source.relation_sql}").fetchall()[0]
            low, high = (0, -1) if low is None else (int(low), int(high))
            count = max(math.ceil((high - low + 1) / step), 1)
            stream.bounds = [(low + k * step, low + (k + 1) * step) for k in range(count)]
            partition = f"({quote_identifier(fact)}.rowid - {low}) // {step}"
            stream.sizes, stream.unlabelled = _partition_sizes(con, stream, partition)
            stream.sizes += [0] * (count - len(stream.sizes))
        else:
            (labelled,), stream.unlabelled = _partition_sizes(con, stream, "0")
            stream.sizes = [step] * (labelled // step) + ([labelled % step] if labelled % step or not labelled else [])
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


def _cut_files(con: duckdb.DuckDBPyConnection, stream: FactStream, files: ParquetFiles, step: int) -> None:
    """Cut each Parquet file into ranges of ``step`` rows, in the files' order, and count each range's rows."""
    stream.unlabelled = 0
    for index, rows in enumerate(files.rows):
        count = max(math.ceil(rows / step), 1)
        stream.bounds += [(k * step, (k + 1) * step) for k in range(count)]
        stream.bound_files += [index] * count
        sizes, unlabelled = _partition_sizes(
            con,
            stream,
            f"{quote_identifier(stream.fact)}.{FILE_ROW} // {step}",
            file_sql(stream.graph, stream.registered, (), files.call, files.files[index]),
        )
        stream.sizes += sizes + [0] * (count - len(sizes))
        stream.unlabelled += unlabelled


def _partition_sizes(
    con: duckdb.DuckDBPyConnection, stream: FactStream, partition: str, sql: str | None = None
) -> tuple[list[int], int]:
    """Labelled output rows per partition (``partition``: its number per row, in SQL) and unlabelled rows in
    all, from one aggregate over the key-only join (``sql``: of one file). Partitions with no rows are missing
    at the end."""
    graph = stream.graph
    sql = sql or indicator_sql(graph, stream.registered, stream.fact, (), streamed_rowid=False)
    select = sqlglot.parse_one(sql, read="duckdb")
    labelled = _labelled(graph) if graph.target is not None else "TRUE"
    select.set(
        "expressions",
        [
            sqlglot.parse_one(f"{partition} AS {PARTITION}", read="duckdb"),
            sqlglot.parse_one(f"count(*) FILTER (WHERE {labelled}) AS n", read="duckdb"),
            sqlglot.parse_one(f"count(*) FILTER (WHERE NOT ({labelled})) AS u", read="duckdb"),
        ],
    )
    select.set("order", None)
    found = fetch_arrow(con, select.sql("duckdb") + f" GROUP BY {PARTITION}", what="the partitions' row counts")
    parts, labelled_rows, unlabelled_rows = (found.column(i).to_pylist() for i in range(3))
    sizes = [0] * (max(map(int, parts)) + 1 if parts else 1)
    for part, n in zip(parts, labelled_rows):
        sizes[int(part)] = int(n)
    return sizes, sum(int(u) for u in unlabelled_rows)


__all__ = [
    "FactPartition",
    "FactStream",
    "NotStreamable",
    "dimension_metadata",
    "open_stream",
    "read_once",
    "used_dimension_rows",
]
