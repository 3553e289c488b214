"""The per-connection settings that change what a query means, declared once.

Two parts read them: the SQL functions carry them from the caller's connection to the one they work on
(``sql_functions.session``), and the artifact store keys every reused read by their values
(``reuse.fingerprint``), so a read under one value is never reused under another. Settings that change only
how fast a query runs, what it prints or the parser's dialect are not here.
"""

from __future__ import annotations

MEANING: tuple[str, ...] = (
    "TimeZone",  # TIMESTAMPTZ's fields, casts and text (hour(ts), ts::DATE)
    "Calendar",
    "integer_division",  # a / b of integers: an integer or a DOUBLE
    "default_collation",  # comparisons, DISTINCT, joins and ORDER BY on text
    "default_order",  # ORDER BY without ASC/DESC (a LIMIT's rows)
    "default_null_order",  # ORDER BY's NULLs first or last (a LIMIT's rows)
    "ieee_floating_point_ops",  # 1.0 / 0: Infinity, or an error or NULL (below)
    "error_on_division_by_zero",
    "order_by_non_integer_literal",  # ORDER BY 'x': an error or a constant
    "scalar_subquery_error_on_multiple_rows",  # (SELECT ...) of several rows: an error or its first
    "disable_timestamptz_casts",
    "preserve_identifier_case",  # the output names: the features' names
    "file_search_path",  # where read_csv('f.csv') looks
    "home_directory",  # what ~ stands for in a path
    "binary_as_string",  # Parquet BINARY read as VARCHAR or BLOB
)


def current_values_sql(names: tuple[str, ...]) -> str:
    """A SQL expression: a JSON object of each of ``names`` and its value in the session (as text).
    ``current_setting``, qualified: ``duckdb_settings()`` leaves some out (error_on_division_by_zero), and a
    caller's macro of the name must not answer for DuckDB."""
    pairs = ", ".join(f"'{n}', CAST(system.main.current_setting('{n}') AS VARCHAR)" for n in names)
    return f"system.main.json_object({pairs})"


__all__ = ["MEANING", "current_values_sql"]
