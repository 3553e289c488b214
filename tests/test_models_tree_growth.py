"""The tree grower: a whole tree grown in one compiled call is the tree the per-node steps grow.

The per-node grower runs on the NumPy reference kernels (:class:`ReferenceTreeKernels`: bincounts, boolean
partitions), the whole-tree one on the fused kernels: the same splits, children and row counts, the same leaf
values to rounding, and the same raw scores after the leaves' values are added.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ilargi_db.backend import quantization
from ilargi_db.backend.parallel import kernel_threads
from ilargi_db.backend.tree_kernels import NumbaTreeKernels
from ilargi_db.backend.tree_reference import ReferenceTreeKernels
from ilargi_db.linalg.binned_matrix import BinnedBlock, BinnedMatrix
from ilargi_db.linalg.feature_bins import FeatureBins, bin_dtype
from ilargi_db.linalg.row_identity import spread_copies
from ilargi_db.models._tree_growth import GrowthLimits, TreeGrower


@st.composite
def growth_cases(draw):
    """A row-wise binned matrix (numeric and categorical features, missing values), training rows, gradients and
    limits."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.sampled_from([1, 40, 500, 5000, 70_000]))  # 70,000: the root and large nodes split in row chunks
    c = draw(st.integers(1, 6))
    missing_bin = draw(st.sampled_from([4, 32, 255, 1024]))
    categorical = rng.random(c) < 0.3
    value_bins = rng.integers(1, missing_bin + 1, c)  # a feature's bins of values: fewer than the most at times
    codes = np.empty((n, c), dtype=bin_dtype(missing_bin))
    for j in range(c):
        column = rng.integers(0, value_bins[j], n)
        column[rng.random(n) < draw(st.sampled_from([0.0, 0.1]))] = missing_bin
        codes[:, j] = column
    bins = [
        FeatureBins(f"x{j}", True, categories=tuple(f"c{k}" for k in range(value_bins[j])))
        if categorical[j]
        else FeatureBins(f"x{j}", False, np.arange(value_bins[j] - 1, dtype=float))
        for j in range(c)
    ]
    order = rng.permutation(c)  # the block's columns in another order than the features'
    block = BinnedBlock(np.ascontiguousarray(codes[:, order]), None, order, np.zeros(c, dtype=codes.dtype))
    X = BinnedMatrix([block], n, bins, missing_bin)
    rows = np.sort(rng.permutation(n)[: max(1, int(n * draw(st.sampled_from([1.0, 0.7]))))])
    g = rng.normal(size=n) * draw(st.sampled_from([1.0, 1e-6]))
    unit_hessian = draw(st.booleans())
    h = np.ones(n) if unit_hessian else rng.random(n) + 0.01
    limits = GrowthLimits(
        max_leaves=draw(st.sampled_from([1, 2, 7, 31, 63])),
        max_depth=draw(st.sampled_from([None, 0, 1, 3, 6])),
        min_samples_leaf=draw(st.sampled_from([1, 5, 20])),
        l2_regularization=draw(st.sampled_from([0.0, 1.0])),
    )
    quantized_seed = draw(st.sampled_from([None, 7]))
    keys = rng.integers(0, 2**63, n).astype(np.uint64)
    return X, rows, g, h, unit_hessian, limits, quantized_seed, keys


@settings(max_examples=60, deadline=None)
@given(growth_cases())
def test_a_whole_tree_in_one_call_is_the_tree_grown_node_by_node(case):
    """The same tree; on quantized gradients the very same (integer sums, exact in any order)."""
    X, rows, g, h, unit_hessian, limits, quantized_seed, keys = case
    compiled = TreeGrower(X, rows, limits, NumbaTreeKernels(), unit_hessian, quantized_seed, keys)
    per_node = TreeGrower(X, rows, limits, ReferenceTreeKernels(np), unit_hessian, quantized_seed, keys)
    assert compiled.whole_trees and not per_node.whole_trees
    raw_compiled, raw_per_node = np.full(X.n_rows, 0.5), np.full(X.n_rows, 0.5)
    rtol = 0.0 if quantized_seed is not None else 1e-9
    for _ in range(2):  # a second tree on the same grower: its buffers start over
        a = compiled.grow(g, h, 0.1, raw_compiled)
        b = per_node.grow(g, h, 0.1, raw_per_node)
        for field in ("feature", "left", "right", "count", "goes_left"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
        np.testing.assert_allclose(a.value, b.value, rtol=rtol, atol=rtol * 1e-3)
        np.testing.assert_allclose(a.gain, b.gain, rtol=rtol, atol=rtol * 1e-3)
        np.testing.assert_allclose(raw_compiled, raw_per_node, rtol=rtol, atol=rtol * 1e-3)


@settings(max_examples=10, deadline=None)
@given(growth_cases())
def test_a_tree_does_not_depend_on_the_thread_count(case):
    X, rows, g, h, unit_hessian, limits, quantized_seed, keys = case
    trees, raws = [], []
    for threads in (1, 2, 3):
        raw = np.zeros(X.n_rows)
        with kernel_threads(threads):
            grower = TreeGrower(X, rows, limits, NumbaTreeKernels(), unit_hessian, quantized_seed, keys)
            trees.append(grower.grow(g, h, 0.1, raw))
        raws.append(raw)
    for tree, raw in zip(trees[1:], raws[1:]):
        for field in ("feature", "left", "right", "count", "goes_left", "value", "gain"):
            np.testing.assert_array_equal(getattr(tree, field), getattr(trees[0], field), err_msg=field)
        np.testing.assert_array_equal(raw, raws[0])


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 300, 70_000]), st.booleans(), st.integers(0, 2**62))
def test_quantized_gradients_are_the_reference_rounding_unbiased_and_within_their_levels(seed, n, unit_hessian, draw):
    rng = np.random.default_rng(seed)
    g = rng.normal(size=n) * rng.choice([1e-8, 1.0, 1e6])
    h = np.ones(n) if unit_hessian else rng.random(n) * 3
    rows = np.sort(rng.permutation(n)[: max(1, n // 2)])
    keys = rng.integers(0, 2**63, n).astype(np.uint64) * np.uint64(2)  # the high bit too
    got = NumbaTreeKernels().quantize(g, h, unit_hessian, rows, keys, draw)
    want = ReferenceTreeKernels(np).quantize(g, h, unit_hessian, rows, keys, draw)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    g_q, h_q, packed, scales = got
    g_levels, h_levels = quantization.levels(len(rows))
    assert np.all(np.abs(g_q[rows]) <= g_levels * scales[0])
    assert np.all(np.abs(g_q - g) < scales[0])  # one step at most, down or up
    np.testing.assert_array_equal(packed >> 32, np.round(g_q / scales[0]))
    if unit_hessian:
        np.testing.assert_array_equal(h_q, 1.0)
        np.testing.assert_array_equal(packed & quantization.LOW_BITS, 1)
    else:
        assert np.all((h_q[rows] >= 0) & (h_q[rows] <= h_levels * scales[1]))
        np.testing.assert_array_equal(packed & quantization.LOW_BITS, np.round(h_q / scales[1]))
    if n >= 70_000:  # without bias: the rounding errors average out (a mean of n errors of at most one step)
        assert abs(np.mean(g_q - g)) < 0.02 * scales[0]


def test_copies_of_a_row_keyed_apart_round_without_bias_together():
    """Rows of the same values and target share a key (row_keys); keyed apart by their rank (spread_copies) their
    roundings are independent draws, so a leaf of copies sums to its exact gradient within a few steps."""
    n = 100_000
    keys = spread_copies(np.full(n, 12345, dtype=np.uint64))
    g = np.full(n, 0.3)
    g_q, _, _, scales = NumbaTreeKernels().quantize(g, np.ones(n), True, np.arange(n), keys, 5)
    assert len(np.unique(g_q)) == 2  # rounded down or up, at random
    assert abs(g_q.sum() - g.sum()) < 5 * np.sqrt(n) * scales[0]  # not n * a step, as one shared draw would give


def test_a_scale_maps_the_largest_gradient_within_its_levels():
    levels = 32768
    for largest in (2.0**-20 * (1 + 2.0**-52) * levels, 1.0, 3.0, 1e300, 5e-324):
        assert largest / quantization.scale(largest, levels) <= levels
    assert quantization.scale(0.0, levels) == 1.0
