"""The hot loops of the normalized matrix, as one contract with a reference and a fused implementation.

A *gather layout* describes the n-row side of a normalized matrix T:

- ``dense`` (n x a, or None): the columns every output row holds itself (the fact's numeric block);
- ``index`` (n x t int64, Fortran order, or None): for each of t indexed blocks, the block row each
  output row takes (a dimension's indicator, or a one-hot feature's category codes);
- ``tables`` (t x r x k): per indexed block, its rows already multiplied by the operand (S_k W_k),
  padded to the longest block (r rows).

With them, ``T @ W = dense @ W_dense + sum_k tables[k, index[:, k]]`` and ``T^T V`` starts from
``dense^T V`` and one segment sum of V per indexed block. :class:`ReferenceKernels` writes these with
``xp`` operations (NumPy or CuPy, several passes); :mod:`ilargi_db.backend.numba_kernels` fuses each into
one multi-threaded pass on the CPU and is tested against the reference. Models never call a kernel:
they call the matrix's operators, which call ``backend.kernels``.
"""

from __future__ import annotations

from typing import Any


class ReferenceKernels:
    """The kernels as plain array operations of a namespace ``xp`` (the oracle, and the CuPy path)."""

    def __init__(self, xp: Any):
        self.xp = xp

    def gather_sum(self, dense: Any, w_dense: Any, index: Any, tables: Any) -> Any:
        """``dense @ w_dense + sum_k tables[k, index[:, k]]``: (n,) for 2-D tables, (n, k) for 3-D ones."""
        xp = self.xp
        out = None if dense is None else dense @ w_dense
        if index is not None:
            for k in range(index.shape[1]):
                taken = xp.take(tables[k], index[:, k], axis=0)
                out = taken if out is None else out + taken
        return out

    def segment_sums(self, dense: Any, index: Any, n_table_rows: int, v: Any) -> tuple[Any, Any]:
        """``(dense^T v, sums)`` where ``sums[k, j]`` adds the ``v`` of rows whose ``index[:, k]`` is j."""
        xp = self.xp
        head = None if dense is None else dense.T @ v
        sums = None
        if index is not None:
            t = index.shape[1]
            sums = xp.zeros((t, n_table_rows, *v.shape[1:]), dtype=v.dtype)
            for k in range(t):
                if v.ndim == 1:
                    sums[k] = xp.bincount(index[:, k], weights=v, minlength=n_table_rows)
                else:
                    for j in range(v.shape[1]):
                        sums[k, :, j] = xp.bincount(index[:, k], weights=v[:, j], minlength=n_table_rows)
        return head, sums

    def dense_product(self, data: Any, w: Any, out: Any) -> Any:
        """``out[...] = data @ w`` (a block's rows times the operand: one of the gather's tables)."""
        out[...] = data @ w
        return out

    def gram_pass(self, dense: Any, index: Any, n_table_rows: int, weights: Any = None) -> tuple[Any, Any]:
        """``(dense^T D dense, sums)`` with ``sums[k]`` (r x (a + 1)) = I_k^T D [dense, 1], D = diag(weights) or I.

        One pass gives every term of T^T D T that involves the rows every output row holds itself, and
        each indexed block's (weighted) counts: X^T X but for the products of two indexed blocks.
        """
        xp = self.xp
        n, t = index.shape
        a = 0 if dense is None else dense.shape[1]
        d = xp.ones(n, dtype=xp.float64) if weights is None else weights
        rows = xp.concatenate([xp.zeros((n, 0)) if dense is None else dense, xp.ones((n, 1))], axis=1) * d[:, None]
        gram = xp.zeros((a, a)) if dense is None else dense.T @ rows[:, :a]
        sums = xp.zeros((t, n_table_rows, a + 1), dtype=xp.float64)
        for k in range(t):
            for j in range(a + 1):
                sums[k, :, j] = xp.bincount(index[:, k], weights=rows[:, j], minlength=n_table_rows)
        return gram, sums

    def rows_by_key(self, keys: Any, n_keys: int) -> tuple[Any, Any]:
        """``(ptr, order)``: the rows listed key by key (row order within a key), key r's at ``ptr[r]:ptr[r + 1]``."""
        xp = self.xp
        order = xp.argsort(keys, kind="stable")
        order = order.astype(xp.int32) if len(order) <= xp.iinfo(xp.int32).max else order
        ptr = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.cumsum(xp.bincount(keys, minlength=n_keys))])
        return ptr, order

    def pair_gram(self, rows_by_a: tuple[Any, Any], index_b: Any, data_a: Any, data_b: Any, weights: Any = None) -> Any:
        """``S_a^T I_a^T D I_b S_b`` of two indexed blocks (D = diag(weights), or I): their block of T^T D T.

        ``rows_by_a`` is :meth:`rows_by_key` of a's index (a block keeps it: its index does not change).
        """
        xp = self.xp
        ptr, order = rows_by_a
        index_a = xp.empty(len(order), dtype=xp.int64)
        index_a[order] = xp.repeat(xp.arange(len(ptr) - 1), xp.diff(ptr))
        summed = self.scatter_gathered(index_a, index_b, data_b, data_a.shape[0], weights)
        return data_a.T @ summed

    def sparse_pair_gram(self, index_a: Any, index_b: Any, data_a: Any, data_b: Any, weights: Any = None) -> Any:
        """``S_a^T I_a^T D I_b S_b`` of two indexed sparse blocks (one-hot against one-hot): b's rows summed into
        a's (dense), then S_a^T of it."""
        summed = self.scatter_gathered(index_a, index_b, data_b.toarray(), data_a.shape[0], weights)
        return data_a.T @ summed

    def scatter_gathered(self, scatter: Any, gather: Any, table: Any, n_out: int, weights: Any = None) -> Any:
        """``out[scatter[i]] += weights[i] * table[gather[i]]`` (``gather`` None: row i): I_a^T D I_b S_b."""
        xp = self.xp
        rows = table if gather is None else xp.take(table, gather, axis=0)
        if weights is not None:
            rows = rows * weights[:, None]
        out = xp.zeros((n_out, table.shape[1]), dtype=xp.float64)
        for j in range(table.shape[1]):
            out[:, j] = xp.bincount(scatter, weights=rows[:, j], minlength=n_out)
        return out

    def nearest(self, dense: Any, w_dense: Any, index: Any, tables: Any, offsets: Any) -> tuple[Any, Any]:
        """Row-wise ``argmin_j`` and ``min_j`` of ``gather_sum(...)[:, j] + offsets[j]`` (k-means' assignment)."""
        xp = self.xp
        scores = self.gather_sum(dense, w_dense, index, tables) + offsets[None, :]
        labels = xp.argmin(scores, axis=1)
        return labels, xp.take_along_axis(scores, labels[:, None], axis=1)[:, 0]

    def label_sums(self, dense: Any, index: Any, n_table_rows: int, labels: Any, k: int) -> tuple[Any, Any]:
        """Per label: ``(sums of dense rows (k x a), counts of block rows (t x r x k))`` (k-means' update)."""
        xp = self.xp
        head = None
        if dense is not None:
            head = xp.zeros((k, dense.shape[1]), dtype=dense.dtype)
            for j in range(dense.shape[1]):
                head[:, j] = xp.bincount(labels, weights=dense[:, j], minlength=k)
        counts = None
        if index is not None:
            t = index.shape[1]
            counts = xp.zeros((t, n_table_rows, k), dtype=xp.float64)
            for c in range(t):
                flat = xp.bincount(index[:, c].astype(xp.int64) * k + labels, minlength=n_table_rows * k)
                counts[c] = flat.reshape(n_table_rows, k)
        return head, counts

    def multiplicative_update(self, W: Any, numerator: Any, gram: Any, epsilon: float) -> Any:
        """NMF's ``W * numerator / (W gram)`` row by row (a zero denominator counts as ``epsilon``)."""
        xp = self.xp
        denominator = W @ gram
        return W * numerator / xp.where(denominator == 0, epsilon, denominator)

    def logistic_loss_residual(self, z: Any, y01: Any) -> tuple[float, Any]:
        """``(sum_i log(1 + e^z_i) - y_i z_i, sigmoid(z) - y)``; the residual may overwrite ``z``."""
        xp = self.xp
        loss = float((xp.logaddexp(0, z) - y01 * z).sum())
        residual = 0.5 * (1.0 + xp.tanh(0.5 * z)) - y01  # the logistic function, without overflow
        return loss, residual


__all__ = ["ReferenceKernels"]
