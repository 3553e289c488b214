"""Trees bin the rows they train on: each numeric feature's edges are the training rows' quantiles and each
categorical feature keeps the categories most training rows take, compared byte for byte. A fact that uses a
small part of a dimension bins over that part (weighted by how often each dimension row is taken), never over
the dimension's own rows; rows with a NULL target are not training rows; 'a' and 'A' are two categories under
any collation. Both strategies bin alike, and the oracle is LightGBM on the materialized join."""

from __future__ import annotations

import math
from collections import Counter

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ilargi_db
from ilargi_db.linalg.feature_bins import MAX_CATEGORIES, weighted_categories, weighted_numeric_edges

WORDS = ["a", "A", "ab", "aB", "Ab", "AB", "b", "B"]  # equal under NOCASE, four by four
JOINED = "SELECT d.price, d.label, f.x, f.y FROM f {kind} JOIN d ON f.k = d.k"


def expected_edges(values: list, max_bins: int) -> list[float]:
    """The bins' upper edges over the training rows: each distinct value its own bin when few, else the
    discrete quantiles (the value at position ceil(n k / max_bins) - 1 of the n sorted values)."""
    values = sorted(v for v in values if v is not None and not math.isnan(v))
    distinct = sorted(set(values))
    if len(distinct) <= max_bins:
        return distinct[:-1]
    return sorted({values[max(math.ceil(len(values) * k / max_bins) - 1, 0)] for k in range(1, max_bins)})


def expected_categories(values: list) -> tuple[str, ...]:
    """The categories the training rows take, most rows first, ties in byte order (Python's)."""
    counts = Counter(v for v in values if v is not None)
    return tuple(sorted(counts, key=lambda c: (-counts[c], c))[:MAX_CATEGORIES])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([np.nan, -np.inf, np.inf, -0.0, 0.0, 1.0, 2.5, -3.0, 1e-300, 1e300]), st.integers(0, 3)
        ),
        max_size=40,
    ),
    st.sampled_from([2, 3, 5, 255]),
)
def test_weighted_bins_equal_the_bins_of_the_rows_repeated(rows, max_bins):
    """A value taken by w rows bins as w copies of it: the factorized way equals the join's rows."""
    values = np.array([v for v, _ in rows], dtype=np.float64)
    weights = np.array([w for _, w in rows], dtype=np.int64)
    repeated = np.repeat(values, weights)
    expected = expected_edges(repeated.tolist(), max_bins)
    assert weighted_numeric_edges(values, weights, max_bins).tolist() == expected
    texts = pa.array([None if np.isnan(v) else ("A" if v > 0 else "a") + str(abs(v) > 1) for v in values])
    counted = weighted_categories(texts, weights, MAX_CATEGORIES)
    assert counted == expected_categories(np.repeat(np.array(texts.to_pylist(), dtype=object), weights).tolist())


@st.composite
def skewed_joins(draw):
    """A dimension of 30-400 rows of which the fact uses 1-6 (skewed keys; some dangling, which a LEFT join
    fills with NULLs), a price over a wide range (magnitudes 1e-300 to 1e301, both signs, NULLs), a label whose
    values differ in case only (under a NOCASE collation or not, NULLs), a fact feature and a target with NULLs
    (those rows are not training rows). Returns the connection, the query and max_bins."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_dim, n_fact = draw(st.integers(30, 400)), draw(st.integers(10, 120))
    used = rng.choice(n_dim, draw(st.integers(1, 6)), replace=False)
    keys = used[rng.integers(0, len(used), n_fact)]
    keys = np.where(rng.random(n_fact) < draw(st.sampled_from([0.0, 0.2])), n_dim + 7, keys)
    price = rng.choice([-1.0, 1.0], n_dim) * 10.0 ** rng.integers(-300, 301, n_dim) * rng.uniform(1, 10, n_dim)
    price[rng.random(n_dim) < 0.1] = np.nan
    labels = [None if rng.random() < 0.1 else WORDS[i] for i in rng.integers(0, len(WORDS), n_dim)]
    y = rng.normal(size=n_fact)
    y[rng.random(n_fact) < draw(st.sampled_from([0.0, 0.3]))] = np.nan
    collation = draw(st.sampled_from(["", "COLLATE NOCASE"]))
    con = duckdb.connect()
    con.register("d_rows", pa.table({"k": np.arange(n_dim), "price": pa.array(price, from_pandas=True),
                                     "label": pa.array(labels, type=pa.string())}))  # fmt: skip
    con.register("f_rows", pa.table({"k": keys, "x": rng.normal(size=n_fact), "y": pa.array(y, from_pandas=True)}))
    con.execute(f"""
        CREATE TABLE d (k BIGINT, price DOUBLE, label VARCHAR {collation});
        INSERT INTO d SELECT * FROM d_rows;
        CREATE TABLE f AS SELECT * FROM f_rows;
    """)
    query = JOINED.format(kind=draw(st.sampled_from(["", "LEFT"])))
    return con, query, draw(st.sampled_from([2, 5, 255]))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(skewed_joins())
def test_bins_are_the_training_rows_statistics_for_either_strategy(join):
    con, query, max_bins = join
    rows = con.execute(f'SELECT price, label COLLATE "binary" FROM ({query}) WHERE y IS NOT NULL').fetchall()
    if not rows:
        return  # no training rows: nothing to train on
    for strategy in ("factorized", "materialized"):
        model = ilargi_db.train(
            con, query, "y", algorithm="gradient_boosting", strategy=strategy, reuse=False,
            n_estimators=1, max_bins=max_bins, min_samples_leaf=1,
        )  # fmt: skip
        bins = {b.name: b for b in model.bins_}
        assert bins["price"].edges.tolist() == expected_edges([r[0] for r in rows], max_bins), strategy
        assert bins["label"].categories == expected_categories([r[1] for r in rows]), strategy


def test_the_rows_of_a_small_part_of_a_dimension_keep_their_categories_and_edges():
    """15 of 5,000 products sold: every product sold is a category and its price an edge of its own (the
    dimension's most frequent names and its quantiles would hold none of them)."""
    rng = np.random.default_rng(3)
    con = duckdb.connect()
    con.execute("""
        CREATE TABLE products AS SELECT range AS id, 'p' || lpad(range::VARCHAR, 5, '0') AS name,
            CASE WHEN range < 4985 THEN 1000.0 + range ELSE (range - 4985) * 1e-3 END AS price FROM range(5000);
    """)
    con.register("sold", pa.table({"product_id": 4985 + rng.integers(0, 15, 600)}))
    con.execute("CREATE TABLE sales AS SELECT product_id, product_id % 15 * 2.0 AS y FROM sold")
    query = "SELECT p.name, p.price, s.y FROM sales s JOIN products p ON s.product_id = p.id"
    for strategy in ("factorized", "materialized"):
        model = ilargi_db.train(con, query, "y", algorithm="gradient_boosting", strategy=strategy, reuse=False)
        bins = {b.name: b for b in model.bins_}
        assert sorted(bins["name"].categories) == [f"p{k:05d}" for k in range(4985, 5000)], strategy
        np.testing.assert_array_equal(bins["price"].edges, np.arange(14) * 1e-3)
        assert ilargi_db.evaluate(con, model, query)["r2"] > 0.999, strategy


def test_a_nocase_column_keeps_categories_that_differ_in_case_only():
    """Under COLLATE NOCASE 'a' and 'A' are two categories, neither merged with NULL: each its own value."""
    con = duckdb.connect()
    con.execute("""
        CREATE TABLE t (c VARCHAR COLLATE NOCASE, y DOUBLE);
        INSERT INTO t SELECT ['a', 'A', 'b', NULL][range % 4 + 1], [1.0, 5.0, 9.0, 13.0][range % 4 + 1]
            FROM range(400);
        CREATE TABLE cases AS SELECT * FROM (VALUES (0, 'a'), (1, 'A'), (2, 'b'), (3, NULL)) v(id, c);
    """)
    query = "SELECT c, y FROM t"
    for strategy in ("factorized", "materialized"):
        model = ilargi_db.train(
            con, query, "y", algorithm="gradient_boosting", strategy=strategy, reuse=False,
            objective="squared_error", n_estimators=40, learning_rate=0.5, min_samples_leaf=1,
        )  # fmt: skip
        assert model.bins_[0].categories == ("A", "a", "b"), strategy
        scored = ilargi_db.predict(con, model, "SELECT c FROM cases ORDER BY id")
        np.testing.assert_allclose(scored, [1.0, 5.0, 9.0, 13.0], atol=1e-3)


@pytest.fixture(scope="module")
def products():
    """300 of 5,000 products sold, 3,000 sales: the price spans 1e-3 to 1e6 over the dimension and 1 to 2 over the
    products sold; their names are not among the dimension's first 1,024 in text order (its most frequent,
    every name once). The amount is each product's own effect plus its price, and a little noise."""
    rng = np.random.default_rng(11)
    n_products, n_sales = 5_000, 3_000
    price = np.where(np.arange(n_products) < 4_700, 10.0 ** rng.uniform(-3, 6, n_products), 1 + rng.random(n_products))
    effect = rng.normal(size=n_products)
    product = 4_700 + rng.integers(0, 300, n_sales)
    con = duckdb.connect()
    con.register("products_rows", pa.table({
        "id": np.arange(n_products), "price": price, "name": [f"p{k:05d}" for k in range(n_products)],
    }))  # fmt: skip
    con.register("sales_rows", pa.table({
        "product_id": product, "amount": effect[product] + price[product] + rng.normal(scale=0.01, size=n_sales),
    }))  # fmt: skip
    con.execute("CREATE TABLE products AS FROM products_rows; CREATE TABLE sales AS FROM sales_rows")
    return con


PRODUCTS = "SELECT p.price, p.name, s.amount FROM sales s JOIN products p ON s.product_id = p.id"
BOOSTING = {"n_estimators": 40, "learning_rate": 0.3, "max_leaves": 31, "min_samples_leaf": 5}


def test_a_fact_using_a_small_part_of_a_dimension_trains_as_lightgbm_on_the_join(products):
    """Training R2 on the 300-of-5,000-products join: both strategies reach LightGBM's on the materialized join
    (which needs its categories' minimum rows lowered to 5 to split on 10 rows a product) and ours on the same
    rows as one table."""
    lightgbm = pytest.importorskip("lightgbm")
    from sklearn.metrics import r2_score

    joined = products.execute(PRODUCTS).df()
    joined["name"] = joined["name"].astype("category")
    X, y = joined.drop(columns="amount"), joined["amount"]
    lgbm = lightgbm.LGBMRegressor(
        n_estimators=40,
        learning_rate=0.3,
        num_leaves=31,
        min_child_samples=5,
        min_data_per_group=5,
        n_jobs=1,
        verbose=-1,
    )
    oracle = r2_score(y, lgbm.fit(X, y).predict(X))
    products.execute(f"CREATE TEMP TABLE one AS {PRODUCTS}")
    single = ilargi_db.train(products, "SELECT price, name, amount FROM one", "amount", "gradient_boosting", **BOOSTING)
    single_r2 = ilargi_db.evaluate(products, single, "SELECT price, name, amount FROM one")["r2"]
    assert oracle > 0.85 and single_r2 > 0.99
    for strategy in ("factorized", "materialized"):
        model = ilargi_db.train(
            products, PRODUCTS, "amount", "gradient_boosting", strategy=strategy, reuse=False, **BOOSTING
        )
        r2 = ilargi_db.evaluate(products, model, PRODUCTS)["r2"]
        assert r2 >= max(oracle, single_r2) - 0.01, (strategy, r2, oracle, single_r2)


def test_stored_bins_are_each_trainings_own(tmp_path):
    """Through the artifact store, a training whose target leaves out rows bins the rows left, and another target
    over the same feature bins its own rows: stored bins are never another training's."""
    con = duckdb.connect(str(tmp_path / "store.duckdb"))
    con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, CASE WHEN range < 50 THEN range END AS y1, range AS y2 "
                "FROM range(200)")  # fmt: skip
    few = ilargi_db.train(con, "SELECT x, y1 FROM t", "y1", algorithm="gradient_boosting", n_estimators=1)
    every = ilargi_db.train(con, "SELECT x, y2 FROM t", "y2", algorithm="gradient_boosting", n_estimators=1)
    again = ilargi_db.train(con, "SELECT x, y1 FROM t", "y1", algorithm="gradient_boosting", n_estimators=2)
    np.testing.assert_array_equal(few.bins_[0].edges, np.arange(49.0))
    np.testing.assert_array_equal(every.bins_[0].edges, np.arange(199.0))
    np.testing.assert_array_equal(again.bins_[0].edges, np.arange(49.0))
    assert any("bin" in r for r in again.reused_)
