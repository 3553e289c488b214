"""The caller's session, carried to the connection ilargi_db's SQL functions work on.

A Python UDF cannot query the connection running it, so the SQL functions work on a cursor: a new
connection to the same database, in DuckDB's defaults. What a caller's own statement would mean depends
on their session: the database in use (``USE``), the search path, the time zone, integer division, ... Each
public function is a TEMP macro that passes :func:`capture_sql` (evaluated in the caller's connection, at
call time) to its UDF, which applies it to the cursor with :func:`apply_session` before any work: the query
is then read, trained on, scored and the model stored or dropped as the caller's own statement would.

The argument is untrusted (anyone can call the UDF by name with any text): only the settings of
``CARRIED`` are applied, each with ``SET SESSION`` (what the caller may run on their own connection),
names and values quoted; a setting already equal is not set (``lock_configuration`` refuses any SET).
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

from ilargi_db.errors import IlargiError
from ilargi_db.query_settings import MEANING, current_values_sql
from ilargi_db.sql_text import quote_identifier, quote_string

# What is carried from the caller's connection: the search path (after USE, which sets the database and schema,
# since USE resets it) and every setting that changes what a query means.
CARRIED: tuple[str, ...] = ("search_path", *MEANING)
# The session's keys besides the settings: where USE points, and the schemas a name is looked up in (checked:
# the search path's text reads differently after USE, for the same schemas).
DATABASE, SCHEMA, SCHEMAS = "database", "schema", "schemas"


def capture_sql() -> str:
    """A SQL expression of the session, evaluated where the caller's statement runs: a JSON object of the
    database and schemas in use and the values of ``CARRIED`` as text."""
    return (
        f"system.main.json_object({quote_string(DATABASE)}, system.main.current_database(), "
        f"{quote_string(SCHEMA)}, system.main.current_schema(), "
        f"{quote_string(SCHEMAS)}, system.main.current_schemas(true), 'settings', {current_values_sql(CARRIED)})"
    )


def _captured(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    return json.loads(con.execute(f"SELECT CAST({capture_sql()} AS VARCHAR)").fetchall()[0][0])


def _parse(session: Any) -> tuple[str, str, Any, dict[str, str | None]]:
    """The database, schema and settings of ``session``, refused unless it is what :func:`capture_sql` writes."""
    try:
        given = json.loads(session) if isinstance(session, str) else None
    except ValueError:
        given = None
    settings = given.get("settings") if isinstance(given, dict) else None
    texts = [given.get(DATABASE), given.get(SCHEMA)] if isinstance(given, dict) else []
    if (
        not isinstance(settings, dict)
        or set(given) != {DATABASE, SCHEMA, SCHEMAS, "settings"}
        or not all(isinstance(t, str) and t and "\x00" not in t for t in texts)
        or not set(settings) <= set(CARRIED)
        or not all(v is None or (isinstance(v, str) and "\x00" not in v) for v in settings.values())
    ):
        raise IlargiError(
            "the caller's session must be the JSON object that ilargi_db's SQL functions write (the database and "
            f"schema in use and the settings {', '.join(CARRIED)}): call ilargi_train, ilargi_evaluate, ... by "
            "those names, not the __ilargi_ functions behind them."
        )
    return texts[0], texts[1], given[SCHEMAS], settings


def apply_session(cursor: duckdb.DuckDBPyConnection, session: str) -> None:
    """Make ``cursor``'s session the caller's (``session`` from :func:`capture_sql`), or refuse with why."""
    database, schema, schemas, settings = _parse(session)
    before = _captured(cursor)
    try:
        if (before[DATABASE], before[SCHEMA]) != (database, schema):  # a USE adds to the schemas looked in
            cursor.execute(f"USE {quote_identifier(database)}.{quote_identifier(schema)}")
    except duckdb.Error as err:
        raise IlargiError(
            f"the database and schema in use, {database}.{schema}, cannot be used by ilargi_db's own connection "
            f"({err}): a TEMP schema, or one created in a transaction not yet committed, is your connection's "
            "alone; COMMIT it, or USE another schema, then call it again."
        ) from None
    current = _captured(cursor)["settings"]
    for name, value in settings.items():
        if current.get(name) == value:
            continue  # nothing to set: under lock_configuration a SET is refused even when it changes nothing
        statement = (
            f"RESET SESSION {quote_identifier(name)}"
            if value is None
            else (f"SET SESSION {quote_identifier(name)} = {quote_string(value)}")
        )
        try:
            cursor.execute(statement)
        except duckdb.Error as err:
            if "locked" in str(err):  # lock_configuration: nothing can be SET, even per session
                fix = (
                    "The configuration is locked (lock_configuration): set it with SET GLOBAL before locking, for "
                    "every connection, or RESET it in this session before locking."
                )
            elif isinstance(err, duckdb.CatalogException):
                fix = "A schema created in a transaction not yet committed is your connection's alone: COMMIT it."
            else:
                fix = f"SET {name} to a value DuckDB accepts, or RESET it, then call the function again."
            raise IlargiError(
                f"setting {name} is {quote_string(value or '')} in this session, and ilargi_db's SQL functions, which "
                f"run on a connection of their own, cannot set it there ({err}). {fix}"
            ) from None
    found = _captured(cursor)  # what a SET or USE left otherwise would go unnoticed
    wanted = {DATABASE: database, SCHEMA: schema, SCHEMAS: schemas}
    differ = [key for key, value in wanted.items() if _first_each(found[key]) != _first_each(value)]
    differ += [n for n, v in settings.items() if n != "search_path" and found["settings"].get(n) != v]
    if differ:
        raise IlargiError(
            f"ilargi_db's SQL functions could not carry {', '.join(differ)} of this session to their own "
            "connection: RESET it, or call ilargi_db from Python on this connection."
        )


def _first_each(value: Any) -> Any:
    """A list of schemas as a name is looked up in them: a schema listed again changes nothing."""
    return list(dict.fromkeys(map(str, value))) if isinstance(value, list) else value
