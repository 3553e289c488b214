"""Tree models' preprocessing: each feature's bins, computed from the training rows, and the rows binned.

:class:`FeatureBinner` is to trees what :class:`~ilargi_db.preprocess.FeatureEncoder` is to linear models:
fitted once on the rows a training reads, it turns the factorized metadata or the materialized join into the
same :class:`~ilargi_db.linalg.binned_matrix.BinnedMatrix` (the same bins for either strategy), and records its
state so that scoring bins new rows alike.

The bins are the training rows' statistics, never a source's: a fact that sells 300 of 5,000 products must
find its bins among those 300. The factorized way weighs each source row's value by how many training rows take
it (``np.bincount`` of the indicator the key-only join already gave; empty rows take the fill value), which
equals the statistics over the join's rows without building it; the materialized join weighs each row once.
The weights are counted in NumPy rather than by DuckDB over the key-only join grouped by source row: that join
is the read's costliest query, its indicators are in memory already, and they are the rows left after the NULL
targets are dropped, so no second query can disagree with the rows the trees see. The rows early stopping holds
out are binned too: one read serves every model of a batch, each drawing its own held-out rows.

Numeric features: every distinct value its own bin when there are at most ``max_bins``, else edges at the
training rows' discrete quantiles. Categorical ones (text, ENUM, BOOLEAN): the categories most training rows
take, up to :data:`MAX_CATEGORIES`, compared byte for byte whatever the column's collation ('a' and 'A' under
NOCASE are two categories, as ``predict`` and the SQL macros compare them); NULL, and a category not kept or
never seen, fall in the missing bin, which comes after every feature's bins (``missing_bin_``). A feature
combining sources with COALESCE is binned over the value each training row takes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ilargi_db.errors import IlargiError
from ilargi_db.linalg.binned_matrix import BinnedBlock, BinnedMatrix
from ilargi_db.linalg.feature_bins import (
    MAX_BINS,
    MAX_CATEGORIES,
    FeatureBins,
    bin_dtype,
    weighted_categories,
    weighted_numeric_edges,
)
from ilargi_db.metadata import DIMetadata
from ilargi_db.metadata.arrow_blocks import arrow_to_numpy, string_array
from ilargi_db.metadata.scans import part_column


def row_weights(indicator: np.ndarray, n_source_rows: int) -> tuple[np.ndarray, int]:
    """How many training rows take each source row, and how many take the empty row (``indicator`` -1: an outer
    join left it empty, its fill value applies; -2, another source won a COALESCE: none)."""
    taken = indicator[indicator >= 0]
    return np.bincount(taken, minlength=n_source_rows), int(np.count_nonzero(indicator == -1))


class FeatureBinner:
    """Bins each feature of a training query: fitted on its training rows, then applied to either strategy's rows."""

    def __init__(self, categorical: list[bool], max_bins: int = MAX_BINS):
        if not 2 <= int(max_bins) <= MAX_BINS:
            raise IlargiError(f"max_bins must be between 2 and {MAX_BINS}, got {max_bins!r}.")
        self.categorical = list(categorical)
        self.max_bins = int(max_bins)
        self.impute = False  # a tree sends missing values to a side; nothing is imputed

    # -- fitting ------------------------------------------------------------------------------------------

    def fit_metadata(self, meta: DIMetadata, feature_names: list[str]) -> FeatureBinner:
        """Each feature's bins over the training rows of the factorized metadata: every source row's value
        weighted by how many training rows take it (the join's statistics, the join never built)."""
        numbers: dict[int, list] = {}
        for block in meta.blocks:
            weights, empty = row_weights(block.indicator, block.n_source_rows)
            for k, j in enumerate(block.columns):  # the column (a view) and the empty rows' fill, as two parts
                fill = (np.array([block.fill[k]], dtype=np.float64), np.array([empty]))
                numbers.setdefault(int(j), []).extend([(block.data[:, k], weights), fill])
        texts: dict[int, list] = {}
        for cat in meta.categoricals:
            weights, empty = row_weights(cat.indicator, cat.n_source_rows)
            fill = (string_array([cat.fill]), np.array([empty]))
            texts.setdefault(cat.feature, []).extend([(cat.values.cast(pa.string()), weights), fill])
        return self._fit(feature_names, numbers, texts)

    def fit_table(self, table: pa.Table, feature_names: list[str]) -> FeatureBinner:
        """Each feature's bins over the materialized join's training rows (columns as :func:`materialized_sql`
        names them), each row once."""
        numbers: dict[int, list] = {}
        texts: dict[int, list] = {}
        ones = np.ones(table.num_rows, dtype=np.int64)
        for j, categorical in enumerate(self.categorical):
            column = table.column(part_column(j, 0))
            if categorical:
                texts[j] = [(column.combine_chunks().cast(pa.string()), ones)]
            else:
                numbers[j] = [(arrow_to_numpy(column).astype(np.float64, copy=False), ones)]
        return self._fit(feature_names, numbers, texts)

    def _fit(self, names: list[str], numbers: dict[int, list], texts: dict[int, list]) -> FeatureBinner:
        """The bins of each feature from its (values, weights) parts: numeric edges or categories kept."""
        bins = []
        for j, (name, categorical) in enumerate(zip(names, self.categorical)):
            parts = (texts if categorical else numbers).get(j, [])
            weights = np.concatenate([w for _, w in parts]) if parts else np.empty(0, dtype=np.int64)
            if categorical:
                values = pa.concat_arrays([v for v, _ in parts]) if parts else string_array([])
                bins.append(FeatureBins(name, True, categories=weighted_categories(values, weights, MAX_CATEGORIES)))
            else:
                values = np.concatenate([v for v, _ in parts]).astype(np.float64, copy=False) if parts else np.empty(0)
                bins.append(FeatureBins(name, False, weighted_numeric_edges(values, weights, self.max_bins)))
        self.bins_ = bins
        return self

    @property
    def missing_bin_(self) -> int:
        """The missing bin: after every numeric feature's ``max_bins`` and every categorical feature's categories."""
        return max([self.max_bins, *(b.n_bins for b in self.bins_ if b.categorical)])

    @property
    def feature_names_out_(self) -> list[str]:
        return [b.name for b in self.bins_]

    @property
    def specs_(self) -> list[FeatureBins]:
        """Each feature's bins (name, kind): what the registry and the macros read per feature, as they read
        FeatureEncoder's ``specs_``."""
        return self.bins_

    def check_features(self, feature_names: list[str]) -> None:
        """Refuse rows whose features are not the ones the model learned, in the same order."""
        if [n.lower() for n in feature_names] != [n.lower() for n in self.feature_names_out_]:
            raise IlargiError(
                f"the query's features {feature_names} are not the model's {self.feature_names_out_}: "
                "select each of the model's features, named as in training (in any order; other columns are kept "
                "aside)."
            )

    # -- binning rows -------------------------------------------------------------------------------------

    def transform_metadata(self, meta: DIMetadata, coalesced: frozenset[int] = frozenset()) -> BinnedMatrix:
        """The factorized rows binned: one block per source, its bins once per source row (``coalesced``: the
        features that COALESCE several sources, binned per training row)."""
        by_source: dict[str, list] = {}
        for block in meta.blocks:
            if block.columns[0] in coalesced:
                continue
            for k, j in enumerate(block.columns):
                codes = self.bins_[j].codes(block.data[:, k], self.missing_bin_)
                fill = self.bins_[j].codes(np.array([block.fill[k]]), self.missing_bin_)[0]
                by_source.setdefault(block.source, []).append((int(j), codes, fill, block.indicator))
        for cat in meta.categoricals:
            codes = self.bins_[cat.feature].codes(cat.values, self.missing_bin_)
            fill = self.bins_[cat.feature].codes(string_array([cat.fill]), self.missing_bin_)[0]
            by_source.setdefault(cat.source, []).append((cat.feature, codes, fill, cat.indicator))
        blocks = [self._block(columns, meta.n_rows) for columns in by_source.values()]
        if coalesced:
            blocks.append(self._coalesced_block(meta, coalesced))
        return BinnedMatrix(blocks, meta.n_rows, self.bins_, self.missing_bin_)

    @staticmethod
    def _block(columns: list, n_rows: int) -> BinnedBlock:
        codes = np.ascontiguousarray(np.column_stack([c for _, c, _, _ in columns]))
        index = columns[0][3]
        if len(codes) == n_rows and bool(np.array_equal(index, np.arange(n_rows))):
            index = None  # the fact's own rows, in order: no gather
        fill = np.array([f for _, _, f, _ in columns], dtype=codes.dtype)
        return BinnedBlock(codes, index, np.array([j for j, _, _, _ in columns], dtype=np.int64), fill)

    def _coalesced_block(self, meta: DIMetadata, coalesced: frozenset[int]) -> BinnedBlock:
        """The COALESCE features, binned per training row: the source that wins a row gives its bin."""
        features = sorted(coalesced)
        dtype = bin_dtype(self.missing_bin_)
        codes = np.full((meta.n_rows, len(features)), self.missing_bin_, dtype=dtype)
        for block in meta.blocks:
            j = int(block.columns[0])
            if j not in coalesced:
                continue
            column = codes[:, features.index(j)]
            values = self.bins_[j].codes(block.data[:, 0], self.missing_bin_)
            taken = block.indicator >= 0
            column[taken] = values[block.indicator[taken]]
            column[block.indicator == -1] = self.bins_[j].codes(np.array([block.fill[0]]), self.missing_bin_)[0]
        fill = np.full(len(features), self.missing_bin_, dtype=dtype)
        return BinnedBlock(codes, None, np.array(features, dtype=np.int64), fill)

    def transform_table(self, table: pa.Table, feature_names: list[str]) -> BinnedMatrix:
        """The materialized join's rows (columns named as :func:`materialized_sql` names them) binned: one block."""
        columns = []  # the reader checked the features against the model's
        for j, b in enumerate(self.bins_):
            values = table.column(part_column(j, 0))
            values = values.combine_chunks() if b.categorical else arrow_to_numpy(values)
            columns.append(b.codes(values, self.missing_bin_))
        n, dtype = table.num_rows, bin_dtype(self.missing_bin_)
        codes = np.ascontiguousarray(np.column_stack(columns)) if columns else np.empty((n, 0), dtype=dtype)
        fill = np.full(len(self.bins_), self.missing_bin_, dtype=dtype)
        blocks = [BinnedBlock(codes, None, np.arange(len(self.bins_)), fill)]
        return BinnedMatrix(blocks, n, self.bins_, self.missing_bin_)

    # -- state --------------------------------------------------------------------------------------------

    def to_state(self) -> dict:
        return {"binning": [b.to_state() for b in self.bins_], "max_bins": self.max_bins}

    @classmethod
    def from_state(cls, state: dict) -> FeatureBinner:
        bins = [FeatureBins.from_state(b) for b in state["binning"]]
        binner = cls([b.categorical for b in bins], state["max_bins"])
        for b in bins:  # every value's bin below the missing bin: the kernels index masks by bin unchecked
            if not b.categorical and b.n_bins > binner.max_bins:
                raise ValueError(f"the feature {b.name!r} has more bins than max_bins {binner.max_bins}")
        binner.bins_ = bins
        return binner

    def set_state(self, state: dict) -> None:
        """Take the bins ``state`` holds (checked: the same features, kinds and ``max_bins`` as this binner's)."""
        other = FeatureBinner.from_state(state)
        if other.categorical != self.categorical or other.max_bins != self.max_bins:
            raise ValueError("the stored bins are for other features or another max_bins")
        self.bins_ = other.bins_


__all__ = ["FeatureBinner", "row_weights"]
