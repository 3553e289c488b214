"""A normalized matrix in row partitions over shared blocks: what streaming and a cluster compute on.

The fact table is split into row partitions; each partition is a :class:`NormalizedMatrix` of its own
fact rows and its slice of every indicator, over dimension blocks that all partitions share (the same
arrays: dimensions are small next to the fact, and are never copied per partition). Every operator is
the partitions' operators combined: row-wise results (``X @ W``, ``nearest``, row norms) are
concatenated, sums (``X.T @ V``, ``crossprod``, column sums, ``group_sums``) are added in partition order,
so a result does not depend on which partition finished first. The models run on it unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ilargi_db.backend import to_host
from ilargi_db.linalg.normalized_matrix import Block, NormalizedMatrix


def _slice_block(block: Block, start: int, stop: int) -> Block:
    """``block`` restricted to output rows ``start:stop``: the fact's rows sliced, a dimension shared."""
    if block.index is None:  # one row per output row (the fact, in output order)
        return Block(block.data[start:stop], columns=block.columns, index=None, fill=block.fill)
    return Block(block.data, columns=block.columns, index=block.index[start:stop], fill=block.fill)


class PartitionedMatrix:
    """Row partitions of a normalized matrix; the operators of :class:`NormalizedMatrix`.

    Examples
    --------
    >>> import numpy as np
    >>> fact = Block(np.arange(6.0).reshape(3, 2), columns=[0, 1])
    >>> dim = Block(np.array([[10.0], [20.0]]), columns=[2], index=np.array([0, 1, 1]))
    >>> X = PartitionedMatrix.from_blocks([fact, dim], n_rows=3, rows_per_partition=2, backend="numpy")
    >>> X.n_partitions, X.shape
    (2, (3, 3))
    >>> X @ np.ones(3)
    array([11., 25., 29.])
    >>> X.T @ np.ones(3)
    array([ 6.,  9., 50.])
    """

    __array_ufunc__ = None  # NumPy defers to our operators

    def __init__(self, partitions: Sequence[NormalizedMatrix], transposed: bool = False):
        if not partitions:
            raise ValueError("a partitioned matrix needs at least one partition.")
        widths = {p.shape[1] for p in partitions}
        if len(widths) != 1:
            raise ValueError(f"every partition must have the same columns, got widths {sorted(widths)}.")
        self.partitions = list(partitions)
        self._transposed = transposed
        self._offsets = np.cumsum([0] + [p.shape[0] for p in self.partitions])

    @classmethod
    def from_blocks(
        cls,
        blocks: Sequence[Block],
        n_rows: int,
        rows_per_partition: int,
        feature_names: Sequence[str] | None = None,
        backend: Any = "auto",
    ) -> PartitionedMatrix:
        """Split ``blocks`` (as :class:`NormalizedMatrix` takes them) into partitions of ``rows_per_partition``."""
        if rows_per_partition < 1:
            raise ValueError(f"rows_per_partition must be at least 1, got {rows_per_partition}.")
        bounds = list(range(0, max(n_rows, 1), rows_per_partition)) + [n_rows]
        partitions = [
            NormalizedMatrix(
                [_slice_block(b, start, stop) for b in blocks],
                n_rows=stop - start,
                feature_names=feature_names,
                backend=backend,
            )
            for start, stop in zip(bounds[:-1], bounds[1:])
        ]
        return cls(partitions)

    # -- what the models read ------------------------------------------------------------------

    @property
    def n_partitions(self) -> int:
        return len(self.partitions)

    @property
    def backend(self) -> Any:
        return self.partitions[0].backend

    @property
    def dtype(self) -> Any:
        return self.partitions[0].dtype

    @property
    def feature_names(self) -> list[str]:
        return self.partitions[0].feature_names

    @property
    def shape(self) -> tuple[int, int]:
        n, d = int(self._offsets[-1]), self.partitions[0].shape[1]
        return (d, n) if self._transposed else (n, d)

    @property
    def nbytes(self) -> int:
        """Bytes held: each partition's own rows, each shared block once."""
        return sum(p.nbytes for p in self.partitions)

    @property
    def T(self) -> PartitionedMatrix:
        return PartitionedMatrix(self.partitions, not self._transposed)

    def _rows(self, k: int) -> slice:
        return slice(int(self._offsets[k]), int(self._offsets[k + 1]))

    def _stack(self, parts: list[Any]) -> Any:
        return self.backend.xp.concatenate(parts, axis=0)

    def _sum(self, parts: list[Any]) -> Any:
        total = parts[0].copy()
        for part in parts[1:]:  # in partition order: the same result however partitions were computed
            total += part
        return total

    def _lmm(self, w: Any) -> Any:
        return self._stack([p @ w for p in self.partitions])

    def _tmm(self, v: Any) -> Any:
        v = self.backend.asarray(v, dtype=self.dtype)
        return self._sum([p.T @ v[self._rows(k)] for k, p in enumerate(self.partitions)])

    def __matmul__(self, w: Any) -> Any:
        """``X @ W`` (rows of each partition, stacked), or ``X.T @ V`` (partials summed in order)."""
        return self._tmm(w) if self._transposed else self._lmm(w)

    def __rmatmul__(self, w: Any) -> Any:
        """``W @ X`` = (X^T W^T)^T."""
        w = self.backend.asarray(w, dtype=self.dtype)
        if self._transposed:
            return self._lmm(w) if w.ndim == 1 else self._lmm(w.T).T
        return self._tmm(w) if w.ndim == 1 else self._tmm(w.T).T

    def crossprod(self, weights: Any = None) -> Any:
        """X^T X (or X^T diag(weights) X): each partition's, summed in order."""
        if self._transposed:
            raise ValueError("crossprod() of a partitioned matrix is defined for the untransposed matrix.")
        if weights is None:
            return self._sum([p.crossprod() for p in self.partitions])
        weights = self.backend.asarray(weights, dtype=self.dtype)
        return self._sum([p.crossprod(weights[self._rows(k)]) for k, p in enumerate(self.partitions)])

    def colsums(self) -> Any:
        if self._transposed:
            return self._stack([p.rowsums() for p in self.partitions])
        return self._sum([p.colsums() for p in self.partitions])

    def rowsums(self) -> Any:
        if self._transposed:
            return self._sum([p.colsums() for p in self.partitions])
        return self._stack([p.rowsums() for p in self.partitions])

    def sum(self) -> float:
        return float(sum(p.sum() for p in self.partitions))

    def column_norms_squared(self) -> Any:
        return self._sum([p.column_norms_squared() for p in self.partitions])

    def row_norms_squared(self) -> Any:
        return self._stack([p.row_norms_squared() for p in self.partitions])

    def min(self) -> float:
        return min(p.min() for p in self.partitions)

    def nearest(self, W: Any, offsets: Any) -> tuple[Any, Any]:
        found = [p.nearest(W, offsets) for p in self.partitions]
        return self._stack([f[0] for f in found]), self._stack([f[1] for f in found])

    def group_sums(self, labels: Any, n_groups: int) -> Any:
        labels = self.backend.xp.asarray(labels)
        return self._sum([p.group_sums(labels[self._rows(k)], n_groups) for k, p in enumerate(self.partitions)])

    def rows(self, indices: Any) -> Any:
        """Selected rows as a dense array, each from the partition that holds it."""
        xp = self.backend.xp
        indices = np.asarray(to_host(indices), dtype=np.int64)
        out = xp.zeros((len(indices), self.shape[1]), dtype=self.dtype)
        owner = np.searchsorted(self._offsets, indices, side="right") - 1
        for k in np.unique(owner):
            at = np.flatnonzero(owner == k)
            out[xp.asarray(at)] = self.partitions[k].rows(indices[at] - self._offsets[k])
        return out

    def materialize(self) -> Any:
        out = self._stack([p.materialize() for p in self.partitions])
        return out.T if self._transposed else out

    # -- element-wise operators: per partition ---------------------------------------------------------

    def _map(self, f: Callable[[NormalizedMatrix], NormalizedMatrix]) -> PartitionedMatrix:
        return PartitionedMatrix([f(p) for p in self.partitions], self._transposed)

    def __add__(self, c):
        return self._map(lambda p: p + c)

    def __sub__(self, c):
        return self._map(lambda p: p - c)

    def __mul__(self, c):
        return self._map(lambda p: p * c)

    def __rmul__(self, c):
        return self._map(lambda p: c * p)

    def __truediv__(self, c):
        return self._map(lambda p: p / c)

    def __pow__(self, c):
        return self._map(lambda p: p**c)

    def __neg__(self):
        return self._map(lambda p: -p)

    def exp(self) -> PartitionedMatrix:
        return self._map(lambda p: p.exp())

    def log(self) -> PartitionedMatrix:
        return self._map(lambda p: p.log())

    def __repr__(self) -> str:
        n, d = self.shape
        return f"<PartitionedMatrix {n:,} x {d:,} in {self.n_partitions} row partitions>"


__all__ = ["PartitionedMatrix"]
