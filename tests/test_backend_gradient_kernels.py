"""The losses' fused gradient kernels equal their NumPy references, on any thread count."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ilargi_db.backend.gradient_kernels import (
    logistic_gradients,
    logistic_gradients_reference,
    poisson_gradients,
    poisson_gradients_reference,
    softmax_gradients,
    softmax_gradients_reference,
)
from ilargi_db.backend.parallel import kernel_threads


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 70, 200_000]), st.sampled_from([1, 2]))
def test_fused_gradients_equal_their_references(seed, n, threads):
    rng = np.random.default_rng(seed)
    raw = rng.normal(size=n) * rng.choice([0.1, 10.0, 800.0])  # 800: exp overflows; the logistic stays in [0, 1]
    labels, counts = (rng.random(n) < 0.5).astype(float), rng.poisson(3.0, n).astype(float)
    for fused, reference, args in (
        (logistic_gradients, logistic_gradients_reference, (raw, labels)),
        (poisson_gradients, poisson_gradients_reference, (np.clip(raw, -30, 30), counts, 0.7)),
    ):
        got, want = (np.empty(n), np.empty(n)), (np.empty(n), np.empty(n))
        with kernel_threads(threads):
            fused(*args, *got)
        reference(*args, *want)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)  # p - y: a difference near 1 - 1


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([0, 1, 70, 200_000]),
    st.integers(3, 7),
    st.sampled_from([1, 2]),
)
def test_fused_softmax_gradients_equal_their_reference(seed, n, classes, threads):
    """Every class's gradient and hessian per row (classes, rows), scores large enough to overflow exp."""
    rng = np.random.default_rng(seed)
    raw = rng.normal(size=(classes, n)) * rng.choice([0.1, 10.0, 800.0])
    y = rng.integers(0, classes, n).astype(float)
    factor = classes / (classes - 1.0)
    got = (np.empty((classes, n)), np.empty((classes, n)))
    want = (np.empty((classes, n)), np.empty((classes, n)))
    with kernel_threads(threads):
        softmax_gradients(raw, y, factor, *got)
    softmax_gradients_reference(raw, y, factor, *want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got[0].sum(axis=0), 0.0, atol=1e-12)  # the probabilities sum to 1
