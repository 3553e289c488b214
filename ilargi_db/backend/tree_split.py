"""The split search of histogram boosting: one feature's best split from its histogram, shared by every grower.

A feature's histogram is a (bins, :data:`HIST_FIELDS`) block of sums: its bins of values, then one row of
missing values at ``missing_at`` (the last row of its compact block, or ``missing_bin`` in the spread layout of
``(features, missing_bin + 1, HIST_FIELDS)``). The split it finds is written as a mask over bins (``missing_bin``
the missing values' bin): numeric thresholds with missing values sent where they gain most, categorical sets
sorted by their gradient statistics, as LightGBM and HistGradientBoosting split.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from ilargi_db.backend.copies import copy_into
from ilargi_db.backend.histogram import COUNT, GRADIENT, HESSIAN, HIST_FIELDS
from ilargi_db.backend.quantization import GOLDEN, MIX_1, MIX_2

# Hessian added when categories are sorted by g / h, and the most rows a category needs to be sorted at all: as
# many as a leaf needs (min_samples_leaf), up to this (LightGBM's cat_smooth, counted in rows); one of fewer stays
# on the right. Without the floor, multi-class trees split on a 40-category feature's rare categories and lost 0.009
# of held-out log loss to LightGBM; at 10 whatever min_samples_leaf, products of 10 rows each were never split
# below the root (tests/test_models_boosting.py, tests/test_preprocess_tree_binning.py).
CATEGORY_SMOOTHING = 10.0
MIN_HESSIAN = 1e-3  # a child needs at least this hessian (LightGBM's min_sum_hessian_in_leaf)
TIE = 1e-9  # gains within this relative distance are a tie: the first feature and bin win (strategies agree)


@dataclass(frozen=True)
class GrowthLimits:
    """What bounds a tree: its leaves and depth, the rows and the L2 penalty of a leaf."""

    max_leaves: int
    max_depth: int | None
    min_samples_leaf: int
    l2_regularization: float


@numba.njit(cache=True, nogil=True, inline="always")
def split_score(g, h, l2):  # pragma: no cover - compiled
    """A side's score: its loss reduction with its Newton step (the split's gain is left + right - parent)."""
    return g * g / (h + l2)


@numba.njit(cache=True, nogil=True, inline="always")
def _cut_gain(gl, hl, nl, total_g, total_h, total_n, parent, l2, min_rows):  # pragma: no cover - compiled
    """The gain of a cut sending (gl, hl, nl) left and the rest right; -1 where a side has fewer than ``min_rows``
    rows or less than :data:`MIN_HESSIAN` hessian, or the gain is within :data:`TIE` of nothing."""
    nr, hr = total_n - nl, total_h - hl
    if nl < min_rows or nr < min_rows or hl < MIN_HESSIAN or hr < MIN_HESSIAN:
        return -1.0
    left, right = split_score(gl, hl, l2), split_score(total_g - gl, hr, l2)
    gain = left + right - parent
    return gain if gain > TIE * (left + right) else -1.0


@numba.njit(cache=True, nogil=True)
def feature_split(hf, nb, missing_at, missing_bin, categorical, total, l2, min_rows, order, keys, mask):
    """The best split of one feature (``hf``: its bins' sums, its missing values' at ``missing_at``): its gain, or 0.0
    when none is valid; the bins going left written into ``mask`` (``missing_bin + 1`` flags) when one is."""  # noqa: D401
    parent = split_score(total[GRADIENT], total[HESSIAN], l2)
    mg, mh, mn = hf[missing_at, GRADIENT], hf[missing_at, HESSIAN], hf[missing_at, COUNT]
    found, cut, cut_missing_left, gain_f = False, -1, False, 0.0
    if not categorical:
        for missing_left in (False, True):
            if missing_left and mn == 0.0:
                continue  # no missing rows here: sending them left or right gains the same
            gl = mg if missing_left else 0.0
            hl = mh if missing_left else 0.0
            nl = mn if missing_left else 0.0
            for b in range(nb):
                gl += hf[b, GRADIENT]
                hl += hf[b, HESSIAN]
                nl += hf[b, COUNT]
                gain = _cut_gain(gl, hl, nl, total[GRADIENT], total[HESSIAN], total[COUNT], parent, l2, min_rows)
                if gain > gain_f * (1.0 + TIE):
                    found, cut, cut_missing_left, gain_f = True, b, missing_left, gain
        if not found:
            return 0.0
        mask[:] = False
        mask[: cut + 1] = True
        if mn > 0.0:
            mask[missing_bin] = cut_missing_left
        else:  # no missing rows here: at prediction they follow the larger side (as HistGradientBoosting)
            on_left = 0.0
            for b in range(cut + 1):
                on_left += hf[b, COUNT]
            mask[missing_bin] = on_left >= total[COUNT] - on_left
        return gain_f
    k = 0
    for b in range(nb):
        if hf[b, COUNT] >= min(CATEGORY_SMOOTHING, min_rows):  # a category of too few rows to sort stays right
            order[k] = b
            keys[k] = hf[b, GRADIENT] / (hf[b, HESSIAN] + CATEGORY_SMOOTHING)
            k += 1
    if mn > 0.0:  # NULL is a category of its own: it joins the side it sorts into
        order[k] = missing_bin
        keys[k] = mg / (mh + CATEGORY_SMOOTHING)
        k += 1
    sorted_order = order[:k][stable_order(keys, k)]
    gl = hl = nl = 0.0
    for j in range(k - 1):
        b = sorted_order[j]
        row = missing_at if b == missing_bin else b
        gl += hf[row, GRADIENT]
        hl += hf[row, HESSIAN]
        nl += hf[row, COUNT]
        gain = _cut_gain(gl, hl, nl, total[GRADIENT], total[HESSIAN], total[COUNT], parent, l2, min_rows)
        if gain > gain_f * (1.0 + TIE):
            found, cut, gain_f = True, j, gain
    if not found:
        return 0.0
    mask[:] = False
    on_left = 0.0
    for j in range(cut + 1):
        b = sorted_order[j]
        mask[b] = True
        on_left += hf[missing_at if b == missing_bin else b, COUNT]
    if mn == 0.0:  # no missing rows here: NULL and unseen categories follow the larger side
        mask[missing_bin] = on_left >= total[COUNT] - on_left
    return gain_f


@numba.njit(cache=True, nogil=True)
def stable_order(keys, k):  # pragma: no cover - compiled
    """The positions of ``keys[:k]`` in ascending order, equal keys in their order: ``np.argsort(keys[:k],
    kind="stable")`` (its NumPy reference), as a bottom-up merge sort. numba's own argsort compiles a second
    slower on a new machine's first training, for the few categories a node sorts."""
    positions, merged = np.arange(k), np.empty(k, np.int64)
    width = 1
    while width < k:
        for lo in range(0, k, 2 * width):
            mid, hi = min(lo + width, k), min(lo + 2 * width, k)
            i, j, o = lo, mid, lo
            while i < mid and j < hi:
                if keys[positions[j]] < keys[positions[i]]:  # strictly: an equal key on the left stays first
                    merged[o] = positions[j]
                    j += 1
                else:
                    merged[o] = positions[i]
                    i += 1
                o += 1
            for r in range(i, mid):  # plain loops: slices compile slower
                merged[o] = positions[r]
                o += 1
            for r in range(j, hi):
                merged[o] = positions[r]
                o += 1
        positions, merged = merged, positions
        width *= 2
    return positions


@numba.njit(cache=True, nogil=True, inline="always")
def uniform_draw(seed, draw):  # pragma: no cover - compiled
    """A number in [0, 1) from (seed, draw): splitmix64 (:func:`~ilargi_db.backend.quantization.uniform`)."""
    z = np.uint64(seed) + np.uint64(draw) * np.uint64(GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX_1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX_2)
    z = z ^ (z >> np.uint64(31))
    return np.float64(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@numba.njit(cache=True, nogil=True)
def draw_features(seed, node, n_pick, allowed):  # pragma: no cover - compiled
    """The features node ``node`` of a tree may split on, ``n_pick`` of them drawn without replacement (a random
    forest's ``max_features``), into ``allowed``: every subset equally likely (selection sampling), the draws a
    function of (seed, node, feature) only, so every grower and thread count draws the same. All of them where
    ``n_pick`` covers every feature."""
    n = allowed.shape[0]
    if n_pick >= n:
        allowed[:] = True
        return
    needed = n_pick
    for j in range(n):
        take = uniform_draw(seed, node * n + j) * (n - j) < needed
        allowed[j] = take
        needed -= np.int64(take)


@numba.njit(cache=True, nogil=True)
def pick_leaf(gains, eligible):  # pragma: no cover - compiled
    """The leaf to split next, leaf-wise: of the ``eligible`` nodes (indexed by node id), the one of largest gain,
    a gain within :data:`TIE` of a lower id's being a tie that the lower id wins (as the split search's features);
    -1 when none is eligible."""
    best = -1
    for i in range(gains.shape[0]):
        if eligible[i] and (best < 0 or gains[i] > gains[best] * (1.0 + TIE)):
            best = i
    return best


@numba.njit(cache=True, nogil=True)
def best_split(hist, n_bins, categorical, missing_bin, l2, min_rows, goes_left, allowed):  # pragma: no cover
    """Best (gain, feature) over a spread histogram (features, ``missing_bin + 1``, :data:`HIST_FIELDS`) of the
    ``allowed`` features: the first feature wins a tie; ``goes_left`` (the winner's bins going left) filled in
    place, all False when none splits."""
    width = hist.shape[1]
    total = np.zeros(HIST_FIELDS)
    for b in range(width):  # every row is in one bin of each feature: the node's sums are its first feature's
        for q in range(HIST_FIELDS):
            total[q] += hist[0, b, q]
    best_gain, best_feature = 0.0, -1
    mask = np.zeros(width, dtype=np.bool_)
    order = np.empty(width, dtype=np.int64)
    keys = np.empty(width)
    goes_left[:] = False
    for f in range(hist.shape[0]):
        if not allowed[f]:
            continue
        gain = feature_split(hist[f], n_bins[f], missing_bin, missing_bin, categorical[f], total, l2, min_rows, order,
                             keys, mask)  # fmt: skip
        if gain > best_gain * (1.0 + TIE):
            best_gain, best_feature = gain, f
            copy_into(goes_left, mask)
    return best_gain, best_feature


__all__ = [
    "CATEGORY_SMOOTHING",
    "GrowthLimits",
    "MIN_HESSIAN",
    "TIE",
    "best_split",
    "draw_features",
    "pick_leaf",
    "feature_split",
    "split_score",
    "stable_order",
    "uniform_draw",
]
