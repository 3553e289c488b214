"""Tree ensembles' shared test helpers: random joins to train on (hypothesis), and the check that the factorized
and the materialized strategy grew the same ensemble."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
from hypothesis import strategies as st

import ilargi_db

TREE_STRUCTURE = ("tree_start", "feature", "left", "right", "threshold", "missing_left", "category_bins", "count")


def assert_same_trees(factorized, materialized) -> None:
    """Both strategies grew the same ensemble: every node's split and children, its leaf values to 1e-9."""
    a, b = factorized.trees_.to_record(), materialized.trees_.to_record()
    for key in TREE_STRUCTURE:
        assert a[key] == b[key], key
    np.testing.assert_allclose(a["value"], b["value"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(a["gain"], b["gain"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(factorized.baseline_, materialized.baseline_, rtol=1e-12, atol=1e-12)
    assert factorized.objective_ == materialized.objective_
    assert [bins.to_state() for bins in factorized.bins_] == [bins.to_state() for bins in materialized.bins_]


def train_both(
    con: duckdb.DuckDBPyConnection, query: str, target: str, algorithm: str = "gradient_boosting", **params
) -> list:
    """The model trained factorized and materialized (nothing reused between them)."""
    models = [
        ilargi_db.train(con, query, target, algorithm=algorithm, strategy=strategy, reuse=False, **params)
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
    table; a numeric, two-valued, BOOLEAN or three-class target. Returns the tables, the query and the target."""
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
    kind = draw(st.sampled_from(["numeric", "two-valued", "boolean", "three-class"]))
    y = rng.normal(size=n_fact).round(3)
    if kind == "two-valued":
        y = np.where(y > 0, 7.0, 3.0)
    elif kind == "three-class":  # multi-class: objective="log_loss", a tree per class each round
        y = np.digitize(y, [-0.4, 0.4]) * 5.0
    fact["y"] = pa.array(y > 0) if kind == "boolean" else pa.array(y)
    tables["f"] = pa.table(fact)
    query = f"SELECT {', '.join(select)}, f.y FROM f {' '.join(joins)}"
    return tables, query, kind


def load(con: duckdb.DuckDBPyConnection, tables: dict[str, pa.Table]) -> None:
    for name, table in tables.items():
        con.register(f"{name}_arrow", table)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_arrow")
        con.unregister(f"{name}_arrow")
