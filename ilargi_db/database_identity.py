"""Which database a connection is on: its file (writable or not), or, in memory, a name of its own.

What the artifact store keys its tiers by and the SQL functions carry from a connection to the cursors they open
on it. Light (DuckDB only): ``ilargi_db.connect()`` names its database before anything of training is imported.
"""

from __future__ import annotations

import os
import uuid
import weakref

import duckdb


def _current_row(con: duckdb.DuckDBPyConnection) -> tuple[str | None, bool]:
    """(the file or None in memory, read-only) of ``con``'s current database; DuckDB's error where it cannot say."""
    row = con.execute(
        "SELECT path, readonly FROM system.main.duckdb_databases() WHERE database_name = system.main.current_database()"
    ).fetchall()
    return (str(row[0][0]) if row[0][0] else None), bool(row[0][1])


def current_database(con: duckdb.DuckDBPyConnection) -> tuple[str | None, bool]:
    """The file of ``con``'s current database (None in memory, or where it cannot be read), and if read-only."""
    try:
        return _current_row(con)
    except (duckdb.Error, IndexError):
        return None, True


def is_read_only(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether ``con``'s current database is open read-only (DuckDB's error, such as a closed connection's, raised)."""
    return _current_row(con)[1]


def database_file(con: duckdb.DuckDBPyConnection) -> str | None:
    """The file of ``con``'s current database when it can hold artifacts (a writable file), else None (in
    memory, where it dies with the process, or read-only)."""
    path, read_only = current_database(con)
    return None if read_only else path


def database_path(con: duckdb.DuckDBPyConnection) -> str | None:
    """The file of ``con``'s current database, writable or not (None in memory)."""
    return current_database(con)[0]


# In-memory databases have no path, and DuckDB names none of them apart: each one installed gets a name here
# (its connection, and the cursors ilargi_db's SQL functions open on it, carry it).
_MEMORY_NAMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def name_database(con: duckdb.DuckDBPyConnection, like: duckdb.DuckDBPyConnection | None = None) -> None:
    """Give the in-memory database of ``con`` a scope of its own, or that of ``like`` (a connection to the same
    database, such as the one ``con`` is a cursor of)."""
    if con not in _MEMORY_NAMES:
        found = _MEMORY_NAMES.get(like) if like is not None else None
        _MEMORY_NAMES[con] = found or f":memory:{uuid.uuid4().hex}"


def database_scope(con: duckdb.DuckDBPyConnection) -> str:
    """Which database ``con`` is on, for the in-process tier's listing and clearing: its file; for an in-memory
    database the name :func:`name_database` gave it, else ``":memory:"`` (shared by every unnamed one)."""
    path = current_database(con)[0]
    return os.path.realpath(path) if path else _MEMORY_NAMES.get(con, ":memory:")


__all__ = ["current_database", "database_file", "database_path", "database_scope", "is_read_only", "name_database"]
