"""The fact's Parquet files, and the one query each worker runs on its file: the training query's
``read_parquet(...)`` call rewritten to read one file, in that file's row order."""

from __future__ import annotations

import os

import duckdb
from sqlglot import exp

from ilargi_db.errors import IlargiError
from ilargi_db.metadata.fact_files import FILE_ROW, call_patterns, expand_files, file_sql
from ilargi_db.plan.join_graph import JoinGraph
from ilargi_db.plan.sources import from_items


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
    patterns = call_patterns(call)
    files = expand_files(con, patterns)  # absolute: a relative path means the driver's working directory
    if not files:
        raise IlargiError(f"read_parquet of the training query matches no file ({', '.join(patterns)}).")
    return call, files


def file_stamp(file: str) -> tuple:
    """What says a local file changed (its size and modification time); a remote URL has none here."""
    try:
        found = os.stat(file)
    except OSError:
        return ()
    return (found.st_size, found.st_mtime_ns)


__all__ = ["FILE_ROW", "file_sql", "file_stamp", "parquet_files"]
