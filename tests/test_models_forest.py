"""Random forests: scikit-learn's conventions, both strategies growing identical forests over random joins, the
bootstrap and the feature draws (kernels against their references, the same forest in any row order), held-out
quality against scikit-learn's RandomForest on the materialized join, the out-of-bag score, and the SQL macros
equal to Python's predict."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.utils.estimator_checks import parametrize_with_checks

import ilargi_db
from ilargi_db import RandomForestClassifier, RandomForestRegressor
from ilargi_db.backend.parallel import kernel_threads
from ilargi_db.backend.tree_grower import poisson_weights, poisson_weights_reference
from ilargi_db.backend.tree_split import draw_features
from ilargi_db.models import RandomForest
from tests.tree_strategies import assert_same_trees, load, train_both, tree_schemas


@parametrize_with_checks([RandomForestRegressor(n_estimators=5), RandomForestClassifier(n_estimators=5)])
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


# -- the draws ------------------------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 2**63 - 1),
    st.sampled_from([0, 1, 50, 200_000]),
    st.sampled_from([0.3, 1.0]),
    st.sampled_from([1, 2]),
)
def test_the_poisson_bootstrap_kernel_equals_its_reference(seed, n, rate, threads):
    keys = np.random.default_rng(seed % 1000).integers(0, 2**63, n, dtype=np.uint64)
    with kernel_threads(threads):
        fused = poisson_weights(keys, seed, rate)
    np.testing.assert_array_equal(fused, poisson_weights_reference(keys, seed, rate))


def test_the_poisson_bootstrap_draws_counts_of_its_mean():
    counts = poisson_weights(np.arange(200_000, dtype=np.uint64), 7, 1.0)
    assert counts.mean() == pytest.approx(1.0, abs=0.01)
    assert (counts == 0).mean() == pytest.approx(np.exp(-1.0), abs=0.01)  # the out-of-bag share of a bootstrap


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**62), st.integers(0, 1000), st.integers(1, 40), st.integers(1, 45))
def test_a_node_draws_exactly_its_number_of_features_and_the_same_each_time(seed, node, n_features, n_pick):
    allowed, again = np.empty(n_features, np.bool_), np.empty(n_features, np.bool_)
    draw_features(seed, node, n_pick, allowed)
    draw_features(seed, node, n_pick, again)
    assert allowed.sum() == min(n_pick, n_features)
    np.testing.assert_array_equal(allowed, again)


def test_each_feature_is_drawn_equally_often():
    allowed, seen = np.empty(10, np.bool_), np.zeros(10)
    for node in range(20_000):
        draw_features(3, node, 3, allowed)
        seen += allowed
    np.testing.assert_allclose(seen / 20_000, 0.3, atol=0.015)


# -- factorized == materialized, row order ----------------------------------------------------------------------


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tree_schemas(),
    st.fixed_dictionaries(
        {
            "n_estimators": st.integers(1, 4),
            "max_leaves": st.integers(2, 8),
            "max_depth": st.sampled_from([None, 2]),
            "min_samples_leaf": st.integers(1, 3),
            "max_features": st.sampled_from([None, 1, 0.5]),
            "bootstrap": st.booleans(),
            "max_bins": st.sampled_from([2, 5, 255]),
            "random_state": st.just(3),
        }
    ),
)
def test_both_strategies_grow_the_same_forest(schema, params):
    tables, query, kind = schema
    con = duckdb.connect()
    load(con, tables)
    if con.execute(f"SELECT count(DISTINCT y) FROM ({query})").fetchone()[0] < 2:
        return  # an inner join that matched nothing (or rows of one value): nothing to train on
    if kind == "three-class":
        params = {**params, "objective": "gini"}
    factorized, materialized = train_both(con, query, "y", "random_forest", **params)
    assert_same_trees(factorized, materialized)
    np.testing.assert_allclose(
        ilargi_db.predict(con, factorized, query), ilargi_db.predict(con, materialized, query), rtol=1e-9, atol=1e-12
    )


def test_the_same_rows_in_another_order_grow_the_same_forest():
    """The bootstrap's counts are drawn from each row's key (its bins and target), not its position."""
    rng = np.random.default_rng(5)
    X, y = rng.normal(size=(3000, 4)), rng.integers(0, 3, 3000)
    X[:300] = X[300:600]  # copies of rows (told apart by their rank among their copies)
    y[:300] = y[300:600]
    order = rng.permutation(3000)
    one = RandomForestClassifier(n_estimators=4, max_leaves=16, random_state=1).fit(X, y)
    other = RandomForestClassifier(n_estimators=4, max_leaves=16, random_state=1).fit(X[order], y[order])
    np.testing.assert_array_equal(one.predict_proba(X), other.predict_proba(X))


@pytest.mark.parametrize("bootstrap", [True, False])
def test_trees_grown_side_by_side_are_those_grown_one_after_another(bootstrap):
    """Rounds grow on several threads at once (a grower each) and merge in round order: the same trees, leaf values
    and out-of-bag scores to the bit as on one thread."""
    rng = np.random.default_rng(2)
    X, y = rng.normal(size=(4000, 5)), rng.integers(0, 3, 4000)
    fits = []
    for threads in (1, 2, 3):
        with kernel_threads(threads):
            fits.append(
                RandomForestClassifier(n_estimators=7, max_leaves=20, bootstrap=bootstrap, random_state=4).fit(X, y)
            )
    for other in fits[1:]:
        assert other.trees_ == fits[0].trees_
        assert other.fit_metrics_ == fits[0].fit_metrics_


def test_a_bootstrapped_forests_training_metrics_are_out_of_bag():
    """Each row scored by the trees that did not see it: the training's accuracy is the out-of-bag score, not the
    (near perfect) accuracy of trees on rows they grew on."""
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(3000, 4)), rng.integers(0, 2, 3000)  # labels that no feature predicts
    model = RandomForestClassifier(n_estimators=20, min_samples_leaf=1, oob_score=True, random_state=0).fit(X, y)
    assert model.fit_metrics_["accuracy"] == model.oob_score_
    assert abs(model.oob_score_ - 0.5) < 0.05  # chance, where the rows it grew on would say far more
    assert (model.predict(X) == y).mean() > 0.9


# -- quality against scikit-learn -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shop():
    """A star of 30,000 sales, 200 stores (region: 8 values) and 1,000 items (category: 25 values, a price with
    NULLs, 5% of the sales' items unknown: a LEFT join); a numeric target, a two-class and a four-class one."""
    rng = np.random.default_rng(11)
    n, n_stores, n_items = 30_000, 200, 1_000
    region, category = rng.integers(0, 8, n_stores), rng.integers(0, 25, n_items)
    price = np.where(rng.random(n_items) < 0.1, np.nan, rng.lognormal(2.0, 0.5, n_items))
    store, item = rng.integers(0, n_stores, n), rng.integers(0, int(n_items * 1.05), n)
    x1, x2 = rng.normal(size=n), rng.uniform(0, 10, n)
    known = item < n_items
    signal = (
        np.sin(2 * x1)
        + 0.2 * x2
        + rng.normal(size=8)[region[store]]
        + np.where(known, rng.normal(size=25)[category[np.minimum(item, n_items - 1)]], 0.5)
        + np.where(known, np.nan_to_num(np.log(price[np.minimum(item, n_items - 1)]), nan=2.0), 1.0)
    )
    noisy = signal + rng.normal(scale=0.7, size=n)
    con = duckdb.connect()
    con.register("stores_df", pd.DataFrame({"id": np.arange(n_stores), "region": [f"r{k}" for k in region]}))
    con.register(
        "items_df", pd.DataFrame({"id": np.arange(n_items), "category": [f"c{k}" for k in category], "price": price})
    )
    con.register(
        "sales_df",
        pd.DataFrame(
            {
                "id": np.arange(n),
                "store_id": store,
                "item_id": item,
                "x1": x1,
                "x2": x2,
                "amount": noisy,
                "bought": noisy > np.median(noisy),
                "segment": np.searchsorted(np.quantile(noisy, [0.25, 0.5, 0.75]), noisy),
            }
        ),
    )
    for table in ("stores", "items", "sales"):
        con.execute(f"CREATE TABLE {table} AS SELECT * FROM {table}_df")
    return con


def shop_query(target: str, held_out: bool) -> str:
    return f"""
        SELECT s.x1, s.x2, st.region, i.category, i.price, s.{target}
        FROM sales s JOIN stores st ON s.store_id = st.id LEFT JOIN items i ON s.item_id = i.id
        WHERE s.id % 5 {"=" if held_out else "<>"} 0 ORDER BY s.id
    """


FOREST = {"n_estimators": 60, "max_leaves": 255, "min_samples_leaf": 2, "random_state": 0}


@pytest.mark.parametrize("target", ["amount", "bought", "segment"])
def test_held_out_quality_matches_scikit_learns_random_forest(shop, target):
    """R2 of a regression, accuracy and log loss of a two-class and a four-class target: within 0.005 of
    scikit-learn's RandomForest (one-hot categories, NULLs as its trees take them) on the materialized join with the
    same settings, or better."""
    from sklearn.ensemble import RandomForestClassifier as SkClassifier
    from sklearn.ensemble import RandomForestRegressor as SkRegressor
    from sklearn.metrics import accuracy_score, log_loss, r2_score

    train, test = (shop.execute(shop_query(target, held)).df() for held in (False, True))
    both = pd.get_dummies(pd.concat([train, test]).drop(columns=target), columns=["region", "category"], dtype=float)
    X, X_test = both.iloc[: len(train)], both.iloc[len(train) :]
    classify = target != "amount"
    objective = {"objective": "gini"} if classify else {}
    model = ilargi_db.train(shop, shop_query(target, False), target, "random_forest", **objective, **FOREST)
    ours = ilargi_db.evaluate(shop, model, shop_query(target, True))
    settings = {"n_estimators": 60, "max_leaf_nodes": 255, "min_samples_leaf": 2, "random_state": 0, "n_jobs": 1}
    if not classify:
        theirs = SkRegressor(max_features=1.0, **settings).fit(X, train[target])
        assert ours["r2"] >= r2_score(test[target], theirs.predict(X_test)) - 0.005
        return
    theirs = SkClassifier(max_features="sqrt", **settings).fit(X, train[target])
    proba = theirs.predict_proba(X_test)
    assert ours["accuracy"] >= accuracy_score(test[target], theirs.classes_[proba.argmax(axis=1)]) - 0.005
    assert ours["log_loss"] <= log_loss(test[target], proba) + 0.005


def test_the_out_of_bag_score_tracks_the_held_out_score(shop):
    model = ilargi_db.train(shop, shop_query("amount", False), "amount", "random_forest", oob_score=True, **FOREST)
    held_out = ilargi_db.evaluate(shop, model, shop_query("amount", True))["r2"]
    assert abs(model.oob_score_ - held_out) < 0.02
    assert np.isfinite(model.estimator_.oob_prediction_).mean() > 0.99  # 60 trees leave almost every row out once


def test_an_out_of_bag_score_without_a_bootstrap_is_refused():
    with pytest.raises(ValueError, match="set bootstrap=True"):
        RandomForest(oob_score=True, bootstrap=False).fit(np.zeros((10, 1)), np.arange(10.0))


# -- SQL ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("target", "objective"), [("amount", "auto"), ("bought", "auto"), ("segment", "gini")])
def test_the_forest_macro_equals_predict(shop, target, objective):
    """The mean of the trees in SQL: a regression's value, a binary forest's share of the second class (its class
    above one half), a multi-class forest's normalized shares as a list (its class the largest's); through the
    registry and back the model predicts the same."""
    params = {**FOREST, "n_estimators": 8}
    model = ilargi_db.train(shop, shop_query(target, False), target, "random_forest", objective=objective, **params)
    ilargi_db.save_model(shop, f"forest_{target}", model)
    scored = "SELECT s.x1, s.x2, st.region, i.category, i.price FROM sales s JOIN stores st ON s.store_id = st.id " \
             "LEFT JOIN items i ON s.item_id = i.id WHERE s.id < 2000 ORDER BY s.id"  # fmt: skip
    rows = shop.execute(f"SELECT forest_{target}_predict(x1, x2, region, category, price) FROM ({scored})").fetchall()
    macro = np.array([r[0] for r in rows], dtype=float)
    if target == "amount":
        np.testing.assert_allclose(macro, ilargi_db.predict(shop, model, scored), rtol=0, atol=1e-9)
    else:
        proba = ilargi_db.predict_proba(shop, model, scored)
        np.testing.assert_allclose(macro, proba[:, 1] if proba.shape[1] == 2 else proba, rtol=0, atol=1e-9)
        classes = shop.execute(
            f"SELECT forest_{target}_predict_class(x1, x2, region, category, price) FROM ({scored})"
        ).fetchall()
        assert [r[0] for r in classes] == ilargi_db.predict(shop, model, scored).tolist()
    loaded = ilargi_db.load_model(shop, f"forest_{target}")
    assert loaded.trees_ == model.trees_
    np.testing.assert_array_equal(ilargi_db.predict(shop, loaded, scored), ilargi_db.predict(shop, model, scored))
