"""The kernels of :mod:`ilargi_db.backend.kernels`, each fused into one multi-threaded numba pass.

Each ``_``-function is a small jitted loop (``parallel=True``, ``cache=True``: compiled once per
machine, then loaded from numba's cache). Reductions (segment sums, per-label sums, the log-loss) run
over a fixed number of row chunks that depends on the shapes only, each chunk with its own
accumulators merged in chunk order: no races, and results that do not depend on the thread count.
:class:`NumbaKernels` adapts shapes (a missing dense block or index becomes an empty array) and is
tested against :class:`~ilargi_db.backend.kernels.ReferenceKernels`.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

TILE_ROWS = 2048  # rows of an elementwise tile (its partial sums stay in L1)
CHUNK_ROWS = 1 << 14  # rows per chunk of a reduction, at least
MAX_CHUNKS = 8
ACCUMULATOR_BYTES = 16 << 20  # per-chunk accumulators of one reduction, together (small: no page faults)


# Style of every kernel: tiles (or chunks) of rows; inside one, column by column over contiguous slices
# of the column-major fact block and index (vectorizable streams, numba proves the slice positions
# non-negative); gathered positions are cast to unsigned so no negative-index wraparound is checked.


@numba.njit(parallel=True, cache=True, nogil=True)
def _gather_sum_1d(dense, w, index, tables, out):  # pragma: no cover - compiled
    n, a, t = out.shape[0], dense.shape[1], index.shape[1]
    for tile in numba.prange((n + TILE_ROWS - 1) // TILE_ROWS):
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


@numba.njit(parallel=True, cache=True, nogil=True)
def _gather_sum_2d(dense, w, index, tables, out):  # pragma: no cover - compiled
    n = out.shape[0]
    for tile in numba.prange((n + TILE_ROWS - 1) // TILE_ROWS):
        start = tile * TILE_ROWS
        stop = min(n, start + TILE_ROWS)
        acc = out[start:stop]
        acc[:] = 0.0
        _add_rows(dense, w, index, tables, start, stop, acc)


@numba.njit(parallel=True, cache=True, nogil=True)
def _segment_sums_1d(dense, index, n_table_rows, v, chunks):  # pragma: no cover - compiled
    n, a, t = v.shape[0], dense.shape[1], index.shape[1]
    size = (n + chunks - 1) // chunks
    head = np.zeros((chunks, a))
    sums = np.zeros((chunks, t, n_table_rows))
    for c in numba.prange(chunks):
        start = c * size
        stop = min(n, start + size)
        values = v[start:stop]
        for j in range(a):
            head[c, j] = _dot(dense[start:stop, j], values)
        for k in range(t):
            rows, acc = index[start:stop, k], sums[c, k]
            for i in range(stop - start):
                acc[numba.uint64(rows[i])] += values[i]
    total_head = np.zeros(a)
    for c in range(chunks):  # chunk order: the same sums whatever the thread count
        total_head += head[c]
    return total_head, _merge_chunks(sums)


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


@numba.njit(parallel=True, cache=True, nogil=True)
def _merge_chunks(sums):  # pragma: no cover - compiled
    """The per-chunk accumulators (chunks, ...) added in chunk order, in parallel over their cells."""
    chunks = sums.shape[0]
    flat = sums.reshape((chunks, sums.size // max(chunks, 1)))
    cells = flat.shape[1]
    total = np.empty(cells)
    for tile in numba.prange((cells + TILE_ROWS - 1) // TILE_ROWS):
        for i in range(tile * TILE_ROWS, min(cells, (tile + 1) * TILE_ROWS)):
            s = 0.0
            for c in range(chunks):
                s += flat[c, i]
            total[i] = s
    return total.reshape(sums.shape[1:])


@numba.njit(parallel=True, cache=True, nogil=True)
def _segment_sums_2d(dense, index, n_table_rows, v, chunks):  # pragma: no cover - compiled
    n, m = v.shape
    a, t = dense.shape[1], index.shape[1]
    size = (n + chunks - 1) // chunks
    head = np.zeros((chunks, a, m))
    sums = np.zeros((chunks, t, m, n_table_rows))  # one contiguous accumulator per (block, column)
    for c in numba.prange(chunks):
        columns = np.empty((m, TILE_ROWS))
        for start in range(c * size, min(n, (c + 1) * size), TILE_ROWS):
            stop = min(n, (c + 1) * size, start + TILE_ROWS)
            rows = stop - start
            for i in range(rows):  # one read of v's tile, kept column by column
                for q in range(m):
                    columns[q, i] = v[start + i, q]
            for j in range(a):
                for q in range(m):
                    head[c, j, q] += _dot(dense[start:stop, j], columns[q, :rows])
            for k in range(t):
                positions = index[start:stop, k]
                for q in range(m):
                    acc, values = sums[c, k, q], columns[q]
                    for i in range(rows):
                        acc[numba.uint64(positions[i])] += values[i]
    total_head = np.zeros((a, m))
    for c in range(chunks):
        total_head += head[c]
    return total_head, _merge_chunks(sums)


@numba.njit(parallel=True, cache=True, nogil=True)
def _gram_pass(dense, index, n_table_rows, weights, chunks):  # pragma: no cover - compiled
    n, a, t = index.shape[0], dense.shape[1], index.shape[1]
    weighted = weights.shape[0] == n
    size = (n + chunks - 1) // chunks
    gram = np.zeros((chunks, a, a))
    sums = np.zeros((chunks, t, a + 1, n_table_rows))  # I_k^T D [dense, 1], one contiguous row per column
    for c in numba.prange(chunks):
        scaled = np.empty((a + 1, TILE_ROWS))  # the tile's D [dense, 1], column by column
        for start in range(c * size, min(n, (c + 1) * size), TILE_ROWS):
            stop = min(n, (c + 1) * size, start + TILE_ROWS)
            rows = stop - start
            for i in range(rows):
                scaled[a, i] = weights[start + i] if weighted else 1.0
            for j in range(a):
                column = dense[start:stop, j]
                for i in range(rows):
                    scaled[j, i] = column[i] * scaled[a, i]
            for j in range(a):
                for q in range(j, a):
                    gram[c, j, q] += _dot(scaled[j, :rows], dense[start:stop, q])
            for k in range(t):
                positions = index[start:stop, k]
                for j in range(a + 1):
                    acc, values = sums[c, k, j], scaled[j]
                    for i in range(rows):
                        acc[numba.uint64(positions[i])] += values[i]
    total = np.zeros((a, a))
    for c in range(chunks):
        total += gram[c]
    for j in range(a):  # the lower triangle from the upper one
        for q in range(j):
            total[j, q] = total[q, j]
    return total, _merge_chunks(sums)


@numba.njit(parallel=True, cache=True, nogil=True)
def _scatter_gathered(scatter, gather, table, weights, n_out, chunks):  # pragma: no cover - compiled
    n, c = scatter.shape[0], table.shape[1]
    gathered, weighted = gather.shape[0] == n, weights.shape[0] == n
    size = (n + chunks - 1) // chunks
    sums = np.zeros((chunks, n_out, c))
    for chunk in numba.prange(chunks):
        acc = sums[chunk]
        for i in range(chunk * size, min(n, (chunk + 1) * size)):
            source = numba.uint64(gather[i]) if gathered else numba.uint64(i)
            target = numba.uint64(scatter[i])
            w = weights[i] if weighted else 1.0
            for j in range(c):
                acc[target, j] += w * table[source, j]
    total = np.zeros((n_out, c))
    for chunk in range(chunks):
        total += sums[chunk]
    return total


@numba.njit(cache=True, nogil=True)
def _rows_by_key(keys, n_keys, order):  # pragma: no cover - compiled
    n = keys.shape[0]
    ptr = np.zeros(n_keys + 1, dtype=np.int64)
    for i in range(n):
        ptr[numba.uint64(keys[i]) + 1] += 1
    for r in range(n_keys):
        ptr[r + 1] += ptr[r]
    cursor = ptr[:-1].copy()
    for i in range(n):
        key = numba.uint64(keys[i])
        order[cursor[key]] = i
        cursor[key] += 1
    return ptr, order


@numba.njit(parallel=True, cache=True, nogil=True)
def _pair_gram(ptr, order, index_b, data_a, table_b, weights, chunks):  # pragma: no cover - compiled
    r_a, c_a, c_b = data_a.shape[0], data_a.shape[1], table_b.shape[1]
    weighted = weights.shape[0] == order.shape[0]
    size = (r_a + chunks - 1) // chunks
    partial = np.zeros((chunks, c_a, c_b))
    for c in numba.prange(chunks):
        summed = np.empty(c_b)  # the b rows (weighted) that meet one row of a
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
    total = np.zeros((c_a, c_b))
    for c in range(chunks):
        total += partial[c]
    return total


@numba.njit(parallel=True, cache=True, nogil=True)
def _nearest(dense, w, index, tables, offsets, labels, best):  # pragma: no cover - compiled
    n, m = labels.shape[0], offsets.shape[0]
    for tile in numba.prange((n + TILE_ROWS - 1) // TILE_ROWS):
        start = tile * TILE_ROWS
        stop = min(n, start + TILE_ROWS)
        scores = np.empty((stop - start, m))
        for i in range(stop - start):
            scores[i] = offsets
        _add_rows(dense, w, index, tables, start, stop, scores)
        for i in range(stop - start):
            low, pick = scores[i, 0], 0
            for q in range(1, m):
                if scores[i, q] < low:  # the first of equal minima, as argmin
                    low, pick = scores[i, q], q
            labels[start + i] = pick
            best[start + i] = low


@numba.njit(parallel=True, cache=True, nogil=True)
def _label_sums(dense, index, n_table_rows, labels, m, chunks):  # pragma: no cover - compiled
    n, a, t = labels.shape[0], dense.shape[1], index.shape[1]
    size = (n + chunks - 1) // chunks
    head = np.zeros((chunks, m, a))
    counts = np.zeros((chunks, t, n_table_rows, m))
    for c in numba.prange(chunks):
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
    total_head = np.zeros((m, a))
    total = np.zeros((t, n_table_rows, m))
    for c in range(chunks):
        total_head += head[c]
        total += counts[c]
    return total_head, total


@numba.njit(parallel=True, cache=True, nogil=True)
def _multiplicative_update(W, numerator, gram, epsilon):  # pragma: no cover - compiled
    n, r = W.shape
    for tile in numba.prange((n + TILE_ROWS - 1) // TILE_ROWS):
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


@numba.njit(parallel=True, cache=True, nogil=True)
def _logistic_loss_residual(z, y, chunks):  # pragma: no cover - compiled
    n = z.shape[0]
    size = (n + chunks - 1) // chunks
    partial = np.zeros(chunks)
    for c in numba.prange(chunks):
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
    total = 0.0
    for c in range(chunks):
        total += partial[c]
    return total


def _chunks(n: int, accumulator_cells: int) -> int:
    """How many row chunks a reduction uses: a function of the shapes alone (so of nothing else)."""
    by_rows = max(1, n // CHUNK_ROWS)
    by_memory = max(1, ACCUMULATOR_BYTES // max(8 * accumulator_cells, 1))
    chunks = int(min(MAX_CHUNKS, by_rows, by_memory))
    return 1 << (chunks.bit_length() - 1)  # a power of two: 3 chunks on 2 threads would leave one idle a third


class NumbaKernels:
    """Fused CPU kernels with the contract of :class:`~ilargi_db.backend.kernels.ReferenceKernels`."""

    xp = np

    @staticmethod
    def _parts(dense: Any, index: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
        dense = np.empty((n, 0)) if dense is None else dense
        index = np.empty((n, 0), dtype=np.int64) if index is None else index
        return dense, index

    def gather_sum(self, dense: Any, w_dense: Any, index: Any, tables: Any) -> Any:
        n = (dense if dense is not None else index).shape[0]
        columns = (w_dense if w_dense is not None else tables[0, :1]).shape[1:]
        dense, index = self._parts(dense, index, n)
        w_dense = np.zeros((0, *columns)) if w_dense is None else np.ascontiguousarray(w_dense, dtype=np.float64)
        tables = np.zeros((0, 1, *columns)) if tables is None else np.ascontiguousarray(tables, dtype=np.float64)
        out = np.empty((n, *columns))
        (_gather_sum_1d if not columns else _gather_sum_2d)(dense, w_dense, index, tables, out)
        return out

    def segment_sums(self, dense: Any, index: Any, n_table_rows: int, v: Any) -> tuple[Any, Any]:
        n = v.shape[0]
        has_dense, has_index = dense is not None, index is not None
        dense, index = self._parts(dense, index, n)
        rows = max(n_table_rows, 0)
        width = 1 if v.ndim == 1 else v.shape[1]
        chunks = _chunks(n, (index.shape[1] * rows + dense.shape[1]) * width)
        if v.ndim == 1:
            head, sums = _segment_sums_1d(dense, index, rows, np.ascontiguousarray(v, dtype=np.float64), chunks)
        else:
            # One pass over the rows (each row of v read once, all its columns together); the accumulators'
            # size bounds the chunks (ACCUMULATOR_BYTES), so they stay few and small.
            head, sums = _segment_sums_2d(dense, index, rows, np.ascontiguousarray(v, dtype=np.float64), chunks)
            sums = sums.transpose(0, 2, 1)  # (blocks, rows, columns), as the contract has it
        return (head if has_dense else None), (sums if has_index else None)

    def dense_product(self, data: Any, w: Any, out: Any) -> Any:
        n = data.shape[0]
        index = np.empty((n, 0), dtype=np.int32)
        w = np.ascontiguousarray(w, dtype=np.float64)
        if w.ndim == 1:
            _gather_sum_1d(data, w, index, np.zeros((0, 1)), out)
        else:
            _gather_sum_2d(data, w, index, np.zeros((0, 1, w.shape[1])), out)
        return out

    def gram_pass(self, dense: Any, index: Any, n_table_rows: int, weights: Any = None) -> tuple[Any, Any]:
        n = index.shape[0]
        dense = np.empty((n, 0)) if dense is None else dense
        weights = np.empty(0) if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
        chunks = _chunks(n, index.shape[1] * n_table_rows * (dense.shape[1] + 1))
        gram, sums = _gram_pass(dense, index, n_table_rows, weights, chunks)
        return gram, sums.transpose(0, 2, 1)  # (blocks, rows, dense columns + 1), as the contract has it

    def scatter_gathered(self, scatter: Any, gather: Any, table: Any, n_out: int, weights: Any = None) -> Any:
        n = scatter.shape[0]
        gather = np.empty(0, dtype=np.int64) if gather is None else gather
        weights = np.empty(0) if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
        chunks = _chunks(n, n_out * table.shape[1])
        # Row order: each gathered row is one contiguous read (a column-major table would cost a cache
        # miss per column); the copy is of the small side's table, once per call.
        table = np.ascontiguousarray(table, dtype=np.float64)
        return _scatter_gathered(scatter, gather, table, weights, n_out, chunks)

    def rows_by_key(self, keys: Any, n_keys: int) -> tuple[Any, Any]:
        n = keys.shape[0]
        order = np.empty(n, dtype=np.int32 if n <= np.iinfo(np.int32).max else np.int64)  # row numbers
        return _rows_by_key(keys, n_keys, order)

    def pair_gram(self, rows_by_a: tuple[Any, Any], index_b: Any, data_a: Any, data_b: Any, weights: Any = None) -> Any:
        ptr, order = rows_by_a
        weights = np.empty(0) if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
        # a's rows in turn, b's rows gathered: row order, one read of each.
        table_b = np.ascontiguousarray(data_b, dtype=np.float64)
        chunks = _chunks(order.shape[0], data_a.shape[1] * data_b.shape[1])
        return _pair_gram(ptr, order, index_b, data_a, table_b, weights, chunks)

    def nearest(self, dense: Any, w_dense: Any, index: Any, tables: Any, offsets: Any) -> tuple[Any, Any]:
        n = (dense if dense is not None else index).shape[0]
        m = offsets.shape[0]
        dense, index = self._parts(dense, index, n)
        w_dense = np.zeros((0, m)) if w_dense is None else np.ascontiguousarray(w_dense, dtype=np.float64)
        tables = np.zeros((0, 1, m)) if tables is None else np.ascontiguousarray(tables, dtype=np.float64)
        labels, best = np.empty(n, dtype=np.int64), np.empty(n)
        _nearest(dense, w_dense, index, tables, np.ascontiguousarray(offsets, dtype=np.float64), labels, best)
        return labels, best

    def label_sums(self, dense: Any, index: Any, n_table_rows: int, labels: Any, k: int) -> tuple[Any, Any]:
        n = labels.shape[0]
        has_dense, has_index = dense is not None, index is not None
        dense, index = self._parts(dense, index, n)
        chunks = _chunks(n, (index.shape[1] * n_table_rows + dense.shape[1]) * k)
        labels = np.ascontiguousarray(labels, dtype=np.int64)
        head, counts = _label_sums(dense, index, max(n_table_rows, 0), labels, k, chunks)
        return (head if has_dense else None), (counts if has_index else None)

    def multiplicative_update(self, W: Any, numerator: Any, gram: Any, epsilon: float) -> Any:
        W = np.asfortranarray(W, dtype=np.float64)  # updated in place, column-major: X.T @ W reads columns
        _multiplicative_update(W, numerator, np.ascontiguousarray(gram, dtype=np.float64), float(epsilon))
        return W

    def logistic_loss_residual(self, z: Any, y01: Any) -> tuple[float, Any]:
        z = np.ascontiguousarray(z, dtype=np.float64)
        loss = _logistic_loss_residual(z, np.ascontiguousarray(y01, dtype=np.float64), _chunks(len(z), 1))
        return float(loss), z


__all__ = ["NumbaKernels"]
