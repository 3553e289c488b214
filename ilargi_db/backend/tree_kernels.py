"""The hot loops of histogram gradient boosting over binned blocks, each fused into one numba pass.

The kernels read a binned matrix's blocks laid end to end (:class:`~ilargi_db.linalg.binned_matrix.FlatBins`):
per block, its bins (source rows x width, uint8, or uint16 past 255 categories), the source row each
training row takes (-1 where an outer join left it empty: the block's fill bins), or none (the fact's own
block). A histogram holds, per feature and bin, the sums of gradient, hessian and rows: ``(features,
n_bins, HIST_FIELDS)`` float64 (:mod:`.histogram`; the kernels add rows into each feature's compact slots, then
spread them).

- ``node_histogram``: one pass over a node's rows for every block at once: a block's bins read through
  each row's index (the materialized join's one block, the fact's, a large dimension), or, the
  factorized way for a small dimension, (g, h, 1) summed per source row over the node's rows
  (``I^T v``) and then each source row's sums added to its bins, so its columns are never repeated per row;
- :func:`partition_rows`: a node's rows split stably by a split's bin mask, read through the index;
- ``best_split``: the split of largest gain over every column's histogram (:mod:`.tree_split`);
- ``grow_tree``: a whole tree in one compiled call on a layout of one block read row by row (:mod:`.tree_grower`);
- :func:`add_trees`: an ensemble's leaf values added to the raw scores of rows given as dense bins.

Reductions run over a number of row chunks that depends on the shapes only, merged in chunk order: the
result does not depend on the thread count. :class:`~ilargi_db.backend.tree_reference.ReferenceTreeKernels`
writes each with ``xp`` array operations, the oracle of the fused ones (tests/test_backend_tree_kernels.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types as nt

from ilargi_db.backend.compiled import float64_values, int64_values, kernel, positions, read_only
from ilargi_db.backend.copies import copy_into
from ilargi_db.backend.histogram import COUNT, GRADIENT, HESSIAN, HIST_FIELDS
from ilargi_db.backend.parallel import run
from ilargi_db.backend.tree_split import CATEGORY_SMOOTHING, MIN_HESSIAN, TIE, GrowthLimits, best_split

CHUNK_ROWS = 1 << 16  # rows per chunk of a reduction, at least: below two chunks a kernel runs on one thread
MAX_CHUNKS = 8
PREDICT_ROWS = 1 << 15  # rows per thread at least of a prediction pass
PREDICT_BLOCK_ROWS = 1 << 14  # rows that walk one tree before the next tree (their bins kept in the caches)
ACCUMULATOR_BYTES = 16 << 20  # per-chunk accumulators of one reduction, together

# One type per role (the kernels' explicit signatures): bins uint8 or uint16 (bin_dtype), source positions int32
# or int64 (FlatBins.index), training rows int64, sums float64, flags bool; arrays C order.
# Arrays a kernel only reads are typed read-only (writable ones are taken too): the IN_* names.
F64, I64, BOOL = nt.float64, nt.int64, nt.boolean
BINS = (nt.uint8, nt.uint16)
POSITIONS = (nt.int32, nt.int64)
BINS_AND_POSITIONS = [(b, p) for b in BINS for p in POSITIONS]
IN_F64, IN_I64, IN_BOOL = read_only(F64[::1]), read_only(I64[::1]), read_only(BOOL[::1])
IN_BINS = {b: read_only(b[::1]) for b in BINS}  # FlatBins.codes, fills
IN_ROWS_BINS = {b: read_only(b[:, ::1]) for b in BINS}  # one block's bins, a row per training row


ACC_GRADIENT, ACC_ROWS = 0, 1  # node_histogram's per-chunk accumulator: (g, rows) per slot, h apart unless it is 1


def _chunks(m: int, accumulator_bytes: int, chunk_rows: int = CHUNK_ROWS) -> int:
    by_rows = max(1, min(MAX_CHUNKS, m // chunk_rows))
    return max(1, min(by_rows, ACCUMULATOR_BYTES // max(1, accumulator_bytes)))


# fmt: off
_NODE_HISTOGRAM_TYPES = [
    nt.void(IN_BINS[b], IN_I64, IN_I64, IN_I64, IN_BINS[b], read_only(p[:, ::1]), IN_BOOL, IN_BOOL, IN_I64, IN_I64,
            IN_F64, IN_F64, IN_I64, IN_I64, BOOL, F64[:, :, ::1], F64[:, ::1], F64[:, :, ::1], I64, I64)
    for b, p in BINS_AND_POSITIONS
]
_NODE_HISTOGRAM_TOTAL_TYPES = [
    (IN_BINS[b], IN_I64, IN_I64, IN_I64, IN_BINS[b], IN_BOOL, IN_I64, I64, IN_I64, IN_I64, IN_I64, IN_I64, BOOL,
     read_only(F64[:, :, ::1]), read_only(F64[:, ::1]), F64[:, :, ::1])  # seg: merged into its first chunk
    for b in BINS
]
# fmt: on


@kernel(_NODE_HISTOGRAM_TYPES)
def _node_histogram(
    codes,
    code_start,
    widths,
    first_column,
    fills,
    index,
    identity,
    segment,
    seg_start,
    rows,
    g,
    h,
    column_slot,
    column_bins,
    unit_hessian,
    acc,
    hess,
    seg,
    first,
    last,
):  # pragma: no cover - compiled
    # Each feature's histogram is stored compactly while rows are added (its value bins, then missing: a few
    # kilobytes that stay in L1): block column j's bin b at column_slot[j] + min(b, column_bins[j]).
    # Per chunk: acc (g, rows) per slot, hess (h per slot, unless unit_hessian), seg (g, h, 1) per source row.
    m, t, chunks = rows.shape[0], widths.shape[0], acc.shape[0]
    size = (m + chunks - 1) // chunks
    for k in range(first, last):
        part, sums, part_h = acc[k], seg[k], hess[k]
        for i in range(k * size, min(m, (k + 1) * size)):
            r = rows[i]
            gi, hi = g[r], h[r]
            for b in range(t):
                s = r if identity[b] else index[r, b]
                if segment[b]:  # the factorized way: (g, h, 1) summed per source row, binned below
                    slot = seg_start[b] + s if s >= 0 else seg_start[b + 1] - 1
                    sums[slot, GRADIENT] += gi
                    sums[slot, HESSIAN] += hi
                    sums[slot, COUNT] += 1.0
                    continue
                w, col0 = widths[b], first_column[b]
                base = code_start[b] + s * w
                for f in range(col0, col0 + w):
                    bin_ = fills[f] if s < 0 else codes[base + f - col0]
                    slot = column_slot[f] + min(bin_, column_bins[f])
                    part[slot, ACC_GRADIENT] += gi
                    part[slot, ACC_ROWS] += 1.0
                    if not unit_hessian:
                        part_h[slot] += hi


@kernel(_NODE_HISTOGRAM_TOTAL_TYPES)
def _node_histogram_total(
    codes,
    code_start,
    widths,
    first_column,
    fills,
    segment,
    seg_start,
    n_bins,
    column_slot,
    column_bins,
    slot_start,
    value_bins,
    unit_hessian,
    acc,
    hess,
    seg,
):  # pragma: no cover - compiled
    """:func:`_node_histogram`'s chunks merged in chunk order, segment sums binned, spread to (features, bins,
    HIST_FIELDS)."""
    t, n_features, chunks = widths.shape[0], value_bins.shape[0], acc.shape[0]
    compact = np.zeros((slot_start[n_features], HIST_FIELDS))
    for k in range(chunks):
        compact[:, GRADIENT] += acc[k, :, ACC_GRADIENT]
        compact[:, COUNT] += acc[k, :, ACC_ROWS]
        if not unit_hessian:
            compact[:, HESSIAN] += hess[k]
        if k > 0:
            seg[0] += seg[k]
    if unit_hessian:  # squared error: every hessian is 1, its sums are the row counts
        copy_into(compact[:, HESSIAN], compact[:, COUNT])
    for b in range(t):
        if not segment[b]:
            continue
        w, col0, n_source_rows = widths[b], first_column[b], seg_start[b + 1] - seg_start[b] - 1
        for s in range(n_source_rows + 1):
            total = seg[0, seg_start[b] + s]
            if total[2] == 0.0:
                continue
            for f in range(col0, col0 + w):
                bin_ = fills[f] if s == n_source_rows else codes[code_start[b] + s * w + f - col0]
                slot = column_slot[f] + min(bin_, column_bins[f])
                compact[slot, GRADIENT] += total[GRADIENT]
                compact[slot, HESSIAN] += 1.0 * total[COUNT] if unit_hessian else total[HESSIAN]
                compact[slot, COUNT] += total[COUNT]
    out = np.zeros((n_features, n_bins, HIST_FIELDS))
    for f in range(n_features):
        nb = value_bins[f]
        for b in range(nb):
            copy_into(out[f, b], compact[slot_start[f] + b])
        copy_into(out[f, n_bins - 1], compact[slot_start[f] + nb])
    return out


@kernel(
    [
        (I64[::1], I64, I64, IN_BINS[b], I64, I64, read_only(p[:]), BOOL, I64, IN_BOOL, I64[::1])  # a strided column
        for b, p in BINS_AND_POSITIONS
    ]
)
def _partition_rows(
    rows, start, stop, codes, base, width, index, identity, fill, goes_left, scratch
):  # pragma: no cover
    left = 0
    right = 0
    for i in range(start, stop):
        r = rows[i]
        s = r if identity else index[r]
        b = fill if s < 0 else codes[base + s * width]
        if goes_left[b]:
            rows[start + left] = r  # never ahead of i: an entry already read
            left += 1
        else:
            scratch[right] = r
            right += 1
    copy_into(rows[start + left : stop], scratch[:right])
    return left


@kernel([(read_only(F64[:, :, ::1]), IN_I64, IN_BOOL, I64, F64, F64, BOOL[::1], IN_BOOL)])
def _best_split(hist, n_bins, categorical, missing_bin, l2, min_rows, goes_left, allowed):  # pragma: no cover
    return best_split(hist, n_bins, categorical, missing_bin, l2, min_rows, goes_left, allowed)


@kernel(
    [
        nt.void(IN_ROWS_BINS[b], IN_I64, IN_I64, read_only(BOOL[:, ::1]), IN_I64, IN_I64, IN_F64, F64[::1], I64, I64)
        for b in BINS
    ]
)
def _add_trees(codes, tree_start, feature, goes_left, left, right, value, out, first, last):  # pragma: no cover
    # A block of rows at a time, each tree over the block: one tree's nodes stay in the caches while its rows
    # walk it (row by row over every tree read the whole ensemble per row: 2x slower on 300 trees). Each row
    # still adds its trees in order, as adding one tree at a time does.
    for block in range(first, last, PREDICT_BLOCK_ROWS):
        end = min(block + PREDICT_BLOCK_ROWS, last)
        for t in range(len(tree_start) - 1):
            root = tree_start[t]
            for i in range(block, end):
                node = root
                while left[node] >= 0:
                    node = root + (left[node] if goes_left[node, codes[i, feature[node]]] else right[node])
                out[i] += value[node]


@kernel([nt.void(IN_I64, IN_I64, IN_I64, IN_F64, F64[::1], I64, I64)])
def _add_leaf_values(rows, starts, stops, values, raw, first, last):  # pragma: no cover - compiled
    for leaf in range(first, last):  # the leaves' rows do not overlap
        value = values[leaf]
        for i in range(starts[leaf], stops[leaf]):
            raw[rows[i]] += value


def _bins(codes: Any) -> np.ndarray:
    """Bins as the kernels take them: uint8 or uint16, C order (wider codes must fit uint16: MAX_BINS)."""
    codes = np.asarray(codes)
    return np.ascontiguousarray(codes if codes.dtype in (np.uint8, np.uint16) else codes.astype(np.uint16))


def _flags(a: Any) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.bool_)


class NumbaTreeKernels:
    """The tree kernels, each one fused numba pass (on the free cores for a node of several chunks of rows)."""

    grows_whole_trees = True  # grow_tree: a tree in one call on a row-wise layout
    grows_side_by_side = True  # a forest's trees may grow on several threads at once, a grower each
    quantizes = True  # quantize(): gradients rounded at random, fused

    def row_layout(self, flat):
        """The bins of a row-wise layout (:attr:`FlatBins.rowwise`) as :meth:`grow_tree` reads them (a
        :class:`~ilargi_db.backend.tree_grower.RowLayout`, built once per training)."""
        from ilargi_db.backend.tree_grower import RowLayout

        codes = np.asarray(flat.codes).reshape(-1, int(flat.widths[0]))
        return RowLayout.of(codes, int64_values(flat.columns), int64_values(flat.value_bins))

    def grow_tree(
        self, layout, buffers, g, h, unit_hessian: bool, categorical, limits: GrowthLimits, floor_sum: float,
        learning_rate: float, missing_bin: int, raw, hists, quantized=None, n_pick: int | None = None,
        feature_seed: int = 0,
    ) -> tuple[np.ndarray, ...]:  # fmt: skip
        """One tree grown on a :meth:`row_layout` from the training rows in ``buffers[0]`` (``buffers``: (2, rows)
        int64 scratch, both written), its leaves' values added to ``raw``: its nodes' (feature, left, right, value,
        gain, count, goes_left) arrays. ``hists``: (max_leaves,
        layout.n_slots, HIST_FIELDS) float64 scratch, the histograms of the leaves; ``quantized``: (packed, scales)
        of :meth:`quantize` (``g`` and ``h`` its rounded values), or None; ``n_pick``: each node splits on that many
        features drawn from ``feature_seed`` (:func:`~ilargi_db.backend.tree_split.draw_features`), None: on all."""
        from ilargi_db.backend.tree_grower import grow_tree

        packed, scales = quantized if quantized is not None else (np.empty(0, np.int64), np.ones(2))
        tree, (starts, stops, values) = grow_tree(
            layout, buffers, float64_values(g), float64_values(h), bool(unit_hessian), packed, float64_values(scales),
            _flags(categorical), limits, floor_sum, learning_rate, int(missing_bin), hists,
            len(categorical) if n_pick is None else n_pick, feature_seed,
        )  # fmt: skip
        self.add_leaf_values(buffers[0], starts, stops, values, raw)
        return tree

    def quantize(self, g, h, unit_hessian: bool, rows, keys, seed: int):
        """(g rounded, h rounded, the levels packed, the scales): :mod:`~ilargi_db.backend.quantization`'s rule;
        ``keys``: each row's uint64 key (its draws)."""
        from ilargi_db.backend.tree_grower import quantize

        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        return quantize(float64_values(g), float64_values(h), unit_hessian, int64_values(rows), keys, int(seed))

    def node_histogram(self, flat, rows, g, h, segment, unit_hessian: bool = False) -> np.ndarray:
        """(features, bins, HIST_FIELDS) sums of (g, h, 1) per bin over ``rows``; ``segment[k]``: block k summed per
        source row first (the factorized way), else gathered per row; ``unit_hessian``: every h is 1 (not read)."""
        seg_start = flat.segment_start(segment)
        chunks = _chunks(len(rows), (int(flat.slot_start[-1]) + int(seg_start[-1])) * 24)
        rows, g, h, n_slots = int64_values(rows), float64_values(g), float64_values(h), int(flat.slot_start[-1])
        slots, bins = int64_values(flat.column_slot), int64_values(flat.column_bins)
        codes, fills = _bins(flat.codes), _bins(flat.fills)
        code_start, widths, first_column = (int64_values(a) for a in (flat.code_start, flat.widths, flat.first_column))
        segment = _flags(segment)
        acc = np.zeros((chunks, n_slots, 2))  # (g, rows); h is summed apart unless it is 1
        hess = np.zeros((chunks, 1 if unit_hessian else n_slots))
        seg = np.zeros((chunks, int(seg_start[-1]), HIST_FIELDS))
        run(
            _node_histogram, chunks, codes, code_start, widths, first_column, fills,
            positions(flat.index), _flags(flat.identity), segment, seg_start, rows, g, h, slots, bins, unit_hessian,
            acc, hess, seg,
        )  # fmt: skip
        return _node_histogram_total(
            codes, code_start, widths, first_column, fills, segment, seg_start, flat.n_bins, slots, bins,
            int64_values(flat.slot_start), int64_values(flat.value_bins), unit_hessian, acc, hess, seg,
        )  # fmt: skip

    def partition_rows(self, rows, start: int, stop: int, flat, feature: int, goes_left, scratch) -> int:
        """Order ``rows[start:stop]`` stably: the rows whose bin of ``feature`` goes left first; their count."""
        b, j = flat.feature_at(feature)
        base = int(flat.code_start[b]) + j
        fill = int(flat.fills[flat.first_column[b] + j])
        index = flat.index[:, b]
        if index.dtype not in (np.int32, np.int64):
            index = index.astype(np.int64)
        return int(
            _partition_rows(
                rows,
                start,
                stop,
                _bins(flat.codes),
                base,
                int(flat.widths[b]),
                index,
                bool(flat.identity[b]),
                fill,
                _flags(goes_left),
                scratch,
            )
        )

    def best_split(
        self, hist, n_bins, categorical, missing_bin: int, l2: float, min_rows: int, goes_left, allowed=None
    ):
        """The best split of the ``allowed`` features (None: every one): (gain, feature), ``goes_left`` filled."""
        hist, n_bins = float64_values(hist), int64_values(n_bins)
        args = (hist, n_bins, _flags(categorical), int(missing_bin), float(l2), float(min_rows))
        allowed = np.ones(len(n_bins), np.bool_) if allowed is None else _flags(allowed)
        gain, column = _best_split(*args, goes_left, allowed)
        return float(gain), int(column)

    def add_leaf_values(self, rows, starts, stops, values, raw) -> None:
        """``raw[rows[starts[k]:stops[k]]] += values[k]`` for every leaf k (ranges that do not overlap)."""
        starts, stops = int64_values(starts), int64_values(stops)
        leaves = len(starts)
        rows_per_leaf = max(1, int((stops - starts).sum()) // max(1, leaves))
        min_leaves = max(1, PREDICT_ROWS // rows_per_leaf)  # each thread adds PREDICT_ROWS rows at least
        run(_add_leaf_values, leaves, rows, starts, stops, float64_values(values), raw, min_tasks=min_leaves)

    def add_trees(self, codes, tree_start, feature, goes_left, left, right, value, out) -> None:
        tree_start, feature, left, right = (int64_values(a) for a in (tree_start, feature, left, right))
        args = (tree_start, feature, _flags(goes_left), left, right, float64_values(value), out)
        run(_add_trees, len(codes), _bins(codes), *args, min_tasks=PREDICT_ROWS)


__all__ = ["CATEGORY_SMOOTHING", "MIN_HESSIAN", "TIE", "NumbaTreeKernels"]
