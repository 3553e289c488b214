"""The normalized matrix: linear algebra over T = sum_k I_k S_k M_k^T without building T.

Each block holds a source's feature columns S_k (dense or sparse), its
indicator I_k as a row-index vector and its mapping M_k as the output positions
of its columns. Operators follow the rewrite rules of ../shared/background.md
section 1; every one is written once against ``backend.xp`` / ``backend.sparse``.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse

from ilargi_db.backend import Backend, get_backend
from ilargi_db.errors import IlargiError
from ilargi_db.linalg.blocks import (
    Block,
    GatherLayout,
    Part,
    cooccurrence_product,
    matmul,
    merge_blocks_sharing_an_index,
    one_pass_products,
)
from ilargi_db.linalg.products import refuse_array
from ilargi_db.linalg.row_selection import ROWS_OF_A_TRANSPOSE, row_positions, select_parts

CROSSPROD = "crossprod"  # X^T X
COLSUMS = "colsums"  # the column sums
MEMOIZED_SUMS = (CROSSPROD, COLSUMS)  # the sums of the data alone a matrix keeps once computed
_MEMO_SECONDS = "seconds"  # beside them in the memo: what computing them took


class NormalizedMatrix:
    """A matrix T = sum_k I_k S_k M_k^T, kept as its blocks.

    Supports ``X @ W`` (LMM), ``W @ X`` (RMM), ``X.T @ V`` (transposed LMM),
    :meth:`crossprod`, :meth:`rowsums`, :meth:`colsums`, :meth:`sum`, scalar
    ``+ - * / **``, :meth:`exp`, :meth:`log`, ``.T`` and :meth:`materialize`.

    Rows an outer join left empty hold each block's ``fill`` (0 by default), so
    element-wise functions with f(0) != 0 see them as the join would.

    Examples
    --------
    >>> import numpy as np
    >>> fact = Block(np.array([[1.0], [2.0], [3.0]]), columns=[0])
    >>> dim = Block(np.array([[10.0, 20.0], [30.0, 40.0]]), columns=[1, 2], index=np.array([0, 1, -1]))
    >>> X = NormalizedMatrix([fact, dim], n_rows=3, backend="numpy")
    >>> X.materialize()
    array([[ 1., 10., 20.],
           [ 2., 30., 40.],
           [ 3.,  0.,  0.]])
    >>> X @ np.ones(3)
    array([31., 72.,  3.])
    """

    # NumPy defers to our __rmatmul__ and __radd__... instead of treating us as an object.
    __array_ufunc__ = None
    __array__ = refuse_array

    def __init__(
        self,
        blocks: Sequence[Block],
        n_rows: int,
        feature_names: Sequence[str] | None = None,
        backend: str | Backend = "auto",
        dtype: Any = np.float64,
    ):
        self.backend = get_backend(backend)
        self._n_rows = int(n_rows)
        widths = [len(b.columns) for b in blocks]
        self._n_cols = 1 + max((int(np.max(b.columns)) for b in blocks if len(b.columns)), default=-1)
        if feature_names is not None:
            if len(feature_names) != self._n_cols:
                raise ValueError(f"{len(feature_names)} feature names for {self._n_cols} columns.")
            self._feature_names = list(feature_names)
        else:
            self._feature_names = [f"x{j}" for j in range(self._n_cols)]
        blocks = merge_blocks_sharing_an_index([b for b, w in zip(blocks, widths) if w], self.backend)
        self._parts = [self._make_part(b, dtype) for b in blocks]
        fed = np.zeros(self._n_cols, dtype=int)
        for part in self._parts:
            fed[part.columns] += 1
        if (fed == 0).any():
            missing = np.flatnonzero(fed == 0).tolist()
            raise ValueError(f"no block feeds output column(s) {missing}; every column needs a block.")
        self._transposed = False
        # What every view of these parts (X.T, built anew on each X.T @ v) shares: the gather layout, built
        # once, whichever view asks first.
        self._shared: dict[str, GatherLayout] = {}
        # Sums that depend on the data alone (X^T X, column sums), kept once computed: a later model on
        # the same matrix (a batch, or a job the artifact store serves) skips them. Keyed by MEMOIZED_SUMS.
        self.memo: dict[str, Any] = {}

    def _make_part(self, block: Block, dtype: Any) -> Part:
        be, xp = self.backend, self.backend.xp
        columns = np.asarray(block.columns, dtype=np.int64)
        if len(np.unique(columns)) != len(columns):
            raise ValueError("a block maps two of its columns to the same output column.")
        data = be.to_device(block.data)
        data = data.astype(dtype) if data.dtype != dtype else data
        if data.ndim != 2 or data.shape[1] != len(columns):
            raise ValueError(f"block data has shape {data.shape} but {len(columns)} columns are mapped.")
        if block.index is None:
            if data.shape[0] != self._n_rows:
                raise ValueError(f"a block without an index needs {self._n_rows} rows, it has {data.shape[0]}.")
            return Part(data, columns, None, be)
        on = np if isinstance(block.index, np.ndarray) else xp  # a host index: checked, then uploaded once
        index = on.asarray(block.index)
        if index.shape != (self._n_rows,):
            raise ValueError(f"block index has shape {index.shape}, expected ({self._n_rows},).")
        r = data.shape[0]
        if len(index) and (int(index.max()) >= r or int(index.min()) < -2):
            raise ValueError(f"block index values must lie in [-2, {r}).")
        empty, absent = index == -1, index == -2
        extra = []  # a fill row for empty rows, a zero row for rows the block does not own
        if bool(empty.any()):
            fill = np.zeros(len(columns)) if block.fill is None else np.asarray(block.fill, dtype=float)
            index = on.where(empty, r + len(extra), index)
            extra.append(fill)
        if bool(absent.any()):
            index = on.where(absent, r + len(extra), index)
            extra.append(np.zeros(len(columns)))
        if extra:
            rows = xp.asarray(np.vstack(extra), dtype=dtype)
            if be.is_sparse(data):
                data = be.sparse.vstack([data, be.sparse.csr_matrix(rows)]).tocsr()
            else:
                data = xp.concatenate([data, rows], axis=0)
        elif len(index) == r and bool((index == on.arange(r)).all()):
            return Part(data, columns, None, be)  # row i takes block row i: no gather needed
        return Part(data, columns, be.to_device(index), be)  # any integer type: the layout stacks them in int32

    @classmethod
    def _from_parts(cls, parts: list[Part], like: NormalizedMatrix) -> NormalizedMatrix:
        new = cls.__new__(cls)
        new.backend, new._n_rows, new._n_cols = like.backend, like._n_rows, like._n_cols
        new._feature_names, new._parts, new._transposed = like._feature_names, parts, like._transposed
        new._shared = like._shared if parts is like._parts else {}  # views of the same parts: one layout
        new.memo = like.memo if parts is like._parts else {}  # the same data (a transposed view) shares its sums
        return new

    def _layout(self) -> GatherLayout:
        """The parts grouped for the fused kernels, built once (the indices are stacked, not copied twice)."""
        if "layout" in self._shared:
            return self._shared["layout"]
        xp = self.backend.xp
        dense, gathered, rest = None, [], []
        for part in self._parts:
            if part.index is not None:
                gathered.append(part)
            elif dense is None and not part.sparse:
                dense = part
            else:
                rest.append(part)
        for part in (*gathered, *([dense] if dense is not None else [])):
            if not part.sparse and not part.data.flags.f_contiguous:
                # Column order, once: the fused products stream each column (a row-major block read
                # column by column would touch every cache line once per column: a C-order fact of
                # 1,000,000 x 5 took X @ w 13.6 ms against 3.7 ms in column order).
                part.data = xp.asfortranarray(part.data)
        index = None
        if gathered:
            # int32 positions when every block fits: half the bytes of the pass's biggest stream after the
            # fact block, and measured 3x faster in the gather kernel.
            narrow = max(p.n_block_rows for p in gathered) < np.iinfo(np.int32).max
            index = xp.empty((self._n_rows, len(gathered)), dtype=xp.int32 if narrow else xp.int64, order="F")
            for k, part in enumerate(gathered):
                index[:, k] = part.index
                part.index = index[:, k]  # a contiguous column view: the stacked copy is the only one kept
        rows = max((p.n_block_rows for p in gathered), default=0)
        self._shared["layout"] = GatherLayout(dense, gathered, index, rows, rest)
        return self._shared["layout"]

    # -- shape and views ---------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, int]:
        return (self._n_cols, self._n_rows) if self._transposed else (self._n_rows, self._n_cols)

    @property
    def feature_names(self) -> list[str]:
        return list(self._feature_names)

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks and their indices (what keeping this matrix costs)."""
        total = 0
        for part in self._parts:
            data = part.data
            sparse = hasattr(data, "indptr")  # scipy.sparse / cupyx.scipy.sparse: three arrays
            total += sum(int(getattr(data, a).nbytes) for a in ("data", "indices", "indptr")) if sparse else data.nbytes
            total += int(part.index.nbytes) if part.index is not None else 0
        return total

    @property
    def dtype(self) -> Any:
        return self._parts[0].data.dtype if self._parts else np.dtype(np.float64)

    @property
    def T(self) -> NormalizedMatrix:
        """The transpose, as a flag: nothing is copied."""
        new = self._from_parts(self._parts, self)
        new._transposed = not self._transposed
        return new

    @property
    def blocks(self) -> list[Block]:
        """The blocks in working form (empty rows point at a trailing fill row)."""
        return [Block(p.data, p.columns.tolist(), p.index) for p in self._parts]

    def __repr__(self) -> str:
        kinds = ", ".join(f"{p.data.shape[0]}x{p.data.shape[1]}{' sparse' if p.sparse else ''}" for p in self._parts)
        flag = ".T" if self._transposed else ""
        return f"NormalizedMatrix(shape={self.shape}, blocks=[{kinds}], backend={self.backend.name!r}){flag}"

    # -- the rewrite rules, on the untransposed T --------------------------------------

    def _vector(self, w: Any, length: int, what: str) -> Any:
        if isinstance(w, NormalizedMatrix):
            raise TypeError("multiplying two normalized matrices is not supported; materialize one of them.")
        w = self.backend.asarray(w, dtype=self.dtype)
        if w.ndim not in (1, 2) or w.shape[0] != length:
            raise ValueError(f"{what}: the operand has shape {tuple(w.shape)}, its first axis must be {length}.")
        return w

    def _lmm(self, w: Any) -> Any:
        """T @ W = sum_k I_k (S_k (M_k^T W)): one fused gather over the output rows."""
        w = self._vector(w, self._n_cols, "T @ W")
        with self.backend.hot_loop():
            return self._lmm_fused(w)

    def _lmm_fused(self, w: Any) -> Any:
        layout = self._layout()
        if layout.dense is None and not layout.gathered:
            out = self.backend.xp.zeros((self._n_rows, *w.shape[1:]), dtype=self.dtype)
        else:
            dense = layout.dense
            out = self.backend.kernels.gather_sum(
                None if dense is None else dense.data,
                None if dense is None else w[dense.device_columns],
                layout.index,
                layout.tables(w, self.backend) if layout.gathered else None,
            )
        for part in layout.rest:
            out += matmul(part.by_columns(), w[part.device_columns], self.backend)
        return out

    def _tmm(self, v: Any) -> Any:
        """T^T @ V = sum_k M_k (S_k^T (I_k^T V)): the segment sums of every block in one fused pass."""
        v = self._vector(v, self._n_rows, "T.T @ V")
        with self.backend.hot_loop():
            return self._tmm_fused(v)

    def _tmm_fused(self, v: Any) -> Any:
        layout = self._layout()
        out = self.backend.xp.zeros((self._n_cols, *v.shape[1:]), dtype=self.dtype)
        if layout.dense is not None or layout.gathered:
            dense = layout.dense
            head, sums = self.backend.kernels.segment_sums(
                None if dense is None else dense.data, layout.index, layout.n_table_rows, v
            )
            if dense is not None:
                out[dense.device_columns] += head
            for k, part in enumerate(layout.gathered):
                out[part.device_columns] += matmul(part.data.T, sums[k, : part.n_block_rows], self.backend)
        for part in layout.rest:
            out[part.device_columns] += matmul(part.by_columns().T, v, self.backend)
        return out

    def _crossprod(self, weights: Any = None) -> Any:
        """T^T D T block-wise: diagonal blocks S^T diag(counts) S, off-diagonal via co-occurrence."""
        if weights is not None:
            weights = self._vector(weights, self._n_rows, "crossprod weights")
        with self.backend.hot_loop():  # fused scatters and small products: BLAS must not spin beside numba
            return self._crossprod_blocks(weights)

    def _crossprod_blocks(self, weights: Any) -> Any:
        xp = self.backend.xp
        out = xp.zeros((self._n_cols, self._n_cols), dtype=self.dtype)
        found = one_pass_products(self._layout(), self._n_rows, weights, self.backend)
        for a, b, block in found:
            self._add_block(out, a, b, block)
        done = {frozenset((id(a), id(b))) for a, b, _ in found}
        for i, a in enumerate(self._parts):
            for b in self._parts[i:]:
                if frozenset((id(a), id(b))) not in done:
                    self._add_block(out, a, b, cooccurrence_product(a, b, weights))
        return out

    def _add_block(self, out: Any, a: Part, b: Part, block: Any) -> None:
        """Add S_a^T D S_b (and its transpose) at the columns of a and b."""
        xp = self.backend.xp
        out[xp.ix_(a.device_columns, b.device_columns)] += block
        if b is not a:
            out[xp.ix_(b.device_columns, a.device_columns)] += block.T

    def _materialize(self) -> Any:
        xp = self.backend.xp
        out = xp.zeros((self._n_rows, self._n_cols), dtype=self.dtype)
        for part in self._parts:
            out[:, part.device_columns] += part.gather(part.dense_data())
        return out

    # -- public operators --------------------------------------------------------------

    def __matmul__(self, w: Any) -> Any:
        """``X @ W`` (LMM), or ``X.T @ V`` (transposed LMM) on a transposed view."""
        return self._tmm(w) if self._transposed else self._lmm(w)

    def __rmatmul__(self, w: Any) -> Any:
        """``W @ X`` (RMM) = (X^T W^T)^T."""
        if self._transposed:
            w = self._vector(w if np.ndim(w) == 1 else self.backend.asarray(w).T, self._n_cols, "W @ T.T")
            return self._lmm(w) if w.ndim == 1 else self._lmm(w).T
        w = self.backend.asarray(w, dtype=self.dtype)
        if w.ndim == 1:
            return self._tmm(w)
        return self._tmm(w.T).T

    def crossprod(self, weights: Any = None) -> Any:
        """X^T X, or X^T diag(weights) X (for X.T: X X^T, n x n, computed as an LMM)."""
        if self._transposed:
            if weights is not None:
                raise ValueError("weighted crossprod is defined for the untransposed matrix.")
            return self._lmm(self._materialize().T)
        if weights is not None:
            return self._crossprod(weights)
        return self._memoized(CROSSPROD, self._crossprod)

    def keep_rows(self, v: Any) -> Any:
        """``v`` (one entry per row) kept where the rows are, for :meth:`reduce_rows`: here, as it is.

        A partitioned matrix cuts it into its partitions' rows once (on a cluster, sends each slice to the
        worker holding its partition once), so each :meth:`reduce_rows` moves only its small results.
        """
        return v

    def reduce_rows(self, fn: Callable[..., tuple], rows: Sequence[Any] = (), args: Sequence[Any] = ()) -> tuple:
        """``fn(X, rows, args)``: a sum over the rows (a loss, a gradient, counts), as a tuple.

        A partitioned matrix calls ``fn`` on each partition with its slice of every vector in ``rows`` (from
        :meth:`keep_rows`) and adds the tuples in partition order: one pass over the data, and on a cluster
        only ``args`` and the sums travel. ``fn`` is a module-level function so a cluster can ship it.
        """
        if self._transposed:
            raise ValueError("reduce_rows() sums over the rows of an untransposed matrix.")
        return tuple(fn(self, tuple(rows), tuple(args)))

    def rows(self, indices: Any) -> Any:
        """Selected rows of T as a dense array (len(indices) x d), without building T."""
        if self._transposed:
            raise ValueError("rows() is defined for the untransposed matrix.")
        xp = self.backend.xp
        indices = xp.asarray(indices)
        out = xp.zeros((len(indices), self._n_cols), dtype=self.dtype)
        for part in self._parts:
            taken = part.data[indices if part.index is None else part.index[indices]]
            out[:, part.device_columns] += taken.toarray() if self.backend.is_sparse(taken) else taken
        return out

    def entries_per_row(self) -> float:
        """The entries a row of T stores on average: a dense part's width, a sparse block's entries per block row
        (what :meth:`row_entries` gives a row, known from the parts alone)."""
        return float(sum(p.data.nnz / max(p.n_block_rows, 1) if p.sparse else p.data.shape[1] for p in self._parts))

    def row_entries(self, indices: Any = None) -> Any:
        """Selected rows of T (every row: None) as a SciPy CSR matrix on the host, each row's stored entries only:
        what a row-by-row solver reads (DuHL's coordinate steps), without the dense rows of a one-hot encoding."""
        if self._transposed:
            raise ValueError("row_entries() is defined for the untransposed matrix.")
        n = self._n_rows if indices is None else len(indices)
        if indices is not None:
            indices = self.backend.xp.asarray(indices)
        rows, columns, values = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.float64)]
        for part in self._parts:
            picked = part.index if indices is None else indices if part.index is None else part.index[indices]
            taken = scipy.sparse.coo_matrix(self.backend.to_host(part.data if picked is None else part.data[picked]))
            rows.append(taken.row.astype(np.int64))
            columns.append(part.columns[taken.col])
            values.append(taken.data.astype(np.float64))
        coo = (np.concatenate(values), (np.concatenate(rows), np.concatenate(columns)))
        return scipy.sparse.csr_matrix(coo, shape=(n, self._n_cols))  # shared columns' entries summed, as rows() adds

    def group_sums(self, labels: Any, n_groups: int) -> Any:
        """T^T L for the one-hot matrix L of ``labels`` (d x n_groups): per-group column sums.

        One fused pass counts (block row, group) pairs of every indexed block and sums the rows
        every output row holds itself; then S_k^T of the small (block rows x groups) counts:
        k-means' center update without k passes.
        """
        if self._transposed:
            raise ValueError("group_sums() is defined for the untransposed matrix.")
        xp = self.backend.xp
        labels = xp.asarray(labels).astype(xp.int64, copy=False)
        layout = self._layout()
        out = xp.zeros((self._n_cols, n_groups), dtype=self.dtype)
        if layout.dense is not None or layout.gathered:
            dense = layout.dense
            head, counts = self.backend.kernels.label_sums(
                None if dense is None else dense.data, layout.index, layout.n_table_rows, labels, n_groups
            )
            if dense is not None:
                out[dense.device_columns] += head.T
            for k, part in enumerate(layout.gathered):
                out[part.device_columns] += matmul(part.data.T, counts[k, : part.n_block_rows], self.backend)
        if layout.rest:
            ones = xp.ones(self._n_rows, dtype=self.dtype)
            onehot_t = self.backend.sparse.csr_matrix(
                (ones, (labels, xp.arange(self._n_rows))), shape=(n_groups, self._n_rows)
            )
            for part in layout.rest:
                out[part.device_columns] += matmul(onehot_t, part.data, self.backend).T
        return out

    def nearest(self, W: Any, offsets: Any) -> tuple[Any, Any]:
        """Row-wise ``argmin_j``/``min_j`` of ``(T W)[i, j] + offsets[j]`` without the n x k product: k-means'
        assignment (W = -2 C^T, offsets = ||c_j||^2 give the nearest center, squared distance less ||t_i||^2)."""
        if self._transposed:
            raise ValueError("nearest() is defined for the untransposed matrix.")
        W = self._vector(W, self._n_cols, "nearest")
        offsets = self.backend.asarray(offsets, dtype=self.dtype)
        layout = self._layout()
        if layout.rest or (layout.dense is None and not layout.gathered):
            xp = self.backend.xp
            scores = self._lmm(W) + offsets[None, :]
            labels = xp.argmin(scores, axis=1)
            return labels, xp.take_along_axis(scores, labels[:, None], axis=1)[:, 0]
        dense = layout.dense
        return self.backend.kernels.nearest(
            None if dense is None else dense.data,
            None if dense is None else W[dense.device_columns],
            layout.index,
            layout.tables(W, self.backend) if layout.gathered else None,
            offsets,
        )

    def take_rows(self, indices: Any) -> NormalizedMatrix:
        """The selected output rows, factorized (:mod:`~ilargi_db.linalg.row_selection`)."""
        if self._transposed:
            raise IlargiError(ROWS_OF_A_TRANSPOSE)
        positions = np.atleast_1d(row_positions(indices, self._n_rows))
        self._layout()  # the shared blocks in the layout's column order once, not once per selection
        new = self._from_parts(select_parts(self._parts, positions, self.backend), self)
        new._n_rows = len(positions)
        return new

    def __getitem__(self, rows: Any) -> Any:
        """``X[rows]`` (integers, a mask or a slice, as scikit-learn indexes) factorized; ``X[i]``: a dense row."""
        position = row_positions(rows, self._n_rows)  # take_rows refuses the rows of a transpose
        return self.take_rows([position]).materialize()[0] if isinstance(position, int) else self.take_rows(position)

    def row_norms_squared(self) -> Any:
        """||t_i||^2 for every row (rowSums(T * T)), factorized."""
        return (self**2).rowsums() if not self._transposed else (self**2).T.rowsums()

    def min(self) -> float:
        """The smallest entry of T, from the block rows some output row takes."""
        xp = self.backend.xp
        values = []
        for part in self._parts:
            data = part.data if part.index is None else part.data[xp.flatnonzero(part.counts() > 0)]
            if part.sparse:
                stored = data.data
                values.append(float(stored.min()) if stored.size else 0.0)
                if stored.size < data.shape[0] * data.shape[1]:
                    values.append(0.0)
            elif data.size:
                values.append(float(data.min()))
        return min(values) if values else 0.0

    def rowsums(self) -> Any:
        """Row sums: sum_k I_k rowSums(S_k) (column sums of the base on a transposed view)."""
        if self._transposed:
            return self._tmm(self.backend.xp.ones(self._n_rows, dtype=self.dtype))
        return self._lmm(self.backend.xp.ones(self._n_cols, dtype=self.dtype))

    def column_norms_squared(self) -> Any:
        """||t_j||^2 for every column (colSums(T * T)): the diagonal of T^T T, without forming it."""
        return (self**2).colsums() if not self._transposed else (self**2).T.colsums()

    def colsums(self) -> Any:
        """Column sums: sum_k (colSums(I_k) S_k) M_k^T."""
        if self._transposed:
            return self.T.rowsums()
        return self._memoized(COLSUMS, lambda: self.T.rowsums())

    def _memoized(self, name: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per matrix; a copy each time, so a caller may change what it gets."""
        if name not in self.memo:
            began = time.perf_counter()
            self.memo[name] = compute()
            self.memo[_MEMO_SECONDS] = self.memoized_seconds + time.perf_counter() - began  # what they cost
        return self.memo[name].copy()

    def memoized_sums(self) -> dict[str, Any]:
        """The sums of the data alone computed so far, ``{name: array}`` with names of :data:`MEMOIZED_SUMS`.

        The backend's arrays themselves, not copies: read them, never change them.
        """
        return {name: self.memo[name] for name in MEMOIZED_SUMS if name in self.memo}

    @property
    def memoized_seconds(self) -> float:
        """The seconds computing the memoized sums took (what keeping them saves a later model)."""
        return float(self.memo.get(_MEMO_SECONDS, 0.0))

    def restore_memoized_sums(self, sums: Mapping[str, Any]) -> None:
        """Take the sums :meth:`memoized_sums` gave for a matrix of the same data: its operators return them
        instead of computing them. Names outside :data:`MEMOIZED_SUMS` are ignored."""
        self.memo.update({name: self.backend.asarray(sums[name]) for name in MEMOIZED_SUMS if name in sums})

    def sum(self) -> float:
        return float(self.colsums().sum())

    def materialize(self) -> Any:
        """T as a dense array of the backend (what the factorized operators avoid)."""
        out = self._materialize()
        return out.T if self._transposed else out

    # -- element-wise scalar operators -------------------------------------------------

    def _merge_shared_columns(self) -> list[Part]:
        """Parts where every output column has one owner: shared columns become one dense part."""
        fed = np.zeros(self._n_cols, dtype=int)
        for part in self._parts:
            fed[part.columns] += 1
        shared = np.flatnonzero(fed > 1)
        if not len(shared):
            return list(self._parts)
        xp = self.backend.xp
        picks = xp.zeros((self._n_cols, len(shared)), dtype=self.dtype)
        picks[xp.asarray(shared), xp.arange(len(shared))] = 1
        merged = Part(self._lmm(picks), shared, None, self.backend)
        parts = [merged]
        for part in self._parts:
            keep = ~np.isin(part.columns, shared)
            if keep.all():
                parts.append(part)
            elif keep.any():
                data = part.data[:, np.flatnonzero(keep)]
                parts.append(Part(data, part.columns[keep], part.index, self.backend))
        return parts

    def _map(self, f: Callable[[Any], Any]) -> NormalizedMatrix:
        """Apply an element-wise f to every cell of T, empty rows included."""
        with np.errstate(all="ignore"):
            f_of_zero = f(np.float64(0.0))
        parts = []
        if f_of_zero == 0:
            # Zeros (sparse zeros, empty rows, masked coalesce rows) stay zeros: map stored values.
            for part in self._parts:
                if part.sparse:
                    data = part.data.copy()
                    data.data = f(data.data)
                else:
                    data = f(part.data)
                parts.append(Part(data, part.columns, part.index, self.backend))
        else:
            for part in self._merge_shared_columns():
                parts.append(Part(f(part.dense_data()), part.columns, part.index, self.backend))
        return self._from_parts(parts, self)

    def _scalar(self, c: Any) -> Any:
        if isinstance(c, numbers.Number) or (hasattr(c, "ndim") and c.ndim == 0):
            return c
        return None

    def _binary(self, c: Any, f: Callable[[Any, Any], Any]) -> NormalizedMatrix:
        c = self._scalar(c)
        if c is None:
            return NotImplemented
        return self._map(lambda a: f(a, c))

    def __add__(self, c):
        return self._binary(c, lambda a, s: a + s)

    def __radd__(self, c):
        return self._binary(c, lambda a, s: s + a)

    def __sub__(self, c):
        return self._binary(c, lambda a, s: a - s)

    def __rsub__(self, c):
        return self._binary(c, lambda a, s: s - a)

    def __mul__(self, c):
        return self._binary(c, lambda a, s: a * s)

    def __rmul__(self, c):
        return self._binary(c, lambda a, s: s * a)

    def __truediv__(self, c):
        return self._binary(c, lambda a, s: a / s)

    def __rtruediv__(self, c):
        return self._binary(c, lambda a, s: s / a)

    def __pow__(self, c):
        return self._binary(c, lambda a, s: a**s)

    def __neg__(self):
        return self._map(lambda a: -a)

    def exp(self) -> NormalizedMatrix:
        """Element-wise e**T (empty rows become e**fill: 1 for an unmatched LEFT-join row)."""
        xp = self.backend.xp
        return self._map(lambda a: xp.exp(a) if not isinstance(a, float) else np.exp(a))

    def log(self) -> NormalizedMatrix:
        """Element-wise natural log (log 0 = -inf and log of a negative = nan, as in NumPy)."""
        xp = self.backend.xp

        def log(a):
            with np.errstate(divide="ignore", invalid="ignore"):
                return xp.log(a) if not isinstance(a, float) else np.log(a)

        return self._map(log)
