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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ilargi_db.backend import Backend, get_backend

_BINCOUNT_MAX_COLUMNS = 64  # segment sums of narrower operands run column by column
CROSSPROD = "crossprod"  # X^T X
COLSUMS = "colsums"  # the column sums
MEMOIZED_SUMS = (CROSSPROD, COLSUMS)  # the sums of the data alone a matrix keeps once computed
_MEMO_SECONDS = "seconds"  # beside them in the memo: what computing them took


@dataclass
class Block:
    """One block of a normalized matrix, as a user (or the metadata stage) gives it.

    Parameters
    ----------
    data : array or sparse matrix, shape (r, c)
        The source's feature columns S_k (NumPy/CuPy array or scipy/cupyx sparse).
    columns : sequence of int, length c
        Output column of each block column (the mapping matrix M_k).
    index : int array of length n_rows, optional
        Block row taken by each output row (the indicator I_k); -1 where the
        block leaves the row empty (it takes ``fill``); -2 where the block does
        not contribute at all (another block owns the cell). ``None`` means row
        i takes block row i.
    fill : array of length c, optional
        Value of an empty row in each column (default 0: an empty row adds nothing).
    """

    data: Any
    columns: Sequence[int]
    index: Any = None
    fill: Any = None


@dataclass
class _Part:
    """A block in working form: empty rows point at an extra ``fill`` row of ``data``."""

    data: Any  # (r', c) dense or sparse; the last row is the fill row when gaps exist
    columns: np.ndarray  # host int64 (c,)
    index: Any  # backend int array (n,) with values in [0, r'), or None (identity)
    backend: Backend
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def n_block_rows(self) -> int:
        return self.data.shape[0]

    @property
    def sparse(self) -> bool:
        return self.backend.is_sparse(self.data)

    def counts(self) -> Any:
        """How many output rows take each block row (colSums of I_k)."""
        if "counts" not in self._cache:
            xp = self.backend.xp
            if self.index is None:
                self._cache["counts"] = xp.ones(self.n_block_rows, dtype=self.data.dtype)
            else:
                counts = xp.bincount(self.index, minlength=self.n_block_rows)
                self._cache["counts"] = counts.astype(self.data.dtype)
        return self._cache["counts"]

    def indicator_t(self) -> Any:
        """I_k^T as a sparse (block rows x n) matrix, built once, for segment sums."""
        if "indicator_t" not in self._cache:
            xp, n = self.backend.xp, len(self.index)
            ones = xp.ones(n, dtype=self.data.dtype)
            coo = self.backend.sparse.coo_matrix((ones, (self.index, xp.arange(n))), shape=(self.n_block_rows, n))
            self._cache["indicator_t"] = coo.tocsr()
        return self._cache["indicator_t"]

    def gather(self, z: Any) -> Any:
        """I_k z: block-row values to output rows (``take`` is several times faster than ``z[index]``)."""
        return z if self.index is None else self.backend.xp.take(z, self.index, axis=0)

    def segment_sum(self, v: Any) -> Any:
        """I_k^T v: sum output-row values into block rows."""
        if self.index is None:
            return v
        xp = self.backend.xp
        if self.backend.is_sparse(v):
            return self.indicator_t() @ v
        if v.ndim == 1:
            return xp.bincount(self.index, weights=v, minlength=self.n_block_rows)
        if v.shape[1] <= _BINCOUNT_MAX_COLUMNS:
            # One pass per column beats a sparse product here (and needs no C-order copy of v).
            out = xp.empty((self.n_block_rows, v.shape[1]), dtype=v.dtype, order="F")
            for j in range(v.shape[1]):
                out[:, j] = xp.bincount(self.index, weights=v[:, j], minlength=self.n_block_rows)
            return out
        return self.indicator_t() @ v

    def dense_data(self) -> Any:
        return self.data.toarray() if self.sparse else self.data


@dataclass
class _GatherLayout:
    """The parts as the fused kernels see them (see :mod:`ilargi_db.backend.kernels`).

    ``dense``: the one part every output row holds itself (index None, dense), if any; ``gathered``: the
    parts with an index, their indices the columns of ``index`` (n x t, Fortran order); ``rest``: any
    other part (an identity sparse block, a second identity dense one), through the per-part path.
    """

    dense: _Part | None
    gathered: list[_Part]
    index: Any
    n_table_rows: int
    rest: list[_Part]

    def tables(self, operand: Any, backend: Backend) -> Any:
        """S_k (M_k^T W) of every gathered part, padded into one (t x r [x m]) array."""
        xp = backend.xp
        tables = xp.zeros((len(self.gathered), self.n_table_rows, *operand.shape[1:]), dtype=operand.dtype)
        for k, part in enumerate(self.gathered):
            tables[k, : part.n_block_rows] = _matmul(part.data, operand[part.columns], backend)
        return tables


_DENSE_MERGE_CELLS = 1 << 22  # merged blocks up to 4M cells (32 MiB) are stored dense


def _merge_blocks_sharing_an_index(blocks: list[Block], backend: Backend) -> list[Block]:
    """One block per indicator: a source's numeric and one-hot blocks then cost one gather, not several."""
    groups: dict[int, list[Block]] = {}
    for block in blocks:
        key = id(block) if block.index is None else id(block.index)
        groups.setdefault(key, []).append(block)
    merged = []
    for group in groups.values():
        if len(group) == 1:
            merged.append(group[0])
            continue
        rows = group[0].data.shape[0]
        cells = rows * sum(len(b.columns) for b in group)
        sparse = any(backend.is_sparse(b.data) for b in group) and cells > _DENSE_MERGE_CELLS
        if sparse:
            data = backend.sparse.hstack([backend.sparse.csr_matrix(b.data) for b in group]).tocsr()
        else:
            data = np.hstack([b.data.toarray() if backend.is_sparse(b.data) else np.asarray(b.data) for b in group])
        fill = np.concatenate([np.zeros(len(b.columns)) if b.fill is None else np.asarray(b.fill) for b in group])
        columns = np.concatenate([np.asarray(b.columns, dtype=np.int64) for b in group])
        merged.append(Block(data, columns=columns, index=group[0].index, fill=fill))
    return merged


def _matmul(a: Any, b: Any, backend: Backend) -> Any:
    """``a @ b`` for any mix of dense and sparse operands; the result is dense."""
    if backend.is_sparse(b) and not backend.is_sparse(a):
        out = (b.T @ a.T).T
    else:
        out = a @ b
    return out.toarray() if backend.is_sparse(out) else out


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
        blocks = _merge_blocks_sharing_an_index([b for b, w in zip(blocks, widths) if w], self.backend)
        self._parts = [self._make_part(b, dtype) for b in blocks]
        fed = np.zeros(self._n_cols, dtype=int)
        for part in self._parts:
            fed[part.columns] += 1
        if (fed == 0).any():
            missing = np.flatnonzero(fed == 0).tolist()
            raise ValueError(f"no block feeds output column(s) {missing}; every column needs a block.")
        self._transposed = False
        # Sums that depend on the data alone (X^T X, column sums), kept once computed: a later model on
        # the same matrix (a batch, or a job the artifact store serves) skips them. Keyed by MEMOIZED_SUMS.
        self.memo: dict[str, Any] = {}

    def _make_part(self, block: Block, dtype: Any) -> _Part:
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
            return _Part(data, columns, None, be)
        index = xp.asarray(block.index)
        if index.shape != (self._n_rows,):
            raise ValueError(f"block index has shape {index.shape}, expected ({self._n_rows},).")
        r = data.shape[0]
        if len(index) and (int(index.max()) >= r or int(index.min()) < -2):
            raise ValueError(f"block index values must lie in [-2, {r}).")
        empty, absent = index == -1, index == -2
        extra = []  # a fill row for empty rows, a zero row for rows the block does not own
        if bool(empty.any()):
            fill = np.zeros(len(columns)) if block.fill is None else np.asarray(block.fill, dtype=float)
            index = xp.where(empty, r + len(extra), index)
            extra.append(fill)
        if bool(absent.any()):
            index = xp.where(absent, r + len(extra), index)
            extra.append(np.zeros(len(columns)))
        if extra:
            rows = xp.asarray(np.vstack(extra), dtype=dtype)
            if be.is_sparse(data):
                data = be.sparse.vstack([data, be.sparse.csr_matrix(rows)]).tocsr()
            else:
                data = xp.concatenate([data, rows], axis=0)
        elif len(index) == r and bool((index == xp.arange(r)).all()):
            return _Part(data, columns, None, be)  # row i takes block row i: no gather needed
        # Any integer type here: the gather layout (the hot paths) stacks every index into int32 once.
        return _Part(data, columns, index, be)

    @classmethod
    def _from_parts(cls, parts: list[_Part], like: NormalizedMatrix) -> NormalizedMatrix:
        new = cls.__new__(cls)
        new.backend, new._n_rows, new._n_cols = like.backend, like._n_rows, like._n_cols
        new._feature_names, new._parts, new._transposed = like._feature_names, parts, like._transposed
        new._layout_cache = like._layout_cache if parts is like._parts else None
        new.memo = like.memo if parts is like._parts else {}  # the same data (a transposed view) shares its sums
        return new

    _layout_cache: _GatherLayout | None = None

    def _layout(self) -> _GatherLayout:
        """The parts grouped for the fused kernels, built once (the indices are stacked, not copied twice)."""
        if self._layout_cache is not None:
            return self._layout_cache
        xp = self.backend.xp
        dense, gathered, rest = None, [], []
        for part in self._parts:
            if part.index is not None:
                gathered.append(part)
            elif dense is None and not part.sparse:
                dense = part
            else:
                rest.append(part)
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
        self._layout_cache = _GatherLayout(dense, gathered, index, rows, rest)
        return self._layout_cache

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
                None if dense is None else w[dense.columns],
                layout.index,
                layout.tables(w, self.backend) if layout.gathered else None,
            )
        for part in layout.rest:
            out += _matmul(part.data, w[part.columns], self.backend)
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
                out[dense.columns] += head
            for k, part in enumerate(layout.gathered):
                out[part.columns] += _matmul(part.data.T, sums[k, : part.n_block_rows], self.backend)
        for part in layout.rest:
            out[part.columns] += _matmul(part.data.T, v, self.backend)
        return out

    def _cooccurrence_product(self, a: _Part, b: _Part, weights: Any = None) -> Any:
        """S_a^T (I_a^T D I_b) S_b (D = diag(weights), or I), multiplying on the side with fewer rows."""
        be = self.backend

        def scale_rows(data: Any, d: Any) -> Any:
            return data.multiply(d[:, None]).tocsr() if be.is_sparse(data) else data * d[:, None]

        if a is b:
            if a.index is None and weights is None:
                return _matmul(a.data.T, a.data, be)  # every row once: no counts to scale by
            counts = a.counts() if weights is None else a.segment_sum(weights)
            return _matmul(a.data.T, scale_rows(a.data, counts), be)
        if a.index is None and b.index is None:
            return _matmul(a.data.T, b.data if weights is None else scale_rows(b.data, weights), be)
        if b.index is None:
            return self._cooccurrence_product(b, a, weights).T
        if not a.sparse and (a.index is None or a.n_block_rows >= b.n_block_rows or b.sparse):
            # One fused pass sums a's (gathered) rows into b's rows: (I_b^T D I_a S_a), then S_b^T of it.
            summed = be.kernels.scatter_gathered(b.index, a.index, a.data, b.n_block_rows, weights)
            return _matmul(summed.T, b.data, be)
        if not b.sparse and a.index is not None:
            summed = be.kernels.scatter_gathered(a.index, b.index, b.data, a.n_block_rows, weights)
            return _matmul(a.data.T, summed, be)
        if a.index is None:  # I_a = identity: I_a^T D I_b = D I_b (sparse blocks stay sparse)
            left = a.data if weights is None else scale_rows(a.data, weights)
            return _matmul(b.segment_sum(left).T, b.data, be)
        xp = be.xp
        values = xp.ones(self._n_rows, dtype=self.dtype) if weights is None else weights
        c = be.sparse.coo_matrix((values, (a.index, b.index)), shape=(a.n_block_rows, b.n_block_rows)).tocsr()
        if a.n_block_rows <= b.n_block_rows:
            return _matmul(a.data.T, _matmul(c, b.data, be), be)
        return _matmul(_matmul(c.T, a.data, be).T, b.data, be)

    def _crossprod(self, weights: Any = None) -> Any:
        """T^T D T block-wise: diagonal blocks S^T diag(counts) S, off-diagonal via co-occurrence."""
        if weights is not None:
            weights = self._vector(weights, self._n_rows, "crossprod weights")
        with self.backend.hot_loop():  # fused scatters and small products: BLAS must not spin beside numba
            return self._crossprod_blocks(weights)

    def _crossprod_blocks(self, weights: Any) -> Any:
        xp = self.backend.xp
        out = xp.zeros((self._n_cols, self._n_cols), dtype=self.dtype)
        for i, a in enumerate(self._parts):
            for b in self._parts[i:]:
                r = self._cooccurrence_product(a, b, weights)
                out[xp.ix_(xp.asarray(a.columns), xp.asarray(b.columns))] += r
                if b is not a:
                    out[xp.ix_(xp.asarray(b.columns), xp.asarray(a.columns))] += r.T
        return out

    def _materialize(self) -> Any:
        xp = self.backend.xp
        out = xp.zeros((self._n_rows, self._n_cols), dtype=self.dtype)
        for part in self._parts:
            out[:, xp.asarray(part.columns)] += part.gather(part.dense_data())
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
            out[:, xp.asarray(part.columns)] += taken.toarray() if self.backend.is_sparse(taken) else taken
        return out

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
                out[dense.columns] += head.T
            for k, part in enumerate(layout.gathered):
                out[part.columns] += _matmul(part.data.T, counts[k, : part.n_block_rows], self.backend)
        if layout.rest:
            ones = xp.ones(self._n_rows, dtype=self.dtype)
            onehot_t = self.backend.sparse.csr_matrix(
                (ones, (labels, xp.arange(self._n_rows))), shape=(n_groups, self._n_rows)
            )
            for part in layout.rest:
                out[part.columns] += _matmul(onehot_t, part.data, self.backend).T
        return out

    def nearest(self, W: Any, offsets: Any) -> tuple[Any, Any]:
        """For every row i, ``argmin_j`` and ``min_j`` of ``(T W)[i, j] + offsets[j]``, without the n x k product.

        k-means' assignment step: with W = -2 C^T and offsets = ||c_j||^2, the nearest center and the
        squared distance less ||t_i||^2.
        """
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
            None if dense is None else W[dense.columns],
            layout.index,
            layout.tables(W, self.backend) if layout.gathered else None,
            offsets,
        )

    def take_rows(self, indices: Any) -> NormalizedMatrix:
        """The normalized matrix of the selected output rows (only the indicators are sliced)."""
        if self._transposed:
            raise ValueError("take_rows() is defined for the untransposed matrix.")
        xp = self.backend.xp
        indices = xp.asarray(indices)
        parts = [
            _Part(p.data, p.columns, indices if p.index is None else p.index[indices], self.backend)
            for p in self._parts
        ]
        new = self._from_parts(parts, self)
        new._n_rows = len(indices)
        return new

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

    def _merge_shared_columns(self) -> list[_Part]:
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
        merged = _Part(self._lmm(picks), shared, None, self.backend)
        parts = [merged]
        for part in self._parts:
            keep = ~np.isin(part.columns, shared)
            if keep.all():
                parts.append(part)
            elif keep.any():
                data = part.data[:, np.flatnonzero(keep)]
                parts.append(_Part(data, part.columns[keep], part.index, self.backend))
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
                parts.append(_Part(data, part.columns, part.index, self.backend))
        else:
            for part in self._merge_shared_columns():
                parts.append(_Part(f(part.dense_data()), part.columns, part.index, self.backend))
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
