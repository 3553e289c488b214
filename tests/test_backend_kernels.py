"""Each fused numba kernel equals its plain NumPy reference (ilargi_db.backend.kernels), on any shape."""

from __future__ import annotations

import numpy as np
import scipy.sparse
from hypothesis import given, settings
from hypothesis import strategies as st

from ilargi_db.backend.kernels import ReferenceKernels
from ilargi_db.backend.numba_kernels import NumbaKernels
from ilargi_db.backend.parallel import kernel_threads

REFERENCE, FUSED = ReferenceKernels(np), NumbaKernels()


@st.composite
def layouts(draw):
    """A gather layout: an optional dense block, an optional index into padded tables, and operands."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.sampled_from([0, 1, 2, 17, 5000, 70_000]))  # 70,000 rows: several reduction chunks
    a = draw(st.integers(0, 4))
    t = draw(st.integers(0, 3))
    if a == 0 and t == 0:
        a = 1
    rows = draw(st.integers(1, 300))
    m = draw(st.integers(1, 4))
    dense = np.asfortranarray(rng.normal(size=(n, a))) if a else None
    if dense is not None and draw(st.booleans()):
        dense = np.ascontiguousarray(dense)  # both layouts reach the kernels
    positions = draw(st.sampled_from([np.int32, np.int64]))  # the kernels' two position types
    index = np.asfortranarray(rng.integers(0, rows, (n, t)), dtype=positions) if t else None
    return rng, n, dense, index, rows, m


@settings(max_examples=40, deadline=None)
@given(layouts())
def test_fused_kernels_match_reference(layout):
    rng, n, dense, index, rows, m = layout
    a = 0 if dense is None else dense.shape[1]
    t = 0 if index is None else index.shape[1]
    w, W = rng.normal(size=a), rng.normal(size=(a, m))
    tables, tables3 = rng.normal(size=(t, rows)), rng.normal(size=(t, rows, m))
    w_dense = None if dense is None else w
    W_dense = None if dense is None else W
    tab = None if index is None else tables
    tab3 = None if index is None else tables3

    np.testing.assert_allclose(
        FUSED.gather_sum(dense, w_dense, index, tab), REFERENCE.gather_sum(dense, w_dense, index, tab), atol=1e-9
    )
    np.testing.assert_allclose(
        FUSED.gather_sum(dense, W_dense, index, tab3), REFERENCE.gather_sum(dense, W_dense, index, tab3), atol=1e-9
    )
    for v in (rng.normal(size=n), rng.normal(size=(n, m))):
        for got, want in zip(FUSED.segment_sums(dense, index, rows, v), REFERENCE.segment_sums(dense, index, rows, v)):
            assert (got is None) == (want is None)
            if want is not None:
                np.testing.assert_allclose(got, want, atol=1e-8)
    if index is not None:  # I_a^T D I_b S_b: a's index scatters, b's gathers (or row i itself)
        scatter, gather, weights = index[:, 0], index[:, -1], rng.random(n)
        table = rng.normal(size=(rows, m))
        for args in ((scatter, gather, table, rows), (scatter, gather, table, rows, weights)):
            np.testing.assert_allclose(FUSED.scatter_gathered(*args), REFERENCE.scatter_gathered(*args), atol=1e-8)
        by_key = FUSED.rows_by_key(scatter, rows)
        for got, want in zip(by_key, REFERENCE.rows_by_key(scatter, rows)):
            np.testing.assert_array_equal(got, want)
        data_a = rng.normal(size=(rows, 3))
        for d in (None, weights):
            got = FUSED.pair_gram(by_key, gather, data_a, table, d)
            np.testing.assert_allclose(got, REFERENCE.pair_gram(by_key, gather, data_a, table, d), atol=1e-8)
        one_hot_a = scipy.sparse.random(rows, 4, density=0.3, random_state=rng, format="csr")
        one_hot_b = scipy.sparse.random(rows, 5, density=0.4, random_state=rng, format="csr")
        wide = one_hot_b.copy()  # scipy's int64 structure (a block of 2^31 nonzeros), beside its int32 one
        wide.indptr, wide.indices = wide.indptr.astype(np.int64), wide.indices.astype(np.int64)
        for d, right in ((None, one_hot_b), (weights, one_hot_b), (weights, wide)):  # each row's nonzero pairs
            got = FUSED.sparse_pair_gram(scatter, gather, one_hot_a, right, d)
            np.testing.assert_allclose(got, REFERENCE.sparse_pair_gram(scatter, gather, one_hot_a, right, d), atol=1e-8)
        if dense is not None:
            np.testing.assert_allclose(
                FUSED.scatter_gathered(scatter, None, dense, rows),
                REFERENCE.scatter_gathered(scatter, None, dense, rows),
            )
    if index is not None:  # T^T D T but for two indexed blocks: the dense Gram and I_k^T D [dense, 1]
        for weights in (None, rng.random(n)):
            got, want = FUSED.gram_pass(dense, index, rows, weights), REFERENCE.gram_pass(dense, index, rows, weights)
            for g, expected in zip(got, want):
                np.testing.assert_allclose(g, expected, atol=1e-8)
    if dense is not None:  # a block times an operand (one of the gather's tables)
        for operand in (w, W):
            out = np.full((n, *operand.shape[1:]), np.nan)
            got = FUSED.dense_product(dense, operand, out.copy())
            np.testing.assert_allclose(got, REFERENCE.dense_product(dense, operand, out), atol=1e-9)
    offsets = rng.normal(size=m)
    labels, best = FUSED.nearest(dense, W_dense, index, tab3, offsets)
    expected_labels, expected_best = REFERENCE.nearest(dense, W_dense, index, tab3, offsets)
    np.testing.assert_allclose(best, expected_best, atol=1e-9)
    np.testing.assert_array_equal(labels, expected_labels)
    sums = FUSED.label_sums(dense, index, rows, labels, m)
    for got, want in zip(sums, REFERENCE.label_sums(dense, index, rows, labels, m)):
        assert (got is None) == (want is None)
        if want is not None:
            np.testing.assert_allclose(got, want, atol=1e-8)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 3, 70_000]))
def test_fused_logistic_loss_matches_reference(seed, n):
    rng = np.random.default_rng(seed)
    z = rng.normal(scale=rng.choice([1.0, 50.0, 800.0]), size=n)  # large |z|: no overflow either way
    y = (rng.random(n) < 0.5).astype(float)
    loss, residual = FUSED.logistic_loss_residual(z.copy(), y)
    expected_loss, expected_residual = REFERENCE.logistic_loss_residual(z, y)
    assert np.isfinite(loss)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(residual, expected_residual, atol=1e-15)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 7, 5000]), st.integers(1, 6))
def test_fused_multiplicative_update_matches_reference(seed, n, r):
    rng = np.random.default_rng(seed)
    W, numerator, gram = rng.random((n, r)), rng.random((n, r)), rng.random((r, r))
    W[rng.random((n, r)) < 0.1] = 0.0  # zero denominators take epsilon
    gram[rng.random((r, r)) < 0.3] = 0.0
    expected = REFERENCE.multiplicative_update(W, numerator, gram, 1e-12)
    np.testing.assert_allclose(FUSED.multiplicative_update(W.copy(), numerator, gram, 1e-12), expected, rtol=1e-12)


def test_reductions_do_not_depend_on_the_thread_count():
    rng = np.random.default_rng(0)
    n = 300_000
    dense, index = np.asfortranarray(rng.normal(size=(n, 3))), np.asfortranarray(rng.integers(0, 50, (n, 2)))
    v, V, labels = rng.normal(size=n), rng.normal(size=(n, 3)), rng.integers(0, 4, n)
    table, weights = rng.normal(size=(50, 3)), rng.random(n)
    results = []
    for threads in (1, 2, 3):
        with kernel_threads(threads):
            results.append(
                (
                    *FUSED.segment_sums(dense, index, 50, v),
                    *FUSED.segment_sums(dense, index, 50, V),
                    *FUSED.label_sums(dense, index, 50, labels, 4),
                    *FUSED.gram_pass(dense, index, 50, weights),
                    FUSED.scatter_gathered(index[:, 0], index[:, 1], table, 50, weights),
                    FUSED.pair_gram(FUSED.rows_by_key(index[:, 0], 50), index[:, 1], dense[:50], dense[:50], weights),
                    FUSED.logistic_loss_residual(v.copy(), (v > 0).astype(float))[0],
                )
            )
    for got in results[1:]:
        for a, b in zip(got, results[0]):
            np.testing.assert_array_equal(a, b)
