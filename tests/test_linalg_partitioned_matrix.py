"""Row partitions over shared blocks: every operator equals the materialized join's, and the models'
results equal those on the whole normalized matrix (issue 14's partitioned normalized matrix)."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ilargi_db
from ilargi_db.cluster import RemotePartitions
from ilargi_db.linalg import Block, NormalizedMatrix, PartitionedMatrix, Partitions, PartitionSource, ResidentPartitions
from tests.oracle import assert_close, materialized
from tests.strategies import schemas


def residual_sums(X, rows, args):
    """A sum over rows for reduce_rows: X^T (X w - v), sum(v), and the row count."""
    (v,), (w,) = rows, args
    return X.T @ (X @ w - v), float(v.sum()), X.shape[0]


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def partitioned(schema, fraction: float):
    con = duckdb.connect()
    schema.load(con)
    X, _ = ilargi_db.normalize(con, schema.query, target=schema.target, backend="numpy", sparse=schema.sparse)
    T, _ = materialized(con, schema.query, schema.target)
    n = X.shape[0]
    rows = max(1, int(fraction * n))
    return PartitionedMatrix.from_blocks(X.blocks, n, rows, X.feature_names, backend="numpy"), X, T


@SETTINGS
@given(schema=schemas(), fraction=st.floats(0.05, 1.2), seed=st.integers(0, 2**16))
def test_partitioned_operators_match_the_materialized_join(schema, fraction, seed):
    P, X, T = partitioned(schema, fraction)
    rng = np.random.default_rng(seed)
    n, d = T.shape
    assert P.shape == (n, d) and P.T.shape == (d, n)
    w, W, v, V = rng.normal(size=d), rng.normal(size=(d, 3)), rng.normal(size=n), rng.normal(size=(n, 2))
    assert_close(P.materialize(), T)
    assert_close(P @ w, T @ w)
    assert_close(P @ W, T @ W)
    assert_close(P.T @ v, T.T @ v)
    assert_close(P.T @ V, T.T @ V)
    assert_close(v @ P, v @ T)
    assert_close(V.T @ P, V.T @ T)
    assert_close(P.crossprod(), T.T @ T)
    weights = rng.random(n)
    assert_close(P.crossprod(weights), T.T @ (weights[:, None] * T))
    assert_close(P.colsums(), T.sum(axis=0))
    assert_close(P.rowsums(), T.sum(axis=1))
    assert_close(P.column_norms_squared(), (T**2).sum(axis=0))
    assert_close(P.row_norms_squared(), (T**2).sum(axis=1))
    labels = rng.integers(0, 3, n)
    assert_close(P.group_sums(labels, 3), T.T @ np.eye(3)[labels])
    picked = rng.integers(0, max(n, 1), 5 if n else 0)
    assert_close(P.rows(picked), T[picked])
    if n:
        C = rng.normal(size=(d, 2))
        offsets = rng.normal(size=2)
        got, best = P.nearest(C, offsets)
        scores = T @ C + offsets
        assert_close(best, scores.min(axis=1))
        assert (scores[np.arange(n), got] <= scores.min(axis=1) + 1e-9).all()
        assert P.min() == pytest.approx(float(T.min()))
    assert_close((P * 2 + 1).materialize(), T * 2 + 1)
    assert_close((P**2).colsums(), (T**2).sum(axis=0))
    kept = P.keep_rows(v)
    for found in (P.reduce_rows(residual_sums, (kept,), (w,)), P.reduce_rows(residual_sums, (v,), (w,))):
        assert_close(found[0], T.T @ (T @ w - v))
        assert found[1] == pytest.approx(float(v.sum()), abs=1e-9) and found[2] == n


def test_dimension_blocks_are_shared_not_copied():
    fact = Block(np.arange(20.0).reshape(10, 2), columns=[0, 1])
    dimension = np.arange(8.0).reshape(4, 2)
    dim = Block(dimension, columns=[2, 3], index=np.arange(10) % 4)
    P = PartitionedMatrix.from_blocks([fact, dim], n_rows=10, rows_per_partition=3, backend="numpy")
    assert P.n_partitions == 4 and [p.shape[0] for p in P.partitions] == [3, 3, 3, 1]
    assert all(any(part.data is dimension for part in p.blocks) for p in P.partitions)


def test_partials_add_in_a_fixed_order():
    rng = np.random.default_rng(3)
    blocks = [Block(rng.normal(size=(5_000, 3)) * 10.0 ** rng.integers(-8, 8, size=(5_000, 3)), columns=[0, 1, 2])]
    P = PartitionedMatrix.from_blocks(blocks, 5_000, 700, backend="numpy")
    v = rng.normal(size=5_000)
    assert np.array_equal(P.T @ v, P.T @ v) and np.array_equal(P.crossprod(), P.crossprod())
    with pytest.raises(ValueError, match="at least 1"):
        PartitionedMatrix.from_blocks(blocks, 5_000, 0, backend="numpy")


@pytest.mark.parametrize(
    "estimator, params",
    [
        ("LinearRegression", {"alpha": 0.5}),
        ("LinearRegression", {"solver": "cg", "tol": 1e-12, "max_iter": 500}),
        ("LinearRegression", {"solver": "gd", "alpha": 1.0, "tol": 1e-12, "max_iter": 300}),
        ("LogisticRegression", {"C": 1.0, "tol": 1e-10, "max_iter": 500}),
        ("LogisticRegression", {"C": 1.0, "solver": "newton", "tol": 1e-10}),
        ("KMeans", {"n_clusters": 3, "random_state": 0}),
        ("GaussianNMF", {"n_components": 2, "random_state": 0, "max_iter": 50}),
    ],
)
def test_models_on_partitions_equal_models_on_the_whole_matrix(estimator, params):
    rng = np.random.default_rng(0)
    n = 3_000
    fact = Block(rng.random((n, 3)), columns=[0, 1, 2])
    dim = Block(rng.random((40, 4)), columns=[3, 4, 5, 6], index=rng.integers(0, 40, n))
    whole = NormalizedMatrix([fact, dim], n_rows=n, backend="numpy")
    parts = PartitionedMatrix.from_blocks([fact, dim], n, 400, backend="numpy")
    y = (
        (whole @ rng.normal(size=7) > 0.8).astype(float)
        if estimator == "LogisticRegression"
        else whole @ np.arange(7.0)
    )
    cls = getattr(ilargi_db, estimator)
    a = cls(**params).fit(whole, y) if "Regression" in estimator else cls(**params).fit(whole)
    b = cls(**params).fit(parts, y) if "Regression" in estimator else cls(**params).fit(parts)
    for name in ("coef_", "cluster_centers_", "components_"):
        if hasattr(a, name):
            np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=1e-7, atol=1e-9)
    if estimator == "KMeans":
        assert np.array_equal(a.labels_, b.labels_)  # the same labels from the same start


def test_reduce_rows_of_a_standardized_view_sees_each_partition_standardized_as_the_whole():
    from ilargi_db.linalg import ScaledMatrix

    rng = np.random.default_rng(5)
    n = 1_000
    fact = Block(rng.random((n, 2)) * 50, columns=[0, 1])
    dim = Block(rng.random((30, 3)), columns=[2, 3, 4], index=rng.integers(0, 30, n))
    whole = ScaledMatrix.standardize(NormalizedMatrix([fact, dim], n_rows=n, backend="numpy"))
    parts = ScaledMatrix.standardize(PartitionedMatrix.from_blocks([fact, dim], n, 130, backend="numpy"))
    v, w = rng.normal(size=n), rng.normal(size=5)
    expected = whole.reduce_rows(residual_sums, (whole.keep_rows(v),), (w,))
    found = parts.reduce_rows(residual_sums, (parts.keep_rows(v),), (w,))
    np.testing.assert_allclose(found[0], expected[0], rtol=1e-10, atol=1e-9)
    assert found[2] == n
    with pytest.raises(ValueError, match="untransposed"):
        parts.base.T.reduce_rows(residual_sums, (v,), (w,))


def test_resident_streamed_and_remote_partitions_all_speak_the_partitions_protocol():
    """A partitioned matrix asks its partitions through one protocol, wherever they are held; a plain list is
    wrapped as resident partitions when the matrix is made."""
    part = NormalizedMatrix([Block(np.ones((2, 1)), columns=[0])], n_rows=2, backend="numpy")
    resident: Partitions = ResidentPartitions([part])
    streamed: Partitions = PartitionSource(lambda k: part, 1)
    remote: Partitions = RemotePartitions(client=None, futures=[])
    assert all(isinstance(source, Partitions) for source in (resident, streamed, remote))
    assert resident.resident and not streamed.resident and not remote.resident
    assert not isinstance([part], Partitions)
    assert isinstance(PartitionedMatrix([part, part]).partitions, ResidentPartitions)


def test_local_partitions_run_each_here_in_order_and_keep_the_pieces_they_are_given():
    parts = [
        NormalizedMatrix([Block(np.arange(n, dtype=float).reshape(n, 1), columns=[0])], n_rows=n, backend="numpy")
        for n in (2, 3, 4)
    ]
    for source in (ResidentPartitions(parts), PartitionSource(parts.__getitem__, 3)):
        found = source.each(lambda p, a, b: (p.shape[0], a, b), [1, 2, 3], ["x", "y", "z"])
        assert found == [(2, 1, "x"), (3, 2, "y"), (4, 3, "z")]
        pieces = [np.zeros(2), np.zeros(3), np.zeros(4)]
        assert source.keep(pieces) is pieces
        doubled = source.mapped(lambda p: p * 2)
        assert doubled.resident == source.resident
        np.testing.assert_array_equal(doubled[2].materialize(), 2 * parts[2].materialize())
