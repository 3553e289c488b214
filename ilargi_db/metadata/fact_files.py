"""A fact read from Parquet files, range by range: its files in glob order, their rows, and one range's query.

A range of one file's rows, by ``file_row_number``, always gives the same rows in the same order, so a
streamed fact in Parquet is read by file and row range (DuckDB skips the row groups outside the range)
and any partition can be read again, like a base table by rowid. The cluster reads the same files, one
per worker (:mod:`ilargi_db.cluster.parquet`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import duckdb
import sqlglot
from sqlglot import exp

from ilargi_db.metadata.indicator import indicator_sql
from ilargi_db.plan.join_graph import JoinGraph
from ilargi_db.plan.sources import from_items
from ilargi_db.sql_text import quote_identifier

FILE_ROW = "file_row_number"  # read_parquet's row number within a file: a partition's fixed order
PARQUET_FUNCTIONS = ("read_parquet", "parquet_scan", "readparquet")
# Options under which one file read alone does not give the columns it gives among the others.
WHOLE_SET_OPTIONS = ("union_by_name",)


@dataclass(frozen=True)
class ParquetFiles:
    """The ``read_parquet(...)`` call the training query reads its fact with, and the files and rows it reads."""

    call: exp.Expression
    files: tuple[str, ...]
    rows: tuple[int, ...]


def file_sql(
    graph: JoinGraph, registered: dict[str, str], fact_items: tuple[str, ...], call: exp.Expression, file: str
) -> str:
    """The key-only join of one Parquet file of the fact against the other sources, in the file's row order."""
    sql = indicator_sql(graph, registered, graph.sources[0].alias, fact_items, streamed_rowid=False)
    select = sqlglot.parse_one(sql, read="duckdb")
    options = [*list(call.expressions or [])[1:], sqlglot.parse_one(f"{FILE_ROW} = true", read="duckdb")]
    function = exp.Anonymous(this="read_parquet", expressions=[exp.Literal.string(file), *options])
    from_items(select)[0].set("this", function)
    select.set("order", None)
    return select.order_by(f"{quote_identifier(graph.sources[0].alias)}.{FILE_ROW}", dialect="duckdb").sql("duckdb")


def parquet_call(graph: JoinGraph) -> exp.Expression | None:
    """The fact's ``read_parquet(...)`` call (a quoted ``'f.parquet'`` made one), or None for any other fact."""
    item = from_items(graph.select)[0]
    this = item.this if isinstance(item, exp.Table) else None
    if isinstance(this, exp.Identifier):
        path = this.name
        if not (this.quoted and path.lower().endswith(".parquet") and graph.sources[0].kind == "table"):
            return None
        return exp.Anonymous(this="read_parquet", expressions=[exp.Literal.string(path)])
    if this is None or graph.sources[0].kind != "function":
        return None
    name = (this.name if isinstance(this, exp.Anonymous) else this.key).lower()
    if name not in PARQUET_FUNCTIONS:
        return None
    options = [e for e in (this.expressions or []) if isinstance(e, exp.EQ)]
    if any(o.this.name.lower() in WHOLE_SET_OPTIONS for o in options):
        return None
    return this


def call_patterns(call: exp.Expression) -> list[str]:
    """The paths or globs a ``read_parquet(...)`` call names (its first argument: a string or a list)."""
    first = (call.expressions or [call.this])[0]
    return [e.this for e in first.expressions] if isinstance(first, exp.Array) else [first.this]


def expand_files(con: duckdb.DuckDBPyConnection, patterns: list[str]) -> list[str]:
    """The files the patterns match, each glob in name order, as absolute paths (URLs as they are)."""
    files: list[str] = []
    for pattern in patterns:
        found = con.execute("SELECT file FROM glob(?) ORDER BY file", [pattern]).fetchall()
        files += [row[0] if "://" in row[0] else os.path.abspath(row[0]) for row in found]
    return files


def parquet_files(con: duckdb.DuckDBPyConnection, graph: JoinGraph) -> ParquetFiles | None:
    """The fact's Parquet files and their rows, or None when the fact is not read from Parquet files alone
    (or one of its columns is named like the row number a range is read by)."""
    call = parquet_call(graph)
    if call is None or graph.sources[0].has_column(FILE_ROW):
        return None
    try:
        files = expand_files(con, call_patterns(call))
        if not files:
            return None
        found = dict(con.execute("SELECT file_name, num_rows FROM parquet_file_metadata(?)", [files]).fetchall())
    except (duckdb.Error, AttributeError, IndexError):  # a pattern DuckDB reads but this reading cannot: read once
        return None
    if set(found) != set(files):
        return None
    return ParquetFiles(call, tuple(files), tuple(int(found[f]) for f in files))


__all__ = ["FILE_ROW", "ParquetFiles", "call_patterns", "expand_files", "file_sql", "parquet_call", "parquet_files"]
