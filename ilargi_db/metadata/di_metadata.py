"""Data-integration metadata: T = sum_k I_k S_k M_k^T, stored compressed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class BlockMetadata:
    """One feature block S_k with its indicator I_k and mapping M_k.

    ``indicator[i]`` is the block row that output row ``i`` takes, or -1 where
    the block contributes nothing to that row (an outer join left the source's
    side empty, or another source won a coalesced column). ``columns[j]`` is
    the output column that block column ``j`` feeds (the mapping matrix).
    ``fill[j]`` is the value a row left empty by an outer join has in column
    ``j`` (the feature expression evaluated on a NULL row, NULL read as 0);
    rows masked by a coalesce always take 0.
    """

    source: str
    data: np.ndarray
    indicator: np.ndarray
    columns: np.ndarray
    fill: np.ndarray
    masked: bool = False  # True for a coalesce part: -1 rows contribute 0, not ``fill``

    @property
    def n_source_rows(self) -> int:
        return self.data.shape[0]


@dataclass(frozen=True)
class DIMetadata:
    """Everything the normalized matrix needs, on the host, before any backend."""

    n_rows: int
    feature_names: list[str]
    blocks: list[BlockMetadata]
    indicators: dict[str, np.ndarray]  # per source alias, -1 where the row is empty
    source_rows: dict[str, int]
    target: np.ndarray | None

    @property
    def n_features(self) -> int:
        return len(self.feature_names)

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
        b = self.blocks[block]
        if b.masked:
            return np.zeros(self.n_rows, dtype=bool)
        return b.indicator < 0
