"""The contract's kernels fused for a CUDA GPU: the CUDA C of :mod:`ilargi_db.backend.cuda_sources`, launched with
CuPy's ``RawKernel`` (compiled on first use), around cuBLAS products for the dense parts.

:class:`CudaKernels` replaces the reference's per-column ``bincount`` loops (one pass over the rows per
column, per block) with one launch each: the gather of ``T @ W``, the segment sums of ``T^T V``, the gram
pass, the pair grams' scatter (so ``pair_gram`` too, which calls it), two sparse blocks' pair gram, k-means'
assignment and update, the logistic loss and residual, NMF's update. ``rows_by_key`` and ``dense_product``
stay the reference's (a sort and one cuBLAS product already).

What is checked without a GPU: the tests compile these CUDA sources with a host C++ compiler and run them,
thread by thread, on the strict device double (``tests/device_double/emulator.py``), against
:class:`~ilargi_db.backend.kernels.ReferenceKernels`. What is not: their speed on a GPU (unmeasured until a
session has one: ``benchmarks/bench_cuda_kernels.py``), races between threads that a serial run cannot show
(``atomicAdd`` is a plain add there), and memory coalescing. The reductions' order differs from the
reference's (atomics), so sums agree to rounding, not bit for bit.
"""

from __future__ import annotations

from typing import Any

from ilargi_db.backend.cuda_sources import source
from ilargi_db.backend.kernels import ReferenceKernels

THREADS_PER_BLOCK = 256  # a multiple of the warp; every kernel is one thread per work item, no shared memory


class Launcher:
    """Compiles each kernel on first use (once per kernel and types) and launches it over a 1-D grid."""

    def __init__(self, xp: Any):
        self.xp = xp
        self._compiled: dict[tuple[str, str, str], Any] = {}

    def __call__(self, name: str, positions: str, total: int, *args: Any, bins: str = "uint8") -> None:
        """Kernel ``name`` over ``total`` work items (nothing for none: CUDA refuses an empty grid)."""
        if total == 0:
            return
        key = (name, positions, bins)
        kernel = self._compiled.get(key)
        if kernel is None:
            kernel = self._compiled[key] = self.xp.RawKernel(source(name, positions, bins), name)
        blocks = (total + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
        kernel((blocks,), (THREADS_PER_BLOCK,), (*args, self.xp.int64(total)))


class CudaKernels(ReferenceKernels):
    """The kernels on a CUDA device: ``xp`` is CuPy (or a namespace with CuPy's ``RawKernel``)."""

    def __init__(self, xp: Any):
        super().__init__(xp)
        self._launch = Launcher(xp)

    # -- operands ---------------------------------------------------------------------------------------

    def _index(self, index: Any) -> tuple[Any, str]:
        """A Fortran-order index of int32 or int64 positions, and its dtype's name (the kernel's ``idx_t``)."""
        xp = self.xp
        if index is None:
            return xp.zeros(1, dtype=xp.int64), "int64"
        positions = "int32" if index.dtype == xp.int32 else "int64"
        return xp.asfortranarray(index, dtype=positions), positions

    def _doubles(self, a: Any) -> Any:
        return self.xp.ascontiguousarray(a, dtype=self.xp.float64)

    def _sizes(self, *sizes: int) -> tuple:
        return tuple(self.xp.int64(s) for s in sizes)

    # -- the contract ---------------------------------------------------------------------------------------

    def gather_sum(self, dense: Any, w_dense: Any, index: Any, tables: Any) -> Any:
        if index is None or index.shape[1] == 0:
            return super().gather_sum(dense, w_dense, index, tables)
        xp = self.xp
        n, t = index.shape
        flat = tables.ndim == 2
        m = 1 if flat else tables.shape[2]
        out = xp.zeros((n, m)) if dense is None else self._doubles((dense @ w_dense).reshape(n, m))
        idx, positions = self._index(index)
        tab = self._doubles(tables)
        self._launch("gather_add", positions, n * m, idx, tab, out, *self._sizes(n, t, tables.shape[1], m))
        return out[:, 0] if flat else out

    def segment_sums(self, dense: Any, index: Any, n_table_rows: int, v: Any) -> tuple[Any, Any]:
        if index is None:
            return super().segment_sums(dense, index, n_table_rows, v)
        xp = self.xp
        head = None if dense is None else dense.T @ v
        n, t = index.shape
        m = 1 if v.ndim == 1 else v.shape[1]
        sums = xp.zeros((t, n_table_rows, *v.shape[1:]), dtype=xp.float64)
        idx, positions = self._index(index)
        args = (idx, self._doubles(v), sums)
        self._launch("segment_add", positions, n * m, *args, *self._sizes(n, t, n_table_rows, m))
        return head, sums.astype(v.dtype, copy=False)

    def gram_pass(self, dense: Any, index: Any, n_table_rows: int, weights: Any = None) -> tuple[Any, Any]:
        xp = self.xp
        n, t = index.shape
        a = 0 if dense is None else dense.shape[1]
        if dense is None:
            gram, rows = xp.zeros((0, 0)), xp.zeros(1)
        else:
            rows = xp.asfortranarray(dense, dtype=xp.float64)  # the matrix's own layout: no copy
            gram = rows.T @ (rows if weights is None else rows * weights[:, None])
        sums = xp.zeros((t, n_table_rows, a + 1), dtype=xp.float64)
        idx, positions = self._index(index)
        d = xp.zeros(1) if weights is None else self._doubles(weights)
        args = (idx, rows, d, xp.int32(weights is not None), sums)
        self._launch("gram_add", positions, n * (a + 1), *args, *self._sizes(n, t, n_table_rows, a))
        return gram, sums

    def scatter_gathered(self, scatter: Any, gather: Any, table: Any, n_out: int, weights: Any = None) -> Any:
        xp = self.xp
        n, m = len(scatter), table.shape[1]
        wide = scatter.dtype != xp.int32 or (gather is not None and gather.dtype != xp.int32)
        positions = "int64" if wide else "int32"
        scatter = xp.ascontiguousarray(scatter, dtype=positions)
        gathered = scatter if gather is None else xp.ascontiguousarray(gather, dtype=positions)
        d = xp.zeros(1) if weights is None else self._doubles(weights)
        out = xp.zeros((n_out, m), dtype=xp.float64)
        flags = (xp.int32(gather is not None), self._doubles(table), d, xp.int32(weights is not None))
        self._launch("scatter_add", positions, n * m, scatter, gathered, *flags, out, xp.int64(m))
        return out

    def pair_gram(self, rows_by_a: tuple[Any, Any], index_b: Any, data_a: Any, data_b: Any, weights: Any = None) -> Any:
        xp = self.xp
        ptr, order = rows_by_a
        # a's index back from its rows by key: the key whose range holds each place (CuPy's repeat takes no
        # device array of counts, which the reference's rebuild uses)
        index_a = xp.empty(len(order), dtype=index_b.dtype)  # b's positions' type: no cast in the scatter
        index_a[order] = xp.searchsorted(ptr, xp.arange(len(order)), side="right") - 1
        return data_a.T @ self.scatter_gathered(index_a, index_b, data_b, data_a.shape[0], weights)

    def sparse_pair_gram(self, index_a: Any, index_b: Any, data_a: Any, data_b: Any, weights: Any = None) -> Any:
        xp = self.xp
        a, b = data_a.tocsr(), data_b.tocsr()
        if max(a.nnz, b.nnz) >= 2**31 - 1:  # int positions in the kernel: a block this large keeps the reference
            return super().sparse_pair_gram(index_a, index_b, data_a, data_b, weights)
        wide = index_a.dtype != xp.int32 or index_b.dtype != xp.int32
        positions = "int64" if wide else "int32"
        csr = [
            (
                xp.ascontiguousarray(m.indptr, dtype=xp.int32),
                xp.ascontiguousarray(m.indices, dtype=xp.int32),
                self._doubles(m.data),
            )
            for m in (a, b)
        ]
        out = xp.zeros((a.shape[1], b.shape[1]), dtype=xp.float64)
        d = xp.zeros(1) if weights is None else self._doubles(weights)
        rows = (xp.ascontiguousarray(index_a, dtype=positions), xp.ascontiguousarray(index_b, dtype=positions))
        args = (*rows, *csr[0], *csr[1], d, xp.int32(weights is not None), out, xp.int64(b.shape[1]))
        self._launch("sparse_pair_add", positions, len(index_a), *args)
        return out

    def nearest(self, dense: Any, w_dense: Any, index: Any, tables: Any, offsets: Any) -> tuple[Any, Any]:
        xp = self.xp
        n, m = (dense.shape[0] if index is None else index.shape[0]), offsets.shape[0]
        base = xp.zeros((n, m)) if dense is None else self._doubles(dense @ w_dense)
        t = 0 if index is None else index.shape[1]
        r = 0 if index is None else tables.shape[1]
        tab = xp.zeros(1) if index is None else self._doubles(tables)
        idx, positions = self._index(index)
        labels, best = xp.empty(n, dtype=xp.int64), xp.empty(n, dtype=xp.float64)
        args = (idx, tab, base, self._doubles(offsets), labels, best)
        self._launch("nearest_rows", positions, n, *args, *self._sizes(t, r, m))
        return labels, best

    def label_sums(self, dense: Any, index: Any, n_table_rows: int, labels: Any, k: int) -> tuple[Any, Any]:
        xp = self.xp
        n = len(labels)
        a = 0 if dense is None else dense.shape[1]
        t = 0 if index is None else index.shape[1]
        head = None if dense is None else xp.zeros((k, a), dtype=xp.float64)
        counts = None if index is None else xp.zeros((t, n_table_rows, k), dtype=xp.float64)
        idx, positions = self._index(index)
        rows = xp.zeros(1) if dense is None else xp.asfortranarray(dense, dtype=xp.float64)
        outputs = (xp.zeros(1) if head is None else head, xp.zeros(1) if counts is None else counts)
        args = (idx, xp.ascontiguousarray(labels, dtype=xp.int64), rows, *outputs)
        self._launch("label_add", positions, n * (a + t), *args, *self._sizes(n, a, t, n_table_rows, k))
        return (None if head is None else head.astype(dense.dtype, copy=False)), counts

    def multiplicative_update(self, W: Any, numerator: Any, gram: Any, epsilon: float) -> Any:
        xp = self.xp
        W, numerator = self._doubles(W), self._doubles(numerator)
        out = xp.empty_like(W)
        args = (W, numerator, self._doubles(W @ gram), xp.float64(epsilon), out)
        self._launch("multiplicative_rows", "int64", W.size, *args)
        return out

    def logistic_loss_residual(self, z: Any, y01: Any) -> tuple[float, Any]:
        xp = self.xp
        z, y = self._doubles(z), self._doubles(y01)
        residual, loss = xp.empty_like(z), xp.zeros(1)
        self._launch("logistic_rows", "int64", z.size, z, y, residual, loss)
        return float(loss[0]), residual


__all__ = ["THREADS_PER_BLOCK", "CudaKernels", "Launcher"]
