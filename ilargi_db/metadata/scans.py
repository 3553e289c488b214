"""Source scans S_k: only the columns a source must give, its own filters pushed in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import sqlglot
from sqlglot import exp

from ilargi_db.errors import IlargiError
from ilargi_db.metadata.arrow_blocks import arrow_to_numpy, fetch_arrow, numpy_to_arrow
from ilargi_db.metadata.target_labels import target_sql
from ilargi_db.plan.join_graph import JoinGraph, Source
from ilargi_db.plan.joins import conjuncts
from ilargi_db.plan.sources import with_prefix
from ilargi_db.sql_text import quote_identifier

ROW = "__ilargi_row"
ROWID = "__ilargi_rowid"
TARGET = "__ilargi_y"
KEPT = "__ilargi_kept_"  # a column that is not a feature, read beside them when scoring (plan.kept_columns)
GROUP = "__ilargi_group"  # the group_by column, as VARCHAR, in the key-only and the materialized join


def kept_column(index: int) -> str:
    """The name a scored query's ``index``-th kept column (not a feature) is read under."""
    return f"{KEPT}{index}"


def part_column(feature_index: int, part_index: int) -> str:
    """Name, inside a scan, of part ``part_index`` of feature ``feature_index``."""
    return f"__ilargi_f{feature_index}_{part_index}"


@dataclass
class SourceScan:
    """What one source gives: the key-only columns and its feature expressions."""

    source: Source
    keys: pa.Table | None  # columns the join needs + the row number, registered for the join
    values: pa.Table  # feature expressions, one float64 column each
    fill: dict[str, float | str | None]  # feature column -> value on a NULL-extended (empty) row
    rowids: np.ndarray | None = None  # native: DuckDB rowid of each scanned row

    @property
    def native(self) -> bool:
        """The join reads the base table itself and names rows by ``rowid``."""
        return self.rowids is not None

    @property
    def n_rows(self) -> int:
        return self.values.num_rows

    def positions(self, rowids: np.ndarray) -> np.ndarray:
        """Scan positions of the rows the join names by rowid (-1 stays -1)."""
        scanned = self.rowids
        increasing = bool(np.all(scanned[1:] > scanned[:-1]))
        if len(scanned) == 0 or (increasing and scanned[0] == 0 and scanned[-1] == len(scanned) - 1):
            return rowids  # no deletes, no filter: rowid = position (DuckDB's BIGINT, kept without a copy)
        order = None if increasing else np.argsort(scanned)
        ordered = scanned if order is None else scanned[order]
        found = np.minimum(np.searchsorted(ordered, rowids), len(ordered) - 1)
        present = rowids >= 0
        if not np.array_equal(ordered[found[present]], rowids[present]):
            raise IlargiError(
                f"the join and the scan of {self.source.alias!r} saw different rows (was the table changed "
                "while training data was read?). Run the query again."
            )
        if order is not None:
            found = order[found]
        return np.where(present, found, -1).astype(self.index_type, copy=False)

    @property
    def index_type(self) -> type:
        return np.int32 if self.n_rows < np.iinfo(np.int32).max else np.int64


def join_columns(graph: JoinGraph) -> dict[str, list[str]]:
    """Raw columns each source must give the key-only join (keys, filters, target, order)."""
    select = graph.select
    aliases = {s.alias.lower(): s.alias for s in graph.sources}
    needed: dict[str, dict[str, str]] = {s.alias: {} for s in graph.sources}
    nodes: list[exp.Expression] = []
    for join in select.args.get("joins") or []:
        if join.args.get("on") is not None:
            nodes.append(join.args["on"])
        for key in join.args.get("using") or []:
            for source in graph.sources:
                if source.has_column(key.name):
                    needed[source.alias].setdefault(key.name.lower(), key.name)
    pushed = {p.sql for p in graph.filters if p.pushed}
    where = select.args.get("where")
    if where is not None:
        nodes += [c for c in conjuncts(where.this) if c.sql("duckdb") not in pushed]
    if select.args.get("order"):
        nodes.append(select.args["order"])
    for labelled in (graph.target, graph.group):
        if labelled is not None:
            nodes.append(sqlglot.parse_one(labelled.sql, read="duckdb"))
    for node in nodes:
        # All columns, nested subqueries included: a correlated reference needs its column too.
        for column in node.find_all(exp.Column):
            alias = aliases.get(column.table.lower())
            if alias and graph.source(alias).has_column(column.name):
                needed[alias].setdefault(column.name.lower(), column.name)
    return {alias: list(cols.values()) for alias, cols in needed.items()}


ZONED = "TIMESTAMP WITH TIME ZONE"  # the one type whose text depends on the session (SET TimeZone)


def group_text(expression: str, duckdb_type: str | None) -> str:
    """A group's value as text, the same in every session: training keys its models by it, scoring and the
    macros look them up by it. DuckDB's cast to VARCHAR, except a TIMESTAMPTZ, which it writes in the session's
    time zone: here always as the cast writes it in UTC ('2024-01-01 00:00:00+00'), whatever the time zone.

    >>> group_text('"g"', "BIGINT")
    'CAST("g" AS VARCHAR)'
    """
    if duckdb_type is not None and duckdb_type.upper() == ZONED:
        # UTC's wall clock, then its offset after the time ('infinity' has no time and keeps its text). The
        # built-ins by their catalog name: this text is in every grouped model's macro, which a database's own
        # macro named timezone or regexp_replace must not change.
        utc = f"CAST(system.main.timezone('UTC', {expression}) AS VARCHAR)"
        return f"system.main.regexp_replace({utc}, '^(\\S+ \\S+)', '\\1+00')"
    return f"CAST({expression} AS VARCHAR)"


def group_item(graph: JoinGraph) -> str:
    """The group_by column as the joins return it: its value as text, as a model's macro compares it."""
    return f"{group_text(f'({graph.group.sql})', graph.group.duckdb_type)} AS {quote_identifier(GROUP)}"


def supports_rowid(con: duckdb.DuckDBPyConnection, source: Source, prefix: str = "") -> bool:
    """Whether ``source`` is a base table whose rows DuckDB names by ``rowid``."""
    if source.kind != "table" or source.has_column("rowid"):
        return False
    try:
        con.sql(f"{prefix}SELECT rowid FROM {source.relation_sql} LIMIT 0")
    except duckdb.Error:
        return False  # a view, a CTE or a registered DataFrame/Arrow table
    return True


def cast_part(name: str, sql: str, categorical: frozenset[str]) -> str:
    """A feature part as DuckDB should return it: DOUBLE, or VARCHAR for a categorical one."""
    return f"CAST(({sql}) AS {'VARCHAR' if name in categorical else 'DOUBLE'}) AS {quote_identifier(name)}"


def materialized_sql(graph: JoinGraph, categorical: list[bool], kept: Sequence[str] = ()) -> str:
    """The training query with each feature cast as the scans cast it, and the target as DOUBLE.

    Both strategies then read every value through the same DuckDB cast (a UBIGINT
    above 2^53 rounds as CAST does, in either), and duplicate output names cannot
    clash: features are named by :func:`part_column`, the target :data:`TARGET`.
    ``kept`` are columns read as they are beside them (named :func:`kept_column`), for scoring.
    """
    names = {part_column(j, 0) for j, flag in enumerate(categorical) if flag}
    items = [cast_part(part_column(j, 0), f.sql, names) for j, f in enumerate(graph.features)]
    if graph.target is not None:
        items.append(f"{target_sql(graph)} AS {quote_identifier(TARGET)}")
    if graph.group is not None:
        items.append(group_item(graph))
    items += [f"({sql}) AS {quote_identifier(kept_column(i))}" for i, sql in enumerate(kept)]
    select = graph.select.copy()
    select.set("expressions", [sqlglot.parse_one(item, read="duckdb") for item in items])
    return select.sql("duckdb")


def scan_sql(
    graph: JoinGraph,
    source: Source,
    keys: list[str],
    parts: dict[str, str],
    native: bool = False,
    categorical: frozenset[str] = frozenset(),
) -> str:
    """``SELECT <keys>, CAST(<part> AS DOUBLE) ... FROM <source> WHERE <pushed filters>``."""
    alias = quote_identifier(source.alias)
    if native:
        items = [f"{alias}.rowid AS {ROWID}"]
    else:
        items = [f"{alias}.{quote_identifier(c)} AS {quote_identifier(c)}" for c in keys]
    items += [cast_part(name, sql, categorical) for name, sql in parts.items()]
    if not items:
        items = ["NULL AS __ilargi_empty"]
    pushed = [f"({p.sql})" for p in graph.filters if p.pushed and p.sources == (source.alias,)]
    where = f" WHERE {' AND '.join(pushed)}" if pushed else ""
    return f"{with_prefix(graph.select)}SELECT {', '.join(items)} FROM {source.relation_sql}{where}"


def null_row_values(
    con: duckdb.DuckDBPyConnection, source: Source, parts: dict[str, str], categorical: frozenset[str] = frozenset()
) -> dict[str, float | str | None]:
    """Each feature expression evaluated on the all-NULL row an outer join adds.

    ``COALESCE(d.x, 5)`` is 5 on a row a LEFT JOIN left empty, not NULL. A NULL
    result is NaN for a numeric part (``normalize`` reads it as 0: an empty row
    contributes nothing; training imputes it) and None for a categorical one.
    """
    if not parts:
        return {}
    nulls = ", ".join(f"CAST(NULL AS {t}) AS {quote_identifier(c)}" for c, t in zip(source.columns, source.types))
    items = ", ".join(cast_part(name, sql, categorical) for name, sql in parts.items())
    row = con.sql(f"SELECT {items} FROM (SELECT {nulls}) AS {quote_identifier(source.alias)}").fetchall()[0]
    values: dict[str, float | str | None] = {}
    for name, value in zip(parts, row):
        values[name] = value if name in categorical else (np.nan if value is None else float(value))
    return values


def scan_source(
    con: duckdb.DuckDBPyConnection,
    graph: JoinGraph,
    source: Source,
    keys: list[str],
    parts: dict[str, str],
    parts_in_join: list[str] = (),
    categorical: frozenset[str] = frozenset(),
    native: bool | None = None,
) -> SourceScan:
    """Scan one source once; split the result into key columns and feature values.

    A base table joins natively (the join reads the table and its ``rowid``);
    any other source joins through its scan, registered as an Arrow table with
    a row number. ``parts_in_join`` are feature columns the join must see too
    (the parts of a coalesced feature: the join decides which source wins).
    ``categorical`` parts come back as VARCHAR instead of DOUBLE.
    """
    if native is None:  # False: a join elsewhere (a cluster's worker) reads it through its registered scan
        native = not parts_in_join and supports_rowid(con, source, with_prefix(graph.select))
    sql = scan_sql(graph, source, keys, parts, native, categorical)
    table = fetch_arrow(con, sql, what=f"the scan of source {source.alias!r}")
    # A source no outer join can empty never uses its fill values.
    fill = (
        null_row_values(con, source, parts, categorical)
        if source.nullable
        else {name: None if name in categorical else np.nan for name in parts}
    )
    values = table.select(list(parts))
    if native:
        rowids = arrow_to_numpy(table.column(ROWID))
        return SourceScan(source=source, keys=None, values=values, fill=fill, rowids=rowids)
    scan = SourceScan(source=source, keys=None, values=values, fill=fill)
    row = numpy_to_arrow(np.arange(table.num_rows, dtype=scan.index_type))
    scan.keys = table.select([*keys, *parts_in_join]).append_column(ROW, row)
    return scan
