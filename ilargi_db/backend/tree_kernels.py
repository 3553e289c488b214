"""The hot loops of histogram gradient boosting over binned blocks, fused (numba) and as a NumPy reference.

A *binned block* is what one source gives a tree: ``codes`` (source rows x c, uint8 bins, C order), the
source row each training row takes (``index``, -1 where an outer join left it empty: ``fill``'s bins),
or none (``identity``: training row i is codes row i, the fact's own block). A histogram holds, per
block column and bin, the sums of gradient, hessian and rows: ``(c, n_bins, 3)`` float64.

- :func:`histogram_gathered`: one pass over a node's rows, each row's bins read through its index
  (the materialized join's one block, the fact's block, or a large dimension);
- :func:`segment_sums` then :func:`histogram_of_segments`: the factorized way for a dimension: (g, h, 1)
  summed per source row over the node's rows (``I^T v``), then each source row's sums added to its bins,
  so the dimension's columns are never repeated per training row;
- :func:`partition_rows`: a node's rows split stably by a split's bin mask, read through the index;
- :func:`best_split`: the split of largest gain over every column's histogram (numeric thresholds with
  missing values sent where they gain most, categorical sets sorted by gradient statistics);
- :func:`add_tree`: a tree's leaf values added to the raw scores of rows given as dense bins.

Reductions run over a number of row chunks that depends on the shapes only, merged in chunk order: the
result does not depend on the thread count. :class:`ReferenceTreeKernels` writes each with ``xp`` array
operations, the oracle of the fused ones (tests/test_backend_tree_kernels.py).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

CHUNK_ROWS = 1 << 16  # rows per chunk of a reduction, at least: below two chunks a kernel runs on one thread
MAX_CHUNKS = 8
ACCUMULATOR_BYTES = 16 << 20  # per-chunk accumulators of one reduction, together
CATEGORY_SMOOTHING = 10.0  # hessian added when categories are sorted by g / h (HistGradientBoosting's support)
MIN_HESSIAN = 1e-3  # a child needs at least this hessian (LightGBM's min_sum_hessian_in_leaf)
TIE = 1e-9  # gains within this relative distance are a tie: the first feature and bin win (strategies agree)


def _chunks(m: int, accumulator_bytes: int) -> int:
    by_rows = max(1, min(MAX_CHUNKS, m // CHUNK_ROWS))
    return max(1, min(by_rows, ACCUMULATOR_BYTES // max(1, accumulator_bytes)))


def _serial_and_parallel(kernel):
    """A reduction over row chunks compiled twice: one thread for one chunk (a parallel region costs a wake-up
    of every thread, and milliseconds when another process holds a core), threads for several."""
    return (
        numba.njit(cache=True, nogil=True)(kernel),
        numba.njit(parallel=True, cache=True, nogil=True)(kernel),
    )


def _histogram_gathered(codes, index, identity, fill, rows, g, h, n_bins, chunks):  # pragma: no cover - compiled
    m, c = rows.shape[0], codes.shape[1]
    acc = np.zeros((chunks, c, n_bins, 3))
    size = (m + chunks - 1) // chunks
    for k in numba.prange(chunks):
        part = acc[k]
        for i in range(k * size, min(m, (k + 1) * size)):
            r = rows[i]
            gi, hi = g[r], h[r]
            if identity:
                row = codes[r]
            else:
                s = index[r]
                row = fill if s < 0 else codes[s]
            for f in range(c):
                b = row[f]
                part[f, b, 0] += gi
                part[f, b, 1] += hi
                part[f, b, 2] += 1.0
    out = acc[0].copy()
    for k in range(1, chunks):
        out += acc[k]
    return out


def _segment_sums(index, rows, g, h, n_source_rows, chunks):  # pragma: no cover - compiled
    m = rows.shape[0]
    acc = np.zeros((chunks, n_source_rows + 1, 3))  # the last row: training rows the source left empty
    size = (m + chunks - 1) // chunks
    for k in numba.prange(chunks):
        part = acc[k]
        for i in range(k * size, min(m, (k + 1) * size)):
            r = rows[i]
            s = index[r]
            if s < 0:
                s = n_source_rows
            part[s, 0] += g[r]
            part[s, 1] += h[r]
            part[s, 2] += 1.0
    out = acc[0].copy()
    for k in range(1, chunks):
        out += acc[k]
    return out


_HISTOGRAM_GATHERED = _serial_and_parallel(_histogram_gathered)
_SEGMENT_SUMS = _serial_and_parallel(_segment_sums)


@numba.njit(cache=True, nogil=True)
def _histogram_of_segments(codes, fill, sums, n_bins):  # pragma: no cover - compiled
    n_source_rows, c = codes.shape
    out = np.zeros((c, n_bins, 3))
    for f in numba.prange(c):
        hist = out[f]
        for s in range(n_source_rows):
            if sums[s, 2] > 0.0:
                b = codes[s, f]
                hist[b, 0] += sums[s, 0]
                hist[b, 1] += sums[s, 1]
                hist[b, 2] += sums[s, 2]
        b = fill[f]
        hist[b, 0] += sums[n_source_rows, 0]
        hist[b, 1] += sums[n_source_rows, 1]
        hist[b, 2] += sums[n_source_rows, 2]
    return out


@numba.njit(cache=True, nogil=True)
def _partition_rows(rows, start, stop, codes, index, identity, fill, column, goes_left, scratch):  # pragma: no cover
    left = 0
    right = 0
    for i in range(start, stop):
        r = rows[i]
        if identity:
            b = codes[r, column]
        else:
            s = index[r]
            b = fill[column] if s < 0 else codes[s, column]
        if goes_left[b]:
            rows[start + left] = r  # never ahead of i: an entry already read
            left += 1
        else:
            scratch[right] = r
            right += 1
    rows[start + left : stop] = scratch[:right]
    return left


@numba.njit(cache=True, nogil=True, inline="always")
def _score(g, h, l2):  # pragma: no cover - compiled
    return g * g / (h + l2)


@numba.njit(cache=True, nogil=True)
def _best_split(hist, n_bins, categorical, missing_bin, l2, min_rows, goes_left):  # pragma: no cover - compiled
    """Best (gain, column) over the columns of ``hist``; ``goes_left[b]`` of the winner filled in place."""
    c, width = hist.shape[0], hist.shape[1]
    total = hist[0].sum(axis=0)
    parent = _score(total[0], total[1], l2)
    best_gain, best_column = 0.0, -1
    mask = np.zeros(width, dtype=np.bool_)
    order = np.empty(width, dtype=np.int64)
    keys = np.empty(width)
    for f in range(c):
        hf = hist[f]
        nb = n_bins[f]
        mg, mh, mn = hf[missing_bin, 0], hf[missing_bin, 1], hf[missing_bin, 2]
        found, cut, cut_missing_left, gain_f = False, -1, False, 0.0
        if not categorical[f]:
            for missing_left in (False, True):
                if missing_left and mn == 0.0:
                    continue  # no missing rows here: sending them left or right gains the same
                gl = mg if missing_left else 0.0
                hl = mh if missing_left else 0.0
                nl = mn if missing_left else 0.0
                for b in range(nb):
                    gl += hf[b, 0]
                    hl += hf[b, 1]
                    nl += hf[b, 2]
                    nr = total[2] - nl
                    if nl < min_rows or nr < min_rows:
                        continue
                    hr = total[1] - hl
                    if hl < MIN_HESSIAN or hr < MIN_HESSIAN:
                        continue
                    left, right = _score(gl, hl, l2), _score(total[0] - gl, hr, l2)
                    gain = left + right - parent
                    if gain > TIE * (left + right) and gain > gain_f * (1.0 + TIE):
                        found, cut, cut_missing_left, gain_f = True, b, missing_left, gain
            if found and gain_f > best_gain * (1.0 + TIE):
                best_gain, best_column = gain_f, f
                mask[:] = False
                mask[: cut + 1] = True
                if mn > 0.0:
                    mask[missing_bin] = cut_missing_left
                else:  # no missing rows here: at prediction they follow the larger side (as HistGradientBoosting)
                    on_left = hf[: cut + 1, 2].sum()
                    mask[missing_bin] = on_left >= total[2] - on_left
        else:
            k = 0
            for b in range(nb):
                if hf[b, 2] > 0.0:
                    order[k] = b
                    keys[k] = hf[b, 0] / (hf[b, 1] + CATEGORY_SMOOTHING)
                    k += 1
            if mn > 0.0:  # NULL is a category of its own: it joins the side it sorts into
                order[k] = missing_bin
                keys[k] = mg / (mh + CATEGORY_SMOOTHING)
                k += 1
            sorted_order = order[:k][np.argsort(keys[:k], kind="mergesort")]
            gl = hl = nl = 0.0
            for j in range(k - 1):
                b = sorted_order[j]
                gl += hf[b, 0]
                hl += hf[b, 1]
                nl += hf[b, 2]
                nr = total[2] - nl
                if nl < min_rows or nr < min_rows:
                    continue
                hr = total[1] - hl
                if hl < MIN_HESSIAN or hr < MIN_HESSIAN:
                    continue
                left, right = _score(gl, hl, l2), _score(total[0] - gl, hr, l2)
                gain = left + right - parent
                if gain > TIE * (left + right) and gain > gain_f * (1.0 + TIE):
                    found, cut, gain_f = True, j, gain
            if found and gain_f > best_gain * (1.0 + TIE):
                best_gain, best_column = gain_f, f
                mask[:] = False
                for j in range(cut + 1):
                    mask[sorted_order[j]] = True
    goes_left[:] = mask
    return best_gain, best_column


def _add_tree(codes, feature, goes_left, left, right, value, out):  # pragma: no cover - compiled
    for i in numba.prange(codes.shape[0]):
        node = 0
        while left[node] >= 0:
            node = left[node] if goes_left[node, codes[i, feature[node]]] else right[node]
        out[i] += value[node]


_ADD_TREE = _serial_and_parallel(_add_tree)


class NumbaTreeKernels:
    """The tree kernels, each one fused multi-threaded numba pass (the CPU's)."""

    def histogram_gathered(self, codes, index, fill, rows, g, h, n_bins: int) -> np.ndarray:
        identity = index is None
        index = np.empty(0, dtype=np.int64) if identity else index
        chunks = _chunks(len(rows), codes.shape[1] * n_bins * 24)
        return _HISTOGRAM_GATHERED[chunks > 1](codes, index, identity, fill, rows, g, h, n_bins, chunks)

    def segment_sums(self, index, rows, g, h, n_source_rows: int) -> np.ndarray:
        chunks = _chunks(len(rows), (n_source_rows + 1) * 24)
        return _SEGMENT_SUMS[chunks > 1](index, rows, g, h, n_source_rows, chunks)

    def histogram_of_segments(self, codes, fill, sums, n_bins: int) -> np.ndarray:
        return _histogram_of_segments(codes, fill, sums, n_bins)

    def partition_rows(self, rows, start: int, stop: int, codes, index, fill, column: int, goes_left, scratch) -> int:
        identity = index is None
        index = np.empty(0, dtype=np.int64) if identity else index
        return int(_partition_rows(rows, start, stop, codes, index, identity, fill, column, goes_left, scratch))

    def best_split(self, hist, n_bins, categorical, missing_bin: int, l2: float, min_rows: int, goes_left):
        gain, column = _best_split(hist, n_bins, categorical, missing_bin, l2, float(min_rows), goes_left)
        return float(gain), int(column)

    def add_tree(self, codes, feature, goes_left, left, right, value, out) -> None:
        _ADD_TREE[len(codes) >= 2 * CHUNK_ROWS](codes, feature, goes_left, left, right, value, out)


class ReferenceTreeKernels:
    """The tree kernels as plain array operations of ``xp`` (the oracle, several passes each)."""

    def __init__(self, xp: Any = np):
        self.xp = xp

    def _bins(self, codes, index, fill, rows):
        xp = self.xp
        if index is None:
            return codes[rows]
        taken = index[rows]
        return xp.where((taken < 0)[:, None], fill[None, :], codes[xp.maximum(taken, 0)])

    def histogram_gathered(self, codes, index, fill, rows, g, h, n_bins: int):
        xp = self.xp
        bins = self._bins(codes, index, fill, rows).astype(xp.int64)
        out = xp.zeros((codes.shape[1], n_bins, 3))
        for f in range(codes.shape[1]):
            for q, weights in enumerate((g[rows], h[rows], xp.ones(len(rows)))):
                out[f, :, q] = xp.bincount(bins[:, f], weights=weights, minlength=n_bins)
        return out

    def segment_sums(self, index, rows, g, h, n_source_rows: int):
        xp = self.xp
        taken = index[rows].astype(xp.int64)
        taken = xp.where(taken < 0, n_source_rows, taken)
        out = xp.zeros((n_source_rows + 1, 3))
        for q, weights in enumerate((g[rows], h[rows], xp.ones(len(rows)))):
            out[:, q] = xp.bincount(taken, weights=weights, minlength=n_source_rows + 1)
        return out

    def histogram_of_segments(self, codes, fill, sums, n_bins: int):
        xp = self.xp
        out = xp.zeros((codes.shape[1], n_bins, 3))
        bins = xp.concatenate([codes, fill[None, :]]).astype(xp.int64)
        for f in range(codes.shape[1]):
            for q in range(3):
                out[f, :, q] = xp.bincount(bins[:, f], weights=sums[:, q], minlength=n_bins)
        return out

    def partition_rows(self, rows, start: int, stop: int, codes, index, fill, column: int, goes_left, scratch) -> int:
        xp = self.xp
        node = rows[start:stop]
        left = goes_left[self._bins(codes, index, fill, node)[:, column]]
        ordered = xp.concatenate([node[left], node[~left]])
        rows[start:stop] = ordered
        return int(left.sum())

    def best_split(self, hist, n_bins, categorical, missing_bin: int, l2: float, min_rows: int, goes_left):
        # The split search runs on the host over a few kilobytes: the compiled search is its own reference.
        return NumbaTreeKernels().best_split(hist, n_bins, categorical, missing_bin, l2, min_rows, goes_left)

    def add_tree(self, codes, feature, goes_left, left, right, value, out) -> None:
        xp = self.xp
        node = xp.zeros(codes.shape[0], dtype=xp.int64)
        for _ in range(len(feature)):  # at most one step per node
            inner = left[node] >= 0
            if not bool(inner.any()):
                break
            bins = codes[xp.arange(codes.shape[0]), xp.maximum(feature[node], 0)]
            step = xp.where(goes_left[node, bins], left[node], right[node])
            node = xp.where(inner, step, node)
        out += value[node]


__all__ = ["CATEGORY_SMOOTHING", "MIN_HESSIAN", "TIE", "NumbaTreeKernels", "ReferenceTreeKernels"]
