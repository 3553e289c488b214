"""Per-group models: ``train(..., group_by=...)`` fits one model per value of a column from one read.

Each group's model equals scikit-learn's on that group's rows of the materialized join (encoded with the job's
categories), the factorized and materialized strategies agree, and the stored model's one macro dispatches on
the group, NULL for a group no model was trained for.
"""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pyarrow.compute as pc
import pytest
import sklearn.linear_model
from hypothesis import HealthCheck, assume, given, settings

import ilargi_db
from ilargi_db import IlargiError, PlanError
from ilargi_db.errors import DamagedModelError
from ilargi_db.trained_model import GroupedModel
from tests.oracle import assert_close, encoded_table, materialized
from tests.strategies import schemas

GROUPED = "SELECT f.x, d.kind, d.z, f.store, f.y FROM f JOIN d USING (k)"
FEATURES = "SELECT f.x, d.kind, d.z, f.store FROM f JOIN d USING (k)"


@pytest.fixture()
def stores() -> duckdb.DuckDBPyConnection:
    """Four stores whose target follows a slope and an offset of their own; one row with a NULL store."""
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE d AS SELECT range AS k, ['a','b','c'][range % 3 + 1] AS kind, range * 0.5 AS z FROM range(20)"
    )
    con.execute(
        "CREATE TABLE f AS SELECT range AS id, range % 20 AS k, ['n','s','e','w'][range % 4 + 1] AS store, "
        "(range * 7919 % 1000) / 1000.0 AS x FROM range(2000)"
    )
    con.execute("ALTER TABLE f ADD COLUMN y DOUBLE")
    con.execute("UPDATE f SET y = x * (ascii(store) % 5 + 1) + (k % 3) + ((id * 31) % 17) / 100.0")
    con.execute("INSERT INTO f VALUES (2000, 1, NULL, 0.5, 1.0)")
    return con


def test_each_group_model_equals_scikit_learn_on_its_rows_of_the_join(stores):
    model = ilargi_db.train(stores, GROUPED, "y", group_by="store", alpha=0.5, backend="numpy")
    assert isinstance(model, GroupedModel)
    assert model.groups_ == ["e", "n", "s", "w"] and model.group_by_ == "store"
    assert model.ungrouped_rows_ == 1 and model.n_rows_ == 2000
    for store, one in model.models_.items():
        one_hot = "d.kind = 'a' AS a, d.kind = 'b' AS b, d.kind = 'c' AS c"
        rows = f"SELECT f.x, {one_hot}, d.z, f.y FROM f JOIN d USING (k) WHERE store = '{store}'"
        T, y = materialized(stores, rows, "y")
        reference = sklearn.linear_model.Ridge(alpha=0.5).fit(T, y)
        assert_close(one.coef_, reference.coef_, rtol=1e-8)
        assert_close(np.array(one.intercept_), np.array(reference.intercept_), rtol=1e-8)
        assert one.n_rows_ == 500


def test_a_group_model_equals_a_training_on_where_group_equals_its_value(stores):
    model = ilargi_db.train(stores, GROUPED, "y", group_by="store", backend="numpy")
    alone = ilargi_db.train(
        stores, "SELECT f.x, d.kind, d.z, f.y FROM f JOIN d USING (k) WHERE f.store = 's'", "y", backend="numpy"
    )
    assert_close(model.models_["s"].coef_, alone.coef_, rtol=1e-9)
    assert model.models_["s"].training_metrics_ == pytest.approx(alone.training_metrics_)


@pytest.mark.parametrize(
    "algorithm, target, params",
    [
        ("linear_regression", "y", {}),
        ("logistic_regression", "y > 2", {"tol": 1e-10, "max_iter": 500}),
        ("kmeans", None, {"n_clusters": 2, "random_state": 0}),
        ("gradient_boosting", "y", {"n_estimators": 5, "random_state": 0}),
    ],
)
def test_factorized_and_materialized_grouped_models_agree(stores, algorithm, target, params):
    label = "" if target is None else f", {target} AS label"
    query = f"SELECT f.x, d.kind, d.z, f.store{label} FROM f JOIN d USING (k)"
    target = None if target is None else "label"
    kwargs = {"group_by": "store", "backend": "numpy", **params}
    fact = ilargi_db.train(stores, query, target, algorithm, strategy="factorized", **kwargs)
    mat = ilargi_db.train(stores, query, target, algorithm, strategy="materialized", **kwargs)
    assert fact.groups_ == mat.groups_ == ["e", "n", "s", "w"]
    predicted = ilargi_db.predict(stores, fact, FEATURES)
    if predicted.dtype == object:  # a BOOLEAN target's classes: the row of the NULL store has none
        assert predicted[-1] is None and {type(c) for c in predicted[:-1]} == {bool}
        assert predicted.tolist() == ilargi_db.predict(stores, mat, FEATURES).tolist()
        return
    assert_close(predicted, ilargi_db.predict(stores, mat, FEATURES), rtol=1e-6)
    assert np.isnan(predicted[-1]) and np.isfinite(predicted[:-1]).all()  # the row of the NULL store


def test_the_stored_model_has_one_macro_dispatching_on_the_group(stores):
    model = ilargi_db.train(stores, GROUPED, "y", group_by="store", backend="numpy")
    ilargi_db.save_model(stores, "per_store", model)
    assert model.macros_ == ["per_store_predict"]
    in_sql = stores.sql(
        "SELECT per_store_predict(f.x, d.kind, d.z, f.store) FROM f JOIN d USING (k) ORDER BY f.id"
    ).fetchnumpy()
    in_python = ilargi_db.predict(stores, model, FEATURES + " ORDER BY f.id")
    scored = list(in_sql.values())[0]
    assert_close(np.asarray(scored[:-1], dtype=float), in_python[:-1], rtol=1e-12)
    assert scored.mask[-1] if np.ma.isMaskedArray(scored) else scored[-1] is None  # NULL store: NULL
    unseen = stores.sql("SELECT per_store_predict(0.5, 'a', 1.0, 'nowhere')").fetchall()
    assert unseen == [(None,)]
    assert ilargi_db.prediction_sql(stores, model, FEATURES).count("per_store_predict") == 1


def test_a_grouped_model_reads_back_from_the_registry_and_a_file(stores, tmp_path):
    model = ilargi_db.train(stores, GROUPED, "y", "linear_regression", group_by="store", backend="numpy")
    ilargi_db.save_model(stores, "per_store", model)
    loaded = ilargi_db.load_model(stores, "per_store")
    model.save(tmp_path / "m.json")
    from_file = ilargi_db.TrainedModel.load(tmp_path / "m.json")
    for other in (loaded, from_file):
        assert isinstance(other, GroupedModel) and other.groups_ == model.groups_
        assert_close(ilargi_db.predict(stores, other, FEATURES), ilargi_db.predict(stores, model, FEATURES))


def test_a_damaged_grouped_record_is_refused(stores):
    model = ilargi_db.train(stores, GROUPED, "y", group_by="store", backend="numpy")
    record = model.to_record()
    fitted = json.loads(record["model"])
    for damage in ({"groups": []}, {"groups": {"e": {"groups": {}}}}, {"groups": {}}):
        with pytest.raises(DamagedModelError):
            ilargi_db.TrainedModel.from_record({**record, "model": json.dumps({**fitted, **damage})})


def test_evaluate_reports_each_group_on_its_rows(stores):
    model = ilargi_db.train(stores, GROUPED, "y", group_by="store", backend="numpy")
    stores.execute("INSERT INTO f VALUES (2001, 1, 'x', 0.5, 1.0)")  # a store trained on by no model
    found = ilargi_db.evaluate(stores, model, GROUPED)
    assert sorted(found["groups"]) == ["e", "n", "s", "w"]
    assert found["rows"] == 2000 and found["rows_without_model"] == 2
    assert all(metrics["r2"] > 0.99 and metrics["rows"] == 500 for metrics in found["groups"].values())


def test_in_sql_group_by_is_an_option_and_the_summary_counts_the_groups(stores):
    summary = json.loads(
        stores.sql(
            "SELECT ilargi_train('per_store', 'linear_regression', $$"
            + GROUPED
            + "$$, 'y', '{\"group_by\": \"store\"}')"
        ).fetchall()[0][0]
    )
    assert summary["groups"] == 4 and summary["group_by"] == "store" and summary["rows"] == 2000


@pytest.mark.parametrize(
    "group_by, message",
    [
        ("shop", "group_by 'shop' is not a column of the query's SELECT list"),
        ("y", "group_by 'y' is the target"),
        (3, "group_by must be the name of a SELECT column"),
    ],
)
def test_a_group_by_that_names_no_other_column_is_refused(stores, group_by, message):
    with pytest.raises(PlanError, match=message):
        ilargi_db.train(stores, GROUPED, "y", group_by=group_by)


def test_a_grouped_job_that_would_stream_or_run_on_a_cluster_is_refused_before_reading(stores):
    with pytest.raises(IlargiError, match="group_by trains on rows held in memory"):
        ilargi_db.train(stores, GROUPED, "y", group_by="store", memory_budget="30KB")
    with pytest.raises(IlargiError, match="on a cluster"):
        ilargi_db.train(stores, GROUPED, "y", group_by="store", cluster="tcp://127.0.0.1:1")


def test_a_group_that_cannot_be_fitted_is_named(stores):
    query = "SELECT f.x, d.kind, f.store, f.store = 'e' AS label FROM f JOIN d USING (k) WHERE f.store IS NOT NULL"
    with pytest.raises(IlargiError, match="group store = 'e'"):  # one class in every group
        ilargi_db.train(stores, query, "label", "logistic_regression", group_by="store")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas())
def test_grouped_ridge_on_random_schemas(schema):
    con = duckdb.connect()
    schema.load(con)
    group = "(CAST(round(f.y * 1000) AS BIGINT) % 3)"
    query = schema.query.replace(" FROM f ", f", {group} AS grp FROM f ", 1)
    model = None
    try:
        model = ilargi_db.train(con, query, "y", group_by="grp", alpha=0.5, backend="numpy")
    except IlargiError as err:
        assume("returned no rows" not in str(err))
        raise
    table = con.sql(query).to_arrow_table()
    table = table.filter(pc.is_valid(table.column("y")))  # the rows trained on: those with a label
    groups = np.array(pc.cast(table.column("grp"), "string").to_pylist(), dtype=object)
    T, y = encoded_table(table.drop_columns(["grp"]), "y")  # encoded as the job encodes: over all the rows
    for label, one in model.models_.items():
        rows = groups == label
        reference = sklearn.linear_model.Ridge(alpha=0.5).fit(T[rows], y[rows])
        assert_close(one.coef_, reference.coef_, rtol=1e-6)
        assert_close(np.array(one.intercept_), np.array(reference.intercept_), rtol=1e-6)


def test_groups_whose_models_answer_different_questions_are_refused(stores):
    # Store 'e' has a 0/1 label, the others a continuous one: "auto" would settle on two objectives.
    query = "SELECT f.x, f.store, CASE WHEN f.store = 'e' THEN (f.x > 0.5)::INTEGER ELSE f.y END AS label FROM f"
    with pytest.raises(IlargiError, match="learned different objective.*pass objective="):
        ilargi_db.train(stores, query, "label", "gradient_boosting", group_by="store", n_estimators=3)
    # Two classes in one store, three in another: one macro cannot give both.
    query = "SELECT f.x, f.store, CASE WHEN f.store = 'e' THEN (f.id // 4) % 3 ELSE (f.id // 4) % 2 END AS label FROM f"
    with pytest.raises(IlargiError, match="learned different classes"):
        ilargi_db.train(stores, query, "label", "logistic_regression", group_by="store")


@pytest.mark.parametrize("strategy", ["factorized", "materialized"])
def test_a_group_left_without_rows_is_named_in_the_warnings(stores, strategy):
    stores.execute("INSERT INTO f VALUES (2002, 1, 'lonely', 0.5, NULL)")  # its one row has no label
    model = ilargi_db.train(stores, GROUPED, "y", group_by="store", strategy=strategy, backend="numpy")
    assert "lonely" not in model.groups_ and model.unlabelled_rows_ == 1
    assert any("'lonely' has no model" in w for w in model.warnings_)


def test_the_group_column_keeps_its_type(stores):
    model = ilargi_db.train(stores, "SELECT f.x, f.k AS kk, f.y FROM f", "y", group_by="kk", backend="numpy")
    with pytest.raises(PlanError, match="has type DOUBLE in this query, but the model was trained on BIGINT"):
        ilargi_db.predict(stores, model, "SELECT f.x, f.k::DOUBLE AS kk FROM f")
    ilargi_db.save_model(stores, "per_k", model)
    # The macro compares the group as training cast it: 3.0 is group '3'.
    assert stores.sql("SELECT per_k_predict(0.5, 3.0) = per_k_predict(0.5, 3)").fetchall() == [(True,)]
    with pytest.raises(IlargiError, match="no row of the query has a group the model was trained for"):
        ilargi_db.evaluate(stores, model, "SELECT f.x, f.k + 100 AS kk, f.y FROM f")


def test_a_model_per_group_has_no_single_fitted_attribute(stores):
    model = ilargi_db.train(stores, GROUPED, "y", group_by="store", backend="numpy")
    with pytest.raises(AttributeError, match=r"one per group, models_\[group\].coef_"):
        model.coef_  # noqa: B018
    X, _ = ilargi_db.normalize(stores, FEATURES.replace(", f.store", ""), impute=True)
    assert np.isnan(model.predict(X[:2], [None, "nowhere"])).all()


@pytest.mark.parametrize("group_by", ["", "x"])
def test_a_record_grouped_by_nothing_or_by_a_feature_is_damaged(stores, group_by):
    model = ilargi_db.train(stores, GROUPED, "y", group_by="store", backend="numpy")
    record = model.to_record()
    fitted = json.loads(record["model"])
    with pytest.raises(DamagedModelError):
        ilargi_db.TrainedModel.from_record({**record, "model": json.dumps({**fitted, "group_by": group_by})})
