"""The model registry's schema: schema ``ilargi``'s tables and view as ``sql/registry.sql`` creates them, created
where missing and checked to be ilargi_db's own (never a user's object of the same name replaced).

Light (DuckDB only): ``ilargi_db.connect()`` runs it before anything of training is imported.
"""

from __future__ import annotations

import functools
from importlib import resources

import duckdb

from ilargi_db.errors import ForeignRegistryError
from ilargi_db.schema_objects import described, ilargi_objects


def registry_ddl() -> str:
    """The registry's DDL, as shipped (``sql/registry.sql``)."""
    return resources.files("ilargi_db.sql_functions").joinpath("registry.sql").read_text()


@functools.cache
def _expected_objects() -> dict[str, tuple[str, str]]:
    """The registry's objects as ``registry.sql`` creates them."""
    with duckdb.connect() as parser:
        return described(statement.query for statement in parser.extract_statements(registry_ddl()))


def check_registry(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the whole registry exists; refuse a table or view of one of its names that is not ilargi_db's.

    ilargi_db never replaces a user's objects: a ``models``, ``category_weights``
    or ``current_models`` in schema ``ilargi`` must be exactly what
    ``registry.sql`` creates (as an earlier ilargi_db with the same DDL did).
    """
    expected = _expected_objects()
    found = {name: obj for name, obj in ilargi_objects(con).items() if name in expected}
    for name, (kind, sql) in sorted(found.items()):
        want_kind, want_sql = expected[name]
        if (kind, sql) != (want_kind, want_sql):
            differs = f"where ilargi_db keeps a {want_kind}" if kind != want_kind else "not as in sql/registry.sql"
            raise ForeignRegistryError(
                f"schema ilargi already has a {kind} {name} that ilargi_db did not create ({differs}). "
                "ilargi_db keeps its model registry in schema ilargi and never replaces your objects: rename "
                f"yours (ALTER {kind.upper()} ilargi.{name} RENAME TO my_{name}) or drop it, then install again."
            )
    return len(found) == len(expected)


def ensure_registry(con: duckdb.DuckDBPyConnection) -> None:
    """Create what is missing of schema ``ilargi``'s registry (nothing when it is all there; never a replacement)."""
    if check_registry(con):
        return  # no DDL at all: concurrent writers of the registry never conflict on it
    for statement in con.extract_statements(registry_ddl()):
        con.execute(statement.query)


__all__ = ["check_registry", "ensure_registry", "registry_ddl"]
