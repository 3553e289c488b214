"""Gradient-boosted trees: the estimators' conventions, parameters refused in words, missing values, both
strategies growing identical trees over random joins, and held-out quality against LightGBM and
scikit-learn's HistGradientBoosting on the materialized join."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.utils.estimator_checks import parametrize_with_checks

import ilargi_db
from ilargi_db import GradientBoostingClassifier, GradientBoostingRegressor, IlargiError

# -- scikit-learn's conventions ---------------------------------------------------------------------------


@parametrize_with_checks([GradientBoostingRegressor(n_estimators=10), GradientBoostingClassifier(n_estimators=10)])
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


# -- factorized == materialized ---------------------------------------------------------------------------

TREE_STRUCTURE = ("tree_start", "feature", "left", "right", "threshold", "missing_left", "category_bins", "count")


def assert_same_trees(factorized, materialized) -> None:
    """Both strategies grew the same ensemble: every node's split and children, its leaf values to 1e-9."""
    a, b = factorized.trees_, materialized.trees_
    for key in TREE_STRUCTURE:
        assert a[key] == b[key], key
    np.testing.assert_allclose(a["value"], b["value"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(a["gain"], b["gain"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(factorized.baseline_, materialized.baseline_, rtol=1e-12, atol=1e-12)
    assert factorized.objective_ == materialized.objective_
    assert [bins.to_state() for bins in factorized.bins_] == [bins.to_state() for bins in materialized.bins_]


def train_both(con: duckdb.DuckDBPyConnection, query: str, target: str, **params):
    models = [
        ilargi_db.train(con, query, target, algorithm="gradient_boosting", strategy=strategy, reuse=False, **params)
        for strategy in ("factorized", "materialized")
    ]
    assert [m.strategy_ for m in models] == ["factorized", "materialized"]
    return models


def _numbers(rng: np.random.Generator, n: int, distinct: int, nulls: float) -> pa.Array:
    values = rng.integers(0, distinct, n) * 0.5 - 1.0  # exact halves: few distinct values, or many
    return pa.array(np.where(rng.random(n) < nulls, np.nan, values), from_pandas=True)


def _texts(rng: np.random.Generator, n: int, distinct: int, nulls: float) -> pa.Array:
    labels = np.array([f"c{k}" for k in range(distinct)], dtype=object)[rng.integers(0, distinct, n)]
    return pa.array([None if null else str(v) for v, null in zip(labels, rng.random(n) < nulls)], type=pa.string())


@st.composite
def tree_schemas(draw):
    """A fact and 1-3 dimensions as a star or a snowflake, joined INNER or LEFT (unmatched rows), on unique or
    repeated (M:N) keys, NULL and dangling foreign keys; numeric and VARCHAR features with NULLs on every
    table; a numeric, two-valued or BOOLEAN target. Returns the tables, the query and the target."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_fact = draw(st.integers(5, 80))
    n_dims = draw(st.integers(1, 3))
    parents = [draw(st.integers(-1, i - 1)) for i in range(n_dims)]  # -1: off the fact (star)
    sizes = [draw(st.integers(1, 15)) for _ in range(n_dims)]
    tables, select, joins = {}, [], []

    def features(name: str, n: int) -> dict[str, pa.Array]:
        cols = {}
        for k in range(draw(st.integers(0, 2))):
            cols[f"v{k}"] = _numbers(rng, n, draw(st.sampled_from([1, 3, 40])), draw(st.sampled_from([0.0, 0.3])))
        for k in range(draw(st.integers(0 if cols else 1, 2))):
            cols[f"c{k}"] = _texts(rng, n, draw(st.sampled_from([1, 2, 6, 30])), draw(st.sampled_from([0.0, 0.3])))
        select.extend(f"{name}.{c} AS {name}_{c}" for c in cols)
        return cols

    for i in range(n_dims):
        name, rows = f"d{i}", sizes[i]
        many = draw(st.booleans())  # M:N: the dimension's keys repeat
        cols = {"id": pa.array(rng.integers(0, max(1, rows // 2), rows) if many else rng.permutation(rows))}
        for child, parent in enumerate(parents):
            if parent == i:  # snowflake: this dimension's foreign key to the child, some dangling
                cols[f"up{child}"] = pa.array(rng.integers(0, sizes[child] + 2, rows))
        cols.update(features(name, rows))
        tables[name] = pa.table(cols)
        how = draw(st.sampled_from(["JOIN", "LEFT JOIN", "LEFT JOIN"]))
        on = f"f.{name}_id = {name}.id" if parents[i] < 0 else f"d{parents[i]}.up{i} = {name}.id"
        joins.append(f"{how} {name} ON {on}")

    fact = features("f", n_fact)
    for i in range(n_dims):
        if parents[i] < 0:
            key = rng.integers(0, sizes[i] + 2, n_fact).astype(float)  # some keys dangle
            key[rng.random(n_fact) < 0.1] = np.nan  # NULL keys
            fact[f"d{i}_id"] = pa.array(key, from_pandas=True).cast(pa.int64())
    kind = draw(st.sampled_from(["numeric", "two-valued", "boolean"]))
    y = rng.normal(size=n_fact).round(3)
    if kind == "two-valued":
        y = np.where(y > 0, 7.0, 3.0)
    fact["y"] = pa.array(y > 0) if kind == "boolean" else pa.array(y)
    tables["f"] = pa.table(fact)
    query = f"SELECT {', '.join(select)}, f.y FROM f {' '.join(joins)}"
    return tables, query, kind


def load(con: duckdb.DuckDBPyConnection, tables: dict[str, pa.Table]) -> None:
    for name, table in tables.items():
        con.register(f"{name}_arrow", table)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_arrow")
        con.unregister(f"{name}_arrow")


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
        }
    ),
)
def test_both_strategies_grow_the_same_trees(schema, params):
    tables, query, kind = schema
    con = duckdb.connect()
    load(con, tables)
    if con.execute(f"SELECT count(*) FROM ({query})").fetchone()[0] == 0:
        return  # an inner join that matched nothing: nothing to train on
    factorized, materialized = train_both(con, query, "y", **params)
    assert_same_trees(factorized, materialized)
    np.testing.assert_allclose(
        ilargi_db.predict(con, factorized, query), ilargi_db.predict(con, materialized, query), rtol=1e-9
    )
