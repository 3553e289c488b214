"""One boosting tree grown in compiled code, start to finish, on bins read row by row.

:func:`grow_tree` grows a tree leaf-wise (the leaf of largest gain first, as LightGBM and HistGradientBoosting grow;
gains within :data:`~.tree_split.TIE` a tie that the lowest node id wins: :func:`~.tree_split.pick_leaf`) until
``max_leaves``: each split partitions its node's rows stably (into the other of two row buffers) and builds the
smaller child's histogram from its rows, the larger child's being the parent's less it (in the parent's slot).
The steps of a tree run in one compiled function; it hands back only the passes over many rows (the root's
histogram, a large node's split), which run over a number of row chunks set by the shapes (on the free cores),
merged in chunk order: the tree does not depend on the thread count.

It reads a :class:`RowLayout`: every feature's bin per training row, row by row, one byte where the feature's
bins fit (two where a categorical keeps more), its missing values in the bin after its values, so that a
feature's histogram is compact (its bins of values, then its missing row; :data:`~.tree_split.HIST_FIELDS`
sums each). It is built from a binned matrix whose blocks are one (:attr:`FlatBins.rowwise`: the materialized
join's, or the fact's with its narrow dimensions gathered in); other layouts grow through
:class:`~ilargi_db.models._tree_growth.TreeGrower`'s per-node steps, which split alike (:mod:`.tree_split`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numba
import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.extending import intrinsic

from ilargi_db.backend import quantization
from ilargi_db.backend.compiled import kernel, read_only
from ilargi_db.backend.copies import copy_into
from ilargi_db.backend.histogram import COUNT, GRADIENT, HESSIAN, HIST_FIELDS
from ilargi_db.backend.parallel import run
from ilargi_db.backend.quantization import CLIP, LOW_BITS, SEED_MASK
from ilargi_db.backend.tree_split import TIE, draw_features, feature_split, pick_leaf, uniform_draw

F64, I64, BOOL = nt.float64, nt.int64, nt.boolean
IN_F64, IN_I64, IN_BOOL = read_only(F64[::1]), read_only(I64[::1]), read_only(BOOL[::1])
NARROW, WIDE = read_only(nt.uint8[:, ::1]), read_only(nt.uint16[:, ::1])  # a RowLayout's two matrices
META = read_only(I64[:, ::1])  # a RowLayout's columns' (SLOT, WIDTH)

# A node's rows are an ascending subset of the training rows: reading their bins and gradients skips through
# memory, each read a cache miss the hardware does not foresee. Each pass asks for the row this many ahead
# first (measured on 1M rows x 12 features: the histograms of a tree's smaller children 2.4x faster).
PREFETCH_AHEAD = 48
# A grower's pass over many rows is cut into chunks of this many rows at least (at most GROWER_CHUNKS), on the free
# cores: fewer rows per chunk than tree_kernels' reductions, as a split's pass is cheaper per row.
GROWER_CHUNK_ROWS = 1 << 14
GROWER_CHUNKS = 8
STRIDE_SPREAD = 4  # the one-byte features' sums at a stride of 256 only while that is at most 4x their compact slots
PARALLEL_ROWS = 2 * GROWER_CHUNK_ROWS  # a histogram of this many rows or more is built in chunks, on the free cores


@intrinsic
def _prefetch(typingctx, array, offset):
    """Ask the CPU to bring ``array``'s element ``offset`` (counted in a C-order array's elements) into its caches
    (LLVM's prefetch: a read, kept close); it reads nothing and cannot fault."""

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32])
        function = builder.module.declare_intrinsic("llvm.prefetch", [byte_pointer], fnty)
        address = builder.bitcast(builder.gep(data, [args[1]]), byte_pointer)
        builder.call(function, [address, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return nt.void(array, offset), codegen


@kernel([nt.void(IN_F64, IN_F64, BOOL, read_only(nt.uint64[::1]), F64, F64, I64, F64[::1], F64[::1], I64[::1], I64,
                 I64)])  # fmt: skip
def _quantize(g, h, unit_hessian, keys, scale_g, scale_h, seed, g_out, h_out, packed, first, last):  # pragma: no cover
    for r in range(first, last):
        draw = keys[r] * np.uint64(2)
        gq = np.int64(np.floor(min(max(g[r] / scale_g, -CLIP), CLIP) + uniform_draw(seed, draw)))
        hq = np.int64(1)
        if not unit_hessian:
            hq = np.int64(np.floor(min(h[r] / scale_h, CLIP) + uniform_draw(seed, draw + np.uint64(1))))
        g_out[r] = gq * scale_g
        h_out[r] = 1.0 if unit_hessian else hq * scale_h
        packed[r] = (gq << 32) + hq


def quantize(g, h, unit_hessian: bool, rows, keys, seed: int) -> tuple[np.ndarray, ...]:
    """:func:`ilargi_db.backend.quantization.quantize`, fused: (g rounded, h rounded, the levels packed, the
    scales), over the training ``rows``' largest gradient and hessian; ``keys``: each row's (uint64)."""
    scales = quantization.scales(g, h, unit_hessian, rows)
    n = len(g)
    g_out, h_out, packed = np.empty(n), np.empty(n), np.empty(n, np.int64)
    run(_quantize, n, g, h, bool(unit_hessian), keys, scales[GRADIENT], scales[HESSIAN], seed & SEED_MASK,
        g_out, h_out, packed, min_tasks=1 << 16)  # fmt: skip
    return g_out, h_out, packed, scales


@kernel([nt.void(read_only(nt.uint64[::1]), I64, IN_F64, F64[::1], I64, I64)])
def _poisson_weights(keys, seed, cdf, out, first, last):  # pragma: no cover - compiled
    for r in range(first, last):
        u = uniform_draw(seed, keys[r])
        k = 0
        while k < cdf.shape[0] and u >= cdf[k]:
            k += 1
        out[r] = k


def poisson_cdf(rate: float) -> np.ndarray:
    """P(count <= k) of a Poisson count of mean ``rate``, for k = 0, 1, ... until it is 1 to the last bit."""
    term = np.exp(-rate)
    cdf, k = [term], 0
    while cdf[-1] < 1.0 - 1e-16 and k < 200:
        k += 1
        term *= rate / k
        cdf.append(cdf[-1] + term)
    return np.array(cdf)


def poisson_weights(keys: np.ndarray, seed: int, rate: float) -> np.ndarray:
    """A Poisson bootstrap (Spark MLlib's random forests draw theirs so): each row's count of mean ``rate`` (float64),
    drawn from (``seed``, the row's uint64 key): the same rows get the same counts in any order."""
    out = np.empty(len(keys))
    run(_poisson_weights, len(keys), keys, int(seed) & SEED_MASK, poisson_cdf(rate), out, min_tasks=1 << 16)
    return out


def poisson_weights_reference(keys: np.ndarray, seed: int, rate: float) -> np.ndarray:
    return np.searchsorted(poisson_cdf(rate), quantization.uniform(seed, keys), side="right").astype(np.float64)


@dataclass(frozen=True)
class RowLayout:
    """Every feature's bin per training row, read row by row: ``narrow`` (rows x the features whose bins, missing
    bin included, fit a byte: uint8) and ``wide`` (the others: uint16), a feature's missing values in bin
    ``value_bins[f]``. Column j of ``narrow`` is feature ``narrow_features[j]``; ``narrow_meta[j]`` is where its
    compact histogram starts and its width (its bins of values and its missing bin); ``wide`` likewise."""

    narrow: np.ndarray
    wide: np.ndarray
    narrow_features: np.ndarray
    wide_features: np.ndarray
    narrow_meta: np.ndarray  # (narrow columns, 2): SLOT, WIDTH
    wide_meta: np.ndarray
    slot_start: np.ndarray  # (features + 1,) where each feature's compact histogram starts
    value_bins: np.ndarray  # (features,)

    @classmethod
    def of(cls, codes: np.ndarray, columns: np.ndarray, value_bins: np.ndarray) -> RowLayout:
        """From a block of every feature (``codes``: training rows x block columns, column j feature ``columns[j]``,
        its missing values in bin ``missing_bin``: every code is a value's bin or that one, as binning writes them)."""
        value_bins = np.ascontiguousarray(value_bins, dtype=np.int64)
        slot_start = np.concatenate([[0], np.cumsum(value_bins + 1)]).astype(np.int64)
        fits = value_bins[columns] < 256  # its values' bins and its missing bin in a byte
        parts = []
        for keep, dtype in ((fits, np.uint8), (~fits, np.uint16)):
            js = np.flatnonzero(keep)
            part = np.empty((codes.shape[0], len(js)), dtype=dtype)
            for k, j in enumerate(js):
                np.minimum(codes[:, j], value_bins[columns[j]], out=part[:, k], casting="unsafe")
            features = np.ascontiguousarray(columns[js], dtype=np.int64)
            meta = np.ascontiguousarray(np.column_stack([slot_start[features], value_bins[features] + 1]))
            parts.append((part, features, meta.astype(np.int64).reshape(-1, 2)))
        (narrow, narrow_features, narrow_meta), (wide, wide_features, wide_meta) = parts
        return cls(narrow, wide, narrow_features, wide_features, narrow_meta, wide_meta, slot_start, value_bins)

    @property
    def n_slots(self) -> int:
        return int(self.slot_start[-1])

    @cached_property
    def column_of(self) -> np.ndarray:
        """Per feature: its column, ``narrow`` ones first then ``wide`` ones (index - narrow width)."""
        out = np.empty(len(self.value_bins), np.int64)
        out[self.narrow_features] = np.arange(len(self.narrow_features))
        out[self.wide_features] = len(self.narrow_features) + np.arange(len(self.wide_features))
        return out


SLOT, WIDTH = 0, 1  # a column's meta


@numba.njit(cache=True, nogil=True)
def _rows_histogram(narrow, wide, rows, lo, hi, g, h, unit_hessian, packed, scales, narrow_meta, wide_meta,
                    acc):  # fmt: skip  # pragma: no cover - compiled
    """Add ``rows[lo:hi]`` to the compact histogram ``acc``, each row's bins read once for every feature, the
    gradients and bins of the row ``PREFETCH_AHEAD`` on asked for first (measured faster than gathering a node's
    gradients in order first, LightGBM's ordered gradients). Quantized gradients (``packed`` not empty:
    :func:`quantize`) are summed as integers, then scaled."""
    if packed.shape[0] > 0:
        _packed_histogram(narrow, wide, rows, lo, hi, packed, unit_hessian, scales, narrow_meta, wide_meta, acc)
        return
    w8, w16 = narrow.shape[1], wide.shape[1]
    for i in range(lo, hi):
        if i + PREFETCH_AHEAD < hi:  # written out: a helper taking the arrays costs their reference counts per row
            ahead = rows[i + PREFETCH_AHEAD]
            if w8 > 0:
                _prefetch(narrow, ahead * w8)
            if w16 > 0:
                _prefetch(wide, ahead * w16)
            _prefetch(g, ahead)
            if not unit_hessian:
                _prefetch(h, ahead)
        r = rows[i]
        gi = g[r]
        h_r = 1.0 if unit_hessian else h[r]
        for j in range(narrow.shape[1]):
            slot = narrow_meta[j, SLOT] + np.int64(narrow[r, j])
            acc[slot, GRADIENT] += gi
            if not unit_hessian:
                acc[slot, HESSIAN] += h_r
            acc[slot, COUNT] += 1.0
        for j in range(wide.shape[1]):
            slot = wide_meta[j, SLOT] + np.int64(wide[r, j])
            acc[slot, GRADIENT] += gi
            if not unit_hessian:
                acc[slot, HESSIAN] += h_r
            acc[slot, COUNT] += 1.0
    if unit_hessian:  # squared error: every hessian is 1, its sums are the row counts
        for s in range(acc.shape[0]):
            acc[s, HESSIAN] = acc[s, COUNT]


@numba.njit(cache=True, nogil=True)
def _packed_histogram(narrow, wide, rows, lo, hi, packed, unit_hessian, scales, narrow_meta, wide_meta,
                      acc):  # fmt: skip  # pragma: no cover - compiled
    """:func:`_rows_histogram` of quantized gradients: one integer add per row and feature (its gradient in the high
    32 bits, its hessian, or 1, in the low ones), the counts apart only for a hessian that is not 1. Where the
    one-byte features use most of their 256 bins, their sums go at a constant stride of 256: the compiler then
    sees that two features never share a slot (measured 2x faster than a stride it cannot see). Where they use
    few (thousands of two-valued features), that would spread a histogram over megabytes (measured 5x slower
    than floats): they go to the compact slots then, as the two-byte features always do."""
    w8, w16, n_slots = narrow.shape[1], wide.shape[1], acc.shape[0]
    strided = w8 * 256 <= STRIDE_SPREAD * n_slots
    sums, compact = np.zeros(w8 * 256 if strided else 0, np.int64), np.zeros(n_slots, np.int64)
    counts = np.zeros(0 if unit_hessian else sums.shape[0], np.int64)
    compact_counts = np.zeros(0 if unit_hessian else n_slots, np.int64)
    for i in range(lo, hi):
        if i + PREFETCH_AHEAD < hi:
            ahead = rows[i + PREFETCH_AHEAD]
            if w8 > 0:
                _prefetch(narrow, ahead * w8)
            if w16 > 0:
                _prefetch(wide, ahead * w16)
            _prefetch(packed, ahead)
        r = rows[i]
        v = packed[r]
        if strided:
            for j in range(w8):
                b = j * 256 + np.int64(narrow[r, j])
                sums[b] += v
                if not unit_hessian:
                    counts[b] += 1
        else:
            for j in range(w8):
                slot = narrow_meta[j, SLOT] + np.int64(narrow[r, j])
                compact[slot] += v
                if not unit_hessian:
                    compact_counts[slot] += 1
        for j in range(w16):
            slot = wide_meta[j, SLOT] + np.int64(wide[r, j])
            compact[slot] += v
            if not unit_hessian:
                compact_counts[slot] += 1
    if strided:
        for j in range(w8):
            for b in range(narrow_meta[j, WIDTH]):
                count = 0 if unit_hessian else counts[j * 256 + b]
                _unpack(sums[j * 256 + b], count, unit_hessian, scales, acc, narrow_meta[j, SLOT] + b)
    for j in range(w8 + w16):
        meta = wide_meta[j - w8] if j >= w8 else narrow_meta[j]
        if j < w8 and strided:
            continue
        for slot in range(meta[SLOT], meta[SLOT] + meta[WIDTH]):
            _unpack(compact[slot], 0 if unit_hessian else compact_counts[slot], unit_hessian, scales, acc, slot)


@numba.njit(cache=True, nogil=True, inline="always")
def _unpack(v, count, unit_hessian, scales, acc, slot):  # pragma: no cover - compiled
    """A packed sum into a float histogram's slot (exact: integers times powers of two)."""
    low = v & LOW_BITS
    acc[slot, GRADIENT] += (v >> 32) * scales[GRADIENT]
    if unit_hessian:
        acc[slot, HESSIAN] += low
        acc[slot, COUNT] += low
    else:
        acc[slot, HESSIAN] += low * scales[HESSIAN]
        acc[slot, COUNT] += count


@numba.njit(cache=True, nogil=True)
def _distribute(codes, src, dst, start, stop, to_left, to_right, column, goes_left):  # pragma: no cover - compiled
    """``src[start:stop]`` written stably into ``dst``: the rows whose bin of ``codes``' column ``column`` goes left
    from ``to_left`` on, the others from ``to_right`` on. Each row written once, where a select (not a branch: a
    split's side is as hard to foresee as a coin's) says."""
    w = codes.shape[1]
    left, right = to_left, to_right
    for i in range(start, stop):
        if i + PREFETCH_AHEAD < stop:
            _prefetch(codes, src[i + PREFETCH_AHEAD] * w + column)
        r = src[i]
        side = np.int64(goes_left[codes[r, column]])
        dst[left if side else right] = r
        left += side
        right += 1 - side


@numba.njit(cache=True, nogil=True)
def _count_left(codes, src, start, stop, column, goes_left):  # pragma: no cover - compiled
    """The rows of ``src[start:stop]`` whose bin of ``codes``' column ``column`` goes left."""
    w, n_left = codes.shape[1], 0
    for i in range(start, stop):
        if i + PREFETCH_AHEAD < stop:
            _prefetch(codes, src[i + PREFETCH_AHEAD] * w + column)
        n_left += goes_left[codes[src[i], column]]
    return n_left


@kernel([nt.void(NARROW, WIDE, IN_I64, I64, I64, I64, IN_BOOL, I64[::1], I64, I64)])
def _chunk_counts(narrow, wide, src, lo, hi, column, goes_left, lefts, first, last):  # pragma: no cover - compiled
    """A split of ``src[lo:hi]`` cut into ``lefts.shape[0]`` chunks, first pass: each chunk's rows going left."""
    chunks = lefts.shape[0]
    size = (hi - lo + chunks - 1) // chunks
    for k in range(first, last):
        a = lo + k * size
        z = min(hi, a + size)
        if column < narrow.shape[1]:
            lefts[k] = _count_left(narrow, src, a, z, column, goes_left)
        else:
            lefts[k] = _count_left(wide, src, a, z, column - narrow.shape[1], goes_left)


# The rows and the split's mask typed writable, as _grow_step passes them, though only dst is written: numba compiles
# a helper once per signature it is called with, and each of _rows_histogram's and _distribute's costs a second.
@kernel([nt.void(NARROW, WIDE, I64[::1], I64[::1], I64, I64, I64, BOOL[::1], IN_I64, BOOL, IN_F64, IN_F64, BOOL, IN_I64,
                 IN_F64, META, META, F64[:, :, ::1], I64, I64)])  # fmt: skip
def _chunk_splits(narrow, wide, src, dst, lo, hi, column, goes_left, lefts, build_left, g, h, unit_hessian, packed,
                  scales, narrow_meta, wide_meta, acc, first, last):  # fmt: skip  # pragma: no cover - compiled
    """Second pass: each chunk's rows written where the chunks before it end (both sides in the node's order, as one
    stable partition leaves them), then the rows it wrote to the built side added to ``acc[k]``."""
    chunks = lefts.shape[0]
    size = (hi - lo + chunks - 1) // chunks
    n_left = lefts.sum()
    for k in range(first, last):
        a = lo + k * size
        z = min(hi, a + size)
        before = lefts[:k].sum()
        to_left, to_right = lo + before, lo + n_left + (a - lo - before)
        _distribute_column(narrow, wide, src, dst, a, z, to_left, to_right, column, goes_left)
        b, e = (to_left, to_left + lefts[k]) if build_left else (to_right, to_right + (z - a - lefts[k]))
        _rows_histogram(narrow, wide, dst, b, e, g, h, unit_hessian, packed, scales, narrow_meta, wide_meta, acc[k])


@numba.njit(cache=True, nogil=True, inline="always")
def _distribute_column(narrow, wide, src, dst, start, stop, to_left, to_right, column, goes_left):  # pragma: no cover
    """:func:`_distribute` by a column of either matrix (:attr:`RowLayout.column_of`'s numbering)."""
    if column < narrow.shape[1]:
        _distribute(narrow, src, dst, start, stop, to_left, to_right, column, goes_left)
    else:
        _distribute(wide, src, dst, start, stop, to_left, to_right, column - narrow.shape[1], goes_left)


# rows typed writable, as _chunk_splits types them: one _rows_histogram compiled for both
@kernel([nt.void(NARROW, WIDE, I64[::1], I64, I64, IN_F64, IN_F64, BOOL, IN_I64, IN_F64, META, META, F64[:, :, ::1],
                 I64, I64)])  # fmt: skip
def _chunk_histograms(narrow, wide, rows, lo, hi, g, h, unit_hessian, packed, scales, narrow_meta, wide_meta, acc,
                      first, last):  # fmt: skip  # pragma: no cover - compiled
    """:func:`_rows_histogram` of ``rows[lo:hi]`` cut into ``acc.shape[0]`` chunks, chunk k's into ``acc[k]``."""
    chunks = acc.shape[0]
    size = (hi - lo + chunks - 1) // chunks
    for k in range(first, last):
        a = lo + k * size
        _rows_histogram(narrow, wide, rows, a, min(hi, a + size), g, h, unit_hessian, packed, scales, narrow_meta,
                        wide_meta, acc[k])  # fmt: skip


# A node's int fields, one row per node (the grower's record, kept across its steps). A node's rows are
# buffers[BUFFER][START:STOP]: a split writes its children's rows into the other buffer, at the same places.
START, STOP, DEPTH, POOL, FEATURE, LEFT, RIGHT, COUNT_ROWS, BUFFER = range(9)
NODE_INTS = 9
VALUE, GAIN = 0, 1
# The grower's state between steps: what it does next, its sizes, the split under way and what it asks for.
PHASE, N_NODES, N_LEAVES, N_FREE, SPLITTING, SMALL, SMALL_LEFT, N_LEFT = range(8)
ASK_FIRST, ASK_LAST, ASK_POOL, ASK_COLUMN = range(8, 12)
STATE_INTS = 12
MIN_GAIN = 0  # the float state
# What a step returns: DONE, or what it asks for: the ROOT's histogram (into hists[ASK_POOL], of the rows
# buffers[0][ASK_FIRST:ASK_LAST]), or a SPLIT of node SPLITTING (its rows written into the other buffer, N_LEFT set,
# the smaller side's histogram into hists[SMALL]).
DONE, ROOT, SPLIT = 0, 1, 2
# Where the grower is (state[PHASE]): values apart from the returns', so that one is never taken for the other.
BEGIN, ROOT_BUILT, CHILD_BUILT, FINISHED = 10, 11, 12, 13


@numba.njit(cache=True, nogil=True)
def _best_split(hist, slot_start, value_bins, categorical, missing_bin, l2, min_rows, total, order, keys, mask,
                best_mask, allowed):  # fmt: skip  # pragma: no cover - compiled
    """Best (gain, feature) over a compact histogram's ``allowed`` features (the first wins a tie, as
    :func:`~.tree_split.best_split` on a spread one), the winner's bins going left in ``best_mask``."""
    best_gain, best_feature = 0.0, -1
    for f in range(value_bins.shape[0]):
        if not allowed[f]:
            continue
        nb = value_bins[f]
        hf = hist[slot_start[f] : slot_start[f] + nb + 1]
        gain = feature_split(hf, nb, nb, missing_bin, categorical[f], total, l2, min_rows, order, keys, mask)
        if gain > best_gain * (1.0 + TIE):
            best_gain, best_feature = gain, f
            copy_into(best_mask, mask)
    return best_gain, best_feature


@numba.njit(cache=True, nogil=True, inline="always")
def _totals(hist, slot_start, total):  # pragma: no cover - compiled
    """A node's sums: its first feature's (every row is in one of its bins)."""
    total[:] = 0.0
    for s in range(slot_start[0], slot_start[1]):
        for q in range(HIST_FIELDS):
            total[q] += hist[s, q]


# fmt: off
_GROW_STEP_TYPES = [
    I64(NARROW, WIDE, I64[:, ::1], IN_F64, IN_F64, BOOL, IN_I64, IN_F64, META, META, IN_I64, IN_I64,
        IN_I64, IN_BOOL, I64, I64, F64, F64, F64, F64, I64, I64, I64, F64[:, :, ::1],
        I64[:, ::1], F64[:, ::1], BOOL[:, ::1], BOOL[::1], I64[::1], I64[::1], I64[::1], F64[::1])
]
# fmt: on


@kernel(_GROW_STEP_TYPES)
def _grow_step(
    narrow, wide, buffers, g, h, unit_hessian, packed, scales, narrow_meta, wide_meta, column_of, slot_start,
    value_bins, categorical, max_leaves, max_depth, min_rows, l2, floor_sum, learning_rate, n_pick, feature_seed,
    ask_rows, hists, nodes, floats, goes_left, split_mask, leaves, free, state, min_gain_state,
):  # fmt: skip  # pragma: no cover - compiled
    """Grow the tree in ``nodes`` from where ``state`` says until it is done (DONE), or until the root's histogram
    or a split of a node of at least ``ask_rows`` rows is wanted (ROOT, SPLIT: done by the caller on the free
    cores, which then calls again). ``split_mask``: the split under way's bins going left, in its feature's
    compact bins (the missing values' last)."""
    n, missing_bin = buffers.shape[1], goes_left.shape[1] - 1
    order, keys = np.empty(missing_bin + 1, np.int64), np.empty(missing_bin + 1)
    mask, total = np.zeros(missing_bin + 1, np.bool_), np.zeros(HIST_FIELDS)
    allowed = np.ones(value_bins.shape[0], np.bool_)  # the features a node may split on (n_pick of them, drawn)
    phase = state[PHASE]
    if phase == FINISHED:  # a tree is grown once
        return DONE
    if phase == BEGIN:
        nodes[:, :] = -1
        nodes[:, START] = nodes[:, STOP] = nodes[:, DEPTH] = nodes[:, COUNT_ROWS] = nodes[:, BUFFER] = 0
        floats[:, :], goes_left[:, :] = 0.0, False
        for k in range(free.shape[0]):
            free[k] = k
        state[N_FREE] = free.shape[0] - 1
        nodes[0, POOL] = free[state[N_FREE]]
        nodes[0, STOP] = nodes[0, COUNT_ROWS] = n
        leaves[0] = 0
        state[N_NODES], state[N_LEAVES] = 1, 1
        hists[nodes[0, POOL]] = 0.0
        state[PHASE] = ROOT_BUILT
        if n >= ask_rows:
            state[ASK_FIRST], state[ASK_LAST], state[ASK_POOL] = 0, n, nodes[0, POOL]
            return ROOT
        first_row = np.int64(0)  # not the literal 0: numba would compile _rows_histogram again for it
        _rows_histogram(narrow, wide, buffers[0], first_row, n, g, h, unit_hessian, packed, scales, narrow_meta,
                        wide_meta, hists[nodes[0, POOL]])  # fmt: skip
        phase = ROOT_BUILT
    candidates = np.zeros(2, np.int64)  # the nodes whose best split is searched next
    n_candidates = 0
    if phase == ROOT_BUILT:
        _totals(hists[nodes[0, POOL]], slot_start, total)
        min_gain_state[MIN_GAIN] = floor_sum * floor_sum / (total[HESSIAN] + l2)  # see _tree_growth.GAIN_FLOOR
        n_candidates = 1
    min_gain = min_gain_state[MIN_GAIN]
    while True:
        if phase == CHILD_BUILT:  # the larger child's histogram is the parent's less the smaller's
            best, small = state[SPLITTING], state[SMALL]
            parent = hists[nodes[best, POOL]]
            parent -= hists[small]
            lo, hi = state[N_NODES], state[N_NODES] + 1
            state[N_NODES] += 2
            middle = nodes[best, START] + state[N_LEFT]
            nodes[best, LEFT], nodes[best, RIGHT] = lo, hi
            nodes[lo, START], nodes[lo, STOP] = nodes[best, START], middle
            nodes[hi, START], nodes[hi, STOP] = middle, nodes[best, STOP]
            nodes[lo, DEPTH] = nodes[hi, DEPTH] = nodes[best, DEPTH] + 1
            nodes[lo, BUFFER] = nodes[hi, BUFFER] = 1 - nodes[best, BUFFER]
            nodes[lo, COUNT_ROWS], nodes[hi, COUNT_ROWS] = middle - nodes[best, START], nodes[best, STOP] - middle
            if state[SMALL_LEFT]:
                nodes[lo, POOL], nodes[hi, POOL] = small, nodes[best, POOL]
            else:
                nodes[lo, POOL], nodes[hi, POOL] = nodes[best, POOL], small
            nodes[best, POOL] = -1
            for k in range(state[N_LEAVES]):
                if leaves[k] == best:
                    leaves[k] = lo
            leaves[state[N_LEAVES]] = hi
            state[N_LEAVES] += 1
            candidates[0], candidates[1], n_candidates = lo, hi, 2
        for c in range(n_candidates):  # a leaf's split, kept as its candidate (FEATURE >= 0) if it may be taken
            node = candidates[c]
            if (max_depth >= 0 and nodes[node, DEPTH] >= max_depth) or (
                nodes[node, STOP] - nodes[node, START] < 2 * min_rows
            ):
                continue
            hist = hists[nodes[node, POOL]]
            _totals(hist, slot_start, total)
            draw_features(feature_seed, node, n_pick, allowed)
            best_gain, best_feature = _best_split(
                hist, slot_start, value_bins, categorical, missing_bin, l2, min_rows, total, order, keys, mask,
                goes_left[node], allowed,
            )  # fmt: skip
            if best_feature >= 0 and best_gain > min_gain:
                nodes[node, FEATURE], floats[node, GAIN] = best_feature, best_gain
            else:
                goes_left[node, :] = False
        n_candidates = 0
        if state[N_LEAVES] >= max_leaves:
            break
        n_nodes = state[N_NODES]
        eligible = (nodes[:n_nodes, LEFT] < 0) & (nodes[:n_nodes, FEATURE] >= 0)  # leaves with a split to take
        best = pick_leaf(floats[:n_nodes, GAIN], eligible)
        if best < 0:
            break
        f = nodes[best, FEATURE]
        s0, nb = slot_start[f], value_bins[f]
        parent = hists[nodes[best, POOL]]
        for b in range(nb):  # the split in the feature's compact bins: its missing values' bin is nb
            split_mask[b] = goes_left[best, b]
        split_mask[nb] = goes_left[best, missing_bin]
        n_left_rows = 0.0
        for b in range(nb + 1):
            if split_mask[b]:
                n_left_rows += parent[s0 + b, COUNT]
        first, last = nodes[best, START], nodes[best, STOP]
        small_left = n_left_rows <= (last - first) - n_left_rows
        state[N_FREE] -= 1
        small = free[state[N_FREE]]
        hists[small] = 0.0
        state[SPLITTING], state[SMALL], state[SMALL_LEFT] = best, small, small_left
        phase = state[PHASE] = CHILD_BUILT
        if last - first >= ask_rows:
            state[ASK_FIRST], state[ASK_LAST], state[ASK_COLUMN] = first, last, column_of[f]
            return SPLIT
        n_left = np.int64(n_left_rows)  # the parent's histogram counts them exactly
        state[N_LEFT] = n_left
        src, dst = buffers[nodes[best, BUFFER]], buffers[1 - nodes[best, BUFFER]]
        _distribute_column(narrow, wide, src, dst, first, last, first, first + n_left, column_of[f], split_mask)
        a, z = (first, first + n_left) if small_left else (first + n_left, last)
        _rows_histogram(narrow, wide, dst, a, z, g, h, unit_hessian, packed, scales, narrow_meta, wide_meta,
                        hists[small])  # fmt: skip
    for k in range(state[N_LEAVES]):  # leaf values (added to their rows' raw scores by the caller)
        i = leaves[k]
        if nodes[i, BUFFER] == 1:  # every leaf's rows in buffers[0], where the caller reads them
            copy_into(buffers[0, nodes[i, START] : nodes[i, STOP]], buffers[1, nodes[i, START] : nodes[i, STOP]])
        _totals(hists[nodes[i, POOL]], slot_start, total)
        nodes[i, FEATURE], floats[i, GAIN] = -1, 0.0
        goes_left[i, :] = False
        floats[i, VALUE] = -learning_rate * total[GRADIENT] / (total[HESSIAN] + l2)
    state[PHASE] = FINISHED
    return DONE


def grow_tree(
    layout: RowLayout, buffers, g, h, unit_hessian: bool, packed, scales, categorical, limits, floor_sum: float,
    learning_rate: float, missing_bin: int, hists, n_pick: int, feature_seed: int,
) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:  # fmt: skip
    """One tree on ``layout`` from the training rows in ``buffers[0]`` (``buffers``: (2, rows) int64, both written):
    its nodes' (feature, left, right, value, gain, count, goes_left) arrays, and its leaves' (start, stop, value):
    each leaf's rows are ``buffers[0][start:stop]``.
    ``hists``: (max_leaves, layout.n_slots, HIST_FIELDS) scratch; ``packed`` and ``scales``: the gradients
    quantized (:func:`quantize`; ``g`` and ``h`` then the rounded values), or ``packed`` empty. Each node splits on
    ``n_pick`` features drawn from ``feature_seed`` and its id (:func:`~.tree_split.draw_features`; every feature
    where ``n_pick`` covers them)."""
    max_nodes = 2 * limits.max_leaves - 1
    nodes, floats = np.empty((max_nodes, NODE_INTS), np.int64), np.empty((max_nodes, 2))
    goes_left, split_mask = np.empty((max_nodes, missing_bin + 1), np.bool_), np.zeros(missing_bin + 1, np.bool_)
    leaves, free = np.empty(limits.max_leaves, np.int64), np.empty(hists.shape[0], np.int64)
    state, min_gain = np.full(STATE_INTS, 0, np.int64), np.zeros(1)
    state[PHASE] = BEGIN
    max_depth = -1 if limits.max_depth is None else int(limits.max_depth)
    meta = (layout.narrow_meta, layout.wide_meta)
    args = (
        layout.narrow, layout.wide, buffers, g, h, unit_hessian, packed, scales, *meta, layout.column_of,
        layout.slot_start, layout.value_bins, categorical, int(limits.max_leaves), max_depth,
        float(limits.min_samples_leaf), float(limits.l2_regularization), float(floor_sum), float(learning_rate),
        int(n_pick), int(feature_seed) & SEED_MASK, PARALLEL_ROWS, hists, nodes, floats, goes_left, split_mask,
        leaves, free, state, min_gain,
    )  # fmt: skip
    while (step := _grow_step(*args)) != DONE:
        lo, hi = int(state[ASK_FIRST]), int(state[ASK_LAST])
        chunks = min(GROWER_CHUNKS, (hi - lo) // GROWER_CHUNK_ROWS)  # by the shapes: the same sums on any thread count
        acc = np.zeros((chunks, hists.shape[1], HIST_FIELDS))
        gradients = (g, h, unit_hessian, packed, scales, *meta, acc)
        if step == ROOT:
            run(_chunk_histograms, chunks, layout.narrow, layout.wide, buffers[0], lo, hi, *gradients)
            merged = hists[int(state[ASK_POOL])]
        else:
            node = int(state[SPLITTING])
            src, dst = buffers[nodes[node, BUFFER]], buffers[1 - nodes[node, BUFFER]]
            column, build_left, lefts = int(state[ASK_COLUMN]), bool(state[SMALL_LEFT]), np.zeros(chunks, np.int64)
            run(_chunk_counts, chunks, layout.narrow, layout.wide, src, lo, hi, column, split_mask, lefts)
            run(
                _chunk_splits, chunks, layout.narrow, layout.wide, src, dst, lo, hi, column, split_mask,
                lefts, build_left, *gradients,
            )  # fmt: skip
            state[N_LEFT] = lefts.sum()
            merged = hists[int(state[SMALL])]
        for k in range(chunks):  # chunk order
            merged += acc[k]
    leaves = leaves[: int(state[N_LEAVES])]
    leaf_rows = (nodes[leaves, START], nodes[leaves, STOP], floats[leaves, VALUE])
    n_nodes = int(state[N_NODES])
    nodes, floats = nodes[:n_nodes], floats[:n_nodes]
    tree = (nodes[:, FEATURE].copy(), nodes[:, LEFT].copy(), nodes[:, RIGHT].copy(), floats[:, VALUE].copy(),
            floats[:, GAIN].copy(), nodes[:, COUNT_ROWS].copy(), goes_left[:n_nodes])  # fmt: skip
    return tree, leaf_rows


__all__ = ["RowLayout", "grow_tree", "poisson_cdf", "poisson_weights", "poisson_weights_reference", "quantize"]
