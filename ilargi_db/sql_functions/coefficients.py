"""A stored model's learned numbers as named rows: ``ilargi_coefficients`` and ``ilargi_importances``.

Each is a TEMP table macro over the registry (plain SQL, no Python UDF), taking ``(name[, model_version])``:
the current version unless ``model_version`` names another. The registry stores ``coef_`` and
``feature_importances_`` as unnamed JSON arrays beside ``feature_names_out``; these pair them.
``ilargi_coefficients``: (feature, coefficient), the intercept first, for linear and logistic regression and the
linear SVM; ``ilargi_importances``: (feature, importance), each feature's share of the gain, for gradient boosting.
``ilargi_group_coefficients`` and ``ilargi_group_importances``: the same with a ``group`` column first, for a model
per group (``group_by``).
"""

from __future__ import annotations

import duckdb

from ilargi_db.models.catalog import CATALOG

# The name the intercept's row carries (R's spelling: no one-hot column "kind=..." or SQL identifier reads so).
INTERCEPT = "(intercept)"
# The algorithms whose stored models have coefficients (coef_ and intercept_), and importances.
WITH_COEFFICIENTS = tuple(name for name, facts in CATALOG.items() if "coef_" in facts.fitted)
WITH_IMPORTANCES = tuple(name for name, facts in CATALOG.items() if "feature_importances_" in facts.fitted)

# A coefficient's name, one per preprocessed column, from the stored preprocessing: the column's name (quoted as a
# SQL identifier unless it is a plain one), then ``=category`` for a one-hot column, or `` IS NULL`` for the NULL
# category. No two read alike, and none reads as the intercept: a text category 'NULL' is ``kind=NULL``, the NULL
# category ``kind IS NULL``, a column named (intercept) ``"(intercept)"``.
_SHOWN = """CASE WHEN regexp_full_match(__ilargi_c.name, '[A-Za-z_][A-Za-z0-9_]*') THEN __ilargi_c.name
    ELSE '"' || replace(__ilargi_c.name, '"', '""') || '"' END"""
_NAMES = f"""flatten([CASE WHEN __ilargi_c.kind = 'categorical'
        THEN [{_SHOWN} || '=' || __ilargi_v FOR __ilargi_v IN __ilargi_c.categories]
            || CASE WHEN __ilargi_c.null_category THEN [{_SHOWN} || ' IS NULL'] ELSE [] END
        ELSE [{_SHOWN}] END
    FOR __ilargi_c IN json_transform(preprocessing->'$.columns',
        '[{{"name": "VARCHAR", "kind": "VARCHAR", "categories": ["VARCHAR"], "null_category": "BOOLEAN"}}]')])"""
# What each macro selects from the chosen version's ``model`` JSON (unnest pairs the lists element by element).
_COEFFICIENTS = f"""unnest(['{INTERCEPT}'] || {_NAMES}) AS feature,
       unnest([CAST(model->>'$.intercept_' AS DOUBLE)] || CAST(model->'$.coef_' AS DOUBLE[])) AS coefficient"""
_IMPORTANCES = """unnest(CAST(model->'$.feature_names_out' AS VARCHAR[])) AS feature,
       unnest(CAST(model->'$.feature_importances_' AS DOUBLE[])) AS importance"""
# A model per group (train(..., group_by=...)): the same per group, each group's fitted values in its entry of
# ``model.groups`` (``fitted`` below), the column names once for all.
_GROUP_COEFFICIENTS = f"""fitted.key AS "group",
       unnest(['{INTERCEPT}'] || {_NAMES}) AS feature,
       unnest([CAST(fitted.value->>'$.intercept_' AS DOUBLE)] || CAST(fitted.value->'$.coef_' AS DOUBLE[]))
           AS coefficient"""
_GROUP_IMPORTANCES = """fitted.key AS "group", unnest(CAST(model->'$.feature_names_out' AS VARCHAR[])) AS feature,
       unnest(CAST(fitted.value->'$.feature_importances_' AS DOUBLE[])) AS importance"""


def _in_words(names: tuple[str, ...]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def model_table_macro(
    sql_name: str, select: str, algorithms: tuple[str, ...], what: str, other: str, grouped: bool = False
) -> str:
    """The ``CREATE OR REPLACE TEMP MACRO`` statement of ``sql_name``: ``select`` over the chosen version's
    ``model`` JSON, for models of ``algorithms`` (which have ``what``); with ``grouped``, over each group's entry
    (``fitted``) of a model per group. ``other`` is the macro of the other kind (per group, or not).

    Its parameters are named so that no registry column shadows them. A name or version not stored, a model of
    another algorithm, or of the other kind, is an error naming what to do, not an empty table.
    """
    listed = ", ".join(f"'{a}'" for a in algorithms)
    source = "chosen LEFT JOIN json_each(chosen.model->'$.groups') AS fitted ON true" if grouped else "chosen"
    fitted = "fitted.value" if grouped else "model"
    if grouped:
        kind = (
            "WHEN (model->'$.groups') IS NULL THEN error('model ''' || model_name || ''' is one model, not one per "
            f"group: ' || '{other}(name) lists its {what}.')"
        )
    else:
        kind = (
            "WHEN (model->'$.groups') IS NOT NULL THEN error('model ''' || model_name || ''' is one model per value "
            f"of ' || (model->>'$.group_by') || ': {other}(name) lists each group''s {what}.')"
        )
    return f"""CREATE OR REPLACE TEMP MACRO {sql_name}(model_name, model_version := NULL) AS TABLE
WITH versions AS (
    SELECT m.version, m.algorithm, m.model, m.preprocessing FROM ilargi.models m WHERE m.name = lower(model_name)
),
span AS (SELECT count(*) AS stored, max(version) AS newest FROM versions),
chosen AS (
    SELECT span.stored, span.newest, v.algorithm, v.model, v.preprocessing
    FROM span LEFT JOIN versions v ON v.version = coalesce(model_version, span.newest)
)
SELECT {select}
FROM {source}
WHERE CASE
    WHEN model_name IS NULL THEN error('model name NULL is not a plain identifier: {sql_name} takes the name of a '
        || 'stored model (e.g. {sql_name}(''delay_model'')); SELECT name FROM ilargi.current_models lists them.')
    WHEN stored = 0 THEN error('no model named ''' || model_name || ''' is stored: '
        || 'SELECT name FROM ilargi.current_models lists those that are.')
    WHEN model IS NULL THEN error('model ''' || model_name || ''' has no version ' || model_version
        || ': its versions run from 1 to ' || newest || '.')
    WHEN algorithm NOT IN ({listed}) THEN error('model ''' || model_name || ''' is a ' || algorithm
        || ' model, which has no {what}: {sql_name} reads {_in_words(algorithms)} models '
        || '(ilargi.models.model holds every model''s fitted values as JSON).')
    {kind}
    WHEN json_type({fitted}->'$.intercept_') = 'ARRAY' THEN error('model ''' || model_name || ''' is a multinomial '
        || 'logistic regression (a row of coefficients per class), which {sql_name} does not list: read coef_, '
        || 'intercept_ and classes_ in ilargi.models.model (JSON), or model.coef_ in Python.')
    ELSE true
END"""


# SQL name -> its CREATE statement: the table macros ``install`` adds beside the scalar functions.
TABLE_MACROS: dict[str, str] = {
    "ilargi_coefficients": model_table_macro(
        "ilargi_coefficients", _COEFFICIENTS, WITH_COEFFICIENTS, "coefficients", "ilargi_group_coefficients"
    ),
    "ilargi_importances": model_table_macro(
        "ilargi_importances", _IMPORTANCES, WITH_IMPORTANCES, "importances", "ilargi_group_importances"
    ),
    "ilargi_group_coefficients": model_table_macro(
        "ilargi_group_coefficients",
        _GROUP_COEFFICIENTS,
        WITH_COEFFICIENTS,
        "coefficients",
        "ilargi_coefficients",
        grouped=True,
    ),
    "ilargi_group_importances": model_table_macro(
        "ilargi_group_importances",
        _GROUP_IMPORTANCES,
        WITH_IMPORTANCES,
        "importances",
        "ilargi_importances",
        grouped=True,
    ),
}


def _no_registry(sql_name: str) -> str:
    """What a macro is where no registry can be read (a read-only database without one): an error saying why."""
    return f"""CREATE OR REPLACE TEMP MACRO {sql_name}(model_name, model_version := NULL) AS TABLE
SELECT NULL::VARCHAR AS feature
WHERE error('this database has no model registry (schema ilargi), so no model is stored in it: train one with '
    || 'ilargi_train on a database opened for writing.')"""


def register_table_macros(con: duckdb.DuckDBPyConnection) -> None:
    """Create the table macros on ``con`` (TEMP: per connection, as the scalar functions' names are)."""
    for sql_name, statement in TABLE_MACROS.items():
        try:
            con.execute(statement)
        except duckdb.CatalogException:  # bound when created: ilargi.models is missing (read-only, never installed)
            con.execute(_no_registry(sql_name))
