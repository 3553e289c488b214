"""The tree kernels: each fused numba kernel equals its NumPy reference, and the split search is the best split.

The histogram, partition and prediction kernels are checked against :class:`ReferenceTreeKernels` on
random binned blocks (the fact's own block, read row by row, and gathered blocks whose index has -1 for
rows an outer join left empty); the split search, which has no second implementation, against a
brute-force search over every threshold and missing side (numeric) and every subset of categories.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ilargi_db.backend.parallel import kernel_threads
from ilargi_db.backend.tree_kernels import (
    CATEGORY_SMOOTHING,
    MIN_HESSIAN,
    NumbaTreeKernels,
)
from ilargi_db.backend.tree_reference import ReferenceTreeKernels
from ilargi_db.linalg.binned_matrix import BinnedBlock, BinnedMatrix, FlatBins
from ilargi_db.linalg.feature_bins import FeatureBins, bin_dtype

FUSED, REFERENCE = NumbaTreeKernels(), ReferenceTreeKernels(np)
ROW_COUNTS = [0, 1, 2, 17, 3000, 140_000]  # 140,000 rows: several reduction chunks, the parallel kernels


@st.composite
def binned_blocks(draw):
    """A binned block (identity or gathered, with empty rows), a node's rows and gradients."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.sampled_from(ROW_COUNTS))
    c = draw(st.integers(1, 5))
    missing_bin = draw(st.sampled_from([3, 16, 255, 1024]))  # 1024: two-byte bins (many categories)
    width = missing_bin + 1
    identity = draw(st.booleans())
    n_source = n if identity else draw(st.integers(1, 300))
    codes = rng.integers(0, width, (n_source, c)).astype(bin_dtype(missing_bin))
    index = None
    if not identity:
        index = rng.integers(0, n_source, n).astype(np.int64)
        index[rng.random(n) < draw(st.sampled_from([0.0, 0.2, 1.0]))] = -1  # rows an outer join left empty
    fill = rng.integers(0, width, c).astype(bin_dtype(missing_bin))
    fraction = draw(st.sampled_from([1.0, 0.5, 0.01]))
    rows = np.sort(rng.permutation(n)[: int(n * fraction)]).astype(np.int64)
    if draw(st.booleans()):
        rows = rng.permutation(rows)  # a node's rows come in partition order, not sorted
    g, h = rng.normal(size=n), rng.random(n)
    return rng, codes, index, fill, rows, g, h, width


def flat_of(codes, index, fill, n_rows: int, width: int, gather_width: int = 0) -> FlatBins:
    """The block as the kernels read it (``gather_width`` 0: a dimension stays gathered through its index)."""
    c = codes.shape[1]
    bins = [FeatureBins(f"x{j}", False, np.arange(width - 2, dtype=float)) for j in range(c)]  # width - 1 value bins
    block = BinnedBlock(codes, index, np.arange(c), fill if fill is not None else np.zeros(c, dtype=codes.dtype))
    return FlatBins.of(BinnedMatrix([block], n_rows, bins, width - 1), gather_width)


def histogram(codes: np.ndarray, g: np.ndarray, h: np.ndarray, width: int) -> np.ndarray:
    """Sums of (g, h, 1) per column and bin, the definition."""
    out = np.zeros((codes.shape[1], width, 3))
    for f in range(codes.shape[1]):
        for q, weights in enumerate((g, h, np.ones(len(g)))):
            out[f, :, q] = np.bincount(codes[:, f], weights=weights, minlength=width)
    return out


@settings(max_examples=40, deadline=None)
@given(binned_blocks(), st.booleans())
def test_histograms_match_reference(block, gathered_first):
    rng, codes, index, fill, rows, g, h, width = block
    n = len(g)
    flat = flat_of(codes, index, fill, n, width, gather_width=16 if gathered_first else 0)
    no_segment = np.zeros(len(flat.widths), dtype=np.bool_)
    got = FUSED.node_histogram(flat, rows, g, h, no_segment)
    want = REFERENCE.node_histogram(flat, rows, g, h, no_segment)
    assert got.shape == (codes.shape[1], width, 3)
    np.testing.assert_allclose(got, want, atol=1e-8)
    np.testing.assert_array_equal(got[..., 2], want[..., 2])  # row counts are exact
    taken = None if index is None else index[rows]
    bins = codes[rows] if index is None else np.where((taken < 0)[:, None], fill, codes[np.maximum(taken, 0)])
    np.testing.assert_allclose(got, histogram(bins, g[rows], h[rows], width), atol=1e-8)
    ones = np.ones(n)  # squared error: the hessians are not read, their sums are the counts
    unit = FUSED.node_histogram(flat, rows, g, ones, no_segment, unit_hessian=True)
    np.testing.assert_allclose(unit, FUSED.node_histogram(flat, rows, g, ones, no_segment), atol=1e-8)
    if index is None or gathered_first:
        return
    # The factorized way: (g, h, 1) summed per source row, then each source row's sums added to its bins.
    segmented = FUSED.node_histogram(flat, rows, g, h, ~flat.identity)
    np.testing.assert_allclose(segmented, want, atol=1e-8)  # either way, the same histogram
    np.testing.assert_array_equal(segmented[..., 2], want[..., 2])


@settings(max_examples=40, deadline=None)
@given(binned_blocks(), st.integers(0, 2**32 - 1))
def test_partition_matches_reference_and_is_stable(block, seed):
    rng, codes, index, fill, rows, g, h, width = block
    if len(rows) == 0:
        return
    rng = np.random.default_rng(seed)
    flat = flat_of(codes, index, fill, len(g), width)
    column = int(rng.integers(0, codes.shape[1]))
    goes_left = rng.random(width) < 0.5
    start = int(rng.integers(0, len(rows)))
    stop = int(rng.integers(start, len(rows) + 1))
    fused_rows, reference_rows = rows.copy(), rows.copy()
    scratch = np.empty(len(rows), dtype=np.int64)
    n_left = FUSED.partition_rows(fused_rows, start, stop, flat, column, goes_left, scratch)
    assert n_left == REFERENCE.partition_rows(reference_rows, start, stop, flat, column, goes_left, None)
    np.testing.assert_array_equal(fused_rows, reference_rows)
    # Stable: each side keeps the node's order; rows outside [start, stop) untouched.
    node = rows[start:stop]
    bins = (
        np.where(index[node] < 0, fill[column], codes[np.maximum(index[node], 0), column])
        if index is not None
        else (codes[node, column])
    )
    left = goes_left[bins]
    np.testing.assert_array_equal(fused_rows[start:stop], np.concatenate([node[left], node[~left]]))
    np.testing.assert_array_equal(fused_rows[:start], rows[:start])
    np.testing.assert_array_equal(fused_rows[stop:], rows[stop:])


def random_tree(rng: np.random.Generator, n_features: int, width: int, splits: int):
    """A tree of ``splits`` random splits, each of a random leaf: (feature, goes_left, left, right, value)."""
    feature, left, right, masks = [-1], [-1], [-1], [np.zeros(width, dtype=np.bool_)]
    for _ in range(splits):
        leaves = [i for i in range(len(feature)) if left[i] < 0]
        node = int(rng.choice(leaves))
        feature[node] = int(rng.integers(0, n_features))
        masks[node] = rng.random(width) < 0.5
        left[node], right[node] = len(feature), len(feature) + 1
        for _ in range(2):
            feature.append(-1)
            left.append(-1)
            right.append(-1)
            masks.append(np.zeros(width, dtype=np.bool_))
    value = rng.normal(size=len(feature))
    as_int = lambda a: np.asarray(a, dtype=np.int64)  # noqa: E731
    return as_int(feature), np.array(masks), as_int(left), as_int(right), value


def walk(codes: np.ndarray, feature, goes_left, left, right, value) -> np.ndarray:
    """Each row's leaf value, one row at a time (the definition of a tree's output)."""
    out = np.empty(len(codes))
    for i, row in enumerate(codes):
        node = 0
        while left[node] >= 0:
            node = left[node] if goes_left[node, row[feature[node]]] else right[node]
        out[i] = value[node]
    return out


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 50, 140_000]), st.integers(0, 40), st.integers(1, 4))
def test_add_trees_matches_reference(seed, n, splits, n_trees):
    """An ensemble's trees back to back (children ids within their tree), each added to the rows' scores."""
    rng = np.random.default_rng(seed)
    n_features, width = int(rng.integers(1, 6)), int(rng.choice([4, 256]))
    codes = rng.integers(0, width, (n, n_features)).astype(np.uint8)
    trees = [random_tree(rng, n_features, width, int(rng.integers(0, splits + 1))) for _ in range(n_trees)]
    start = np.cumsum([0] + [len(t[0]) for t in trees])
    feature, goes_left, left, right, value = (np.concatenate(parts) for parts in zip(*trees))
    ensemble = (start, feature, goes_left, left, right, value)
    scores = rng.normal(size=n)
    fused, reference = scores.copy(), scores.copy()
    FUSED.add_trees(codes, *ensemble, fused)
    REFERENCE.add_trees(codes, *ensemble, reference)
    np.testing.assert_allclose(fused, reference, rtol=0, atol=1e-12)
    head = slice(0, min(n, 500))  # the row-by-row walk of each tree on a few rows
    walked = sum(walk(codes[head], *tree) for tree in trees)
    np.testing.assert_allclose(fused[head] - scores[head], walked, atol=1e-12)


def test_histograms_do_not_depend_on_the_thread_count():
    rng = np.random.default_rng(0)
    n, width = 300_000, 256
    codes = rng.integers(0, width, (n, 3)).astype(np.uint8)
    index = rng.integers(-1, 40, n).astype(np.int64)
    dim = rng.integers(0, width, (40, 2)).astype(np.uint8)
    fill = np.zeros(2, dtype=np.uint8)
    rows = rng.permutation(n).astype(np.int64)
    g, h = rng.normal(size=n), rng.random(n)
    fact, dimension = flat_of(codes, None, None, n, width), flat_of(dim, index, fill, n, width)
    results = []
    for threads in (1, 2, 3):
        with kernel_threads(threads):
            results.append(
                (
                    FUSED.node_histogram(fact, rows, g, h, np.zeros(1, dtype=np.bool_)),
                    FUSED.node_histogram(dimension, rows, g, h, np.zeros(1, dtype=np.bool_)),
                    FUSED.node_histogram(dimension, rows, g, h, np.ones(1, dtype=np.bool_)),
                )
            )
    for got in results[1:]:
        for a, b in zip(got, results[0]):
            np.testing.assert_array_equal(a, b)


# -- the split search ---------------------------------------------------------------------------------------


def score(g: float, h: float, l2: float) -> float:
    return g * g / (h + l2)


def split_gain(hist: np.ndarray, f: int, left_bins: np.ndarray, l2: float, min_rows: int) -> float | None:
    """The gain of sending ``left_bins`` of feature ``f`` left (None: a side breaks min_rows or the hessian floor)."""
    total = hist[f].sum(axis=0)
    left = hist[f][left_bins].sum(axis=0)
    right = total - left
    if left[2] < min_rows or right[2] < min_rows or left[1] < MIN_HESSIAN or right[1] < MIN_HESSIAN:
        return None
    return score(left[0], left[1], l2) + score(right[0], right[1], l2) - score(total[0], total[1], l2)


def candidate_splits(hist, f, n_bins, categorical, missing_bin):
    """Every split of feature ``f`` as its bins going left: numeric thresholds with missing values on either
    side; categorical: every subset of the categories present (NULL among them), up to complement."""
    width = hist.shape[1]
    if not categorical:
        for cut, missing_left in itertools.product(range(n_bins), (False, True)):
            mask = np.zeros(width, dtype=bool)
            mask[: cut + 1] = True
            mask[missing_bin] = missing_left
            yield mask
        return
    present = [b for b in [*range(n_bins), missing_bin] if hist[f, b, 2] > 0]
    for size in range(1, len(present)):
        for subset in itertools.combinations(present, size):
            mask = np.zeros(width, dtype=bool)
            mask[list(subset)] = True
            yield mask


def brute_force(hist, n_bins, categorical, missing_bin, l2, min_rows):
    """The largest gain of any split of any feature, and the gain of each feature's best split."""
    best = []
    for f in range(hist.shape[0]):
        gains = [
            split_gain(hist, f, mask, l2, min_rows)
            for mask in candidate_splits(hist, f, n_bins[f], categorical[f], missing_bin)
        ]
        best.append(max([gain for gain in gains if gain is not None], default=0.0))
    return max(best, default=0.0), best


@st.composite
def histograms(draw, balanced: bool = False):
    """Histograms of a node's rows (every feature sums the same rows), numeric and categorical features.

    ``balanced``: squared error (a hessian of 1 per row) and, per feature, as many rows in each bin present.
    """
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    c = draw(st.integers(1, 4))
    missing_bin = draw(st.sampled_from([6, 255]))
    categorical = np.array([draw(st.booleans()) for _ in range(c)])
    n_bins = np.array([draw(st.integers(1, 6)) for _ in range(c)], dtype=np.int64)
    n = 60 if balanced else draw(st.integers(2, 120))
    codes = np.empty((n, c), dtype=np.uint8)
    for f in range(c):
        if balanced:  # 1 to 6 bins present (NULL perhaps among them), each 60 / present rows
            bins = [*range(n_bins[f]), missing_bin]
            present = sorted(rng.choice(bins, size=draw(st.integers(1, min(6, len(bins)))), replace=False))
            codes[:, f] = rng.permutation(np.repeat(present, n // len(present)))
        else:
            codes[:, f] = rng.integers(0, n_bins[f], n)
            codes[rng.random(n) < draw(st.sampled_from([0.0, 0.3])), f] = missing_bin
    squared_error = balanced or draw(st.booleans())
    step = rng.normal(size=n_bins.max() + 1)  # a target that depends on the first feature, and noise
    g = rng.normal(size=n) + step[np.minimum(codes[:, 0], n_bins.max())]
    h = np.ones(n) if squared_error else rng.uniform(0.01, 0.25, n)  # log loss: p (1 - p)
    hist = histogram(codes, g, h, missing_bin + 1)
    l2 = draw(st.sampled_from([0.0, 1.0]))
    min_rows = draw(st.sampled_from([1, 1, 3, 20]))
    return hist, n_bins, categorical, missing_bin, l2, min_rows


def no_gain(best: float, hist: np.ndarray, l2: float) -> bool:
    """Whether the best split gains nothing beyond rounding (the kernel then splits nothing)."""
    parent = hist[0].sum(axis=0)
    return best <= 1e-8 * max(1.0, score(parent[0], parent[1], l2) + best)


def check_mask(hist, column, mask, missing_bin, n_bins, categorical) -> None:
    """The winner's mask is a split of the kind its feature takes."""
    if not categorical[column]:
        values = mask[:missing_bin]
        cut = int(values.sum()) - 1
        assert values[: cut + 1].all() and not values[cut + 1 :].any(), "a numeric split is a threshold"
        assert 0 <= cut < n_bins[column]
    else:
        assert not mask[n_bins[column] : missing_bin].any()


def check_winner(hist, n_bins, categorical, missing_bin, l2, min_rows, best, per_feature) -> None:
    mask = np.zeros(missing_bin + 1, dtype=np.bool_)
    gain, column = FUSED.best_split(hist, n_bins, categorical, missing_bin, l2, min_rows, mask)
    if column < 0:
        assert no_gain(best, hist, l2)
        assert gain == 0.0
        return
    np.testing.assert_allclose(gain, best, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(per_feature[column], best, rtol=1e-9, atol=1e-12)  # the winner has it
    assert all(g <= gain * (1 + 1e-9) for g in per_feature[:column]), "ties: the first feature wins"
    found = split_gain(hist, column, mask, l2, min_rows)
    assert found is not None, "the split honours min_samples_leaf and the hessian floor"
    np.testing.assert_allclose(found, gain, rtol=1e-9, atol=1e-12)  # the mask is the split that gains it
    check_mask(hist, column, mask, missing_bin, n_bins, categorical)
    parent = hist[0].sum(axis=0)
    if hist[column, missing_bin, 2] == 0:  # numeric or categorical: no NULL rows here
        on_left = hist[column][:missing_bin][mask[:missing_bin], 2].sum()
        assert mask[missing_bin] == (on_left >= parent[2] - on_left), "unseen NULLs follow the larger side"


@settings(max_examples=300, deadline=None)
@given(histograms())
def test_best_split_is_the_brute_force_best_threshold(case):
    hist, n_bins, categorical, missing_bin, l2, min_rows = case
    numeric = np.zeros_like(categorical)
    best, per_feature = brute_force(hist, n_bins, numeric, missing_bin, l2, min_rows)
    check_winner(hist, n_bins, numeric, missing_bin, l2, min_rows, best, per_feature)


@settings(max_examples=300, deadline=None)
@given(histograms(balanced=True))
def test_best_split_is_the_best_subset_of_categories(case):
    """With equal hessians per category (squared error, as many rows in each), sorting the categories by
    g / (h + smoothing) finds the best of every subset of categories (Fisher, 1958): for a given number
    of categories left, the gain is convex in the left gradient sum, so the best set is a prefix or suffix."""
    hist, n_bins, categorical, missing_bin, l2, min_rows = case
    best, per_feature = brute_force(hist, n_bins, categorical, missing_bin, l2, min_rows)
    check_winner(hist, n_bins, categorical, missing_bin, l2, min_rows, best, per_feature)


@settings(max_examples=200, deadline=None)
@given(histograms())
def test_best_categorical_split_is_the_best_prefix_of_the_sorted_categories(case):
    """Any hessians: the chosen set is the best prefix of the categories (NULL one of them) sorted by
    g / (h + smoothing), within min_samples_leaf; never better than the best subset. A category of fewer rows than
    min_samples_leaf and the smoothing (too few to sort it) stays right, NULL being a category wherever it has rows."""
    hist, n_bins, categorical, missing_bin, l2, min_rows = case
    categorical = np.ones_like(categorical)
    per_feature = []
    for f in range(hist.shape[0]):
        supported = [b for b in range(n_bins[f]) if hist[f, b, 2] >= min(CATEGORY_SMOOTHING, min_rows)]
        present = supported + ([missing_bin] if hist[f, missing_bin, 2] > 0 else [])
        keys = [hist[f, b, 0] / (hist[f, b, 1] + CATEGORY_SMOOTHING) for b in present]
        ordered = [present[k] for k in np.argsort(keys, kind="stable")]
        gains = []
        for j in range(1, len(ordered)):
            prefix = np.zeros(missing_bin + 1, dtype=bool)
            prefix[ordered[:j]] = True
            gains.append(split_gain(hist, f, prefix, l2, min_rows))
        per_feature.append(max([x for x in gains if x is not None], default=0.0))
    check_winner(hist, n_bins, categorical, missing_bin, l2, min_rows, max(per_feature), per_feature)
    # Feature by feature (a feature without a valid prefix counts 0.0 above; its other subsets may lose gain).
    every_subset = brute_force(hist, n_bins, categorical, missing_bin, l2, min_rows)[1]
    for f, (prefix_best, subset_best) in enumerate(zip(per_feature, every_subset)):
        if any(hist[f, b, 2] > 0 for b in range(missing_bin + 1)) and prefix_best != 0.0:
            assert prefix_best <= subset_best + 1e-9


@pytest.mark.parametrize(("min_rows", "cut"), [(1, 0), (10, 0), (11, 1), (20, 1), (21, None), (25, None), (26, None)])
def test_best_split_honours_min_samples_leaf(min_rows, cut):
    # One numeric feature, bins 0..4 of 10 rows each; the gradient steps between bins 0 and 1, so the best
    # threshold is 0 | 1..4, then 0..1 | 2..4 once a leaf needs 11 rows; none leaves 21 on both sides.
    missing_bin = 255
    codes = np.repeat(np.arange(5), 10).astype(np.uint8)[:, None]
    g = np.where(codes[:, 0] == 0, -5.0, 1.0)
    hist = histogram(codes, g, np.ones(50), missing_bin + 1)
    mask = np.zeros(missing_bin + 1, dtype=np.bool_)
    gain, column = FUSED.best_split(hist, np.array([5]), np.array([False]), missing_bin, 0.0, min_rows, mask)
    if cut is None:
        assert (gain, column) == (0.0, -1)
        return
    assert column == 0 and int(mask[:missing_bin].sum()) - 1 == cut
    left = hist[0][mask, 2].sum()
    assert left >= min_rows and 50 - left >= min_rows


@pytest.mark.parametrize("null_target", [0.0, 5.0])
def test_missing_values_go_to_the_side_that_gains_most(null_target):
    # Values 0..3 with targets 0, 0, 5, 5; NULL rows with the target of the low values or of the high ones.
    missing_bin = 255
    codes = np.array([0] * 10 + [1] * 10 + [2] * 10 + [3] * 10 + [missing_bin] * 10, dtype=np.uint8)[:, None]
    y = np.array([0.0] * 20 + [5.0] * 20 + [null_target] * 10)
    g, h = y.mean() - y, np.ones(len(y))  # squared error at the mean
    hist = histogram(codes, g, h, missing_bin + 1)
    mask = np.zeros(missing_bin + 1, dtype=np.bool_)
    gain, column = FUSED.best_split(hist, np.array([4]), np.array([False]), missing_bin, 0.0, 1, mask)
    assert column == 0 and gain > 0
    assert mask[:4].tolist() == [True, True, False, False]  # 0, 1 | 2, 3
    assert bool(mask[missing_bin]) == (null_target == 0.0)  # NULLs join the rows they resemble


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 50, 140_000]), st.integers(1, 63))
def test_leaf_values_are_added_to_their_rows_as_the_reference_adds_them(seed, n, leaves):
    rng = np.random.default_rng(seed)
    rows = rng.permutation(n).astype(np.int64)
    cuts = np.sort(rng.integers(0, n + 1, leaves - 1))
    starts, stops = np.concatenate([[0], cuts]), np.concatenate([cuts, [n]])
    values = rng.normal(size=leaves)
    fused, reference = np.zeros(n), np.zeros(n)
    FUSED.add_leaf_values(rows, starts, stops, values, fused)
    REFERENCE.add_leaf_values(rows, starts, stops, values, reference)
    np.testing.assert_array_equal(fused, reference)


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.sampled_from([-1.5, -0.25, 0.0, 0.0, 0.5, 2.0, 1e300, -1e-300]), min_size=0, max_size=70),
    extra=st.integers(0, 5),
)
def test_the_category_order_is_numpys_stable_argsort(keys, extra):
    """A node sorts its categories by gradient over hessian; ties (equal keys) keep their order, as NumPy's."""
    from ilargi_db.backend.tree_split import stable_order

    values = np.array(keys + [9.0] * extra, dtype=np.float64)  # entries past k are never read
    k = len(keys)
    np.testing.assert_array_equal(stable_order(values, k), np.argsort(values[:k], kind="stable"))
