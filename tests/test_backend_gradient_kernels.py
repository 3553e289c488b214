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
