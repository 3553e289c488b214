"""The SQL functions as DuckDB sees them: each name, its parameters, and how it is registered on a connection.

Registering is light (DuckDB only): each function's implementation (:mod:`.functions`, with the training stack
behind it) is imported on its first call, so ``ilargi_db.connect()`` costs what DuckDB's own connect costs plus
the registry's check, not scikit-learn's and numba's imports.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import weakref
from collections.abc import Callable
from typing import Any

import duckdb

from ilargi_db.errors import speaking_to
from ilargi_db.sql_functions.coefficients import register_table_macros
from ilargi_db.sql_functions.cross_validation import table_select
from ilargi_db.sql_functions.session import capture_sql

IMPLEMENTATIONS = "ilargi_db.sql_functions.functions"
# SQL name -> (its implementation in IMPLEMENTATIONS, required parameters); those in WITH_OPTIONS also take
# options := '{}'.
FUNCTIONS: dict[str, tuple[str, list[str]]] = {
    "ilargi_train": ("sql_train", ["name", "algorithm", "training_query", "target"]),
    "ilargi_train_batch": ("sql_train_batch", ["training_query", "target", "models"]),
    "ilargi_explain": ("sql_explain", ["algorithm", "training_query", "target"]),
    "ilargi_evaluate": ("sql_evaluate", ["name", "query"]),
    "ilargi_cross_validate": ("sql_cross_validate", ["algorithm", "training_query", "target"]),
    "ilargi_drop_model": ("sql_drop_model", ["name"]),
    "ilargi_artifacts": ("sql_artifacts", []),
    "ilargi_clear_artifacts": ("sql_clear_artifacts", []),
    "ilargi_artifact_budget": ("sql_artifact_budget", ["memory", "storage"]),
}
WITH_OPTIONS = {"ilargi_train", "ilargi_train_batch", "ilargi_explain", "ilargi_cross_validate"}
# Those whose public name is a table macro: the SELECT that makes rows of the UDF's JSON array.
TABLE_RESULTS: dict[str, Callable[[str], str]] = {"ilargi_cross_validate": table_select}
SESSION = "session"  # every UDF's last parameter: the caller's session (capture_sql)

_UDF_IDS = itertools.count()


def parameters(sql_name: str) -> list[str]:
    """The UDF's parameters, in order: the function's own, its options where it takes them, the session."""
    return [*FUNCTIONS[sql_name][1], *(["options"] if sql_name in WITH_OPTIONS else []), SESSION]


def _udf(sql_name: str, con: weakref.ref) -> Callable[..., str]:
    """The UDF of ``sql_name`` on ``con``: its implementation, imported on the first call, run with its errors
    worded for SQL (arguments, JSON options)."""
    implementation = FUNCTIONS[sql_name][0]

    def udf(*args: Any) -> str:
        function = getattr(importlib.import_module(IMPLEMENTATIONS), implementation)
        with speaking_to("sql"):
            return function(con, *args)

    # DuckDB counts a Python function's parameters from its signature.
    positional = inspect.Parameter.POSITIONAL_ONLY
    udf.__signature__ = inspect.Signature([inspect.Parameter(p, positional) for p in parameters(sql_name)])
    udf.__name__ = udf.__qualname__ = implementation
    return udf


def register_functions(con: duckdb.DuckDBPyConnection) -> None:
    """Register the SQL functions on ``con`` (``install`` calls it once per connection)."""
    ref = weakref.ref(con)  # the UDF must not keep its own connection alive
    suffix = next(_UDF_IDS)
    for sql_name, (_, params) in FUNCTIONS.items():
        # Connections to one database file share its function catalog: each connection gets UDFs of its own
        # names, and TEMP macros (which are per connection) give them the public names.
        udf = f"__{sql_name}_{suffix}"
        con.create_function(
            udf,
            _udf(sql_name, ref),
            ["VARCHAR"] * len(parameters(sql_name)),
            "JSON",
            side_effects=True,
            null_handling="special",
        )
        signature = ", ".join(params) + (", options := '{}'" if sql_name in WITH_OPTIONS else "")
        arguments = ", ".join(params) + (", options" if sql_name in WITH_OPTIONS else "")
        body = f"{udf}({arguments}{', ' if arguments else ''}{capture_sql()})"  # evaluated where it is called
        body = f"TABLE {TABLE_RESULTS[sql_name](body)}" if sql_name in TABLE_RESULTS else body
        con.execute(f"CREATE OR REPLACE TEMP MACRO {sql_name}({signature}) AS {body}")
    register_table_macros(con)  # plain SQL over the registry: nothing of this process


__all__ = ["FUNCTIONS", "TABLE_RESULTS", "WITH_OPTIONS", "parameters", "register_functions"]
