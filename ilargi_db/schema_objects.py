"""The tables and views in a database's schema ``ilargi``, as DuckDB describes them.

ilargi_db keeps its model registry and its artifact store there, and tells its own objects from a user's of
the same names by comparing DuckDB's normalized ``CREATE`` statement with the one its DDL gives in a scratch
database: one DDL gives one text, whatever spacing or release made it.

>>> import duckdb
>>> con = duckdb.connect()
>>> described(["CREATE TABLE ilargi.t (x INTEGER)"]) == {"t": ("table", "CREATE TABLE ilargi.t(x INTEGER);")}
True
"""

from __future__ import annotations

from collections.abc import Iterable

import duckdb


def ilargi_objects(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[str, str]]:
    """``{name: (kind, SQL)}`` of the tables and views in schema ``ilargi`` of ``con``'s current database (read
    from ``system.main``, which no macro can stand in for)."""
    found = con.execute(
        "SELECT lower(table_name), 'table', sql FROM system.main.duckdb_tables() "
        "WHERE database_name = system.main.current_database() AND lower(schema_name) = 'ilargi' "
        "UNION ALL SELECT lower(view_name), 'view', sql FROM system.main.duckdb_views() "
        "WHERE database_name = system.main.current_database() AND lower(schema_name) = 'ilargi' AND NOT internal"
    ).fetchall()
    return {name: (kind, sql) for name, kind, sql in found}


def described(ddl: Iterable[str]) -> dict[str, tuple[str, str]]:
    """The objects the statements ``ddl`` create in schema ``ilargi``, as :func:`ilargi_objects` reads them
    (run in a scratch in-memory database)."""
    scratch = duckdb.connect()
    try:
        scratch.execute("CREATE SCHEMA IF NOT EXISTS ilargi")
        for statement in ddl:
            scratch.execute(statement)
        return ilargi_objects(scratch)
    finally:
        scratch.close()


__all__ = ["described", "ilargi_objects"]
