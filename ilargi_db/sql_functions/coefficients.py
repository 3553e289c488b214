"""``ilargi_coefficients(name[, model_version])``: a stored linear model's coefficients as rows, named.

A TEMP table macro over the registry (plain SQL, no Python UDF): the registry stores ``coef_`` as an unnamed
JSON array beside ``feature_names_out``; this pairs them, the intercept first, for linear and logistic
regression and the linear SVM, of the current version unless ``model_version`` names another.
"""

from __future__ import annotations

import duckdb

from ilargi_db.models.catalog import CATALOG

# The name the intercept's row carries (R's spelling: no one-hot column "kind=..." or SQL identifier reads so).
INTERCEPT = "(intercept)"
# The algorithms whose stored model has coefficients (coef_ and intercept_).
WITH_COEFFICIENTS = tuple(name for name, facts in CATALOG.items() if "coef_" in facts.fitted)


def coefficients_macro() -> str:
    """The ``CREATE OR REPLACE TEMP MACRO ilargi_coefficients`` statement.

    Its parameters are named so that no registry column shadows them. A name or version not stored, or a
    model of another algorithm, is an error naming what to do, not an empty table.
    """
    algorithms = ", ".join(f"'{a}'" for a in WITH_COEFFICIENTS)
    readable = ", ".join(WITH_COEFFICIENTS[:-1]) + " and " + WITH_COEFFICIENTS[-1]
    return f"""CREATE OR REPLACE TEMP MACRO ilargi_coefficients(model_name, model_version := NULL) AS TABLE
WITH versions AS (
    SELECT m.version, m.algorithm, m.model FROM ilargi.models m WHERE m.name = lower(model_name)
),
span AS (SELECT count(*) AS stored, max(version) AS newest FROM versions),
chosen AS (
    SELECT span.stored, span.newest, v.algorithm, v.model
    FROM span LEFT JOIN versions v ON v.version = coalesce(model_version, span.newest)
)
SELECT unnest(['{INTERCEPT}'] || CAST(model->'$.feature_names_out' AS VARCHAR[])) AS feature,
       unnest([CAST(model->>'$.intercept_' AS DOUBLE)] || CAST(model->'$.coef_' AS DOUBLE[])) AS coefficient
FROM chosen
WHERE CASE
    WHEN stored = 0 THEN error('no model named ''' || model_name || ''' is stored: '
        || 'SELECT name FROM ilargi.current_models lists those that are.')
    WHEN model IS NULL THEN error('model ''' || model_name || ''' has no version ' || model_version
        || ': its versions run from 1 to ' || newest || '.')
    WHEN algorithm NOT IN ({algorithms}) THEN error('model ''' || model_name || ''' is a ' || algorithm
        || ' model, which has no coefficients: ilargi_coefficients reads {readable} models '
        || '(ilargi.models.model holds every model''s fitted values as JSON).')
    ELSE true
END"""


# SQL name -> its CREATE statement: the table macros ``install`` adds beside the scalar functions.
TABLE_MACROS: dict[str, str] = {"ilargi_coefficients": coefficients_macro()}
# What the macro is where no registry can be read (a read-only database without one): an error saying why.
NO_REGISTRY = """CREATE OR REPLACE TEMP MACRO ilargi_coefficients(model_name, model_version := NULL) AS TABLE
SELECT NULL::VARCHAR AS feature, NULL::DOUBLE AS coefficient
WHERE error('this database has no model registry (schema ilargi), so no model is stored in it: train one with '
    || 'ilargi_train on a database opened for writing.')"""


def register_table_macros(con: duckdb.DuckDBPyConnection) -> None:
    """Create the table macros on ``con`` (TEMP: per connection, as the scalar functions' names are)."""
    try:
        con.execute(TABLE_MACROS["ilargi_coefficients"])
    except duckdb.CatalogException:  # bound when created: ilargi.models is missing (read-only, never installed)
        con.execute(NO_REGISTRY)
