"""The kernels of :mod:`ilargi_db.backend.kernels`, each fused into one pass over row tiles or chunks.

Each ``_``-function is a small jitted loop over a range of tasks (row tiles of an elementwise kernel, row chunks
of a reduction); :func:`~ilargi_db.backend.parallel.run` hands the ranges to as many threads as there are free
cores. Reductions (segment sums, per-label sums, the log-loss) run over a fixed number of row chunks that depends
on the shapes only, each chunk with its own accumulators, merged in chunk order: no races, and results that do
not depend on the thread count. Each is entered through a :class:`~ilargi_db.backend.compiled.Kernel` of
explicit signatures (float64 values, int32 or int64 positions, C order: a column-major block or index is passed
transposed), so nothing compiles in the middle of a job. :class:`NumbaKernels` adapts shapes and types (a missing
dense block or index becomes an empty array) and is tested against
:class:`~ilargi_db.backend.kernels.ReferenceKernels`.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba import types as nt

from ilargi_db.backend.compiled import float64_values, int64_values, kernel, position_type, positions, read_only
from ilargi_db.backend.copies import copy_into
from ilargi_db.backend.parallel import run

TILE_ROWS = 2048  # rows of an elementwise tile (its partial sums stay in L1)
PARALLEL_TILES = 16  # tiles per thread at least (32,768 rows): below that a thread costs more than it saves
CHUNK_ROWS = 1 << 14  # rows per chunk of a reduction, at least
MAX_CHUNKS = 8
ACCUMULATOR_BYTES = 16 << 20  # per-chunk accumulators of one reduction, together (small: no page faults)

# One type per role. Values float64; positions int32 (the normalized matrix's stacked index) or int64 (a block
# of 2^31 rows or more, or a caller's); every array C order, a column-major (n x a) block passed as its
# transpose (a x n), C order at any width (numba types an (n x 1) array C, not F).
# Arrays a kernel only reads are typed read-only (writable ones are taken too): IN_* below, and index types.
F64, I64 = nt.float64, nt.int64
POSITIONS = (nt.int32, nt.int64)
IN_1, IN_2, IN_3 = read_only(F64[::1]), read_only(F64[:, ::1]), read_only(F64[:, :, ::1])
ROWS_T = IN_2  # a transposed column-major block
LABELS = read_only(I64[::1])
INDEX_T = {p: read_only(p[:, ::1]) for p in POSITIONS}  # a transposed index (t x n)
GATHER = {p: read_only(p[::1]) for p in POSITIONS}  # one block's positions


# Style of every kernel: tiles (or chunks) of rows; inside one, column by column over contiguous slices
# of the column-major fact block and index (vectorizable streams, numba proves the slice positions
# non-negative); gathered positions are cast to unsigned so no negative-index wraparound is checked.


@numba.njit(cache=True, nogil=True)
def _gather_sum_1d(dense, w, index, tables, out, first, last):  # pragma: no cover - compiled
    n, a, t = out.shape[0], dense.shape[1], index.shape[1]
    for tile in range(first, last):
        start = tile * TILE_ROWS
        stop = min(n, start + TILE_ROWS)
        acc = out[start:stop]
        acc[:] = 0.0
        for j in range(a):
            column, wj = dense[start:stop, j], w[j]
            for i in range(stop - start):
                acc[i] += column[i] * wj
        for k in range(t):
            rows, table = index[start:stop, k], tables[k]
            for i in range(stop - start):
                acc[i] += table[numba.uint64(rows[i])]


@kernel([nt.void(ROWS_T, IN_1, INDEX_T[p], IN_2, F64[::1], I64, I64) for p in POSITIONS])
def _gather_sum_1d_entry(dense_t, w, index_t, tables, out, first, last):  # pragma: no cover - compiled
    _gather_sum_1d(dense_t.T, w, index_t.T, tables, out, first, last)


@numba.njit(cache=True, nogil=True, inline="always")
def _add_rows(dense, w, index, tables, start, stop, acc):  # pragma: no cover - compiled
    """acc[i - start] += dense[i] @ w + sum_k tables[k, index[i, k]] for the rows of one tile."""
    m = acc.shape[1]
    for j in range(dense.shape[1]):
        column = dense[start:stop, j]
        for i in range(stop - start):
            x = column[i]
            for q in range(m):
                acc[i, q] += x * w[j, q]
    for k in range(index.shape[1]):
        rows, table = index[start:stop, k], tables[k]
        for i in range(stop - start):
            row = table[numba.uint64(rows[i])]
            for q in range(m):
                acc[i, q] += row[q]


@numba.njit(cache=True, nogil=True)
def _gather_sum_2d(dense, w, index, tables, out, first, last):  # pragma: no cover - compiled
    n = out.shape[0]
    for tile in range(first, last):
        start = tile * TILE_ROWS
        stop = min(n, start + TILE_ROWS)
        acc = out[start:stop]
        acc[:] = 0.0
        _add_rows(dense, w, index, tables, start, stop, acc)


@kernel([nt.void(ROWS_T, IN_2, INDEX_T[p], IN_3, F64[:, ::1], I64, I64) for p in POSITIONS])
def _gather_sum_2d_entry(dense_t, w, index_t, tables, out, first, last):  # pragma: no cover - compiled
    _gather_sum_2d(dense_t.T, w, index_t.T, tables, out, first, last)


@numba.njit(cache=True, nogil=True)
def _segment_sums_1d(dense, index, v, head, sums, first, last):  # pragma: no cover - compiled
    n, a, t = v.shape[0], dense.shape[1], index.shape[1]
    size = (n + head.shape[0] - 1) // head.shape[0]  # rows per chunk: head and sums hold one row per chunk
    for c in range(first, last):
        start = c * size
        stop = min(n, start + size)
        values = v[start:stop]
        for j in range(a):
            head[c, j] = _dot(dense[start:stop, j], values)
        for k in range(t):
            rows, acc = index[start:stop, k], sums[c, k]
            for i in range(stop - start):
                acc[numba.uint64(rows[i])] += values[i]


@kernel([nt.void(ROWS_T, INDEX_T[p], IN_1, F64[:, ::1], F64[:, :, ::1], I64, I64) for p in POSITIONS])
def _segment_sums_1d_entry(dense_t, index_t, v, head, sums, first, last):  # pragma: no cover - compiled
    _segment_sums_1d(dense_t.T, index_t.T, v, head, sums, first, last)


@numba.njit(cache=True, nogil=True, inline="always")
def _dot(x, y):  # pragma: no cover - compiled
    """x @ y over four interleaved partial sums: not one chain of dependent additions (4x the throughput)."""
    n = x.shape[0]
    s0, s1, s2, s3 = 0.0, 0.0, 0.0, 0.0
    for i in range(0, n - 3, 4):
        s0 += x[i] * y[i]
        s1 += x[i + 1] * y[i + 1]
        s2 += x[i + 2] * y[i + 2]
        s3 += x[i + 3] * y[i + 3]
    for i in range(n - n % 4, n):
        s0 += x[i] * y[i]
    return (s0 + s1) + (s2 + s3)


@numba.njit(cache=True, nogil=True)
def _segment_sums_2d(dense, index, v, head, sums, first, last):  # pragma: no cover - compiled
    n, m = v.shape
    a, t = dense.shape[1], index.shape[1]
    size = (n + head.shape[0] - 1) // head.shape[0]
    columns = np.empty((m, TILE_ROWS))  # one read of v's tile (every column of a row together), column by column
    for c in range(first, last):
        for start in range(c * size, min(n, (c + 1) * size), TILE_ROWS):
            stop = min(n, (c + 1) * size, start + TILE_ROWS)
            rows = stop - start
            for i in range(rows):
                for q in range(m):
                    columns[q, i] = v[start + i, q]
            for j in range(a):
                for q in range(m):
                    head[c, j, q] += _dot(dense[start:stop, j], columns[q, :rows])
            for k in range(t):
                positions = index[start:stop, k]
                for q in range(m):
                    acc, values = sums[c, k, q], columns[q]  # one contiguous accumulator per (block, column)
                    for i in range(rows):
                        acc[numba.uint64(positions[i])] += values[i]


@kernel([nt.void(ROWS_T, INDEX_T[p], IN_2, F64[:, :, ::1], F64[:, :, :, ::1], I64, I64) for p in POSITIONS])
def _segment_sums_2d_entry(dense_t, index_t, v, head, sums, first, last):  # pragma: no cover - compiled
    _segment_sums_2d(dense_t.T, index_t.T, v, head, sums, first, last)


@numba.njit(cache=True, nogil=True)
def _gram_pass(dense, index, weights, gram, sums, first, last):  # pragma: no cover - compiled
    n, a, t = index.shape[0], dense.shape[1], index.shape[1]
    weighted = weights.shape[0] == n
    size = (n + gram.shape[0] - 1) // gram.shape[0]
    scaled = np.empty((a + 1, TILE_ROWS))  # the tile's D [dense, 1], column by column
    for c in range(first, last):
        for start in range(c * size, min(n, (c + 1) * size), TILE_ROWS):
            stop = min(n, (c + 1) * size, start + TILE_ROWS)
            rows = stop - start
            for i in range(rows):
                scaled[a, i] = weights[start + i] if weighted else 1.0
            for j in range(a):
                column = dense[start:stop, j]
                for i in range(rows):
                    scaled[j, i] = column[i] * scaled[a, i]
            for j in range(a):  # the upper triangle; the caller mirrors it
                for q in range(j, a):
                    gram[c, j, q] += _dot(scaled[j, :rows], dense[start:stop, q])
            for k in range(t):
                positions = index[start:stop, k]
                for j in range(a + 1):
                    acc, values = sums[c, k, j], scaled[j]
                    for i in range(rows):
                        acc[numba.uint64(positions[i])] += values[i]


@kernel([nt.void(ROWS_T, INDEX_T[p], IN_1, F64[:, :, ::1], F64[:, :, :, ::1], I64, I64) for p in POSITIONS])
def _gram_pass_entry(dense_t, index_t, weights, gram, sums, first, last):  # pragma: no cover - compiled
    _gram_pass(dense_t.T, index_t.T, weights, gram, sums, first, last)


@kernel([nt.void(IN_2, F64[::1], I64, I64)])
def _merge_chunks(parts, total, first, last):  # pragma: no cover - compiled
    chunks, cells = parts.shape
    for tile in range(first, last):
        start = tile * TILE_ROWS
        stop = min(cells, start + TILE_ROWS)
        out = total[start:stop]
        out[:] = 0.0
        for c in range(chunks):  # chunk order: the same sums whatever the thread count
            part = parts[c, start:stop]
            for i in range(stop - start):
                out[i] += part[i]


@kernel([nt.void(GATHER[p], GATHER[p], IN_2, IN_1, F64[:, :, ::1], I64, I64) for p in POSITIONS])
def _scatter_gathered(scatter, gather, table, weights, sums, first, last):  # pragma: no cover - compiled
    n, c = scatter.shape[0], table.shape[1]
    gathered, weighted = gather.shape[0] == n, weights.shape[0] == n
    size = (n + sums.shape[0] - 1) // sums.shape[0]
    for chunk in range(first, last):
        acc = sums[chunk]
        for i in range(chunk * size, min(n, (chunk + 1) * size)):
            source = numba.uint64(gather[i]) if gathered else numba.uint64(i)
            target = numba.uint64(scatter[i])
            w = weights[i] if weighted else 1.0
            for j in range(c):
                acc[target, j] += w * table[source, j]


# A sparse block's row pointers, columns (scipy's own int32 or int64: no copy of them on each call) and values.
CSR = {c: (read_only(c[::1]), read_only(c[::1]), IN_1) for c in POSITIONS}


@kernel(
    [
        nt.void(GATHER[p], GATHER[p], *CSR[c], *CSR[c], IN_1, F64[:, :, ::1], I64, I64)
        for p in POSITIONS
        for c in POSITIONS
    ]
)
def _sparse_pair_gram(index_a, index_b, ptr_a, cols_a, vals_a, ptr_b, cols_b, vals_b, weights, sums, first, last):
    """Each output row's nonzero pairs of its two sparse block rows, weighted, added into its chunk's sums."""
    n = index_a.shape[0]
    weighted = weights.shape[0] == n
    size = (n + sums.shape[0] - 1) // sums.shape[0]
    for chunk in range(first, last):  # pragma: no cover - compiled
        acc = sums[chunk]
        for i in range(chunk * size, min(n, (chunk + 1) * size)):
            ra, rb = numba.uint64(index_a[i]), numba.uint64(index_b[i])
            w = weights[i] if weighted else 1.0
            for ja in range(ptr_a[ra], ptr_a[ra + 1]):
                x, p = w * vals_a[ja], cols_a[ja]
                for jb in range(ptr_b[rb], ptr_b[rb + 1]):
                    acc[p, cols_b[jb]] += x * vals_b[jb]


@kernel([nt.void(GATHER[p], I64[::1], o[::1]) for p in POSITIONS for o in POSITIONS])
def _rows_by_key(keys, ptr, order):  # pragma: no cover - compiled
    """A counting sort: ptr (zeros on entry) the start of each key's rows, order the rows key by key."""
    n, n_keys = keys.shape[0], ptr.shape[0] - 1
    for i in range(n):
        ptr[numba.uint64(keys[i]) + 1] += 1
    for r in range(n_keys):
        ptr[r + 1] += ptr[r]
    cursor = ptr[:-1].copy()
    for i in range(n):
        key = numba.uint64(keys[i])
        order[cursor[key]] = i
        cursor[key] += 1


@numba.njit(cache=True, nogil=True)
def _pair_gram(ptr, order, index_b, data_a, table_b, weights, partial, first, last):  # pragma: no cover - compiled
    r_a, c_a, c_b = data_a.shape[0], data_a.shape[1], table_b.shape[1]
    weighted = weights.shape[0] == order.shape[0]
    size = (r_a + partial.shape[0] - 1) // partial.shape[0]
    summed = np.empty(c_b)  # the b rows (weighted) that meet one row of a
    for c in range(first, last):
        out = partial[c]
        for r in range(c * size, min(r_a, (c + 1) * size)):
            summed[:] = 0.0
            for j in range(ptr[r], ptr[r + 1]):
                i = numba.uint64(order[j])
                row = table_b[numba.uint64(index_b[i])]
                w = weights[i] if weighted else 1.0
                for q in range(c_b):
                    summed[q] += w * row[q]
            for p in range(c_a):
                x = data_a[r, p]
                for q in range(c_b):
                    out[p, q] += x * summed[q]


@kernel(
    [
        nt.void(read_only(I64[::1]), GATHER[o], GATHER[p], ROWS_T, IN_2, IN_1, F64[:, :, ::1], I64, I64)
        for o in POSITIONS
        for p in POSITIONS
    ]
)
def _pair_gram_entry(ptr, order, index_b, data_a_t, table_b, weights, partial, first, last):  # pragma: no cover
    _pair_gram(ptr, order, index_b, data_a_t.T, table_b, weights, partial, first, last)


@numba.njit(cache=True, nogil=True)
def _nearest(dense, w, index, tables, offsets, labels, best, first, last):  # pragma: no cover - compiled
    n, m = labels.shape[0], offsets.shape[0]
    for tile in range(first, last):
        start = tile * TILE_ROWS
        stop = min(n, start + TILE_ROWS)
        scores = np.empty((stop - start, m))
        for i in range(stop - start):
            copy_into(scores[i], offsets)
        _add_rows(dense, w, index, tables, start, stop, scores)
        for i in range(stop - start):
            low, pick = scores[i, 0], 0
            for q in range(1, m):
                if scores[i, q] < low:  # the first of equal minima, as argmin
                    low, pick = scores[i, q], q
            labels[start + i] = pick
            best[start + i] = low


@kernel([nt.void(ROWS_T, IN_2, INDEX_T[p], IN_3, IN_1, I64[::1], F64[::1], I64, I64) for p in POSITIONS])
def _nearest_entry(dense_t, w, index_t, tables, offsets, labels, best, first, last):  # pragma: no cover - compiled
    _nearest(dense_t.T, w, index_t.T, tables, offsets, labels, best, first, last)


@numba.njit(cache=True, nogil=True)
def _label_sums(dense, index, labels, head, counts, first, last):  # pragma: no cover - compiled
    n, a, t = labels.shape[0], dense.shape[1], index.shape[1]
    size = (n + head.shape[0] - 1) // head.shape[0]
    for c in range(first, last):
        start = c * size
        stop = min(n, start + size)
        groups = labels[start:stop]
        for j in range(a):
            column, acc = dense[start:stop, j], head[c]
            for i in range(stop - start):
                acc[numba.uint64(groups[i]), j] += column[i]
        for k in range(t):
            rows, acc = index[start:stop, k], counts[c, k]
            for i in range(stop - start):
                acc[numba.uint64(rows[i]), numba.uint64(groups[i])] += 1.0


@kernel([nt.void(ROWS_T, INDEX_T[p], LABELS, F64[:, :, ::1], F64[:, :, :, ::1], I64, I64) for p in POSITIONS])
def _label_sums_entry(dense_t, index_t, labels, head, counts, first, last):  # pragma: no cover - compiled
    _label_sums(dense_t.T, index_t.T, labels, head, counts, first, last)


@numba.njit(cache=True, nogil=True)
def _multiplicative_update(W, numerator, gram, epsilon, first, last):  # pragma: no cover - compiled
    n, r = W.shape
    for tile in range(first, last):
        start = tile * TILE_ROWS
        stop = min(n, start + TILE_ROWS)
        denominator = np.zeros((stop - start, r))
        for j in range(r):  # (W gram) for the tile, column by column over contiguous slices of W
            column = W[start:stop, j]
            for q in range(r):
                g = gram[j, q]
                for i in range(stop - start):
                    denominator[i, q] += column[i] * g
        for q in range(r):
            for i in range(stop - start):
                d = denominator[i, q]
                W[start + i, q] *= numerator[start + i, q] / (d if d != 0 else epsilon)


@kernel([nt.void(F64[:, ::1], IN_2, IN_2, F64, I64, I64)])
def _multiplicative_update_entry(W_t, numerator, gram, epsilon, first, last):  # pragma: no cover - compiled
    _multiplicative_update(W_t.T, numerator, gram, epsilon, first, last)


@kernel([nt.void(F64[::1], IN_1, F64[::1], I64, I64)])
def _logistic_loss_residual(z, y, partial, first, last):  # pragma: no cover - compiled
    n = z.shape[0]
    size = (n + partial.shape[0] - 1) // partial.shape[0]
    for c in range(first, last):
        start = c * size
        stop = min(n, start + size)
        scores, labels, s = z[start:stop], y[start:stop], 0.0
        for i in range(stop - start):
            zi = scores[i]
            # log(1 + e^z) - y z and sigmoid(z) from one exp(-|z|), without overflow; the residual
            # sigmoid(z) - y overwrites z.
            e = np.exp(-abs(zi))
            s += max(zi, 0.0) + np.log1p(e) - labels[i] * zi
            scores[i] = (1.0 if zi >= 0 else e) / (1.0 + e) - labels[i]
        partial[c] = s


def _chunks(n: int, accumulator_cells: int) -> int:
    """How many row chunks a reduction uses: a function of the shapes alone (so of nothing else)."""
    by_rows = max(1, n // CHUNK_ROWS)
    by_memory = max(1, ACCUMULATOR_BYTES // max(8 * accumulator_cells, 1))
    chunks = int(min(MAX_CHUNKS, by_rows, by_memory))
    return 1 << (chunks.bit_length() - 1)  # a power of two: 3 chunks on 2 threads would leave one idle a third


def _in_chunk_order(parts: np.ndarray) -> np.ndarray:
    """The sum of a reduction's per-chunk accumulators, added in chunk order: the same sums whatever the threads
    (the cells split between the free cores)."""
    flat = parts.reshape(parts.shape[0], parts.size // parts.shape[0])
    total = np.empty(flat.shape[1])
    run(_merge_chunks, _tiles(flat.shape[1]), flat, total, min_tasks=PARALLEL_TILES)
    return total.reshape(parts.shape[1:])


def _tiles(n: int) -> int:
    return (n + TILE_ROWS - 1) // TILE_ROWS


def _block_t(block: Any, n: int) -> np.ndarray:
    """A dense block (n x a) as the kernels take it: float64, column-major, transposed (a x n, C order)."""
    if block is None:
        return np.empty((0, n))
    return np.asfortranarray(block, dtype=np.float64).T


def _index_t(index: Any, n: int) -> np.ndarray:
    """An index (n x t) as the kernels take it: int32 or int64 positions, column-major, transposed (t x n)."""
    if index is None:
        return np.empty((0, n), dtype=np.int32)
    return np.asfortranarray(index, dtype=position_type(index)).T


def _own(a: np.ndarray) -> np.ndarray:
    """``a``, or a copy where it is read-only (an array a kernel writes to)."""
    return a if a.flags.writeable else a.copy(order="K")


class NumbaKernels:
    """Fused CPU kernels with the contract of :class:`~ilargi_db.backend.kernels.ReferenceKernels`."""

    xp = np

    def gather_sum(self, dense: Any, w_dense: Any, index: Any, tables: Any) -> Any:
        n = (dense if dense is not None else index).shape[0]
        columns = (w_dense if w_dense is not None else tables[0, :1]).shape[1:]
        w_dense = np.zeros((0, *columns)) if w_dense is None else float64_values(w_dense)
        tables = np.zeros((0, 1, *columns)) if tables is None else float64_values(tables)
        out = np.empty((n, *columns))
        entry = _gather_sum_1d_entry if not columns else _gather_sum_2d_entry
        args = (_block_t(dense, n), w_dense, _index_t(index, n), tables, out)
        run(entry, _tiles(n), *args, min_tasks=PARALLEL_TILES)
        return out

    def segment_sums(self, dense: Any, index: Any, n_table_rows: int, v: Any) -> tuple[Any, Any]:
        n = v.shape[0]
        dense_t, index_t = _block_t(dense, n), _index_t(index, n)
        a, t, rows = dense_t.shape[0], index_t.shape[0], max(n_table_rows, 0)
        width = 1 if v.ndim == 1 else v.shape[1]
        chunks = _chunks(n, (t * rows + a) * width)
        if v.ndim == 1:
            head, sums = np.zeros((chunks, a)), np.zeros((chunks, t, rows))
            run(_segment_sums_1d_entry, chunks, dense_t, index_t, float64_values(v), head, sums)
            head, sums = _in_chunk_order(head), _in_chunk_order(sums)
        else:
            # One pass over the rows (each row of v read once, all its columns together); the accumulators'
            # size bounds the chunks (ACCUMULATOR_BYTES), so they stay few and small.
            head, sums = np.zeros((chunks, a, width)), np.zeros((chunks, t, width, rows))
            run(_segment_sums_2d_entry, chunks, dense_t, index_t, float64_values(v), head, sums)
            head, sums = _in_chunk_order(head), _in_chunk_order(sums).transpose(0, 2, 1)  # (blocks, rows, columns)
        return (head if dense is not None else None), (sums if index is not None else None)

    def dense_product(self, data: Any, w: Any, out: Any) -> Any:
        n = data.shape[0]
        w = float64_values(w)
        fits = out.dtype == np.float64 and out.flags.c_contiguous and out.flags.writeable
        target = out if fits else np.empty(out.shape)
        tables = np.zeros((0, 1, *w.shape[1:]))  # no indexed block: data @ w alone
        entry = _gather_sum_1d_entry if w.ndim == 1 else _gather_sum_2d_entry
        args = (_block_t(data, n), w, _index_t(None, n), tables, target)
        run(entry, _tiles(n), *args, min_tasks=PARALLEL_TILES)
        if target is not out:
            out[...] = target
        return out

    def gram_pass(self, dense: Any, index: Any, n_table_rows: int, weights: Any = None) -> tuple[Any, Any]:
        n = index.shape[0]
        dense_t, index_t = _block_t(dense, n), _index_t(index, n)
        a, t, rows = dense_t.shape[0], index_t.shape[0], max(n_table_rows, 0)
        weights = np.empty(0) if weights is None else float64_values(weights)
        chunks = _chunks(n, t * rows * (a + 1))
        gram, sums = np.zeros((chunks, a, a)), np.zeros((chunks, t, a + 1, rows))
        run(_gram_pass_entry, chunks, dense_t, index_t, weights, gram, sums)
        gram = _in_chunk_order(gram)
        lower = np.tril_indices(a, -1)
        gram[lower] = gram.T[lower]  # the lower triangle from the upper one
        return gram, _in_chunk_order(sums).transpose(0, 2, 1)  # (blocks, rows, dense columns + 1)

    def scatter_gathered(self, scatter: Any, gather: Any, table: Any, n_out: int, weights: Any = None) -> Any:
        n = scatter.shape[0]
        positions = position_type(scatter) if gather is None else position_type(scatter, gather)
        gather = np.empty(0, dtype=positions) if gather is None else np.ascontiguousarray(gather, dtype=positions)
        weights = np.empty(0) if weights is None else float64_values(weights)
        # Row order: each gathered row is one contiguous read (a column-major table would cost a cache
        # miss per column); the copy is of the small side's table, once per call.
        table = float64_values(table)
        chunks = _chunks(n, n_out * table.shape[1])
        sums = np.zeros((chunks, n_out, table.shape[1]))
        scatter = np.ascontiguousarray(scatter, dtype=positions)
        run(_scatter_gathered, chunks, scatter, gather, table, weights, sums)
        return _in_chunk_order(sums)

    def rows_by_key(self, keys: Any, n_keys: int) -> tuple[Any, Any]:
        n = keys.shape[0]
        order = np.empty(n, dtype=np.int32 if n <= np.iinfo(np.int32).max else np.int64)  # row numbers
        ptr = np.zeros(n_keys + 1, dtype=np.int64)
        _rows_by_key(np.ascontiguousarray(keys, dtype=position_type(keys)), ptr, order)
        return ptr, order

    def pair_gram(self, rows_by_a: tuple[Any, Any], index_b: Any, data_a: Any, data_b: Any, weights: Any = None) -> Any:
        ptr, order = rows_by_a
        ptr, order = int64_values(ptr), positions(order)
        r_a = data_a.shape[0]
        weights = np.empty(0) if weights is None else float64_values(weights)
        table_b = float64_values(data_b)  # a's rows in turn, b's rows gathered: row order, one read of each
        chunks = _chunks(order.shape[0], data_a.shape[1] * data_b.shape[1])
        partial = np.zeros((chunks, data_a.shape[1], data_b.shape[1]))
        index_b = np.ascontiguousarray(index_b, dtype=position_type(index_b))
        args = (ptr, order, index_b, _block_t(data_a, r_a), table_b, weights, partial)
        run(_pair_gram_entry, chunks, *args)
        return _in_chunk_order(partial)

    def sparse_pair_gram(self, index_a: Any, index_b: Any, data_a: Any, data_b: Any, weights: Any = None) -> Any:
        positions = position_type(index_a, index_b)
        a, b = data_a.tocsr(), data_b.tocsr()
        chunks = _chunks(index_a.shape[0], a.shape[1] * b.shape[1])
        sums = np.zeros((chunks, a.shape[1], b.shape[1]))
        structure = position_type(a.indptr, a.indices, b.indptr, b.indices)  # a weighted Gram calls it per iteration
        args = [np.ascontiguousarray(i, dtype=positions) for i in (index_a, index_b)]
        for m in (a, b):
            args += [np.ascontiguousarray(m.indptr, dtype=structure), np.ascontiguousarray(m.indices, dtype=structure)]
            args.append(float64_values(m.data))
        args += [np.empty(0) if weights is None else float64_values(weights), sums]
        run(_sparse_pair_gram, chunks, *args)
        return _in_chunk_order(sums)

    def nearest(self, dense: Any, w_dense: Any, index: Any, tables: Any, offsets: Any) -> tuple[Any, Any]:
        n = (dense if dense is not None else index).shape[0]
        m = offsets.shape[0]
        w_dense = np.zeros((0, m)) if w_dense is None else float64_values(w_dense)
        tables = np.zeros((0, 1, m)) if tables is None else float64_values(tables)
        labels, best = np.empty(n, dtype=np.int64), np.empty(n)
        args = (_block_t(dense, n), w_dense, _index_t(index, n), tables, float64_values(offsets), labels, best)
        run(_nearest_entry, _tiles(n), *args, min_tasks=PARALLEL_TILES)
        return labels, best

    def label_sums(self, dense: Any, index: Any, n_table_rows: int, labels: Any, k: int) -> tuple[Any, Any]:
        n = labels.shape[0]
        dense_t, index_t = _block_t(dense, n), _index_t(index, n)
        a, t, rows = dense_t.shape[0], index_t.shape[0], max(n_table_rows, 0)
        chunks = _chunks(n, (t * n_table_rows + a) * k)
        head, counts = np.zeros((chunks, k, a)), np.zeros((chunks, t, rows, k))
        labels = int64_values(labels)
        run(_label_sums_entry, chunks, dense_t, index_t, labels, head, counts)
        head, counts = _in_chunk_order(head), _in_chunk_order(counts)
        return (head if dense is not None else None), (counts if index is not None else None)

    def multiplicative_update(self, W: Any, numerator: Any, gram: Any, epsilon: float) -> Any:
        W = _own(np.asfortranarray(W, dtype=np.float64))  # updated in place, column-major: X.T @ W reads columns
        args = (W.T, float64_values(numerator), float64_values(gram), float(epsilon))
        run(_multiplicative_update_entry, _tiles(W.shape[0]), *args, min_tasks=PARALLEL_TILES)
        return W

    def logistic_loss_residual(self, z: Any, y01: Any) -> tuple[float, Any]:
        z = _own(float64_values(z))
        partial = np.zeros(_chunks(len(z), 1))
        run(_logistic_loss_residual, len(partial), z, float64_values(y01), partial)
        loss = 0.0
        for s in partial:  # chunk order
            loss += s
        return float(loss), z


__all__ = ["POSITIONS", "NumbaKernels"]
