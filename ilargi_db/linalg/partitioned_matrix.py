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
from ilargi_db.linalg.partitions import Partitions, ResidentPartitions
from ilargi_db.linalg.products import ProductOperators


# What each partition computes, as module-level functions: a cluster ships them to its workers by name.
def _lmm(p: NormalizedMatrix, w: Any) -> Any:
    return p @ w


def _tmm(p: NormalizedMatrix, v: Any) -> Any:
    return p.T @ v


def _call(p: NormalizedMatrix, name: str) -> Any:
    return getattr(p, name)()


def _crossprod_weighted(p: NormalizedMatrix, weights: Any) -> Any:
    return p.crossprod(weights)


def _nearest(p: NormalizedMatrix, W: Any, offsets: Any) -> tuple[Any, Any]:
    return p.nearest(W, offsets)


def _group_sums(p: NormalizedMatrix, labels: Any, n_groups: int) -> Any:
    return p.group_sums(labels, n_groups)


def _rows_of(p: NormalizedMatrix, indices: Any) -> Any:
    return p.rows(indices) if len(indices) else None


def _reduce(p: NormalizedMatrix, fn: Callable[..., tuple], rows: tuple, args: tuple) -> tuple:
    return p.reduce_rows(fn, rows, args)


def _slice_block(block: Block, start: int, stop: int) -> Block:
    """``block`` restricted to output rows ``start:stop``: the fact's rows sliced, a dimension shared."""
    if block.index is None:  # one row per output row (the fact, in output order)
        return Block(block.data[start:stop], columns=block.columns, index=None, fill=block.fill)
    return Block(block.data, columns=block.columns, index=block.index[start:stop], fill=block.fill)


class KeptRows:
    """A vector of a partitioned matrix's rows, cut into its partitions' slices once (``keep_rows``).

    ``pieces[k]`` is partition ``k``'s slice: a view here, or a future on the worker holding the partition.
    """

    def __init__(self, pieces: list[Any]):
        self.pieces = pieces


class PartitionedMatrix(ProductOperators):
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

    def __init__(
        self,
        partitions: Partitions | Sequence[NormalizedMatrix],
        transposed: bool = False,
        sizes: Sequence[int] | None = None,
        template: NormalizedMatrix | None = None,
    ):
        """``partitions``: a list (held here), or :class:`Partitions` (a :class:`PartitionSource`, streamed;
        a cluster's, remote) with their row ``sizes`` and a ``template`` partition that says the columns,
        names and backend without reading the others."""
        if not len(partitions):
            raise ValueError("a partitioned matrix needs at least one partition.")
        if not isinstance(partitions, Partitions):
            partitions = ResidentPartitions(partitions)
        if not partitions.resident:
            # Made on demand (streamed) or held elsewhere (a cluster's workers): never gathered here.
            if sizes is None or template is None:
                raise ValueError("a streamed or remote partitioned matrix needs its partitions' sizes and a template.")
        else:
            widths = {p.shape[1] for p in partitions}
            if len(widths) != 1:
                raise ValueError(f"every partition must have the same columns, got widths {sorted(widths)}.")
            sizes = [p.shape[0] for p in partitions]
        self.partitions: Partitions = partitions
        self._template = template if template is not None else partitions[0]
        self._transposed = transposed
        self._offsets = np.cumsum([0, *sizes])

    @property
    def row_offsets(self) -> np.ndarray:
        """Where each partition's rows start, and the row count last: partition ``k`` holds rows
        ``row_offsets[k]`` to ``row_offsets[k + 1]``."""
        return self._offsets

    @property
    def streamed(self) -> bool:
        """Whether the partitions are not held here: read on every pass, or held by a cluster's workers."""
        return not self.partitions.resident

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
        return self._template.backend

    @property
    def dtype(self) -> Any:
        return self._template.dtype

    @property
    def feature_names(self) -> list[str]:
        return self._template.feature_names

    @property
    def shape(self) -> tuple[int, int]:
        n, d = int(self._offsets[-1]), self._template.shape[1]
        return (d, n) if self._transposed else (n, d)

    @property
    def nbytes(self) -> int:
        """Bytes held: each partition's own rows and the blocks they share (streamed: the template's)."""
        return self._template.nbytes if self.streamed else sum(p.nbytes for p in self.partitions)

    def _like(self, partitions: Any, transposed: bool, template: NormalizedMatrix | None = None) -> PartitionedMatrix:
        sizes = np.diff(self._offsets).tolist()
        return PartitionedMatrix(partitions, transposed, sizes, template if template is not None else self._template)

    @property
    def T(self) -> PartitionedMatrix:
        return self._like(self.partitions, not self._transposed)

    def _rows(self, k: int) -> slice:
        return slice(int(self._offsets[k]), int(self._offsets[k + 1]))

    def _split(self, v: Any) -> list[Any]:
        """A vector (or rows of a matrix) of the whole matrix, cut into the partitions' rows."""
        return [v[self._rows(k)] for k in range(self.n_partitions)]

    def _each(self, fn: Callable[..., Any], *per_partition: list[Any]) -> list[Any]:
        """``fn(partition, *its arguments)`` for every partition, in order, where the partitions are: here
        (streamed ones read one by one) or on a cluster's workers, from which only the results come back."""
        return self.partitions.each(fn, *per_partition)

    def _stack(self, parts: list[Any]) -> Any:
        return self.backend.xp.concatenate(parts, axis=0)

    def _sum(self, parts: list[Any]) -> Any:
        total = parts[0].copy()
        for part in parts[1:]:  # in partition order: the same result however partitions were computed
            total += part
        return total

    def _lmm(self, w: Any) -> Any:
        return self._stack(self._each(_lmm, [w] * self.n_partitions))

    def _tmm(self, v: Any) -> Any:
        v = self.backend.asarray(v, dtype=self.dtype)
        return self._sum(self._each(_tmm, self._split(v)))

    def crossprod(self, weights: Any = None) -> Any:
        """X^T X (or X^T diag(weights) X): each partition's, summed in order."""
        if self._transposed:
            raise ValueError("crossprod() of a partitioned matrix is defined for the untransposed matrix.")
        if weights is None:
            return self._sum(self._each(_call, ["crossprod"] * self.n_partitions))
        weights = self.backend.asarray(weights, dtype=self.dtype)
        return self._sum(self._each(_crossprod_weighted, self._split(weights)))

    def _each_method(self, name: str) -> list[Any]:
        return self._each(_call, [name] * self.n_partitions)

    def colsums(self) -> Any:
        if self._transposed:
            return self._stack(self._each_method("rowsums"))
        return self._sum(self._each_method("colsums"))

    def rowsums(self) -> Any:
        if self._transposed:
            return self._sum(self._each_method("colsums"))
        return self._stack(self._each_method("rowsums"))

    def sum(self) -> float:
        return float(sum(self._each_method("sum")))

    def column_norms_squared(self) -> Any:
        return self._sum(self._each_method("column_norms_squared"))

    def row_norms_squared(self) -> Any:
        return self._stack(self._each_method("row_norms_squared"))

    def min(self) -> float:
        return min(self._each_method("min"))

    def nearest(self, W: Any, offsets: Any) -> tuple[Any, Any]:
        found = self._each(_nearest, [W] * self.n_partitions, [offsets] * self.n_partitions)
        return self._stack([f[0] for f in found]), self._stack([f[1] for f in found])

    def group_sums(self, labels: Any, n_groups: int) -> Any:
        labels = self.backend.xp.asarray(labels)
        return self._sum(self._each(_group_sums, self._split(labels), [n_groups] * self.n_partitions))

    def keep_rows(self, v: Any) -> KeptRows:
        """``v`` (one entry per row) cut into the partitions' rows once: views here, or sent once to the
        workers that hold the partitions, so each :meth:`reduce_rows` ships only parameters and sums."""
        return KeptRows(self.partitions.keep(self._split(v)))

    def reduce_rows(self, fn: Callable[..., tuple], rows: Sequence[Any] = (), args: Sequence[Any] = ()) -> tuple:
        """``fn(partition, its slices of rows, args)`` for every partition, in one pass; the tuples added in
        partition order (deterministic). ``rows`` are from :meth:`keep_rows` (a plain vector is cut each call)."""
        if self._transposed:
            raise ValueError("reduce_rows() sums over the rows of an untransposed matrix.")
        pieces = [r.pieces if isinstance(r, KeptRows) else self._split(r) for r in rows]
        mine = [tuple(piece[k] for piece in pieces) for k in range(self.n_partitions)]
        found = self._each(_reduce, [fn] * self.n_partitions, mine, [tuple(args)] * self.n_partitions)
        totals = []
        for values in zip(*found):
            total = values[0]
            for value in values[1:]:  # in partition order, into a new total (the partials stay as they were)
                total = total + value
            totals.append(total)
        return tuple(totals)

    def entries_per_row(self) -> float:
        """As :meth:`NormalizedMatrix.entries_per_row`, from the partitions' shared layout (no partition read)."""
        return self._template.entries_per_row()

    def rows(self, indices: Any) -> Any:
        """Selected rows as a dense array, each from the partition that holds it."""
        xp = self.backend.xp
        indices = np.asarray(to_host(indices), dtype=np.int64)
        out = xp.zeros((len(indices), self.shape[1]), dtype=self.dtype)
        owner = np.searchsorted(self._offsets, indices, side="right") - 1
        wanted = [indices[owner == k] - self._offsets[k] for k in range(self.n_partitions)]
        found = self._each(_rows_of, wanted)
        for k in np.unique(owner):
            out[xp.asarray(np.flatnonzero(owner == k))] = found[int(k)]
        return out

    def materialize(self) -> Any:
        out = self._stack([p.materialize() for p in self.partitions])
        return out.T if self._transposed else out

    # -- element-wise operators: per partition ---------------------------------------------------------

    def _map(self, f: Callable[[NormalizedMatrix], NormalizedMatrix]) -> PartitionedMatrix:
        """``f`` on every partition where it is (streamed: as each is read; remote: on its worker)."""
        mapped = self.partitions.mapped(f)
        if mapped.resident:
            return PartitionedMatrix(mapped, self._transposed)
        return self._like(mapped, self._transposed, f(self._template))

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


__all__ = ["KeptRows", "PartitionedMatrix"]
