"""``X[rows]`` on a normalized matrix: the selected rows stay factorized, and every operator on them equals
the same operator on the materialized join's rows."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import ilargi_db
from ilargi_db.errors import IlargiError
from ilargi_db.linalg import Block, NormalizedMatrix, ScaledMatrix
from tests.oracle import assert_close, materialized
from tests.strategies import schemas

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _normalized(schema):
    con = duckdb.connect()
    schema.load(con)
    X, _ = ilargi_db.normalize(con, schema.query, target=schema.target, backend="numpy", sparse=schema.sparse)
    T, _ = materialized(con, schema.query, schema.target)
    return X, T


def _gradient(X, rows, args):
    """A sum over the rows as the models write one: X^T (v * a)."""
    (v,), (a,) = rows, args
    return (X.T @ (v * a),)


def _selections(rng: np.random.Generator, n: int) -> list:
    """The three ways scikit-learn's splitters hand rows over, repeats and any order included."""
    picked = rng.integers(0, n, rng.integers(1, 2 * n + 1)) if n else np.zeros(0, dtype=np.int64)
    mask = rng.random(n) < 0.6
    start = int(rng.integers(0, n + 1))
    return [picked, mask, slice(start, None, int(rng.integers(1, 3)))]


def _assert_operators_match(S, R, rng: np.random.Generator) -> None:
    """Every operator of ``S`` (a selection) equals the same on ``R`` (its rows materialized)."""
    m, d = R.shape
    assert S.shape == (m, d)
    w, W = rng.normal(size=d), rng.normal(size=(d, 3))
    v, V = rng.normal(size=m), rng.normal(size=(m, 2))
    assert_close(S.materialize(), R)
    assert_close(S @ w, R @ w)
    assert_close(S @ W, R @ W)
    assert_close(v @ S, v @ R)
    assert_close(S.T @ v, R.T @ v)
    assert_close(S.T @ V, R.T @ V)
    assert_close(S.crossprod(), R.T @ R)
    weights = rng.random(m)
    assert_close(S.crossprod(weights), R.T @ (weights[:, None] * R))
    assert_close(S.rowsums(), R.sum(axis=1))
    assert_close(S.colsums(), R.sum(axis=0))
    assert_close(S.column_norms_squared(), (R**2).sum(axis=0))
    assert_close(S.row_norms_squared(), (R**2).sum(axis=1))
    labels = rng.integers(0, 3, m)
    assert_close(S.group_sums(labels, 3), R.T @ np.eye(3)[labels])
    (gradient,) = S.reduce_rows(_gradient, (S.keep_rows(v),), (2.0,))
    assert_close(gradient, R.T @ (2.0 * v))
    if m:
        centers = rng.normal(size=(d, 2))
        offsets = rng.normal(size=2)
        labels_found, best = S.nearest(centers, offsets)
        scores = R @ centers + offsets
        assert_close(best, scores.min(axis=1))
        assert_close(scores[np.arange(m), labels_found], scores.min(axis=1))
        picked = rng.integers(0, m, 3)
        assert_close(S.rows(picked), R[picked])


@SETTINGS
@given(schema=schemas(), seed=st.integers(0, 2**16))
def test_operators_on_selected_rows_match_the_materialized_rows(schema, seed):
    X, T = _normalized(schema)
    rng = np.random.default_rng(seed)
    for rows in _selections(rng, T.shape[0]):
        S = X[rows]
        assert isinstance(S, NormalizedMatrix)
        _assert_operators_match(S, T[rows], rng)
        assert_close(S.exp().materialize(), np.exp(T[rows]))  # empty rows take e**fill, as in the join
        assert_close(X[rows, ...].materialize(), T[rows])  # how sklearn.utils._safe_indexing asks
        assert_close(X[rows, :].materialize(), T[rows])


@SETTINGS
@given(schema=schemas(), seed=st.integers(0, 2**16))
def test_a_selection_of_a_selection_is_the_rows_of_the_rows(schema, seed):
    X, T = _normalized(schema)
    rng = np.random.default_rng(seed)
    outer = _selections(rng, T.shape[0])[0]
    inner = _selections(rng, len(outer))[1]
    _assert_operators_match(X[outer][inner], T[outer][inner], rng)


@SETTINGS
@given(schema=schemas(), seed=st.integers(0, 2**16))
def test_selected_rows_of_a_standardized_view_are_standardized_as_the_whole(schema, seed):
    X, T = _normalized(schema)
    assume(T.shape[0] > 0)  # the mean of no rows is undefined
    rng = np.random.default_rng(seed)
    Z = ScaledMatrix.standardize(X)
    rows = _selections(rng, T.shape[0])[0]
    S = Z[rows]
    assert isinstance(S, ScaledMatrix)
    R = (T[rows] - Z.mean) / Z.scale
    w, v = rng.normal(size=T.shape[1]), rng.normal(size=R.shape[0])
    assert_close(S.materialize(), R)
    assert_close(S @ w, R @ w)
    assert_close(S.T @ v, R.T @ v)
    assert_close(S.crossprod(), R.T @ R)


def _star() -> tuple[NormalizedMatrix, np.ndarray]:
    """A fact of 6 rows with one feature, and a dimension of 3 rows with two, one fact row unmatched."""
    fact = Block(np.arange(6.0)[:, None], columns=[0])
    dim = Block(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), columns=[1, 2], index=np.array([0, 1, 2, 2, 1, -1]))
    X = NormalizedMatrix([fact, dim], n_rows=6, backend="numpy")
    return X, X.materialize()


def test_a_selection_shares_the_dimension_blocks_and_copies_only_the_selected_fact_rows():
    X, T = _star()
    S = X[np.array([5, 0, 0, 3])]
    dimension = next(b for b in X.blocks if b.index is not None)
    assert any(b.data is dimension.data for b in S.blocks)  # the same array, not a copy
    fact = next(b for b in S.blocks if b.index is None)
    assert fact.data.shape[0] == 4
    assert_close(S.materialize(), T[[5, 0, 0, 3]])


def test_one_integer_gives_one_dense_row_and_negative_rows_count_from_the_end():
    X, T = _star()
    assert_close(X[2], T[2])
    assert_close(X[-1], T[-1])
    assert_close(X[[-1, -6]].materialize(), T[[-1, -6]])
    assert X[[]].shape == (0, 3)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([0, 6], "row 6 is out of range for a matrix of 6 rows"),
        (np.ones(5, dtype=bool), "needs one entry per row (6), it has 5"),
        (np.array([0.5, 1.0]), "rows must be integers, a boolean mask or a slice"),
        (np.zeros((2, 2), dtype=int), "1-D array"),
        ((slice(None), [0, 1]), "its columns are the query's features"),
    ],
)
def test_a_bad_selection_says_what_rows_are_and_what_to_do(rows, message):
    X, _ = _star()
    with pytest.raises(IlargiError, match=message.replace("(", r"\(").replace(")", r"\)")):
        X[rows]


def test_rows_of_a_transpose_are_refused_with_the_order_that_works():
    X, _ = _star()
    with pytest.raises(IlargiError, match=r"X\[rows\]\.T"):
        X.T[[0, 1]]
    with pytest.raises(IlargiError, match=r"X\[rows\]\.T"):
        ScaledMatrix.standardize(X).T[[0, 1]]


def test_a_normalized_matrix_never_turns_into_a_dense_array_implicitly():
    X, T = _star()
    for matrix in (X, X[[0, 1]], ScaledMatrix.standardize(X)):
        with pytest.raises(IlargiError, match=r"does not turn into one implicitly .* X\.materialize\(\)"):
            np.asarray(matrix)
    assert_close(X.materialize(), T)  # building it is a deliberate call
