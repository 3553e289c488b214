"""One-hot features kept as codes and sparse dimension blocks equal the materialized one-hot matrix.

Random star schemas with VARCHAR features of 1 to 5,000 categories (on the fact and on the
dimensions, NULLs, unmatched LEFT-join rows, a dimension key one-hot encoded as real data has it),
encoded the factorized way; the oracle is the DuckDB join one-hot encoded here with NumPy.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ilargi_db.backend import NUMPY
from ilargi_db.pipeline.readers import ReadSettings, read_factorized
from ilargi_db.plan import build_join_graph, is_categorical
from ilargi_db.preprocess import FeatureEncoder
from tests.oracle import assert_close

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CROSSPROD_MAX_COLUMNS = 1500  # the oracle's dense T^T T stays small


@st.composite
def categorical_stars(draw) -> tuple[duckdb.DuckDBPyConnection, str]:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    con = duckdb.connect()
    n = draw(st.integers(1, 300))
    fact = {"id": np.arange(n), "x": rng.normal(size=n).round(3), "y": rng.normal(size=n).round(3)}
    select, joins = ["f.x"], []
    if draw(st.booleans()):
        categories = draw(st.integers(1, 5000))
        codes = rng.integers(0, categories, n)
        values = np.array([f"c{c}" for c in codes], dtype=object)
        values[rng.random(n) < draw(st.sampled_from([0.0, 0.2]))] = None
        fact["kind"] = values
        select.append("f.kind")
    for d in range(draw(st.integers(1, 2))):
        rows = draw(st.one_of(st.integers(1, 30), st.integers(1, 5000)))
        categories = draw(st.integers(1, 5000))
        attribute = np.array([f"a{c}" for c in rng.integers(0, categories, rows)], dtype=object)
        attribute[rng.random(rows) < draw(st.sampled_from([0.0, 0.1]))] = None
        table = pa.table(
            {
                "id": np.arange(rows),
                "name": [f"k{i}" for i in range(rows)],  # the key as a category, one per row
                "attribute": attribute,
                "z": rng.normal(size=rows).round(3),
            }
        )
        con.register(f"d{d}_arrow", table)
        con.sql(f"CREATE TABLE d{d} AS SELECT * FROM d{d}_arrow")
        fact[f"k{d}"] = rng.integers(0, rows + 2, n)  # some keys dangle
        how = draw(st.sampled_from(["JOIN", "LEFT JOIN"]))
        joins.append(f"{how} d{d} ON f.k{d} = d{d}.id")
        select += [f"d{d}.attribute AS attribute{d}", f"d{d}.z AS z{d}"]
        if draw(st.booleans()):
            select.append(f"d{d}.name AS name{d}")
    con.register("f_arrow", pa.table(fact))
    con.sql("CREATE TABLE f AS SELECT * FROM f_arrow")
    # Dimension keys are unique: each fact row appears at most once, so f.id orders the rows fully.
    return con, f"SELECT {', '.join(select)}, f.y FROM f {' '.join(joins)} ORDER BY f.id"


def one_hot_join(con: duckdb.DuckDBPyConnection, query: str, target: str) -> np.ndarray:
    """The oracle: the DuckDB join, numeric NULLs as the column mean, text one-hot (sorted, NULL last)."""
    table = con.sql(query).to_arrow_table()
    columns = []
    for name in table.column_names:
        if name == target:
            continue
        column = table.column(name)
        if pa.types.is_string(column.type):
            values = column.to_pylist()
            labels = sorted({v for v in values if v is not None}) + ([None] if None in values else [])
            position = {label: j for j, label in enumerate(labels)}
            block = np.zeros((len(values), len(labels)))
            block[np.arange(len(values)), [position[v] for v in values]] = 1.0
            columns.append(block)
        else:
            values = pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)
            present = ~np.isnan(values)
            mean = values[present].mean() if present.any() else 0.0
            columns.append(np.where(present, values, mean)[:, None])
    return np.hstack(columns)


@SETTINGS
@given(star=categorical_stars(), seed=st.integers(0, 2**16))
def test_categorical_operators_match_one_hot_join(star, seed):
    con, query = star
    graph = build_join_graph(con, query, "y")
    encoder = FeatureEncoder([is_categorical(f.duckdb_type) for f in graph.features])
    X = read_factorized(con, graph, ReadSettings(encoder, fit=True, backend=NUMPY)).X
    T = one_hot_join(con, query, "y")
    rng = np.random.default_rng(seed)
    n, d = T.shape
    assert X.shape == (n, d)
    w, W = rng.normal(size=d), rng.normal(size=(d, 3))
    v, V = rng.normal(size=n), rng.normal(size=(n, 2))
    assert_close(X @ w, T @ w)
    assert_close(X @ W, T @ W)
    assert_close(X.T @ v, T.T @ v)
    assert_close(X.T @ V, T.T @ V)
    assert_close(X.colsums(), T.sum(axis=0))
    assert_close(X.column_norms_squared(), (T**2).sum(axis=0))
    assert_close(X.row_norms_squared(), (T**2).sum(axis=1))
    labels = rng.integers(0, 3, n)
    assert_close(X.group_sums(labels, 3), T.T @ np.eye(3)[labels])
    offsets = rng.normal(size=3)
    nearest, best = X.nearest(W, offsets)
    scores = T @ W + offsets
    assert_close(best, scores.min(axis=1))
    assert_close(scores[np.arange(n), nearest], scores.min(axis=1))
    picked = rng.integers(0, max(n, 1), 4 if n else 0)
    assert_close(X.rows(picked), T[picked])
    if d <= CROSSPROD_MAX_COLUMNS:
        weights = rng.random(n)
        assert_close(X.crossprod(), T.T @ T)
        assert_close(X.crossprod(weights), T.T @ (weights[:, None] * T))
