"""Data-integration metadata: T = sum_k I_k S_k M_k^T, stored compressed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import scipy.sparse as sp

from ilargi_db.metadata.arrow_blocks import filled_integers


@dataclass(frozen=True)
class BlockMetadata:
    """One feature block S_k with its indicator I_k and mapping M_k.

    ``indicator[i]`` is the block row that output row ``i`` takes; -1 where an
    outer join left the source's side empty (the row takes ``fill``); -2 where
    another source won a coalesced column (the block contributes nothing).
    ``columns[j]`` is the output column that block column ``j`` feeds (the
    mapping matrix). ``fill[j]`` is the feature expression evaluated on an
    all-NULL row, NaN where that is NULL. A NULL stored in a source is NaN in
    ``data``.
    """

    source: str
    data: np.ndarray
    indicator: np.ndarray
    columns: np.ndarray
    fill: np.ndarray

    @property
    def n_source_rows(self) -> int:
        return self.data.shape[0]


def group_order(codes: np.ndarray, n_groups: int) -> np.ndarray:
    """The stable order that sorts rows by their group code (-1 first): NumPy sorts 16-bit keys by radix, in
    O(n), where a 32-bit key takes a merge sort (0.06 s for 2M rows)."""
    narrow = codes.astype(np.int16) if n_groups < np.iinfo(np.int16).max else codes
    return np.argsort(narrow, kind="stable")


@dataclass(frozen=True)
class GroupCodes:
    """Each output row's group (``group_by``): an index into ``labels``, -1 where the group is NULL.

    ``labels`` are the groups' values as DuckDB casts them to VARCHAR (what a model's SQL macro compares), sorted.
    """

    codes: np.ndarray
    labels: tuple[str, ...]

    @classmethod
    def from_arrow(cls, values: pa.Array | pa.ChunkedArray) -> GroupCodes:
        """The codes of a VARCHAR column, one value per output row."""
        import pyarrow.compute as pc

        if isinstance(values, pa.Array):
            values = pa.chunked_array([values])
        encoded = pc.dictionary_encode(values).combine_chunks() if len(values) else None
        if encoded is None:
            return cls(np.empty(0, dtype=np.int32), ())
        labels = encoded.dictionary.to_pylist()
        order = np.argsort(np.array(labels, dtype=object), kind="stable") if labels else np.empty(0, np.int64)
        rank = np.empty(len(labels) + 1, dtype=np.int32)
        rank[order] = np.arange(len(labels), dtype=np.int32)
        rank[-1] = -1  # a NULL group: the last slot, reached by the filled index below
        indices = filled_integers(encoded.indices, len(labels))
        return cls(rank[indices], tuple(labels[i] for i in order))

    def take(self, keep: np.ndarray) -> GroupCodes:
        return GroupCodes(self.codes[keep], self.labels)

    def rows_of_each(self) -> dict[str, np.ndarray]:
        """Each group's rows, in row order (the NULL group's rows left out)."""
        order = group_order(self.codes, len(self.labels))
        bounds = np.searchsorted(self.codes[order], np.arange(-1, len(self.labels) + 1))
        return {label: order[bounds[g + 1] : bounds[g + 2]] for g, label in enumerate(self.labels)}


@dataclass(frozen=True)
class CategoricalMetadata:
    """A categorical feature read from one source, before encoding.

    ``values`` holds the value (as text, NULL as null) of every source row;
    ``indicator`` and ``fill`` are as in :class:`BlockMetadata`.
    """

    source: str
    feature: int
    values: pa.Array
    indicator: np.ndarray
    fill: str | None

    @property
    def n_source_rows(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class DIMetadata:
    """Everything the normalized matrix needs, on the host, before any backend."""

    n_rows: int
    feature_names: list[str]
    blocks: list[BlockMetadata]
    indicators: dict[str, np.ndarray]  # per source alias, -1 where the row is empty
    source_rows: dict[str, int]
    target: np.ndarray | None
    categoricals: list[CategoricalMetadata] = field(default_factory=list)
    # Per source, the DuckDB rowid of each block row (a base table), or None: what a later job needs to
    # read one more column of the same rows (see ilargi_db.reuse).
    row_ids: dict[str, np.ndarray | None] = field(default_factory=dict)
    groups: GroupCodes | None = None  # each row's group_by value, when the job trains one model per group

    @property
    def n_features(self) -> int:
        return len(self.feature_names)

    def take_rows(self, keep: np.ndarray) -> DIMetadata:
        """The metadata of the selected output rows (indicators and target sliced; blocks shared)."""
        return DIMetadata(
            n_rows=len(keep),
            feature_names=self.feature_names,
            blocks=[dataclasses.replace(b, indicator=b.indicator[keep]) for b in self.blocks],
            indicators={a: ind[keep] for a, ind in self.indicators.items()},
            source_rows=self.source_rows,
            target=None if self.target is None else self.target[keep],
            categoricals=[dataclasses.replace(c, indicator=c.indicator[keep]) for c in self.categoricals],
            row_ids=self.row_ids,
            groups=None if self.groups is None else self.groups.take(keep),
        )

    def indicator_matrix(self, block: int) -> sp.csr_matrix:
        """I_k as a 0/1 sparse matrix (n_rows x block rows)."""
        b = self.blocks[block]
        rows = np.flatnonzero(b.indicator >= 0)
        ones = np.ones(len(rows))
        return sp.csr_matrix((ones, (rows, b.indicator[rows])), shape=(self.n_rows, b.n_source_rows))

    def mapping_matrix(self, block: int) -> sp.csr_matrix:
        """M_k as a 0/1 sparse matrix (n_features x block columns)."""
        b = self.blocks[block]
        cols = np.arange(len(b.columns))
        return sp.csr_matrix((np.ones(len(cols)), (b.columns, cols)), shape=(self.n_features, len(cols)))

    def empty_rows(self, block: int) -> np.ndarray:
        """Boolean mask of output rows the block leaves empty (its ``fill`` applies)."""
        return self.blocks[block].indicator == -1
