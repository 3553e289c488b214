"""One boosting tree grown in compiled code, start to finish, on a block of bins read row by row.

:func:`grow_tree` is the whole of a tree in one call: the root's histogram, then leaf-wise (the leaf of largest
gain first, ties to the lowest node id, as LightGBM and HistGradientBoosting grow) until ``max_leaves``: each split
partitions its node's rows stably and adds the smaller child's rows to that child's histogram in the same pass,
the larger child's histogram being the parent's less it (in the parent's buffer). No interpreter runs between the
steps of a tree. It is the row-wise layout of :class:`~ilargi_db.linalg.binned_matrix.FlatBins`: one block of
every feature, one row per training row (the materialized join's, or the fact's with its narrow dimensions
gathered in); other layouts grow through :class:`~ilargi_db.models._tree_growth.TreeGrower`'s per-node steps,
which split alike (the same search, :mod:`.tree_split`).

Histograms are compact: feature f's bins of values at ``slot_start[f]``, then its missing values' row, each row
:data:`~ilargi_db.backend.tree_split.HIST_FIELDS` sums. A pass over many rows runs over a number of row chunks set
by the shapes only (on the free cores), merged in chunk order: the tree does not depend on the thread count.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types as nt

from ilargi_db.backend.compiled import kernel, read_only
from ilargi_db.backend.tree_split import COUNT, GRADIENT, HESSIAN, HIST_FIELDS, TIE, feature_split

F64, I64, BOOL = nt.float64, nt.int64, nt.boolean
BINS = (nt.uint8, nt.uint16)
IN_F64, IN_I64, IN_BOOL = read_only(F64[::1]), read_only(I64[::1]), read_only(BOOL[::1])


@numba.njit(cache=True, nogil=True, inline="always")
def _add_row(codes, r, gi, hi, unit_hessian, slots, bins, acc):  # pragma: no cover - compiled
    for j in range(codes.shape[1]):
        b = np.int64(codes[r, j])
        slot = slots[j] + (b if b < bins[j] else bins[j])  # a value's bin, or the feature's missing row
        acc[slot, GRADIENT] += gi
        if not unit_hessian:
            acc[slot, HESSIAN] += hi
        acc[slot, COUNT] += 1.0


@numba.njit(cache=True, nogil=True)
def _partition_add(codes, rows, scratch, start, stop, column, goes_left, build_left, g, h, unit_hessian, slots, bins,
                   acc):  # fmt: skip  # pragma: no cover - compiled
    """Order ``rows[start:stop]`` stably, left rows first, adding the rows of the built side to ``acc``; the left
    rows' count."""
    left = 0
    right = 0
    for i in range(start, stop):
        r = rows[i]
        to_left = goes_left[codes[r, column]]
        if to_left:
            rows[start + left] = r  # never ahead of i: an entry already read
            left += 1
        else:
            scratch[right] = r
            right += 1
        if to_left == build_left:
            _add_row(codes, r, g[r], h[r], unit_hessian, slots, bins, acc)
    rows[start + left : stop] = scratch[:right]
    if unit_hessian:
        acc[:, HESSIAN] = acc[:, COUNT]
    return left


@numba.njit(cache=True, nogil=True)
def _totals(hist, slot_start, total):  # pragma: no cover - compiled
    """A node's sums: those of its first feature's bins (every row is in one bin of each feature)."""
    total[:] = 0.0
    for s in range(slot_start[0], slot_start[1]):
        for q in range(HIST_FIELDS):
            total[q] += hist[s, q]


@numba.njit(cache=True, nogil=True)
def _best_split(hist, slot_start, value_bins, categorical, missing_bin, l2, min_rows, total, order, keys, mask,
                best_mask):  # fmt: skip  # pragma: no cover - compiled
    """Best (gain, feature) over a compact histogram's features, the winner's bins going left in ``best_mask``."""
    best_gain, best_feature = 0.0, -1
    for f in range(value_bins.shape[0]):
        nb = value_bins[f]
        hf = hist[slot_start[f] : slot_start[f] + nb + 1]
        gain = feature_split(hf, nb, nb, missing_bin, categorical[f], total, l2, min_rows, order, keys, mask)
        if gain > best_gain * (1.0 + TIE):
            best_gain, best_feature = gain, f
            best_mask[:] = mask
    return best_gain, best_feature


# fmt: off
_GROW_TREE_TYPES = [
    I64(read_only(b[:, ::1]), I64[::1], I64[::1], IN_F64, IN_F64, BOOL, IN_I64, IN_I64, IN_I64, IN_BOOL, I64,
        I64, I64, F64, F64, F64, F64, F64[:, :, ::1],
        I64[::1], I64[::1], I64[::1], F64[::1], F64[::1], I64[::1], BOOL[:, ::1], F64[::1])
    for b in BINS
]
# fmt: on


@kernel(_GROW_TREE_TYPES)
def _grow_tree(
    codes, rows, scratch, g, h, unit_hessian, columns, slot_start, value_bins, categorical, missing_bin,
    max_leaves, max_depth, min_rows, l2, floor_abs, learning_rate, hists,
    feature, left, right, value, gain, count, goes_left, raw,
):  # fmt: skip  # pragma: no cover - compiled
    n, w, n_features, max_nodes = rows.shape[0], codes.shape[1], value_bins.shape[0], feature.shape[0]
    slots, bins, column_of = np.empty(w, np.int64), np.empty(w, np.int64), np.empty(n_features, np.int64)
    for j in range(w):
        slots[j], bins[j], column_of[columns[j]] = slot_start[columns[j]], value_bins[columns[j]], j
    start, stop = np.zeros(max_nodes, np.int64), np.zeros(max_nodes, np.int64)
    depth, pool = np.zeros(max_nodes, np.int64), np.full(max_nodes, -1, np.int64)
    leaves = np.empty(max_leaves, np.int64)
    free = np.arange(hists.shape[0])  # histogram buffers not in use: a leaf holds one
    n_free = hists.shape[0]
    order, keys = np.empty(missing_bin + 1, np.int64), np.empty(missing_bin + 1)
    mask = np.zeros(missing_bin + 1, np.bool_)
    total = np.zeros(HIST_FIELDS)
    feature[:], left[:], right[:], value[:], gain[:], count[:], goes_left[:] = -1, -1, -1, 0.0, 0.0, 0, False

    n_free -= 1
    pool[0] = free[n_free]
    root = hists[pool[0]]
    root[:] = 0.0
    for i in range(n):
        r = rows[i]
        _add_row(codes, r, g[r], h[r], unit_hessian, slots, bins, root)
    if unit_hessian:  # squared error: every hessian is 1, its sums are the row counts
        root[:, HESSIAN] = root[:, COUNT]
    _totals(root, slot_start, total)
    min_gain = floor_abs * floor_abs / (total[HESSIAN] + l2)  # see _tree_growth.GAIN_FLOOR
    stop[0], count[0], leaves[0] = n, n, 0
    n_nodes, n_leaves = 1, 1
    candidates = np.zeros(1, np.int64)  # the nodes whose best split is searched next
    while True:
        for node in candidates:  # a leaf's split, kept as its candidate (feature >= 0) if it may be taken
            if (max_depth >= 0 and depth[node] >= max_depth) or stop[node] - start[node] < 2 * min_rows:
                continue
            hist = hists[pool[node]]
            _totals(hist, slot_start, total)
            best_gain, best_feature = _best_split(
                hist, slot_start, value_bins, categorical, missing_bin, l2, min_rows, total, order, keys, mask,
                goes_left[node],
            )  # fmt: skip
            if best_feature >= 0 and best_gain > min_gain:
                feature[node], gain[node] = best_feature, best_gain
            else:
                goes_left[node, :] = False
        if n_leaves >= max_leaves:
            break
        best = -1
        for k in range(n_leaves):  # the leaf of largest gain, ties to the lowest id
            i = leaves[k]
            if feature[i] >= 0 and (best < 0 or gain[i] > gain[best] or (gain[i] == gain[best] and i < best)):
                best = i
        if best < 0:
            break
        f = feature[best]
        s0, nb = slot_start[f], value_bins[f]
        parent = hists[pool[best]]
        n_left_rows = parent[s0 + nb, COUNT] if goes_left[best, missing_bin] else 0.0
        for b in range(nb):
            if goes_left[best, b]:
                n_left_rows += parent[s0 + b, COUNT]
        small_left = n_left_rows <= (stop[best] - start[best]) - n_left_rows
        n_free -= 1
        small = free[n_free]
        hists[small, :, :] = 0.0
        n_left = _partition_add(
            codes, rows, scratch, start[best], stop[best], column_of[f], goes_left[best], small_left, g, h,
            unit_hessian, slots, bins, hists[small],
        )  # fmt: skip
        parent -= hists[small]  # the larger child's histogram, in the parent's buffer
        lo, hi = n_nodes, n_nodes + 1
        n_nodes += 2
        middle = start[best] + n_left
        left[best], right[best] = lo, hi
        start[lo], stop[lo], start[hi], stop[hi] = start[best], middle, middle, stop[best]
        depth[lo] = depth[hi] = depth[best] + 1
        count[lo], count[hi] = middle - start[best], stop[best] - middle
        pool[lo], pool[hi] = (small, pool[best]) if small_left else (pool[best], small)
        pool[best] = -1
        for k in range(n_leaves):
            if leaves[k] == best:
                leaves[k] = lo
        leaves[n_leaves] = hi
        n_leaves += 1
        candidates = np.array([lo, hi])
    for k in range(n_leaves):  # leaf values, added to the raw scores of the leaf's rows
        i = leaves[k]
        _totals(hists[pool[i]], slot_start, total)
        feature[i], gain[i] = -1, 0.0
        goes_left[i, :] = False
        value[i] = -learning_rate * total[GRADIENT] / (total[HESSIAN] + l2)
        for q in range(start[i], stop[i]):
            raw[rows[q]] += value[i]
    return n_nodes


__all__ = ["_grow_tree"]
