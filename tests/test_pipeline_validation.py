"""Held-out rows: ``train(..., validation=...)`` fits on a seeded share of the rows and scores the rest (or scores
another query), and says what ``evaluate`` would on them."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pytest
import sklearn.linear_model
from hypothesis import HealthCheck, assume, given, settings

import ilargi_db
from ilargi_db import IlargiError
from ilargi_db.linalg.row_identity import row_keys
from ilargi_db.pipeline.validation import VALIDATION_SEED, held_out_rows
from tests.oracle import assert_close, oracle_matrix
from tests.strategies import schemas

QUERY = "SELECT f.x, d.kind, f.y FROM f JOIN d USING (k)"


@pytest.fixture()
def con():
    con = ilargi_db.connect()
    con.execute("CREATE TABLE d AS SELECT range AS k, ['a','b','c'][range % 3 + 1] AS kind FROM range(10)")
    con.execute(
        "CREATE TABLE f AS SELECT range AS id, range % 10 AS k, (range * 7919 % 1000) / 100.0 AS x, "
        "(range * 7919 % 1000) / 50.0 + (range % 10) % 3 + ((range * 31) % 17) / 10.0 AS y FROM range(1000)"
    )
    return con


def test_the_model_is_fitted_on_the_rows_not_held_out_and_scored_on_the_others(con):
    model = ilargi_db.train(con, QUERY, "y", alpha=0.5, validation=0.25, backend="numpy")
    T, y = oracle_matrix(con, QUERY, "y")  # the rows, in any order: each is held out by its values
    train, held = held_out_rows(row_keys(T, [y], VALIDATION_SEED), 0.25)
    assert len(held) == 250 and len(np.intersect1d(train, held)) == 0
    reference = sklearn.linear_model.Ridge(alpha=0.5).fit(T[train], y[train])
    assert_close(model.coef_, reference.coef_, rtol=1e-8)
    assert model.n_rows_ == 750 and model.validation_metrics_["rows"] == 250
    assert model.validation_metrics_["r2"] == pytest.approx(reference.score(T[held], y[held]), rel=1e-9)


def test_the_same_rows_are_held_out_on_every_run(con):
    first = ilargi_db.train(con, QUERY, "y", validation=0.2, reuse=False, backend="numpy")
    again = ilargi_db.train(con, QUERY, "y", validation=0.2, reuse=False, backend="numpy")
    assert first.validation_metrics_ == again.validation_metrics_


def _same_fit(first, again) -> None:
    assert again.validation_metrics_ == pytest.approx(first.validation_metrics_, rel=1e-9)
    assert_close(again.coef_, first.coef_, rtol=1e-9)


def test_the_held_out_rows_are_chosen_by_their_values_not_by_the_order_they_arrive_in(con):
    """The same rows stored in another order (as a Parquet scan without insertion order, DuckDB's threads or ties
    in ORDER BY deliver them) hold out the same rows: the same fit and the same scores."""
    con.execute("CREATE TABLE g AS SELECT * FROM f ORDER BY (id * 389) % 1000")  # the rows shuffled
    first = ilargi_db.train(con, QUERY, "y", validation=0.2, reuse=False, backend="numpy")
    shuffled = ilargi_db.train(
        con, QUERY.replace("FROM f", "FROM g AS f"), "y", validation=0.2, reuse=False, backend="numpy"
    )
    _same_fit(first, shuffled)


def test_ties_in_order_by_hold_out_the_same_rows(con):
    con.execute("CREATE TABLE g AS SELECT * FROM f ORDER BY id DESC")
    tied = QUERY + " ORDER BY f.k"  # a hundred rows per key: their order among themselves is the table's
    first = ilargi_db.train(con, tied, "y", validation=0.2, reuse=False, backend="numpy")
    reversed_ = ilargi_db.train(
        con, tied.replace("FROM f", "FROM g AS f"), "y", validation=0.2, reuse=False, backend="numpy"
    )
    _same_fit(first, reversed_)


def test_a_view_over_parquet_without_insertion_order_holds_out_the_same_rows_on_any_threads(con, tmp_path):
    for name, order in (("a", "id"), ("b", "(id * 389) % 1000")):
        con.execute(f"COPY (SELECT * FROM f ORDER BY {order}) TO '{tmp_path / name}.parquet' (ROW_GROUP_SIZE 128)")
    con.execute("SET preserve_insertion_order = false")
    found = []
    for name, threads in (("a", 1), ("a", 2), ("b", 2)):
        con.execute(f"SET threads = {threads}")
        con.execute(f"CREATE OR REPLACE VIEW pf AS SELECT * FROM read_parquet('{tmp_path / name}.parquet')")
        query = QUERY.replace("FROM f", "FROM pf AS f")
        found.append(ilargi_db.train(con, query, "y", validation=0.2, reuse=False, backend="numpy"))
    for model in found[1:]:
        _same_fit(found[0], model)


def test_a_validation_query_is_scored_as_evaluate_scores_it(con):
    later = QUERY + " WHERE f.id >= 800"
    model = ilargi_db.train(con, QUERY + " WHERE f.id < 800", "y", validation=later, backend="numpy")
    assert model.validation_metrics_ == ilargi_db.evaluate(con, model, later)
    assert model.validation_metrics_["rows"] == 200


def test_a_validation_query_selects_the_features_by_name_and_may_select_other_columns(con):
    later = "SELECT f.id, d.kind, f.y, f.x FROM f JOIN d USING (k) WHERE f.id >= 800"  # as evaluate takes it
    model = ilargi_db.train(con, QUERY + " WHERE f.id < 800", "y", validation=later, backend="numpy")
    assert model.validation_metrics_ == ilargi_db.evaluate(con, model, later)
    assert model.validation_metrics_["rows"] == 200


def test_a_model_per_group_reports_each_group_on_its_held_out_rows(con):
    query = "SELECT f.x, d.kind, f.k % 2 AS half, f.y FROM f JOIN d USING (k)"
    model = ilargi_db.train(con, query, "y", group_by="half", validation=0.3, backend="numpy")
    found = model.validation_metrics_
    assert sorted(found["groups"]) == ["0", "1"] and found["rows"] == 300


def test_in_sql_validation_is_an_option_and_the_summary_reports_it(con):
    summary = json.loads(
        con.sql(
            f"SELECT ilargi_train('m', 'linear_regression', $${QUERY}$$, 'y', '{{\"validation\": 0.2}}')"
        ).fetchall()[0][0]
    )
    assert summary["rows"] == 800 and summary["validation_metrics"]["rows"] == 200
    assert ilargi_db.load_model(con, "m").validation_metrics_ == summary["validation_metrics"]


@pytest.mark.parametrize("validation", [0, 1, 1.5, -0.1, True, "", [0.2], np.float32(2.0)])
def test_a_validation_that_is_no_share_or_query_is_refused_before_anything_is_read(con, validation):
    with pytest.raises(IlargiError, match="validation must be the share of rows to hold out"):
        ilargi_db.train(con, "SELECT no_such_column FROM nowhere", "y", validation=validation)


def test_a_share_that_leaves_no_rows_on_one_side_is_refused(con):
    with pytest.raises(IlargiError, match="leaves no rows to score"):
        ilargi_db.train(con, QUERY + " WHERE f.id < 3", "y", validation=0.1)


def test_a_streamed_job_cannot_hold_rows_out(con):
    with pytest.raises(IlargiError, match="a validation share trains on rows held in memory"):
        ilargi_db.train(con, QUERY, "y", validation=0.2, memory_budget="24KB")


def test_the_materialized_join_holds_out_the_rows_the_factorized_read_does(con):
    """Its row order changes between runs; the held-out rows are chosen by their values, so they are the same."""
    factorized = ilargi_db.train(con, QUERY, "y", validation=0.2, strategy="factorized", reuse=False, backend="numpy")
    joined = ilargi_db.train(con, QUERY, "y", validation=0.2, strategy="materialized", reuse=False, backend="numpy")
    assert joined.strategy_ == "materialized"
    _same_fit(factorized, joined)
    assert ilargi_db.train(con, QUERY, "y", validation=np.float32(0.2), backend="numpy").n_rows_ == 800


@pytest.mark.parametrize(
    "validation, message",
    [
        ("SELECT f.x, d.kind, f.y FROM nowhere", "the validation query"),
        ("SELECT f.x, f.y FROM f", "selects the features x, and the training query x, kind"),
        ("SELECT f.x, d.kind FROM f JOIN d USING (k)", "does not select the target 'y'"),
        ("DELETE FROM f", "DELETE"),
        ("0.2", "a number written as text: pass 0.2"),
    ],
)
def test_a_validation_query_is_planned_before_anything_is_read(con, validation, message):
    with pytest.raises(IlargiError, match=message):
        ilargi_db.train(con, QUERY, "y", validation=validation)
    assert con.sql("SELECT count(*) FROM f").fetchall() == [(1000,)]


def test_explain_says_what_a_validation_share_changes_and_checks_a_validation_query(con):
    explanation = ilargi_db.explain(con, QUERY, "y", validation=0.2)
    assert any("validation=0.2" in r and "a hash of its values" in r for r in explanation.reasons)
    with pytest.raises(IlargiError, match="does not select the target"):
        ilargi_db.explain(con, QUERY, "y", validation="SELECT f.x, d.kind FROM f JOIN d USING (k)")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas())
def test_held_out_rows_on_random_schemas(schema):
    """The held-out rows are those of the smallest keys of their values, as the oracle's matrix gives them."""
    con = duckdb.connect()
    schema.load(con)
    T, y = oracle_matrix(con, schema.query, "y")
    assume(len(y) >= 4)
    model = ilargi_db.train(con, schema.query, "y", alpha=0.5, validation=0.25, backend="numpy")
    train, held = held_out_rows(row_keys(T, [y], VALIDATION_SEED), 0.25)
    reference = sklearn.linear_model.Ridge(alpha=0.5).fit(T[train], y[train])
    assert_close(model.coef_, reference.coef_, rtol=1e-6)
    assert model.validation_metrics_["rmse"] == pytest.approx(
        float(np.sqrt(np.mean((reference.predict(T[held]) - y[held]) ** 2))), rel=1e-6, abs=1e-9
    )
