"""Gradient-boosted trees: the estimators' conventions, parameters refused in words, missing values, both
strategies growing identical trees over random joins, and held-out quality against LightGBM and
scikit-learn's HistGradientBoosting on the materialized join."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.utils.estimator_checks import parametrize_with_checks

import ilargi_db
from ilargi_db import GradientBoostingClassifier, GradientBoostingRegressor, IlargiError
from ilargi_db.linalg.feature_bins import MAX_CATEGORIES
from ilargi_db.models import GradientBoosting
from tests.strategies import schemas
from tests.tree_strategies import assert_same_trees, load, train_both, tree_schemas

# -- scikit-learn's conventions ---------------------------------------------------------------------------


@parametrize_with_checks([GradientBoostingRegressor(n_estimators=10), GradientBoostingClassifier(n_estimators=10)])
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


# -- factorized == materialized ---------------------------------------------------------------------------


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tree_schemas(),
    st.fixed_dictionaries(
        {
            "n_estimators": st.integers(1, 4),
            "learning_rate": st.sampled_from([0.1, 0.5]),
            "max_leaves": st.integers(2, 8),
            "max_depth": st.sampled_from([None, 2]),
            "min_samples_leaf": st.integers(1, 4),
            "l2_regularization": st.sampled_from([0.0, 1.0]),
            "max_bins": st.sampled_from([2, 5, 255]),
            "quantized_gradients": st.booleans(),
            "random_state": st.just(3),
        }
    ),
)
def test_both_strategies_grow_the_same_trees(schema, params):
    tables, query, kind = schema
    con = duckdb.connect()
    load(con, tables)
    if con.execute(f"SELECT count(DISTINCT y) FROM ({query})").fetchone()[0] < 2:
        return  # an inner join that matched nothing (or rows of one class): nothing to train on
    if kind == "three-class":
        params = {**params, "objective": "log_loss"}
    factorized, materialized = train_both(con, query, "y", **params)
    assert_same_trees(factorized, materialized)
    np.testing.assert_allclose(
        ilargi_db.predict(con, factorized, query),
        ilargi_db.predict(con, materialized, query),
        rtol=1e-9,
        atol=1e-12,  # a baseline of 0 is +-1e-18 by the order the rows were summed in
    )


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas(max_dims=3))
def test_both_strategies_grow_the_same_trees_on_the_shared_random_schemas(schema):
    """tests/strategies.py's schemas too: FULL joins (a COALESCE key), composite keys, filters, BOOLEAN,
    DECIMAL and FLOAT features."""
    con = duckdb.connect()
    schema.load(con)
    if con.execute(f'SELECT count("{schema.target}") FROM ({schema.query})').fetchone()[0] == 0:
        return  # no row with a target: nothing to train on
    factorized, materialized = train_both(
        con, schema.query, schema.target, n_estimators=3, max_leaves=6, min_samples_leaf=2, learning_rate=0.5
    )
    assert_same_trees(factorized, materialized)


def test_both_strategies_grow_the_same_trees_with_many_categories():
    """Categoricals of 1 to 50,000 values on the fact and on a dimension (the MAX_CATEGORIES most frequent kept,
    the rest in the missing bin: two-byte bins), a LEFT join with unmatched rows and an M:N dimension."""
    rng = np.random.default_rng(7)
    n, n_items = 60_000, 50_000
    sku = rng.zipf(1.3, n) % 50_000  # skewed: a few hundred frequent values, many rare ones
    con = duckdb.connect()
    con.register("sku_arrow", pa.table({"sku": pa.array([f"s{k}" for k in sku])}))
    con.execute(f"""
        CREATE TABLE items AS SELECT i AS id, 'item' || i AS name, 'one' AS only, (i % 13) * 1.0 AS weight
            FROM range({n_items}) t(i);
        CREATE TABLE tags AS SELECT i % 40 AS item_id, 't' || (i % 7) AS tag FROM range(100) t(i);  -- M:N
        CREATE TABLE f AS SELECT row_number() OVER () - 1 AS id, sku FROM sku_arrow;
    """)
    con.execute(f"""
        ALTER TABLE f ADD COLUMN item_id BIGINT;
        UPDATE f SET item_id = (id * 7919) % {n_items + 5000};  -- 5,000 keys match no item
        ALTER TABLE f ADD COLUMN y DOUBLE;
        UPDATE f SET y = (id % 13) * 0.1 + CASE WHEN sku IN ('s1', 's2', 's3') THEN 2.0 ELSE 0.0 END;
    """)
    query = """
        SELECT f.sku, items.name, items.only, items.weight, tags.tag, f.y
        FROM f LEFT JOIN items ON f.item_id = items.id LEFT JOIN tags ON tags.item_id = items.id
    """
    assert con.execute("SELECT count(DISTINCT sku) FROM f").fetchone()[0] > 5_000
    factorized, materialized = train_both(con, query, "y", n_estimators=5, max_leaves=15)
    assert_same_trees(factorized, materialized)
    bins = {b.name: b for b in factorized.bins_}
    assert len(bins["name"].categories) == MAX_CATEGORIES and bins["only"].categories == ("one",)
    assert factorized.missing_bin_ == MAX_CATEGORIES
    assert {"s1", "s2", "s3"} <= set(bins["sku"].categories)  # the most frequent are kept
    split_on = {factorized.feature_names_in_[f] for f in factorized.trees_.feature if f >= 0}
    assert "sku" in split_on


# -- held-out quality against LightGBM and HistGradientBoosting -------------------------------------------

SETTINGS = {"n_estimators": 100, "learning_rate": 0.1, "max_leaves": 31, "min_samples_leaf": 20}


@pytest.fixture(scope="module")
def retail():
    """A star: 40,000 sales, 300 stores (region: 12 values), 2,000 items (category: 40 values, a price with
    NULLs; 5% of the sales' items unknown: a LEFT join leaves them empty). The target mixes a smooth
    function of the fact's numbers, the categories and the price, plus noise."""
    rng = np.random.default_rng(2024)
    n, n_stores, n_items = 40_000, 300, 2_000
    region_effect, category_effect = rng.normal(size=12), rng.normal(size=40)
    store_region = rng.integers(0, 12, n_stores)
    item_category = rng.integers(0, 40, n_items)
    price = rng.lognormal(2.0, 0.7, n_items)
    price_known = rng.random(n_items) > 0.1
    store, item = rng.integers(0, n_stores, n), rng.integers(0, int(n_items * 1.05), n)
    x1, x2 = rng.normal(size=n), rng.uniform(0, 10, n)
    x2_known = rng.random(n) > 0.05
    matched = item < n_items
    known_item = np.minimum(item, n_items - 1)
    signal = (
        2.0 * np.sin(2 * x1)
        + 0.3 * np.where(x2_known, x2, 8.0)
        + region_effect[store_region[store]]
        + np.where(matched, category_effect[item_category[known_item]], 0.5)
        + np.where(matched & price_known[known_item], np.log(price[known_item]), 1.0)
    )
    signal -= signal.mean()
    con = duckdb.connect()
    tables = {
        "stores": pa.table({"id": np.arange(n_stores), "region": [f"r{k}" for k in store_region]}),
        "items": pa.table(
            {
                "id": np.arange(n_items),
                "category": [f"c{k}" for k in item_category],
                "price": pa.array(np.where(price_known, price, np.nan), from_pandas=True),
            }
        ),
        "sales": pa.table(
            {
                "id": np.arange(n),
                "store_id": store,
                "item_id": item,
                "x1": x1,
                "x2": pa.array(np.where(x2_known, x2, np.nan), from_pandas=True),
                "amount": signal + rng.normal(scale=0.5, size=n),
                "bought": rng.random(n) < 1 / (1 + np.exp(-signal)),
                "units": rng.poisson(np.exp(0.5 * signal)),  # counts: objective="poisson"
                # four classes by the signal's quartiles, a fifth of them drawn at random: multi-class
                "segment": np.where(
                    rng.random(n) < 0.2,
                    rng.integers(0, 4, n),
                    np.searchsorted(np.quantile(signal, [0.25, 0.5, 0.75]), signal),
                ),
            }
        ),
    }
    load(con, tables)
    return con


def retail_query(target: str, held_out: bool) -> str:
    return f"""
        SELECT s.x1, s.x2, st.region, i.category, i.price, s.{target}
        FROM sales s JOIN stores st ON s.store_id = st.id LEFT JOIN items i ON s.item_id = i.id
        WHERE s.id % 5 {"=" if held_out else "<>"} 0 ORDER BY s.id
    """


def oracle_scores(con: duckdb.DuckDBPyConnection, target: str) -> dict[str, float]:
    """LightGBM's and HistGradientBoosting's held-out score, fit on the materialized training join: ROC AUC of
    ``bought``, the mean Poisson deviance of the counts ``units``, R2 of ``amount``."""
    lightgbm = pytest.importorskip("lightgbm")
    import pandas as pd
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from sklearn.metrics import mean_poisson_deviance, r2_score, roc_auc_score

    train, test = (con.execute(retail_query(target, held)).df() for held in (False, True))
    for column in ("region", "category"):
        kinds = pd.CategoricalDtype(sorted(train[column].dropna().unique()))
        train[column], test[column] = train[column].astype(kinds), test[column].astype(kinds)
    X, y = train.drop(columns=target), train[target]
    X_test, y_test = test.drop(columns=target), test[target]
    classify, counts = target == "bought", target == "units"
    lgbm = (lightgbm.LGBMClassifier if classify else lightgbm.LGBMRegressor)(
        **({"objective": "poisson"} if counts else {}),
        n_estimators=100,
        learning_rate=0.1,
        num_leaves=31,
        max_depth=-1,
        min_child_samples=20,
        reg_lambda=0.0,
        max_bin=255,
        subsample=1.0,
        colsample_bytree=1.0,
        verbose=-1,
    )
    hgb = (HistGradientBoostingClassifier if classify else HistGradientBoostingRegressor)(
        **({"loss": "poisson"} if counts else {}),
        max_iter=100,
        learning_rate=0.1,
        max_leaf_nodes=31,
        max_depth=None,
        min_samples_leaf=20,
        l2_regularization=0.0,
        max_bins=255,
        early_stopping=False,
        categorical_features="from_dtype",
    )
    scores = {}
    for name, model in (("lightgbm", lgbm), ("hist_gradient_boosting", hgb)):
        model.fit(X, y)
        if classify:
            scores[name] = roc_auc_score(y_test, model.predict_proba(X_test)[:, 1])
        elif counts:
            scores[name] = mean_poisson_deviance(y_test, model.predict(X_test))
        else:
            scores[name] = r2_score(y_test, model.predict(X_test))
    return scores


@pytest.mark.parametrize("quantized", [False, True])
@pytest.mark.parametrize(("target", "metric"), [("amount", "r2"), ("bought", "roc_auc")])
def test_held_out_quality_matches_lightgbm_and_hist_gradient_boosting(retail, target, metric, quantized):
    """On exact gradients and on quantized ones (quantized_gradients=True)."""
    oracles = oracle_scores(retail, target)
    query = retail_query(target, False)
    model = ilargi_db.train(
        retail, query, target, algorithm="gradient_boosting", quantized_gradients=quantized, random_state=0, **SETTINGS
    )
    assert model.objective_ == ("log_loss" if target == "bought" else "squared_error")
    ours = ilargi_db.evaluate(retail, model, retail_query(target, True))[metric]
    for name, score in oracles.items():
        assert abs(ours - score) <= 0.005, (name, ours, score)


def test_multi_class_log_loss_and_accuracy_match_lightgbm_and_hist_gradient_boosting(retail):
    """Four classes over the join, held out: log loss and accuracy within 0.005 of LightGBM's ``multiclass``, and not
    worse than HistGradientBoosting's by more, each fit on the materialized join with the same settings."""
    lightgbm = pytest.importorskip("lightgbm")
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.metrics import accuracy_score, log_loss

    train, test = (retail.execute(retail_query("segment", held)).df() for held in (False, True))
    for column in ("region", "category"):
        kinds = pd.CategoricalDtype(sorted(train[column].dropna().unique()))
        train[column], test[column] = train[column].astype(kinds), test[column].astype(kinds)
    X, y, X_test, y_test = train.drop(columns="segment"), train.segment, test.drop(columns="segment"), test.segment
    oracles = {
        "lightgbm": lightgbm.LGBMClassifier(
            n_estimators=100,
            learning_rate=0.1,
            num_leaves=31,
            min_child_samples=20,
            reg_lambda=0.0,
            max_bin=255,
            verbose=-1,
        ),  # fmt: skip
        "hist_gradient_boosting": HistGradientBoostingClassifier(
            max_iter=100,
            learning_rate=0.1,
            max_leaf_nodes=31,
            min_samples_leaf=20,
            early_stopping=False,
            categorical_features="from_dtype",
        ),  # fmt: skip
    }
    model = ilargi_db.train(
        retail, retail_query("segment", False), "segment", algorithm="gradient_boosting", objective="log_loss",
        **SETTINGS,
    )  # fmt: skip
    assert model.trees_.trees_per_round == 4
    ours = ilargi_db.evaluate(retail, model, retail_query("segment", True))
    for name, oracle in oracles.items():
        oracle.fit(X, y)
        proba = oracle.predict_proba(X_test)
        theirs = {"log_loss": log_loss(y_test, proba), "accuracy": accuracy_score(y_test, proba.argmax(axis=1))}
        for metric, score in theirs.items():
            worse = score - ours[metric] if metric == "accuracy" else ours[metric] - score
            # LightGBM's within 0.005 either way; no library's better by more than 0.005
            assert worse <= 0.005 and (name != "lightgbm" or abs(worse) <= 0.005), (name, metric, ours[metric], score)


def test_poisson_counts_match_lightgbm_and_hist_gradient_boosting_on_the_join(retail):
    """Counts trained with objective="poisson" over the join score, held out, as the libraries' Poisson losses do
    on the materialized join (mean Poisson deviance within 2%), and predict exp of the trees' sum: never below 0."""
    from sklearn.metrics import mean_poisson_deviance

    oracles = oracle_scores(retail, "units")
    query = retail_query("units", False)
    model = ilargi_db.train(retail, query, "units", algorithm="gradient_boosting", objective="poisson", **SETTINGS)
    assert model.objective_ == "poisson" and not hasattr(model, "predict_proba")
    held_out = retail_query("units", True)
    truth = retail.execute(f"SELECT units FROM ({held_out})").fetchnumpy()["units"]
    predicted = ilargi_db.predict(retail, model, held_out)
    assert predicted.min() > 0
    ours = mean_poisson_deviance(truth, predicted)
    for name, score in oracles.items():
        assert abs(ours - score) <= 0.02 * score, (name, ours, score)


def test_poisson_refuses_a_negative_count():
    X, y = np.arange(20.0).reshape(-1, 1), np.arange(20.0) - 1.0
    with pytest.raises(ValueError, match="target must be 0 or more on every row"):
        GradientBoosting(objective="poisson").fit(X, y)


# -- objectives, early stopping, refusals -----------------------------------------------------------------


@pytest.fixture
def shop():
    """A fact of 400 rows and a dimension; targets of every kind the objective is chosen from."""
    con = duckdb.connect()
    con.execute("""
        CREATE TABLE shops AS SELECT i AS id, 'k' || (i % 4) AS kind FROM range(20) t(i);
        CREATE TABLE visits AS SELECT i AS id, i % 25 AS shop_id, (i * 37 % 100) * 1.0 AS x,
            (i * 37 % 100) > 50 AS flag, CASE WHEN (i * 37 % 100) > 50 THEN 9 ELSE 4 END AS two,
            (i * 37 % 100) * 0.5 + (i % 3) AS amount, CASE WHEN i % 3 = 0 THEN 'a' ELSE 'b' END AS label
        FROM range(400) t(i);
    """)
    return con


SHOP = "SELECT v.x, s.kind, v.{target} FROM visits v LEFT JOIN shops s ON v.shop_id = s.id"


@pytest.mark.parametrize(
    ("target", "objective", "expected"),
    [
        ("flag", "auto", "log_loss"),  # BOOLEAN
        ("two", "auto", "log_loss"),  # two distinct numbers
        ("amount", "auto", "squared_error"),
        ("two", "squared_error", "squared_error"),  # the caller overrides
        ("flag", "squared_error", "squared_error"),
    ],
)
def test_objective_auto_and_overrides(shop, target, objective, expected):
    model = ilargi_db.train(
        shop, SHOP.format(target=target), target, algorithm="gradient_boosting", objective=objective, n_estimators=5
    )
    assert model.objective_ == expected
    predictions = ilargi_db.predict(shop, model, SHOP.format(target=target))
    if expected == "log_loss":
        assert set(np.unique(predictions)) <= set(model.classes_) and len(model.classes_) == 2
        assert model.predict_proba is not None
        assert {"accuracy", "log_loss"} <= set(model.training_metrics_)
    else:
        assert not hasattr(model, "predict_proba")
        assert "r2" in model.training_metrics_


@pytest.mark.parametrize("algorithm", ["gradient_boosting", "random_forest"])
def test_auto_refuses_a_few_whole_numbers_naming_both_fixes(shop, algorithm):
    """Seven positions coded 0 to 6 are classes, a count of 0 to 6 items an amount: "auto" does not guess (a
    silent regression on class codes), it names the objective of each."""
    query = "SELECT v.x, s.kind, v.shop_id % 7 AS y FROM visits v LEFT JOIN shops s ON v.shop_id = s.id"
    with pytest.raises(
        ValueError, match=r"7 whole numbers \(0, 1, 2, 3, 4, 5, 6\) are classes or amounts: pass objective="
    ):
        ilargi_db.train(shop, query, "y", algorithm=algorithm, n_estimators=2)
    model = ilargi_db.train(shop, query, "y", algorithm=algorithm, objective="squared_error", n_estimators=2)
    assert not hasattr(model, "classes_")


def test_log_loss_on_a_continuous_target_is_refused(shop):
    query = "SELECT v.x, s.kind, amount AS y FROM visits v LEFT JOIN shops s ON v.shop_id = s.id"
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        ilargi_db.train(shop, query, "y", algorithm="gradient_boosting", objective="log_loss")


def test_log_loss_on_three_classes_grows_a_tree_per_class_each_round(shop):
    """Multi-class: ``n_estimators`` rounds of one tree per class, each class's probability the softmax of the
    classes' sums; the training's metrics are those ``evaluate`` gives on the same rows."""
    query = "SELECT v.x, s.kind, v.shop_id % 3 AS y FROM visits v LEFT JOIN shops s ON v.shop_id = s.id"
    model = ilargi_db.train(shop, query, "y", algorithm="gradient_boosting", objective="log_loss", n_estimators=4)
    assert list(model.classes_) == [0, 1, 2] and model.trees_.trees_per_round == 3
    assert model.trees_.n_trees == 12 and model.n_iter_ == 4 and len(model.baseline_) == 3
    proba = model.predict_proba(shop.execute(f"SELECT x, kind FROM ({query})").df())
    assert proba.shape == (400, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    predicted = ilargi_db.predict(shop, model, query)
    np.testing.assert_array_equal(predicted, model.classes_[proba.argmax(axis=1)])
    metrics = ilargi_db.evaluate(shop, model, query)
    for name in ("accuracy", "log_loss"):
        assert metrics[name] == pytest.approx(model.training_metrics_[name], rel=1e-12)


def test_early_stopping_stops_and_records_the_validation_loss():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 3))
    y = X[:, 0] + rng.normal(scale=2.0, size=2000)  # mostly noise: the held-out loss soon stops improving
    model = GradientBoostingRegressor(
        n_estimators=500, learning_rate=0.3, early_stopping=True, n_iter_no_change=5, random_state=0
    ).fit(X, y)
    assert model.n_iter_ < 500
    scores = np.asarray(model.validation_score_)
    assert len(scores) == model.n_iter_ == len(model.train_score_)
    best = scores[: -model.n_iter_no_change].min()
    assert np.all(scores[-model.n_iter_no_change :] >= best - model.tol), "it stopped because nothing improved"
    assert np.all(np.diff(scores[: -model.n_iter_no_change]).min() < 0)  # it improved before
    again = GradientBoostingRegressor(
        n_estimators=500, learning_rate=0.3, early_stopping=True, n_iter_no_change=5, random_state=0
    ).fit(X, y)
    assert again.n_iter_ == model.n_iter_  # random_state fixes the validation rows
    without = GradientBoostingRegressor(n_estimators=20).fit(X, y)
    assert without.n_iter_ == 20 and without.validation_score_ == []


def test_early_stopping_holds_out_the_same_rows_whatever_order_they_come_in():
    """The held-out rows are keyed by their values: the rows shuffled (as a Parquet view without insertion order or
    ties in ORDER BY deliver them) stop at the same round with the same held-out losses."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(600, 3))
    y = X[:, 0] + rng.normal(scale=2.0, size=600)
    shuffled = rng.permutation(600)
    fits = [
        GradientBoostingRegressor(
            n_estimators=200, learning_rate=0.3, early_stopping=True, n_iter_no_change=5, random_state=0
        ).fit(X[rows], y[rows])
        for rows in (np.arange(600), shuffled)
    ]
    assert fits[1].n_iter_ == fits[0].n_iter_
    np.testing.assert_allclose(fits[1].validation_score_, fits[0].validation_score_, rtol=1e-9)


def test_early_stopping_through_train(shop):
    model = ilargi_db.train(
        shop,
        SHOP.format(target="amount"),
        "amount",
        algorithm="gradient_boosting",
        n_estimators=1000,
        learning_rate=0.5,
        early_stopping=True,
        validation_fraction=0.2,
        n_iter_no_change=3,
        random_state=1,
    )
    assert model.n_iter_ < 1000 and len(model.validation_score_) == model.n_iter_


class ReadCounter:
    """A scalar function that counts the rows DuckDB passes through it: a query over it reads nothing unseen."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self.rows = 0
        con.create_function("counted", self.count)

    def count(self, x: float) -> float:
        self.rows += 1
        return x


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"max_bins": 300}, "max_bins"),
        ({"learning_rate": 0}, "learning_rate"),
        ({"n_estimators": 0}, "n_estimators"),
        ({"objective": "tweedie"}, "objective"),
        ({"max_leaves": 1}, "max_leaves"),
    ],
)
def test_bad_parameters_are_refused_before_reading(shop, params, message):
    reads = ReadCounter(shop)
    query = "SELECT counted(v.x) AS x, s.kind, v.amount FROM visits v JOIN shops s ON v.shop_id = s.id"
    with pytest.raises(ValueError, match=message):
        ilargi_db.train(shop, query, "amount", algorithm="gradient_boosting", **params)
    assert reads.rows == 0


def test_a_batch_mixing_trees_and_linear_models_is_refused_before_reading(shop):
    reads = ReadCounter(shop)
    query = "SELECT counted(v.x) AS x, s.kind, v.amount FROM visits v JOIN shops s ON v.shop_id = s.id"
    with pytest.raises(IlargiError, match="cannot mix tree models .* with the linear models"):
        ilargi_db.train_batch(
            shop, query, "amount", [{"algorithm": "gradient_boosting"}, {"algorithm": "linear_regression"}]
        )
    assert reads.rows == 0


def test_a_memory_budget_too_small_is_refused_before_the_rows_are_read(shop):
    reads = ReadCounter(shop)
    query = "SELECT counted(v.x) AS x, s.kind, v.amount FROM visits v JOIN shops s ON v.shop_id = s.id"
    with pytest.raises(IlargiError, match="memory_budget"):
        ilargi_db.train(shop, query, "amount", algorithm="gradient_boosting", memory_budget="1KB", reuse=False)
    refused = reads.rows
    ilargi_db.train(shop, query, "amount", algorithm="gradient_boosting", n_estimators=1, reuse=False)
    assert refused < reads.rows - refused  # the counts it needed, not the bins and the rows a training reads


def test_a_cluster_is_refused_before_reading(shop):
    reads = ReadCounter(shop)
    query = "SELECT counted(v.x) AS x, s.kind, v.amount FROM visits v JOIN shops s ON v.shop_id = s.id"
    with pytest.raises(IlargiError, match="leave out cluster"):
        ilargi_db.train(shop, query, "amount", algorithm="gradient_boosting", cluster="x:1", reuse=False)
    assert reads.rows == 0


# -- missing values ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("null_like", ["low", "high"])
def test_missing_values_go_to_the_side_that_gains_most(null_like):
    """x in 0..99 with a target of 0 below 50 and 10 above; rows whose x (a dimension's, through a LEFT join
    that leaves some empty, and NULL values) is missing have the target of the low rows, or of the high."""
    con = duckdb.connect()
    missing_target = 0.0 if null_like == "low" else 10.0
    con.execute("""
        CREATE TABLE dim AS SELECT i AS id, CASE WHEN i % 10 = 0 THEN NULL ELSE i % 100 END AS x FROM range(500) t(i);
        CREATE TABLE f AS SELECT i AS id, i % 550 AS dim_id FROM range(5000) t(i);
    """)
    query = f"""
        SELECT dim.x, CASE WHEN dim.x IS NULL THEN {missing_target} WHEN dim.x < 50 THEN 0.0 ELSE 10.0 END AS y
        FROM f LEFT JOIN dim ON f.dim_id = dim.id
    """
    for strategy in ("factorized", "materialized"):
        model = ilargi_db.train(
            con,
            query,
            "y",
            algorithm="gradient_boosting",
            strategy=strategy,
            n_estimators=1,
            max_leaves=2,
            learning_rate=1.0,
        )
        trees = model.trees_
        assert trees.feature[0] == 0
        edges = model.bins_[0].edges
        assert edges[trees.threshold(0)] == 49  # x <= 49 left
        assert trees.missing_left(0) == (null_like == "low")
        predictions = ilargi_db.predict(con, model, query + " ORDER BY f.id")
        truth = con.execute(query + " ORDER BY f.id").fetchnumpy()["y"]
        np.testing.assert_allclose(predictions, truth, atol=1e-9)  # one split, learning rate 1: exact


def test_a_trained_model_predicts_plain_rows_with_text_features_as_predict_does():
    """Rows given as an object array or a DataFrame (numbers and text, None missing) are binned as in training."""
    con = ilargi_db.connect()
    con.sql(
        "CREATE TABLE t AS SELECT range % 7 * 1.0 AS x, ['a', 'b', 'c'][range % 3 + 1] AS k, "
        "(range % 7) * 2 + (range % 3) AS y FROM range(3000)"
    )
    model = ilargi_db.train(con, "SELECT x, k, y FROM t", "y", algorithm="gradient_boosting", n_estimators=20)
    from_query = ilargi_db.predict(con, model, "SELECT x, k FROM t")[:3]  # rows 0, 1, 2: (0, a), (1, b), (2, c)
    rows = np.array([[0.0, "a"], [1.0, "b"], [2.0, "c"]], dtype=object)
    np.testing.assert_allclose(model.predict(rows), from_query, atol=1e-12)
    frame = pd.DataFrame({"x": [0.0, 1.0, 2.0], "k": ["a", "b", "c"]})
    np.testing.assert_allclose(model.predict(frame), from_query, atol=1e-12)
    # NULL and a category training never saw share the missing bin, as in SQL: the same prediction
    missing, unseen = model.predict(np.array([[2.0, None], [2.0, "zzz"]], dtype=object))
    assert missing == unseen and np.isfinite(missing)


def test_another_learning_rate_on_the_same_query_reads_and_bins_nothing_again(tmp_path):
    """The bins (edges and categories) and the binned rows are artifacts: the second training takes both, and
    grows the trees the first would with its settings (the same as a training without reuse)."""
    con = duckdb.connect(str(tmp_path / "shop.duckdb"))
    con.execute("""
        CREATE TABLE shops AS SELECT i AS id, 'k' || (i % 4) AS kind FROM range(20) t(i);
        CREATE TABLE visits AS SELECT i AS id, i % 25 AS shop_id, (i * 37 % 100) * 1.0 AS x,
            (i * 37 % 100) * 0.5 + (i % 3) AS amount FROM range(400) t(i);
    """)
    query = SHOP.format(target="amount")
    first = ilargi_db.train(con, query, "amount", algorithm="gradient_boosting", strategy="factorized", n_estimators=5)
    second = ilargi_db.train(
        con, query, "amount", algorithm="gradient_boosting", strategy="factorized", n_estimators=5, learning_rate=0.3
    )
    assert not any("bin" in r for r in first.reused_)
    assert any("the binned rows" in r for r in second.reused_)
    cold = ilargi_db.train(
        con, query, "amount", algorithm="gradient_boosting", strategy="factorized", n_estimators=5, learning_rate=0.3,
        reuse=False,
    )  # fmt: skip
    assert second.trees_ == cold.trees_
