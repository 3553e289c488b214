"""The training rows as a tree sees them: each feature's values as bins, kept per source (factorized).

A :class:`BinnedMatrix` is the tree's normalized matrix: each source's features as one block of bins
(uint8, or uint16 once a categorical keeps more than 255 categories: ``bin_dtype``; one row per source
row) and the source row each training row takes. A dimension's bins are stored once per dimension row,
never per fact row; the materialized join is the special case of one block that every row indexes by
itself. Each feature's ``FeatureBins`` say what its bins are (:mod:`ilargi_db.linalg.feature_bins` holds
the rules that choose them), and every feature has one more bin, ``missing_bin``, for NULL (and a
category training never saw, as HistGradientBoosting does).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ilargi_db.linalg.feature_bins import MAX_BINS, FeatureBins, bin_dtype

# Dimensions of at most this many features are gathered into the fact's block for the trees' passes: reading
# their bins through the index costs a random access per row and block, more than a byte per feature in order.
GATHER_WIDTH = 16


@dataclass(frozen=True, eq=False)  # compared by identity: blocks hold arrays
class BinnedBlock:
    """One source's features as bins: ``codes[s, j]`` is source row s's bin of feature ``columns[j]``.

    ``index[i]`` is the source row training row i takes, -1 where an outer join left it empty (it takes
    ``fill``, the bins of the features on an all-NULL row); ``index`` None: training row i is row i.
    """

    codes: np.ndarray  # (source rows, c) bins (:func:`bin_dtype`), C order
    index: np.ndarray | None
    columns: np.ndarray  # (c,) int64: the feature each column is
    fill: np.ndarray  # (c,) bins of an empty row

    @property
    def n_source_rows(self) -> int:
        return self.codes.shape[0]

    def take_rows(self, rows: np.ndarray) -> BinnedBlock:
        index = rows if self.index is None else self.index[rows]
        return BinnedBlock(self.codes, index.astype(np.int64, copy=False), self.columns, self.fill)

    def bins_of(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Every column's bin for the training ``rows`` (all when None): (rows, c), one copy."""
        if self.index is None:
            return self.codes if rows is None else self.codes[rows]
        index = self.index if rows is None else self.index[rows]
        out = self.codes[np.maximum(index, 0)]
        out[index < 0] = self.fill
        return out


@dataclass(frozen=True)
class BinnedMatrix:
    """The binned training rows: one :class:`BinnedBlock` per source, each feature in exactly one block."""

    blocks: list[BinnedBlock]
    n_rows: int
    bins: list[FeatureBins]
    missing_bin: int = MAX_BINS
    backend: Any = None  # the array backend trees grow on (ilargi_db.backend.get_backend); None: NumPy

    def __post_init__(self) -> None:
        seen = np.sort(np.concatenate([b.columns for b in self.blocks])) if self.blocks else np.empty(0)
        if not np.array_equal(seen, np.arange(len(self.bins))):
            raise ValueError("every feature must be in exactly one block")

    @property
    def shape(self) -> tuple[int, int]:
        return self.n_rows, len(self.bins)

    @property
    def feature_names(self) -> list[str]:
        return [b.name for b in self.bins]

    @property
    def categorical(self) -> np.ndarray:
        return np.array([b.categorical for b in self.bins], dtype=np.bool_)

    @property
    def n_bins(self) -> np.ndarray:
        return np.array([b.n_bins for b in self.bins], dtype=np.int64)

    @property
    def nbytes(self) -> int:
        return sum(b.codes.nbytes + (0 if b.index is None else b.index.nbytes) for b in self.blocks)

    def take_rows(self, rows: np.ndarray) -> BinnedMatrix:
        """The selected training rows (every block indexes them; the codes are shared)."""
        return BinnedMatrix(
            [b.take_rows(rows) for b in self.blocks], len(rows), self.bins, self.missing_bin, self.backend
        )

    def __getitem__(self, rows: np.ndarray) -> BinnedMatrix:
        """``X[rows]`` (integer positions) as :meth:`take_rows`: the row selection a per-group fit takes."""
        return self.take_rows(np.asarray(rows))

    def dense_bins(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Every feature's bin for ``rows`` (all when None) as one (rows, features) array: for scoring."""
        n = self.n_rows if rows is None else len(rows)
        out = np.empty((n, len(self.bins)), dtype=bin_dtype(self.missing_bin))
        for block in self.blocks:
            out[:, block.columns] = block.bins_of(rows)
        return out


@dataclass(frozen=True)
class FlatBins:
    """A binned matrix's blocks laid end to end, as the fused tree kernels read them (one call per node).

    Block k's bins (source rows x ``widths[k]``, C order) start at ``codes[code_start[k]]``; its features are
    ``columns[first_column[k]:][:widths[k]]`` with their fill bins in ``fills``; ``index[i, k]`` is the source
    row training row i takes (unused where ``identity[k]``: row i is row i).
    """

    codes: np.ndarray
    code_start: np.ndarray
    widths: np.ndarray
    first_column: np.ndarray
    columns: np.ndarray
    fills: np.ndarray
    index: np.ndarray
    identity: np.ndarray
    source_rows: np.ndarray
    n_bins: int  # bins of every feature's histogram, the missing bin included
    value_bins: np.ndarray  # (features,) each feature's bins of values (its compact histogram: one more)
    slot_start: np.ndarray  # (features + 1,) where each feature's compact histogram starts
    host: FlatBins | None = None  # on a device (:meth:`on`): the same layout on the host, for its shapes

    @property
    def column_slot(self) -> np.ndarray:
        """Per block column (as laid out), where its feature's compact histogram starts."""
        return self.slot_start[self.columns]

    @property
    def column_bins(self) -> np.ndarray:
        """Per block column, its feature's bins of values."""
        return self.value_bins[self.columns]

    @classmethod
    def of(cls, X: BinnedMatrix, gather_width: int = GATHER_WIDTH) -> FlatBins:
        """``X``'s blocks laid out for the kernels; a dimension of at most ``gather_width`` features is gathered
        into the fact's block first (its bins per training row: a byte per row and feature, read in order on
        every pass instead of through its index)."""
        narrow = [b.index is None or b.codes.shape[1] <= gather_width for b in X.blocks]
        rowwise = [b for b, row in zip(X.blocks, narrow) if row]
        blocks = [b for b, row in zip(X.blocks, narrow) if not row]
        if len(rowwise) == 1 and rowwise[0].index is None:
            blocks.insert(0, rowwise[0])  # already one row per training row (the join's block): no copy
        elif rowwise:
            codes = np.empty((X.n_rows, sum(b.codes.shape[1] for b in rowwise)), dtype=bin_dtype(X.missing_bin))
            at = 0
            for b in rowwise:
                codes[:, at : at + b.codes.shape[1]] = b.bins_of()
                at += b.codes.shape[1]
            columns = np.concatenate([b.columns for b in rowwise])
            fill = np.concatenate([b.fill for b in rowwise])
            blocks.insert(0, BinnedBlock(codes, None, columns, fill))
        widths = np.array([b.codes.shape[1] for b in blocks], dtype=np.int64)
        source_rows = np.array([b.n_source_rows for b in blocks], dtype=np.int64)
        sizes = np.array([b.codes.size for b in blocks], dtype=np.int64)
        index_type = np.int32 if source_rows.max(initial=0) < np.iinfo(np.int32).max else np.int64
        gathered = any(b.index is not None for b in blocks)  # else no row reads an index: none is kept
        index = np.zeros((X.n_rows if gathered else 0, len(blocks)), dtype=index_type)
        for k, b in enumerate(blocks):
            if b.index is not None:
                index[:, k] = b.index
        return cls(
            codes=np.concatenate([b.codes.ravel() for b in blocks]) if len(blocks) > 1 else _flat_view(blocks),
            code_start=np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64),
            widths=widths,
            first_column=np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64),
            columns=np.concatenate([b.columns for b in blocks]).astype(np.int64),
            fills=np.concatenate([b.fill for b in blocks]).astype(bin_dtype(X.missing_bin)),
            index=index,
            identity=np.array([b.index is None for b in blocks], dtype=np.bool_),
            source_rows=source_rows,
            n_bins=X.missing_bin + 1,
            value_bins=X.n_bins,
            slot_start=np.concatenate([[0], np.cumsum(X.n_bins + 1)]).astype(np.int64),
        )

    @property
    def rowwise(self) -> bool:
        """One block holds every feature, one row per training row (no index to read through)."""
        return len(self.widths) == 1 and bool(self.identity[0])

    def segment_start(self, segment: np.ndarray) -> np.ndarray:
        """Where each block's per-source-row sums start in the buffer of the blocks ``segment`` sums (each
        its rows and one for empty rows; the others none)."""
        return np.concatenate([[0], np.cumsum(np.where(segment, self.source_rows + 1, 0))]).astype(np.int64)

    def on(self, backend: Any) -> FlatBins:
        """The layout on ``backend``'s device (uploaded once: what the kernels read), keeping the host's in ``host``
        for the shapes and positions read one at a time (the same layout on NumPy)."""
        if backend.xp is np:
            return self
        arrays = {
            f.name: backend.to_device(value)
            for f in dataclasses.fields(self)
            if isinstance(value := getattr(self, f.name), np.ndarray)
        }
        return dataclasses.replace(self, **arrays, host=self)

    @property
    def shapes(self) -> FlatBins:
        """The layout whose shapes and positions are host arrays (itself, or the host's copy of a device's)."""
        return self.host if self.host is not None else self

    def feature_at(self, feature: int) -> tuple[int, int]:
        """(block, column in it) of ``feature``."""
        host = self.shapes
        position = int(host.position[feature])
        block = int(np.searchsorted(host.first_column, position, side="right")) - 1
        return block, position - int(host.first_column[block])

    @functools.cached_property
    def position(self) -> np.ndarray:
        """Per feature, its column in the laid-out blocks."""
        out = np.empty(len(self.columns), dtype=np.int64)
        out[self.columns] = np.arange(len(self.columns))
        return out


def _flat_view(blocks: list[BinnedBlock]) -> np.ndarray:
    """One block's bins as the 1-D buffer, without a copy (the materialized join's: the passes never write it)."""
    return blocks[0].codes.ravel() if blocks else np.empty(0, dtype=np.uint8)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def bin_array(X: Any, bins: list[FeatureBins], missing_bin: int = MAX_BINS) -> BinnedMatrix:
    """A plain array's rows (numbers; text for categorical features) binned with ``bins``: one block."""
    columns = []
    for j, b in enumerate(bins):
        column = X[:, j] if hasattr(X, "shape") else [row[j] for row in X]
        if b.categorical:
            column = pa.array([None if _missing(v) else str(v) for v in column], type=pa.string())
        elif getattr(column, "dtype", None) is None or column.dtype == object:
            column = np.array([np.nan if _missing(v) else float(v) for v in column], dtype=np.float64)
        columns.append(b.codes(column, missing_bin))
    n = len(columns[0]) if columns else len(X)
    dtype = bin_dtype(missing_bin)
    codes = np.ascontiguousarray(np.column_stack(columns)) if columns else np.empty((n, 0), dtype=dtype)
    fill = np.full(len(bins), missing_bin, dtype=dtype)
    return BinnedMatrix([BinnedBlock(codes, None, np.arange(len(bins)), fill)], n, bins, missing_bin)


__all__ = ["BinnedBlock", "BinnedMatrix", "FlatBins", "bin_array"]
