"""The oracle: the same query materialized by DuckDB, as a NumPy matrix.

A NULL in the materialized join is a row an outer join left empty (the test
schemas store no NULL feature values), which the normalized matrix reads as 0.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow.compute as pc


def materialized(con: duckdb.DuckDBPyConnection, query: str, target: str | None = None):
    table = con.sql(query).to_arrow_table()
    names = [n for n in table.column_names if n != target]
    columns = [pc.cast(table.column(n), "float64").to_numpy(zero_copy_only=False) for n in names]
    T = np.column_stack(columns) if columns else np.zeros((table.num_rows, 0))
    T = np.nan_to_num(T, nan=0.0)
    y = None
    if target is not None:
        y = pc.cast(table.column(target), "float64").to_numpy(zero_copy_only=False)
    return T, y


def assert_close(actual, expected, rtol: float = 1e-9) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    finite = np.isfinite(expected)
    scale = np.max(np.abs(expected[finite])) if finite.any() else 1.0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * max(scale, 1.0), equal_nan=True)


def oracle_matrix(con, query: str, target: str | None):
    """The join as scikit-learn users build it: materialize, impute means, one-hot text (sorted, NULL last)."""
    return encoded_table(con.sql(query).to_arrow_table(), target)


def encoded_table(table, target: str | None):
    """An Arrow table's rows with a label (when ``target``), numbers imputed by their mean, text one-hot."""
    if target is not None:  # rows without a label are dropped before anything is learned
        labels = pc.cast(table.column(target), "float64").to_numpy(zero_copy_only=False)
        table = table.filter(~np.isnan(labels))
    columns, y = [], None
    for name, column in zip(table.column_names, table.columns):
        if name == target:
            y = pc.cast(column, "float64").to_numpy(zero_copy_only=False)
            continue
        if column.type in ("string", "large_string", "bool") or str(column.type).startswith("dictionary"):
            values = pc.cast(column, "string").to_pylist()
            labels = sorted({v for v in values if v is not None})
            columns += [[float(v == label) for v in values] for label in labels]
            if None in values:
                columns.append([float(v is None) for v in values])
        else:
            values = pc.cast(column, "float64").to_numpy(zero_copy_only=False)
            mean = np.nanmean(values) if (~np.isnan(values)).any() else 0.0
            columns.append(np.where(np.isnan(values), mean, values))
    return (np.column_stack(columns) if columns else np.zeros((table.num_rows, 0))), y
