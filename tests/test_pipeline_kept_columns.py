"""A query to score may select columns that are not the model's features (an id, a date): they are kept.

``predict``, ``predict_proba`` and ``evaluate`` read the model's features by name, in any order; ``predict(...,
keep=True)`` returns the other columns beside the prediction, row for row, and the SQL macro's query keeps them.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

import ilargi_db
from ilargi_db.errors import IlargiError

TRAINING = "SELECT s.price, s.qty, p.weight, p.kind, s.y FROM sales s JOIN products p ON s.pid = p.pid"
# The features, each also copied under another name: the copies are kept, so each row's prediction can be checked
# against the model's own predict on the kept values.
WITH_COPIES = (
    "SELECT s.id, s.day, p.weight AS weight_copy, s.qty, s.price AS price_copy, p.kind, s.qty AS qty_copy, "
    "p.kind AS kind_copy, s.price, p.weight FROM sales s JOIN products p ON s.pid = p.pid"
)


@pytest.fixture(scope="module")
def con():
    con = duckdb.connect()
    con.execute("""
        CREATE TABLE products AS SELECT range AS pid, (range % 17) * 0.3 AS weight,
            ['a', 'b', 'c'][range % 3 + 1] AS kind FROM range(60);
        CREATE TABLE sales AS SELECT range AS id, DATE '2026-01-01' + CAST(range % 300 AS INTEGER) AS day,
            range % 60 AS pid, ((range * 7919) % 1000) / 100.0 AS price, range % 5 AS qty,
            ((range * 7919) % 1000) / 100.0 * 2 + (range % 5) - (range % 17) * 0.3 * ((range % 60) % 17) AS y
        FROM range(3000);
    """)
    return con


@pytest.fixture(scope="module", params=["linear_regression", "gradient_boosting"])
def model(request, con):
    params = {"n_estimators": 5} if request.param == "gradient_boosting" else {}
    return ilargi_db.train(con, TRAINING, "y", request.param, **params)


def test_kept_columns_come_back_beside_each_rows_prediction(con, model):
    table = ilargi_db.predict(con, model, WITH_COPIES, keep=True)
    assert table.column_names == ["id", "day", "weight_copy", "price_copy", "qty_copy", "kind_copy", "prediction"]
    rows = table.sort_by("id").to_pydict()
    assert rows["id"] == list(range(3000))
    # Each row's kept values are its own: the copies equal the features the prediction was made from.
    expected = con.execute(TRAINING.replace(", s.y ", ", s.id ") + " ORDER BY s.id").fetchall()
    assert list(zip(rows["price_copy"], rows["qty_copy"], rows["weight_copy"], rows["kind_copy"])) == [
        tuple(row[:4]) for row in expected
    ]
    by_id = ilargi_db.predict(con, model, TRAINING + " ORDER BY s.id")
    np.testing.assert_allclose(rows["prediction"], by_id, rtol=1e-12, atol=1e-12)


def test_other_columns_are_left_out_of_the_predictions_and_the_metrics(con, model):
    ordered = " ORDER BY s.id"
    plain = ilargi_db.predict(con, model, TRAINING + ordered)
    np.testing.assert_array_equal(ilargi_db.predict(con, model, WITH_COPIES + ordered), plain)
    with_id = TRAINING.replace("SELECT ", "SELECT s.id, s.day, ")
    assert ilargi_db.evaluate(con, model, with_id) == ilargi_db.evaluate(con, model, TRAINING)


def test_the_features_are_found_by_name_in_any_order(con, model):
    shuffled = "SELECT p.kind, s.y, p.weight, s.qty, s.price FROM sales s JOIN products p USING (pid) ORDER BY s.id"
    np.testing.assert_array_equal(
        ilargi_db.predict(con, model, shuffled), ilargi_db.predict(con, model, TRAINING + " ORDER BY s.id")
    )


def test_the_macros_query_keeps_every_column_and_orders_by_a_kept_alias(con, model):
    ilargi_db.save_model(con, "kept", model)
    query = (
        "SELECT s.id AS sale, s.day, s.price, s.qty, p.weight, p.kind FROM sales s JOIN products p ON s.pid = p.pid "
        "ORDER BY sale DESC LIMIT 5"
    )
    rows = con.execute(ilargi_db.prediction_sql(con, ilargi_db.load_model(con, "kept"), query)).fetchall()
    assert [row[0] for row in rows] == [2999, 2998, 2997, 2996, 2995]
    last_five = TRAINING.replace("SELECT ", "SELECT s.id, ") + " ORDER BY s.id DESC LIMIT 5"
    expected = ilargi_db.predict(con, model, last_five)
    np.testing.assert_allclose([row[-1] for row in rows], expected, rtol=1e-9)


def test_the_macros_query_reads_the_features_as_written_from_an_unaliased_subquery(con, model):
    """The features in another order than training's, beside a kept id, from a subquery without an alias: the
    macro reads them as the query writes them (the planner's own name for that subquery is not in the query)."""
    ilargi_db.save_model(con, "unaliased", model)
    inner = "SELECT s.id, s.price, s.qty, p.weight, p.kind FROM sales s JOIN products p ON s.pid = p.pid"
    query = f"SELECT id, kind, weight, qty, price FROM ({inner}) ORDER BY id"
    rows = con.execute(ilargi_db.prediction_sql(con, ilargi_db.load_model(con, "unaliased"), query)).fetchall()
    assert [row[0] for row in rows] == list(range(3000))
    expected = ilargi_db.predict(con, model, TRAINING + " ORDER BY s.id")
    np.testing.assert_allclose([row[-1] for row in rows], expected, rtol=1e-9)


def test_no_kept_columns_still_gives_a_table(con, model):
    table = ilargi_db.predict(con, model, TRAINING, keep=True)
    assert table.column_names == ["prediction"] and table.num_rows == 3000


def test_a_missing_feature_is_still_named(con, model):
    with pytest.raises(IlargiError, match="select each of the model.s features, named as in training"):
        ilargi_db.predict(con, model, "SELECT s.id, s.price, s.qty, p.weight FROM sales s JOIN products p USING (pid)")


def test_a_kept_column_named_prediction_is_refused(con, model):
    query = TRAINING.replace("SELECT ", "SELECT s.id AS prediction, ")
    with pytest.raises(IlargiError, match="selects a column named 'prediction'.*rename it"):
        ilargi_db.predict(con, model, query, keep=True)


def test_unaliased_kept_expressions_and_an_order_over_a_kept_alias(con, model):
    query = (
        "SELECT s.id * 2, upper(p.kind), s.id AS sale, s.price, s.qty, p.weight, p.kind "
        "FROM sales s JOIN products p ON s.pid = p.pid ORDER BY -sale LIMIT 3"
    )
    table = ilargi_db.predict(con, model, query, keep=True)
    assert table.column_names == ["s.id * 2", "UPPER(p.kind)", "sale", "prediction"]
    assert table.column("sale").to_pylist() == [2999, 2998, 2997]
    assert table.column("s.id * 2").to_pylist() == [5998, 5996, 5994]
