"""The fact's Parquet files, and the one query each worker runs on its file: the training query's
``read_parquet(...)`` call rewritten to read one file, in that file's row order."""

from __future__ import annotations

import os
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp

from ilargi_db.errors import IlargiError
from ilargi_db.metadata.indicator import indicator_sql
from ilargi_db.metadata.scans import quote
from ilargi_db.plan.join_graph import JoinGraph
from ilargi_db.plan.sources import from_items

FILE_ROW = "file_row_number"  # read_parquet's row number within a file: a partition's fixed order


def parquet_files(con: duckdb.DuckDBPyConnection, graph: JoinGraph) -> tuple[exp.Expression, list[str]]:
    """The fact's ``read_parquet(...)`` call and the files it reads (globs expanded), or a clear refusal."""
    fact = graph.sources[0]
    item = from_items(graph.select)[0]
    call = item.this if isinstance(item, exp.Table) else None
    name = (call.name if isinstance(call, exp.Anonymous) else getattr(call, "key", "")).lower() if call else ""
    if fact.kind != "function" or "parquet" not in (name + fact.relation_sql.lower()):
        raise IlargiError(
            f"on a cluster every worker reads its share of the fact from Parquet files: the training query's first "
            f"FROM source must be read_parquet('path/*.parquet') that every worker can read, got "
            f"{fact.relation_sql!r}. Write the fact to Parquet (COPY ... TO 'dir' (FORMAT parquet)), or train "
            "without cluster=."
        )
    args = call.expressions or [call.this]
    first = args[0]
    patterns = [e.this for e in first.expressions] if isinstance(first, exp.Array) else [first.this]
    files: list[str] = []
    for pattern in patterns:
        found = con.execute("SELECT file FROM glob(?) ORDER BY file", [pattern]).fetchall()
        # A relative path means the driver's working directory: the workers get it spelled out.
        files += [row[0] if "://" in row[0] else os.path.abspath(row[0]) for row in found]
    if not files:
        raise IlargiError(f"read_parquet of the training query matches no file ({', '.join(patterns)}).")
    return call, files


def file_sql(graph: JoinGraph, registered: dict[str, str], fact_items: tuple[str, ...], call: Any, file: str) -> str:
    """The key-only join of one Parquet file of the fact against the registered dimensions, in file order."""
    sql = indicator_sql(graph, registered, graph.sources[0].alias, fact_items, streamed_rowid=False)
    select = sqlglot.parse_one(sql, read="duckdb")
    one = call.copy()
    rest = [a for a in (one.expressions or [])][1:]
    options = [*rest, sqlglot.parse_one(f"{FILE_ROW} = true", read="duckdb")]
    item = from_items(select)[0]
    function = exp.Anonymous(this="read_parquet", expressions=[exp.Literal.string(file), *options])
    item.set("this", function)
    select.set("order", None)
    return select.order_by(f"{quote(graph.sources[0].alias)}.{FILE_ROW}", dialect="duckdb").sql("duckdb")


def file_stamp(file: str) -> tuple:
    """What says a local file changed (its size and modification time); a remote URL has none here."""
    try:
        found = os.stat(file)
    except OSError:
        return ()
    return (found.st_size, found.st_mtime_ns)


__all__ = ["FILE_ROW", "file_sql", "file_stamp", "parquet_files"]
