"""Ready a DuckDB connection for ilargi_db: the SQL functions and the model registry."""

from __future__ import annotations

import atexit
import weakref

import duckdb

from ilargi_db.database_identity import is_read_only, name_database
from ilargi_db.errors import IlargiError
from ilargi_db.interruption import watch_sigint
from ilargi_db.sql_functions.registry_schema import check_registry, ensure_registry
from ilargi_db.sql_functions.udfs import register_functions

MIN_DUCKDB = (2, 0)
_INSTALLED: weakref.WeakSet = weakref.WeakSet()


def _duckdb_version() -> tuple[int, ...]:
    return tuple(int(p) for p in duckdb.__version__.split(".")[:2] if p.isdigit())


@atexit.register
def _close_installed() -> None:
    # A connection holding Python UDFs that is still open when the interpreter exits makes
    # DuckDB's bindings print a page of "leaked instance" warnings; closing it first keeps exit quiet.
    for con in list(_INSTALLED):
        try:
            con.close()
        except duckdb.Error:
            pass


def install(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """Register ilargi_db's SQL functions on ``con``, create the registry if missing, and return ``con``.

    Adds the SQL functions of ``ilargi_db.sql_functions.udfs.FUNCTIONS``
    (``ilargi_train``, ``ilargi_explain``, ``ilargi_evaluate``, ...) and schema
    ``ilargi`` (``sql/registry.sql``; skipped on a read-only database).
    Idempotent. Refuses (``ForeignRegistryError``) a table or view of a
    registry name in schema ``ilargi`` that ilargi_db did not create: it never
    replaces a user's objects.

    >>> import duckdb
    >>> con = install(duckdb.connect())
    >>> con.sql("SELECT count(*) FROM ilargi.models").fetchall()
    [(0,)]
    """
    if not isinstance(con, duckdb.DuckDBPyConnection):
        raise IlargiError(f"install() needs a duckdb connection (duckdb.connect(...)), got {type(con).__name__}.")
    if _duckdb_version() < MIN_DUCKDB:
        raise IlargiError(
            f"ilargi_db needs duckdb >= {'.'.join(map(str, MIN_DUCKDB))}, found {duckdb.__version__}: "
            "pip install -U duckdb."
        )
    try:
        read_only = is_read_only(con)
    except duckdb.ConnectionException as err:
        raise IlargiError(f"the DuckDB connection is not usable ({err}); open a new one.") from None
    if read_only:
        check_registry(con)  # refuse someone else's ilargi.models here too: load_model would misread it
    else:
        ensure_registry(con)
    if con not in _INSTALLED:
        register_functions(con)
        name_database(con)  # an in-memory database lists and clears its own artifacts, not another's
        _INSTALLED.add(con)
    watch_sigint()  # DuckDB may run the functions on its own threads, which Ctrl-C does not reach otherwise
    return con


def connect(path: str = ":memory:", **kwargs) -> duckdb.DuckDBPyConnection:
    """Open a DuckDB database (``:memory:`` by default) with ilargi_db's SQL functions installed."""
    return install(duckdb.connect(path, **kwargs))
