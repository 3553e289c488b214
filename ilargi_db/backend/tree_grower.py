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
from llvmlite import ir
from numba import types as nt
from numba.extending import intrinsic

from ilargi_db.backend import quantization
from ilargi_db.backend.compiled import kernel, read_only
from ilargi_db.backend.parallel import run
from ilargi_db.backend.quantization import CLIP, GOLDEN, LOW_BITS, MIX_1, MIX_2, SEED_MASK
from ilargi_db.backend.tree_split import COUNT, GRADIENT, HESSIAN, HIST_FIELDS, best_split

F64, I64, BOOL = nt.float64, nt.int64, nt.boolean
BINS = (nt.uint8, nt.uint16)
IN_F64, IN_I64, IN_BOOL = read_only(F64[::1]), read_only(I64[::1]), read_only(BOOL[::1])

# A node's rows are an ascending subset of the training rows: reading their bins and gradients skips through
# memory, each read a cache miss the hardware does not foresee. Each pass asks for the row this many ahead
# first (measured on 1M rows x 12 features: the histograms of a tree's smaller children 2.4x faster).
PREFETCH_AHEAD = 48
CHUNK_ROWS = 1 << 14  # rows per chunk of a root's histogram or a split done on several threads
MAX_CHUNKS = 8
PARALLEL_ROWS = 2 * CHUNK_ROWS  # a histogram of this many rows or more is built in chunks, on the free cores


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


@numba.njit(cache=True, nogil=True)
def _rows_histogram(codes, rows, lo, hi, g, h, unit_hessian, packed, scales, offsets, acc):  # pragma: no cover
    """Add ``rows[lo:hi]`` to ``acc`` ((features x bins, HIST_FIELDS): block column j's bin b at ``offsets[j] + b``),
    each row's bins read once for every feature, the gradients and bins of the row ``PREFETCH_AHEAD`` on asked for
    first (measured faster than gathering a node's gradients in order first, LightGBM's ordered gradients).
    Quantized gradients (``packed`` not empty: :func:`quantize`) are summed as integers, then scaled."""
    if packed.shape[0] > 0:
        _packed_histogram(codes, rows, lo, hi, packed, unit_hessian, scales, offsets, acc)
        return
    w = codes.shape[1]
    for i in range(lo, hi):
        if i + PREFETCH_AHEAD < hi:
            ahead = rows[i + PREFETCH_AHEAD]
            _prefetch(codes, ahead * w)
            _prefetch(g, ahead)
            if not unit_hessian:
                _prefetch(h, ahead)
        r = rows[i]
        gi = g[r]
        hi_ = 1.0 if unit_hessian else h[r]
        for j in range(w):
            slot = offsets[j] + np.int64(codes[r, j])
            acc[slot, GRADIENT] += gi
            if not unit_hessian:
                acc[slot, HESSIAN] += hi_
            acc[slot, COUNT] += 1.0
    if unit_hessian:  # squared error: every hessian is 1, its sums are the row counts
        for s in range(acc.shape[0]):
            acc[s, HESSIAN] = acc[s, COUNT]


@numba.njit(cache=True, nogil=True, inline="always")
def _add_packed(codes, rows, i, hi, packed, unit_hessian, stride, sums, counts):  # pragma: no cover - compiled
    w = codes.shape[1]
    if i + PREFETCH_AHEAD < hi:
        ahead = rows[i + PREFETCH_AHEAD]
        _prefetch(codes, ahead * w)
        _prefetch(packed, ahead)
    r = rows[i]
    v = packed[r]
    for j in range(w):
        b = j * stride + np.int64(codes[r, j])
        sums[b] += v
        if not unit_hessian:
            counts[b] += 1


@numba.njit(cache=True, nogil=True)
def _packed_histogram(codes, rows, lo, hi, packed, unit_hessian, scales, offsets, acc):  # pragma: no cover
    """:func:`_rows_histogram` of quantized gradients: one integer add per row and feature (its gradient in the high
    32 bits, its hessian, or 1, in the low ones), the counts apart only for a hessian that is not 1."""
    w = codes.shape[1]
    n_bins = acc.shape[0] // w  # one block of every feature
    one_byte = codes.itemsize == 1
    stride = 256 if one_byte else n_bins
    sums = np.zeros(w * stride, np.int64)
    counts = np.zeros(0 if unit_hessian else w * stride, np.int64)
    if one_byte:  # a constant stride: the compiler sees that features never share a slot (measured 2x faster)
        for i in range(lo, hi):
            _add_packed(codes, rows, i, hi, packed, unit_hessian, 256, sums, counts)
    else:
        for i in range(lo, hi):
            _add_packed(codes, rows, i, hi, packed, unit_hessian, stride, sums, counts)
    for j in range(w):
        for b in range(n_bins):
            v = sums[j * stride + b]
            low = v & LOW_BITS
            slot = offsets[j] + b
            acc[slot, GRADIENT] += (v >> 32) * scales[GRADIENT]
            if unit_hessian:
                acc[slot, HESSIAN] += low
                acc[slot, COUNT] += low
            else:
                acc[slot, HESSIAN] += low * scales[HESSIAN]
                acc[slot, COUNT] += counts[j * stride + b]


@numba.njit(cache=True, nogil=True, inline="always")
def _uniform(seed, draw):  # pragma: no cover - compiled
    """A number in [0, 1) from (seed, draw): splitmix64 (:func:`~ilargi_db.backend.quantization.uniform`)."""
    z = np.uint64(seed) + draw * np.uint64(GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX_1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX_2)
    z = z ^ (z >> np.uint64(31))
    return np.float64(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@kernel([nt.void(IN_F64, IN_F64, BOOL, read_only(nt.uint64[::1]), F64, F64, I64, F64[::1], F64[::1], I64[::1], I64,
                 I64)])  # fmt: skip
def _quantize(g, h, unit_hessian, keys, scale_g, scale_h, seed, g_out, h_out, packed, first, last):  # pragma: no cover
    for r in range(first, last):
        draw = keys[r] * np.uint64(2)
        gq = np.int64(np.floor(min(max(g[r] / scale_g, -CLIP), CLIP) + _uniform(seed, draw)))
        hq = np.int64(1)
        if not unit_hessian:
            hq = np.int64(np.floor(min(h[r] / scale_h, CLIP) + _uniform(seed, draw + np.uint64(1))))
        g_out[r] = gq * scale_g
        h_out[r] = 1.0 if unit_hessian else hq * scale_h
        packed[r] = (gq << 32) + hq


def quantize(g, h, unit_hessian: bool, rows, keys, seed: int) -> tuple[np.ndarray, ...]:
    """:func:`ilargi_db.backend.quantization.quantize`, fused: (g rounded, h rounded, the levels packed, the
    scales), over the training ``rows``' largest gradient and hessian; ``keys``: each row's (uint64)."""
    scales = quantization.scales(g, h, unit_hessian, rows)
    n = len(g)
    g_out, h_out, packed = np.empty(n), np.empty(n), np.empty(n, np.int64)
    run(_quantize.dispatcher, n, g, h, bool(unit_hessian), keys, scales[GRADIENT], scales[HESSIAN], seed & SEED_MASK,
        g_out, h_out, packed, min_tasks=1 << 16)  # fmt: skip
    return g_out, h_out, packed, scales


@numba.njit(cache=True, nogil=True)
def _partition(codes, rows, scratch, start, stop, column, goes_left):  # pragma: no cover - compiled
    """Order ``rows[start:stop]`` stably, the rows whose bin of block column ``column`` goes left first; their count.
    Without a branch on the side (each row written to both, the counts advanced by its side): a split's side
    is as hard to foresee as a coin's."""
    left = 0
    right = 0
    w = codes.shape[1]
    for i in range(start, stop):
        if i + PREFETCH_AHEAD < stop:
            _prefetch(codes, rows[i + PREFETCH_AHEAD] * w + column)
        r = rows[i]
        to_left = np.int64(goes_left[codes[r, column]])
        rows[start + left] = r  # never ahead of i: an entry already read
        scratch[right] = r
        left += to_left
        right += 1 - to_left
    rows[start + left : stop] = scratch[:right]
    return left


@kernel([nt.void(read_only(b[:, ::1]), IN_I64, I64, I64, IN_F64, IN_F64, BOOL, IN_I64, IN_F64, IN_I64,
                 F64[:, :, ::1], I64, I64)
         for b in BINS])  # fmt: skip
def _chunk_histograms(codes, rows, lo, hi, g, h, unit_hessian, packed, scales, offsets, acc, first,
                      last):  # fmt: skip  # pragma: no cover - compiled
    """:func:`_rows_histogram` of ``rows[lo:hi]`` cut into ``acc.shape[0]`` chunks, chunk k's into ``acc[k]``."""
    chunks = acc.shape[0]
    size = (hi - lo + chunks - 1) // chunks
    for k in range(first, last):
        a = lo + k * size
        _rows_histogram(codes, rows, a, min(hi, a + size), g, h, unit_hessian, packed, scales, offsets, acc[k])


# fmt: off
@kernel([nt.void(read_only(b[:, ::1]), I64[::1], I64[::1], I64, I64, I64, IN_BOOL, BOOL, IN_F64, IN_F64, BOOL, IN_I64,
                 IN_F64, IN_I64, F64[:, :, ::1], I64[::1], I64, I64)
         for b in BINS])
# fmt: on
def _chunk_splits(codes, rows, scratch, lo, hi, column, goes_left, build_left, g, h, unit_hessian, packed, scales,
                  offsets, acc, lefts, first, last):  # fmt: skip  # pragma: no cover - compiled
    """A split of ``rows[lo:hi]`` cut into chunks, first pass: each chunk partitioned in place (its left rows, then
    its right ones), the rows of its built side added to ``acc[k]``, its left rows counted in ``lefts[k]``."""
    chunks = acc.shape[0]
    size = (hi - lo + chunks - 1) // chunks
    for k in range(first, last):
        a = lo + k * size
        z = min(hi, a + size)
        n_left = _partition(codes, rows, scratch[a:z], a, z, column, goes_left)
        lefts[k] = n_left
        if build_left:
            _rows_histogram(codes, rows, a, a + n_left, g, h, unit_hessian, packed, scales, offsets, acc[k])
        else:
            _rows_histogram(codes, rows, a + n_left, z, g, h, unit_hessian, packed, scales, offsets, acc[k])


@kernel([nt.void(I64[::1], I64[::1], I64, I64, IN_I64, I64, I64)])
def _chunk_merge(rows, scratch, lo, hi, lefts, first, last):  # pragma: no cover - compiled
    """Second pass: each chunk's left rows, then its right ones, copied where the chunks before it end (into
    ``scratch``): both sides in the node's order, as one stable partition leaves them."""
    chunks = lefts.shape[0]
    size = (hi - lo + chunks - 1) // chunks
    n_left = lefts.sum()
    for k in range(first, last):
        a = lo + k * size
        z = min(hi, a + size)
        before = lefts[:k].sum()
        to_left, to_right = lo + before, lo + n_left + (a - lo - before)
        scratch[to_left : to_left + lefts[k]] = rows[a : a + lefts[k]]
        scratch[to_right : to_right + (z - a - lefts[k])] = rows[a + lefts[k] : z]


@kernel([nt.void(I64[::1], IN_I64, I64, I64, I64, I64, I64)])
def _chunk_copy(rows, scratch, lo, hi, chunks, first, last):  # pragma: no cover - compiled
    """Third pass: the merged rows copied back, a chunk per task."""
    size = (hi - lo + chunks - 1) // chunks
    for k in range(first, last):
        a = lo + k * size
        z = min(hi, a + size)
        rows[a:z] = scratch[a:z]


# A node's int fields, one row per node (the grower's record, kept across its steps).
START, STOP, DEPTH, POOL, FEATURE, LEFT, RIGHT, COUNT_ROWS = range(8)
NODE_INTS = 8
VALUE, GAIN = 0, 1
# The grower's state between steps: what it does next, its sizes, the split under way and what it asks for.
PHASE, N_NODES, N_LEAVES, N_FREE, SPLITTING, SMALL, SMALL_LEFT, N_LEFT = range(8)
ASK_FIRST, ASK_LAST, ASK_BUFFER, ASK_COLUMN = range(8, 12)
STATE_INTS = 12
MIN_GAIN = 0  # the float state
# Phases; a step returns DONE or asks for the ROOT's histogram (into hists[ASK_BUFFER], of rows[ASK_FIRST:ASK_LAST])
# or a SPLIT of node SPLITTING (its rows partitioned, N_LEFT set, the smaller side's histogram into hists[SMALL]).
BEGIN, ROOT_BUILT, CHILD_BUILT = 0, 1, 2
DONE, ROOT, SPLIT = 0, 1, 2

# fmt: off
_GROW_STEP_TYPES = [
    I64(read_only(b[:, ::1]), I64[::1], I64[::1], IN_F64, IN_F64, BOOL, IN_I64, IN_F64, IN_I64, IN_I64, IN_I64, IN_BOOL,
        I64, I64, F64, F64, F64, F64, I64, F64[:, :, ::1],
        I64[:, ::1], F64[:, ::1], BOOL[:, ::1], I64[::1], I64[::1], I64[::1], F64[::1])
    for b in BINS
]
# fmt: on


@kernel(_GROW_STEP_TYPES)
def _grow_step(
    codes, rows, scratch, g, h, unit_hessian, packed, scales, offsets, column_of, value_bins, categorical,
    max_leaves, max_depth, min_rows, l2, floor_abs, learning_rate, ask_rows, hists,
    nodes, floats, goes_left, leaves, free, state, min_gain_state,
):  # fmt: skip  # pragma: no cover - compiled
    """Grow the tree in ``nodes`` from where ``state`` says until it is done (DONE), or until the root's histogram
    or a split of a node of at least ``ask_rows`` rows is wanted (ROOT, SPLIT: done by the caller on the free
    cores, which then calls again)."""
    n_features, n_bins = value_bins.shape[0], goes_left.shape[1]
    n = rows.shape[0]
    phase = state[PHASE]
    if phase == BEGIN:
        nodes[:, :] = -1
        nodes[:, START] = nodes[:, STOP] = nodes[:, DEPTH] = nodes[:, COUNT_ROWS] = 0
        floats[:, :], goes_left[:, :] = 0.0, False
        free[:] = np.arange(free.shape[0])
        state[N_FREE] = free.shape[0] - 1
        nodes[0, POOL] = free[state[N_FREE]]
        nodes[0, STOP] = nodes[0, COUNT_ROWS] = n
        leaves[0] = 0
        state[N_NODES], state[N_LEAVES] = 1, 1
        hists[nodes[0, POOL]] = 0.0
        state[PHASE] = ROOT_BUILT
        if n >= ask_rows:
            state[ASK_FIRST], state[ASK_LAST], state[ASK_BUFFER] = 0, n, nodes[0, POOL]
            return ROOT
        _rows_histogram(codes, rows, 0, n, g, h, unit_hessian, packed, scales, offsets, hists[nodes[0, POOL]])
        phase = ROOT_BUILT
    candidates = np.zeros(2, np.int64)  # the nodes whose best split is searched next
    n_candidates = 0
    if phase == ROOT_BUILT:
        total = hists[nodes[0, POOL], :n_bins].sum(axis=0)  # the first feature's bins: every row is in one
        min_gain_state[MIN_GAIN] = floor_abs * floor_abs / (total[HESSIAN] + l2)  # see _tree_growth.GAIN_FLOOR
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
            hist = hists[nodes[node, POOL]].reshape(n_features, n_bins, HIST_FIELDS)
            best_gain, best_feature = best_split(hist, value_bins, categorical, n_bins - 1, l2, min_rows,
                                                 goes_left[node])  # fmt: skip
            if best_feature >= 0 and best_gain > min_gain:
                nodes[node, FEATURE], floats[node, GAIN] = best_feature, best_gain
            else:
                goes_left[node, :] = False
        n_candidates = 0
        if state[N_LEAVES] >= max_leaves:
            break
        best = -1
        for k in range(state[N_LEAVES]):  # the leaf of largest gain, ties to the lowest id
            i = leaves[k]
            if nodes[i, FEATURE] >= 0 and (
                best < 0 or floats[i, GAIN] > floats[best, GAIN] or (floats[i, GAIN] == floats[best, GAIN] and i < best)
            ):
                best = i
        if best < 0:
            break
        f = nodes[best, FEATURE]
        parent = hists[nodes[best, POOL]]
        n_left_rows = 0.0
        for b in range(n_bins):
            if goes_left[best, b]:
                n_left_rows += parent[f * n_bins + b, COUNT]
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
        n_left = _partition(codes, rows, scratch, first, last, column_of[f], goes_left[best])
        state[N_LEFT] = n_left
        a, z = (first, first + n_left) if small_left else (first + n_left, last)
        _rows_histogram(codes, rows, a, z, g, h, unit_hessian, packed, scales, offsets, hists[small])
    for k in range(state[N_LEAVES]):  # leaf values (added to their rows' raw scores by the caller)
        i = leaves[k]
        total = hists[nodes[i, POOL], :n_bins].sum(axis=0)
        nodes[i, FEATURE], floats[i, GAIN] = -1, 0.0
        goes_left[i, :] = False
        floats[i, VALUE] = -learning_rate * total[GRADIENT] / (total[HESSIAN] + l2)
    return DONE


def grow_tree(
    codes, rows, scratch, g, h, unit_hessian: bool, packed, scales, columns, value_bins, categorical, limits,
    floor_abs: float, learning_rate: float, hists,
) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:  # fmt: skip
    """One tree on ``codes`` (training row r's bins in row r, block column j feature ``columns[j]``) from ``rows``
    (partitioned in place): its nodes' (feature, left, right, value, gain, count, goes_left) arrays, and its leaves'
    (start, stop, value): each leaf's rows are ``rows[start:stop]``. The root's histogram and the splits of many
    rows run here over row chunks, on the free cores. ``packed`` and ``scales``: the gradients quantized
    (:func:`quantize`; ``g`` and ``h`` then the rounded values), or ``packed`` empty."""
    n_features, n_bins = len(value_bins), hists.shape[1] // len(value_bins)
    max_nodes = 2 * limits.max_leaves - 1
    nodes, floats = np.empty((max_nodes, NODE_INTS), np.int64), np.empty((max_nodes, 2))
    goes_left = np.empty((max_nodes, n_bins), np.bool_)
    leaves, free = np.empty(limits.max_leaves, np.int64), np.empty(hists.shape[0], np.int64)
    state, min_gain = np.zeros(STATE_INTS, np.int64), np.zeros(1)
    offsets, column_of = columns * n_bins, np.empty(n_features, np.int64)
    column_of[columns] = np.arange(len(columns))
    max_depth = -1 if limits.max_depth is None else int(limits.max_depth)
    args = (
        codes, rows, scratch, g, h, unit_hessian, packed, scales, offsets, column_of, value_bins, categorical,
        int(limits.max_leaves),
        max_depth, float(limits.min_samples_leaf), float(limits.l2_regularization), float(floor_abs),
        float(learning_rate), PARALLEL_ROWS, hists, nodes, floats, goes_left, leaves, free, state, min_gain,
    )  # fmt: skip
    while (step := _grow_step(*args)) != DONE:
        lo, hi = int(state[ASK_FIRST]), int(state[ASK_LAST])
        chunks = min(MAX_CHUNKS, (hi - lo) // CHUNK_ROWS)  # set by the shapes: the same sums on any thread count
        acc = np.zeros((chunks, hists.shape[1], HIST_FIELDS))
        if step == ROOT:
            run(_chunk_histograms.dispatcher, chunks, codes, rows, lo, hi, g, h, unit_hessian, packed, scales, offsets,
                acc)  # fmt: skip
            merged = hists[int(state[ASK_BUFFER])]
        else:
            node, lefts = int(state[SPLITTING]), np.zeros(chunks, np.int64)
            column, build_left = int(state[ASK_COLUMN]), bool(state[SMALL_LEFT])
            run(
                _chunk_splits.dispatcher, chunks, codes, rows, scratch, lo, hi, column, goes_left[node], build_left,
                g, h, unit_hessian, packed, scales, offsets, acc, lefts,
            )  # fmt: skip
            run(_chunk_merge.dispatcher, chunks, rows, scratch, lo, hi, lefts)
            run(_chunk_copy.dispatcher, chunks, rows, scratch, lo, hi, chunks)
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


__all__ = ["grow_tree", "quantize"]
