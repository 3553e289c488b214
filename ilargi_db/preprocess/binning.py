"""Tree models' preprocessing: each feature's bins, computed by DuckDB per source, and the rows binned.

:class:`FeatureBinner` is to trees what :class:`~ilargi_db.preprocess.FeatureEncoder` is to linear models:
fitted once (here: :meth:`FeatureBinner.fit_query` asks DuckDB for each feature's distinct values or
quantiles over the rows of the source it comes from, with the source's own filters), it turns the
factorized metadata or the materialized join into the same :class:`~ilargi_db.linalg.binned_matrix.BinnedMatrix`
(the same bins for either strategy), and records its state so that scoring bins new rows alike.

Numeric features: every distinct value its own bin when there are at most ``max_bins``, else edges at
DuckDB's discrete quantiles. Categorical ones (text, ENUM, BOOLEAN): their most frequent categories, up
to :data:`MAX_CATEGORIES`; NULL, and a category not kept or never seen, fall in the missing bin, which
comes after every feature's bins (``missing_bin_``). A feature combining
sources with COALESCE is binned over the union of its parts' values; a query whose features mix
sources (only the materialized join can train) over the query's rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from ilargi_db.errors import IlargiError
from ilargi_db.linalg.binned_matrix import (
    MAX_BINS,
    MAX_CATEGORIES,
    BinnedBlock,
    BinnedMatrix,
    FeatureBins,
    bin_dtype,
    quantile_probabilities,
)
from ilargi_db.metadata import DIMetadata
from ilargi_db.metadata.arrow_blocks import fetch_arrow
from ilargi_db.metadata.scans import materialized_sql, part_column, quote, scan_sql
from ilargi_db.plan.join_graph import JoinGraph


@dataclass(frozen=True)
class BinSource:
    """A relation whose rows some features are binned over, and the column each of them is in it."""

    sql: str
    columns: dict[int, str]  # feature index -> column name


def bin_sources(graph: JoinGraph, categorical: list[bool]) -> list[BinSource]:
    """Where each feature's bins come from: its source's scan, the union of a COALESCE's parts, or the join."""
    texts = frozenset(part_column(j, 0) for j, flag in enumerate(categorical) if flag)
    if not graph.factorizable:
        sql = materialized_sql(graph, categorical)
        return [BinSource(sql, {j: part_column(j, 0) for j in range(len(graph.features))})]
    sources = []
    for source in graph.sources:
        own = {
            j: part_column(j, 0)
            for j, f in enumerate(graph.features)
            if f.kind == "source" and f.sources == (source.alias,)
        }
        if own:
            parts = {name: graph.features[j].parts[0].sql for j, name in own.items()}
            sources.append(BinSource(scan_sql(graph, source, [], parts, categorical=texts), own))
    for j, feature in enumerate(graph.features):
        if feature.kind == "coalesce":
            name = part_column(j, 0)
            scans = [
                f"({scan_sql(graph, graph.source(part.source), [], {name: part.sql}, categorical=texts)})"
                for part in feature.parts
            ]
            sources.append(BinSource(" UNION ALL ".join(scans), {j: name}))
    return sources


def _numeric_bins(con: duckdb.DuckDBPyConnection, source: BinSource, features: list[int], max_bins: int) -> dict:
    """Edges of the numeric ``features`` of ``source``: two queries (distinct counts, then values or quantiles)."""
    if not features:
        return {}
    present = {j: f"FILTER (WHERE NOT isnan({quote(source.columns[j])}))" for j in features}
    counts = ", ".join(f"count(DISTINCT {quote(source.columns[j])}) {present[j]}" for j in features)
    found = fetch_arrow(con, f"SELECT {counts} FROM ({source.sql})", what="the distinct values of the features")
    items = []
    for j, column in zip(features, found.columns):
        c = quote(source.columns[j])
        if column[0].as_py() <= max_bins:
            items.append(f"list_sort(list(DISTINCT {c}) {present[j]})")
        else:
            items.append(f"quantile_disc({c}, {quantile_probabilities(max_bins)}) {present[j]}")
    values = fetch_arrow(con, f"SELECT {', '.join(items)} FROM ({source.sql})", what="the features' bins")
    edges = {}
    for j, column, items_sql in zip(features, values.columns, items):
        found_values = np.asarray(column[0].as_py() or [], dtype=np.float64)
        edges[j] = found_values[:-1] if items_sql.startswith("list_sort") else np.unique(found_values)
    return edges


def _categories(con: duckdb.DuckDBPyConnection, source: BinSource, j: int, max_bins: int) -> tuple[str, ...]:
    """The ``max_bins`` most frequent categories of feature ``j`` (ties by value), most frequent first."""
    c = quote(source.columns[j])
    sql = (
        f"SELECT {c} FROM ({source.sql}) WHERE {c} IS NOT NULL GROUP BY {c} "
        f"ORDER BY count(*) DESC, {c} LIMIT {int(max_bins)}"
    )
    return tuple(fetch_arrow(con, sql, what="the categories of the features").column(0).to_pylist())


class FeatureBinner:
    """Bins each feature of a training query: fitted by DuckDB per source, then applied to either strategy's rows."""

    def __init__(self, categorical: list[bool], max_bins: int = MAX_BINS):
        if not 2 <= int(max_bins) <= MAX_BINS:
            raise IlargiError(f"max_bins must be between 2 and {MAX_BINS}, got {max_bins!r}.")
        self.categorical = list(categorical)
        self.max_bins = int(max_bins)
        self.impute = False  # a tree sends missing values to a side; nothing is imputed

    # -- fitting ------------------------------------------------------------------------------------------

    def fit_query(self, con: duckdb.DuckDBPyConnection, graph: JoinGraph) -> FeatureBinner:
        """Each feature's bins, by DuckDB over the rows of the source it comes from."""
        bins: dict[int, FeatureBins] = {}
        for source in bin_sources(graph, self.categorical):
            numeric = [j for j in source.columns if not self.categorical[j]]
            for j, edges in _numeric_bins(con, source, numeric, self.max_bins).items():
                bins[j] = FeatureBins(graph.features[j].name, False, edges)
            for j in source.columns:
                if self.categorical[j]:
                    bins[j] = FeatureBins(
                        graph.features[j].name, True, categories=_categories(con, source, j, MAX_CATEGORIES)
                    )
        self.bins_ = [bins[j] for j in range(len(graph.features))]
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
                "select the same columns, in the same order."
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
            fill = self.bins_[cat.feature].codes(pa.array([cat.fill], type=pa.string()), self.missing_bin_)[0]
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
            values = values.combine_chunks() if b.categorical else values.to_numpy()
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


__all__ = ["BinSource", "FeatureBinner", "bin_sources"]
