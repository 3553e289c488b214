"""Logistic regression on more than two classes: scikit-learn's multinomial model, over the join unmaterialized."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest
import sklearn.linear_model
from sklearn.metrics import f1_score, log_loss, roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import ilargi_db
from ilargi_db import IlargiError
from ilargi_db.linalg import Block, PartitionedMatrix
from ilargi_db.models import LogisticRegression
from ilargi_db.sql_functions import macros
from tests.test_pipeline import oracle_matrix

TIGHT = {"tol": 1e-10, "max_iter": 1000}
QUERY = "SELECT s.price, h.region, h.size, s.klass FROM sales s JOIN shops h ON s.shop_id = h.shop_id"


def shops_and_sales(n_classes: int, n: int = 600) -> duckdb.DuckDBPyConnection:
    """A fact of sales joined to a dimension of shops (a text column, one-hot encoded); the class depends on both."""
    rng = np.random.default_rng(n_classes)
    con = duckdb.connect()
    shops = {"shop_id": np.arange(20), "region": np.array(["north", "south", "east"])[np.arange(20) % 3]}
    shops["size"] = rng.normal(size=20)
    price = rng.uniform(0, 3, n)
    shop_id = rng.integers(0, 20, n)
    region_effect = (np.arange(20) % 3)[shop_id]
    klass = np.floor(price + region_effect + shops["size"][shop_id] + rng.normal(size=n)).clip(0, n_classes - 1)
    sales = {"id": np.arange(n), "shop_id": shop_id, "price": price, "klass": klass.astype(int)}
    con.register("shops_frame", shops)
    con.register("sales_frame", sales)
    con.execute("CREATE TABLE shops AS SELECT * FROM shops_frame")
    con.execute("CREATE TABLE sales AS SELECT * FROM sales_frame")
    return con


def test_arrays_fit_scikit_learns_multinomial_model():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 5))
    y = np.array(["ant", "bee", "cat"])[np.argmax(X[:, :3] + rng.normal(size=(400, 3)), axis=1)]
    ours = LogisticRegression(C=0.5, **TIGHT).fit(X, y)
    reference = sklearn.linear_model.LogisticRegression(C=0.5, **TIGHT).fit(X, y)
    assert ours.coef_.shape == (3, 5) and ours.intercept_.shape == (3,)
    np.testing.assert_array_equal(ours.classes_, ["ant", "bee", "cat"])
    np.testing.assert_allclose(ours.coef_, reference.coef_, atol=1e-6)
    np.testing.assert_allclose(ours.intercept_, reference.intercept_, atol=1e-6)
    np.testing.assert_allclose(ours.predict_proba(X), reference.predict_proba(X), atol=1e-6)
    np.testing.assert_array_equal(ours.predict(X), reference.predict(X))
    assert ours.loss_curve_[-1] == pytest.approx(log_loss(y, reference.predict_proba(X)), rel=1e-6)


def test_row_partitions_give_the_model_of_the_whole_join():
    rng = np.random.default_rng(3)
    n = 500
    fact = Block(rng.normal(size=(n, 2)), columns=[0, 1])
    dim = Block(rng.normal(size=(7, 2)), columns=[2, 3], index=rng.integers(0, 7, n))
    X = PartitionedMatrix.from_blocks([fact, dim], n_rows=n, rows_per_partition=120, backend="numpy")
    T = X.materialize()
    y = np.argmax(T[:, :3] + rng.normal(size=(n, 3)), axis=1)
    partitioned = LogisticRegression(**TIGHT).fit(X, y)
    whole = LogisticRegression(**TIGHT).fit(T, y)
    np.testing.assert_allclose(partitioned.coef_, whole.coef_, atol=1e-8)
    np.testing.assert_allclose(partitioned.intercept_, whole.intercept_, atol=1e-8)


def test_without_penalty_or_intercept_it_still_matches():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 3))
    y = np.argmax(X @ rng.normal(size=(3, 4)) + 2 * rng.normal(size=(300, 4)), axis=1)
    ours = LogisticRegression(fit_intercept=False, **TIGHT).fit(X, y)
    reference = sklearn.linear_model.LogisticRegression(fit_intercept=False, **TIGHT).fit(X, y)
    np.testing.assert_allclose(ours.coef_, reference.coef_, atol=1e-6)
    np.testing.assert_array_equal(ours.intercept_, np.zeros(4))


@pytest.mark.parametrize("n_classes", [3, 4])
def test_train_over_the_join_matches_scikit_learn_on_the_materialized_join(n_classes):
    con = shops_and_sales(n_classes)
    T, y = oracle_matrix(con, QUERY, "klass")
    reference = sklearn.linear_model.LogisticRegression(**TIGHT).fit(T, y)
    for strategy in ("factorized", "materialized"):
        model = ilargi_db.train(con, QUERY, "klass", "logistic_regression", strategy=strategy, backend="numpy", **TIGHT)
        assert model.strategy_ == strategy
        np.testing.assert_array_equal(model.classes_, np.arange(n_classes))
        np.testing.assert_allclose(model.coef_, reference.coef_, atol=1e-4)
        np.testing.assert_allclose(model.intercept_, reference.intercept_, atol=1e-4)
        proba = reference.predict_proba(T)
        metrics = model.training_metrics_
        assert metrics["log_loss"] == pytest.approx(log_loss(y, proba), rel=1e-5)
        assert metrics["accuracy"] == pytest.approx(np.mean(reference.predict(T) == y))


@pytest.mark.parametrize("strategy", ["factorized", "materialized"])
def test_standardized_it_is_scikit_learns_scaler_and_model_given_back_in_the_columns_units(strategy):
    """standardize=True fits the standardized columns (scikit-learn's StandardScaler, then its LogisticRegression)
    and keeps a row of coefficients and an intercept per class in the columns' own units."""
    con = shops_and_sales(3)
    T, y = oracle_matrix(con, QUERY, "klass")
    reference = make_pipeline(StandardScaler(), sklearn.linear_model.LogisticRegression(**TIGHT)).fit(T, y)
    model = ilargi_db.train(
        con, QUERY, "klass", "logistic_regression", strategy=strategy, backend="numpy", standardize=True, **TIGHT
    )
    assert model.coef_.shape == (3, T.shape[1]) and model.intercept_.shape == (3,)
    np.testing.assert_allclose(model.predict_proba(T), reference.predict_proba(T), atol=1e-6)
    scaler, fitted = reference[0], reference[1]
    np.testing.assert_allclose(model.coef_, fitted.coef_ / scaler.scale_, atol=1e-5)


def test_a_binary_target_keeps_the_binary_model():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 3))
    y = (X[:, 0] + rng.normal(size=200) > 0).astype(int)
    model = LogisticRegression().fit(X, y)
    assert model.coef_.shape == (3,) and isinstance(model.intercept_, float)
    assert model.predict_proba(X).shape == (200, 2)


def test_solvers_other_than_lbfgs_refuse_more_than_two_classes():
    X, y = np.eye(6), np.array([0, 1, 2, 0, 1, 2])
    for solver in ("newton", "duhl"):
        with pytest.raises(IlargiError, match='3 classes is fitted by solver="lbfgs" only'):
            LogisticRegression(solver=solver).fit(X, y)


def test_a_warm_start_is_refused_for_more_than_two_classes():
    X, y = np.eye(6), np.array([0, 1, 2, 0, 1, 2])
    with pytest.raises(IlargiError, match="warm-start the binary model only"):
        LogisticRegression().fit(X, y, coef_init=np.zeros(6))


@pytest.mark.parametrize("inline_categories", [64, 0], ids=["CASE", "lookup"])
def test_sql_macros_give_the_class_and_the_probabilities_predict_gives(inline_categories, monkeypatch):
    monkeypatch.setattr(macros, "INLINE_CATEGORIES", inline_categories)
    con = ilargi_db.install(shops_and_sales(4))
    con.execute(f"SELECT ilargi_train('m', 'logistic_regression', '{QUERY}', 'klass')").fetchall()
    model = ilargi_db.load_model(con, "m")
    assert model.macros_ == ["m_predict", "m_predict_class"]
    scored = con.sql(
        "SELECT m_predict(s.price, h.region, h.size), m_predict_class(s.price, h.region, h.size) "
        "FROM sales s JOIN shops h ON s.shop_id = h.shop_id"
    ).fetchall()
    T, _ = oracle_matrix(con, QUERY, "klass")
    np.testing.assert_allclose(np.array([p for p, _ in scored]), model.predict_proba(T), atol=1e-12)
    np.testing.assert_array_equal(np.array([c for _, c in scored]), model.predict(T))
    assert con.sql("SELECT typeof(m_predict_class(1.0, 'north', 0.5))").fetchall() == [("BIGINT",)]
    with pytest.raises(duckdb.Error, match="multinomial logistic regression .* ilargi.models.model"):
        con.sql("SELECT * FROM ilargi_coefficients('m')").fetchall()


def test_evaluate_reports_macro_averages_and_a_saved_model_loads_the_same(tmp_path):
    con = shops_and_sales(3)
    model = ilargi_db.train(con, QUERY, "klass", "logistic_regression", backend="numpy")
    T, y = oracle_matrix(con, QUERY, "klass")
    proba = model.predict_proba(T)
    guess = model.predict(T)
    found = ilargi_db.evaluate(con, model, QUERY)
    assert found["accuracy"] == pytest.approx(model.training_metrics_["accuracy"])
    assert found["log_loss"] == pytest.approx(log_loss(y, proba))
    assert found["f1"] == pytest.approx(f1_score(y, guess, average="macro"))
    assert found["roc_auc"] == pytest.approx(roc_auc_score(y, proba, multi_class="ovr"))
    model.save(tmp_path / "model.json")
    loaded = ilargi_db.TrainedModel.load(tmp_path / "model.json")
    np.testing.assert_array_equal(loaded.predict_proba(T), proba)
