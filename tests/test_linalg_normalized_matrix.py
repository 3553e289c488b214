"""Every operator of the normalized matrix equals the same operator on the materialized join."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ilargi_db
from tests.oracle import assert_close, materialized
from tests.strategies import schemas

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _normalized(schema):
    con = duckdb.connect()
    schema.load(con)
    X, y = ilargi_db.normalize(con, schema.query, target=schema.target, backend="numpy", sparse=schema.sparse)
    T, y_expected = materialized(con, schema.query, schema.target)
    return X, y, T, y_expected


@SETTINGS
@given(schema=schemas(), seed=st.integers(0, 2**16))
def test_linear_operators_match_materialized_join(schema, seed):
    X, y, T, y_expected = _normalized(schema)
    rng = np.random.default_rng(seed)
    n, d = T.shape
    assert X.shape == (n, d)
    assert_close(X.materialize(), T)
    assert_close(y, y_expected)
    w, W = rng.normal(size=d), rng.normal(size=(d, 3))
    v, V = rng.normal(size=n), rng.normal(size=(n, 2))
    assert_close(X @ w, T @ w)
    assert_close(X @ W, T @ W)
    assert_close(V.T @ X, V.T @ T)  # RMM
    assert_close(v @ X, v @ T)
    assert_close(X.T @ v, T.T @ v)
    assert_close(X.T @ V, T.T @ V)
    assert_close(W.T @ X.T, W.T @ T.T)
    assert_close(X.crossprod(), T.T @ T)
    assert_close(X.rowsums(), T.sum(axis=1))
    assert_close(X.colsums(), T.sum(axis=0))
    assert_close(X.T.rowsums(), T.sum(axis=0))
    assert_close(np.array(X.sum()), np.array(T.sum()))
    assert X.T.shape == (d, n) and X.T.T.shape == (n, d)
    assert_close(X.T.materialize(), T.T)
    # What the models use beyond the rewrite rules.
    weights = rng.random(n)
    assert_close(X.crossprod(weights), T.T @ (weights[:, None] * T))
    labels = rng.integers(0, 3, n)
    assert_close(X.group_sums(labels, 3), T.T @ np.eye(3)[labels])
    picked = rng.integers(0, max(n, 1), 4 if n else 0)
    assert_close(X.rows(picked), T[picked])
    assert_close(X.take_rows(picked).materialize(), T[picked])
    assert_close(X.take_rows(picked) @ w, T[picked] @ w)
    assert_close(X.row_norms_squared(), (T**2).sum(axis=1))


@SETTINGS
@given(schema=schemas(), seed=st.integers(0, 2**16))
def test_elementwise_operators_match_materialized_join(schema, seed):
    X, _, T, _ = _normalized(schema)
    w = np.random.default_rng(seed).normal(size=T.shape[1])
    with np.errstate(all="ignore"):
        cases = [
            (X * 2.5, T * 2.5),
            (3 * X, 3 * T),
            (X / 4, T / 4),
            (X**2, T**2),
            (X + 1.5, T + 1.5),  # f(0) != 0: empty rows of LEFT joins become 1.5
            (2 - X, 2 - T),
            (-X, -T),
            (X.exp(), np.exp(T)),
            ((X**2 + 1).log(), np.log(T**2 + 1)),
            ((X + 1) * 2 - 0.5, (T + 1) * 2 - 0.5),
        ]
    for got, expected in cases:
        assert_close(got.materialize(), expected)
        assert_close(got @ w, expected @ w)
        assert_close(got.crossprod(), expected.T @ expected)


@pytest.mark.parametrize("op", ["log", "rtruediv", "pow0"])
def test_elementwise_with_infinities_and_nans(op):
    con = duckdb.connect()
    con.sql("CREATE TABLE f AS SELECT range AS k, range - 2.0 AS x FROM range(5)")
    con.sql("CREATE TABLE d AS SELECT range AS k, range * 1.0 AS z FROM range(3)")
    query = "SELECT x, z FROM f LEFT JOIN d ON f.k = d.k ORDER BY x"
    X, _ = ilargi_db.normalize(con, query, backend="numpy")
    T, _ = materialized(con, query)
    with np.errstate(all="ignore"):
        got, expected = {
            "log": (X.log(), np.log(T)),
            "rtruediv": (1 / X, 1 / T),
            "pow0": (X**0, T**0),
        }[op]
    np.testing.assert_array_equal(got.materialize(), expected)


def test_a_matrix_of_the_same_data_takes_the_sums_another_one_memoized():
    from ilargi_db.linalg import CROSSPROD, MEMOIZED_SUMS, Block, NormalizedMatrix

    rng = np.random.default_rng(0)
    blocks = [Block(rng.normal(size=(6, 2)), [0, 1]), Block(rng.normal(size=(3, 1)), [2], index=np.arange(6) % 3)]
    X = NormalizedMatrix(blocks, n_rows=6, backend="numpy")
    assert X.memoized_sums() == {} and X.memoized_seconds == 0.0
    gram, sums = X.crossprod(), X.colsums()
    kept = X.memoized_sums()
    assert set(kept) == set(MEMOIZED_SUMS) and X.memoized_seconds > 0
    assert_close(kept[CROSSPROD], gram)
    again = NormalizedMatrix(blocks, n_rows=6, backend="numpy")
    again.restore_memoized_sums({CROSSPROD: 2 * gram, "rowsums": np.zeros(6)})  # other names are ignored
    assert set(again.memoized_sums()) == {CROSSPROD}
    assert_close(again.crossprod(), 2 * gram)  # served as given, not computed
    assert_close(again.colsums(), sums)  # computed: none was given
