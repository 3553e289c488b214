"""Ready a DuckDB connection for ilargi_db."""

from __future__ import annotations

import duckdb

from ilargi_db.errors import IlargiError

MIN_DUCKDB = (1, 4)


def _duckdb_version() -> tuple[int, ...]:
    return tuple(int(p) for p in duckdb.__version__.split(".")[:2] if p.isdigit())


def install(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """Ready an existing connection for ilargi_db and return it.

    Checks that ``con`` is an open DuckDB connection of a supported version and
    that DuckDB answers on it. Idempotent.

    >>> import duckdb
    >>> con = install(duckdb.connect())
    """
    if not isinstance(con, duckdb.DuckDBPyConnection):
        raise IlargiError(f"install() needs a duckdb connection (duckdb.connect(...)), got {type(con).__name__}.")
    if _duckdb_version() < MIN_DUCKDB:
        raise IlargiError(
            f"ilargi_db needs duckdb >= {'.'.join(map(str, MIN_DUCKDB))}, found {duckdb.__version__}: "
            "pip install -U duckdb."
        )
    try:
        con.sql("SELECT 1").fetchall()
    except duckdb.ConnectionException as err:
        raise IlargiError(f"the DuckDB connection is not usable ({err}); open a new one.") from None
    return con


def connect(path: str = ":memory:", **kwargs) -> duckdb.DuckDBPyConnection:
    """Open a DuckDB database (``:memory:`` by default) ready for ilargi_db."""
    return install(duckdb.connect(path, **kwargs))
