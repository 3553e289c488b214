"""The blocks of a normalized matrix: as a user gives them (:class:`Block`) and in working form
(:class:`Part`: empty rows point at a trailing fill row), with the gathers, segment sums and products
the matrix's operators are written with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ilargi_db.backend import Backend

BINCOUNT_MAX_COLUMNS = 64  # segment sums of narrower operands run column by column
# crossprod's one pass when its accumulators per gathered part (block rows x (dense columns + 1) cells)
# are at most the rows / this: no more bytes than the int32 index column the pass reads.
ONE_PASS_ACCUMULATOR_CELLS_PER_ROW = 2


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


TALL_ROWS_PER_COLUMN = 16  # a sparse block this many times taller than wide multiplies by columns (Part.by_columns)


@dataclass
class Part:
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

    @property
    def device_columns(self) -> Any:
        """``columns`` on the device, copied once: a host index in a device operation is copied at every use
        (a synchronous copy on CuPy, which stalls the host until the stream catches up)."""
        if "columns" not in self._cache:
            self._cache["columns"] = self.backend.xp.asarray(self.columns)
        return self._cache["columns"]

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

    def rows_by_key(self) -> tuple[Any, Any]:
        """The output rows grouped by the block row they take (see kernels' ``rows_by_key``), built once: the
        index never changes, and a product with another indexed block then reads each row of this one once."""
        if "rows_by_key" not in self._cache:
            self._cache["rows_by_key"] = self.backend.kernels.rows_by_key(self.index, self.n_block_rows)
        return self._cache["rows_by_key"]

    def by_columns(self) -> Any:
        """``data`` for a product with it: a tall sparse block of few columns (a fact's one-hot columns) kept once in
        compressed columns, which a product reads column by column; any other block as it is. Row by row, the
        product pays for every row however few its entries (66,548 x 20 with 55,301 entries: 0.26 ms a product
        row by row, 0.03 ms by columns). The copy stays with the matrix: 12 bytes an entry of the block."""
        if "by_columns" not in self._cache:
            rows, columns = self.data.shape
            tall = self.sparse and self.index is None and rows >= TALL_ROWS_PER_COLUMN * columns
            self._cache["by_columns"] = self.data.tocsc() if tall else self.data
        return self._cache["by_columns"]

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
        if v.shape[1] <= BINCOUNT_MAX_COLUMNS:
            # One pass per column beats a sparse product here (and needs no C-order copy of v).
            out = xp.empty((self.n_block_rows, v.shape[1]), dtype=v.dtype, order="F")
            for j in range(v.shape[1]):
                out[:, j] = xp.bincount(self.index, weights=v[:, j], minlength=self.n_block_rows)
            return out
        return self.indicator_t() @ v

    def dense_data(self) -> Any:
        return self.data.toarray() if self.sparse else self.data


@dataclass
class GatherLayout:
    """The parts as the fused kernels see them (see :mod:`ilargi_db.backend.kernels`).

    ``dense``: the one part every output row holds itself (index None, dense), if any; ``gathered``: the
    parts with an index, their indices the columns of ``index`` (n x t, Fortran order); ``rest``: any
    other part (an identity sparse block, a second identity dense one), through the per-part path.
    """

    dense: Part | None
    gathered: list[Part]
    index: Any
    n_table_rows: int
    rest: list[Part]

    def tables(self, operand: Any, backend: Backend) -> Any:
        """S_k (M_k^T W) of every gathered part, padded into one (t x r [x m]) array.

        Dense parts through the fused kernels (every core, no BLAS); the padding past a part's rows is
        never read (its index stays below them), so it is left unset.
        """
        xp = backend.xp
        tables = xp.empty((len(self.gathered), self.n_table_rows, *operand.shape[1:]), dtype=operand.dtype)
        for k, part in enumerate(self.gathered):
            w = operand[part.device_columns]
            if part.sparse:
                tables[k, : part.n_block_rows] = matmul(part.data, w, backend)
            else:
                backend.kernels.dense_product(part.data, w, tables[k, : part.n_block_rows])
        return tables


DENSE_MERGE_CELLS = 1 << 22  # merged blocks up to 4M cells (32 MiB) are stored dense


def merge_blocks_sharing_an_index(blocks: list[Block], backend: Backend) -> list[Block]:
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
        sparse = any(backend.is_sparse(b.data) for b in group) and cells > DENSE_MERGE_CELLS
        if sparse:
            data = backend.sparse.hstack([backend.sparse.csr_matrix(b.data) for b in group]).tocsr()
        else:
            data = np.hstack([b.data.toarray() if backend.is_sparse(b.data) else np.asarray(b.data) for b in group])
        fill = np.concatenate([np.zeros(len(b.columns)) if b.fill is None else np.asarray(b.fill) for b in group])
        columns = np.concatenate([np.asarray(b.columns, dtype=np.int64) for b in group])
        merged.append(Block(data, columns=columns, index=group[0].index, fill=fill))
    return merged


def matmul(a: Any, b: Any, backend: Backend) -> Any:
    """``a @ b`` for any mix of dense and sparse operands; the result is dense."""
    if backend.is_sparse(b) and not backend.is_sparse(a):
        out = (b.T @ a.T).T
    else:
        out = a @ b
    return out.toarray() if backend.is_sparse(out) else out


def _scale_rows(data: Any, d: Any, backend: Backend) -> Any:
    return data.multiply(d[:, None]).tocsr() if backend.is_sparse(data) else data * d[:, None]


def scaled_gram(part: Part, counts: Any) -> Any:
    """S^T diag(counts) S: a block's diagonal block of T^T D T from its rows' (weighted) counts."""
    return matmul(part.data.T, _scale_rows(part.data, counts, part.backend), part.backend)


PAIR_KERNEL_PRODUCTS = 16  # nonzero products per output row up to which two sparse blocks pair row by row


def cooccurrence_product(a: Part, b: Part, weights: Any = None) -> Any:
    """S_a^T (I_a^T D I_b) S_b (D = diag(weights), or I), multiplying on the side with fewer rows."""
    be = a.backend

    def scale_rows(data: Any, d: Any) -> Any:
        return _scale_rows(data, d, be)

    if a is b:
        if a.index is None and weights is None:
            return matmul(a.data.T, a.data, be)  # every row once: no counts to scale by
        return scaled_gram(a, a.counts() if weights is None else a.segment_sum(weights))
    if a.index is None and b.index is None:
        return matmul(a.data.T, b.data if weights is None else scale_rows(b.data, weights), be)
    if b.index is None:
        return cooccurrence_product(b, a, weights).T
    if a.index is not None and not a.sparse and not b.sparse:  # two indexed dense blocks: no big accumulators
        return be.kernels.pair_gram(a.rows_by_key(), b.index, a.data, b.data, weights)
    if not a.sparse and (a.index is None or a.n_block_rows >= b.n_block_rows or b.sparse):
        # One fused pass sums a's (gathered) rows into b's rows: (I_b^T D I_a S_a), then S_b^T of it.
        summed = be.kernels.scatter_gathered(b.index, a.index, a.data, b.n_block_rows, weights)
        return matmul(summed.T, b.data, be)
    if not b.sparse and a.index is not None:
        summed = be.kernels.scatter_gathered(a.index, b.index, b.data, a.n_block_rows, weights)
        return matmul(a.data.T, summed, be)
    if a.index is None:  # I_a = identity: I_a^T D I_b = D I_b (sparse blocks stay sparse)
        left = a.data if weights is None else scale_rows(a.data, weights)
        return matmul(b.segment_sum(left).T, b.data, be)
    if _nonzeros_per_row(a) * _nonzeros_per_row(b) <= PAIR_KERNEL_PRODUCTS:
        # Two indexed sparse blocks of a few nonzeros a row (one-hot against one-hot): each output row's nonzero
        # pairs in one fused pass, not a co-occurrence matrix of the block rows built and sorted (scipy's tocsr:
        # the most of a snowflake's Gram).
        return be.kernels.sparse_pair_gram(a.index, b.index, a.data, b.data, weights)
    # Denser rows (numbers merged with wide one-hot columns): the co-occurrence counts first, each pair of block
    # rows once however many output rows repeat it.
    xp = be.xp
    values = xp.ones(len(a.index), dtype=a.data.dtype) if weights is None else weights
    c = be.sparse.coo_matrix((values, (a.index, b.index)), shape=(a.n_block_rows, b.n_block_rows)).tocsr()
    if a.n_block_rows <= b.n_block_rows:
        return matmul(a.data.T, matmul(c, b.data, be), be)
    return matmul(matmul(c.T, a.data, be).T, b.data, be)


def _nonzeros_per_row(part: Part) -> float:
    return part.data.nnz / max(part.n_block_rows, 1)


def one_pass_products(
    layout: GatherLayout, n_rows: int, weights: Any, backend: Backend
) -> list[tuple[Part, Part, Any]]:
    """The blocks ``(a, b, S_a^T D S_b)`` of T^T D T one fused pass over the rows gives: the dense part's Gram,
    its products with every gathered part, and the gathered parts' diagonal blocks from the pass's counts.
    Only the products of two gathered parts are left.

    Empty when the pass's accumulators (padded block rows x (dense columns + 1), per gathered part) would be
    larger than the index it reads: then the pairwise products hold less memory.
    """
    dense, a = layout.dense, 0 if layout.dense is None else len(layout.dense.columns)
    if not layout.gathered or ONE_PASS_ACCUMULATOR_CELLS_PER_ROW * layout.n_table_rows * (a + 1) > n_rows:
        return []
    gram, sums = backend.kernels.gram_pass(
        None if dense is None else dense.data, layout.index, layout.n_table_rows, weights
    )
    found = [] if dense is None else [(dense, dense, gram)]
    for k, part in enumerate(layout.gathered):
        rows = sums[k, : part.n_block_rows]
        found.append((part, part, scaled_gram(part, rows[:, a])))
        if dense is not None:
            found.append((dense, part, matmul(rows[:, :a].T, part.data, backend)))
    return found
