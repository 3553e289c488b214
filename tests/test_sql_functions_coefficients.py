"""ilargi_coefficients and ilargi_importances (their contract: sql/test/coefficients.test): the rows are the
trained model's numbers, and a database without a registry says why it has none."""

from __future__ import annotations

import duckdb
import pytest

import ilargi_db


def test_the_rows_are_the_models_coefficients_by_its_column_names():
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE t AS SELECT range * 1.0 AS x, ['a', 'b', 'c'][range % 3 + 1] AS kind, range % 4 = 0 AS y "
        "FROM range(60)"
    )
    model = ilargi_db.train(con, "SELECT x, kind, y FROM t", "y", "logistic_regression", backend="numpy")
    ilargi_db.save_model(con, "quarter", model)
    rows = con.execute("SELECT feature, coefficient FROM ilargi_coefficients('quarter')").fetchall()
    names = ["(intercept)", *model.feature_names_in_]
    assert rows == list(zip(names, [model.intercept_, *model.coef_.tolist()]))


def test_the_importances_are_the_boosted_models():
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE t AS SELECT range * 1.0 AS x, (range * 7 % 5) * 1.0 AS z, range * 2.0 - z AS y FROM range(60)"
    )
    model = ilargi_db.train(con, "SELECT x, z, y FROM t", "y", "gradient_boosting", n_estimators=5, backend="numpy")
    ilargi_db.save_model(con, "boost", model)
    rows = con.execute("SELECT feature, importance FROM ilargi_importances('boost')").fetchall()
    assert rows == list(zip(model.feature_names_in_, model.feature_importances_.tolist()))


@pytest.mark.parametrize("function", ["ilargi_coefficients", "ilargi_importances"])
def test_a_read_only_database_without_a_registry_says_so(tmp_path, function):
    path = str(tmp_path / "plain.db")
    duckdb.connect(path).execute("CREATE TABLE t AS SELECT 1 AS x").close()
    con = ilargi_db.connect(path, read_only=True)
    with pytest.raises(duckdb.InvalidInputException, match="this database has no model registry"):
        con.execute(f"SELECT * FROM {function}('any')").fetchall()
