"""How a feature's values become a tree's bins, in one place: the bins of one feature, and the rules that choose
them from the training rows.

A numeric feature's bins are its distinct values when at most ``max_bins``, else DuckDB's ``quantile_disc``
at k / max_bins (the value at position ceil(n q) - 1 of the n sorted rows); a categorical feature keeps its
:data:`MAX_CATEGORIES` most frequent categories. Rows are counted with weights (how many training rows take each
source row), so a dimension's values bin as the join's rows would without expanding them. Whoever bins (the
SQL path's :class:`~ilargi_db.preprocess.binning.FeatureBinner`, or an estimator given a plain array through
:func:`quantile_bins`) bins by these rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ilargi_db.metadata.arrow_blocks import filled_integers, string_array

MAX_BINS = 255  # bins of a numeric feature's values at most (uint8 codes, one more for missing)
# Categories a categorical feature keeps at most (its most frequent): more than MAX_BINS make every bin of the
# matrix uint16 (the missing bin above them). LightGBM keeps every category; past a thousand, a node's
# histograms (features x bins) would cost more to copy and subtract than the rows they sum.
MAX_CATEGORIES = 1024


def bin_dtype(missing_bin: int) -> type:
    """The bins' integer type: one byte while the missing bin fits, else two."""
    return np.uint8 if missing_bin <= np.iinfo(np.uint8).max else np.uint16


@dataclass(frozen=True)
class FeatureBins:
    """How one feature's values become bins.

    Numeric: bin b holds ``edges[b-1] < x <= edges[b]`` (bin ``len(edges)``: above the last edge).
    Categorical: bin b holds ``categories[b]``. NULL (and NaN, and a category not kept) is the missing bin.
    """

    name: str
    categorical: bool
    edges: np.ndarray = field(default_factory=lambda: np.empty(0))
    categories: tuple[str, ...] = ()

    @property
    def n_bins(self) -> int:
        """Bins of values (the missing bin not counted)."""
        return len(self.categories) if self.categorical else len(self.edges) + 1

    @property
    def kind(self) -> str:
        """ "categorical" or "numeric", as the registry names a feature's kind (FeatureEncoder's specs say the same)."""
        return "categorical" if self.categorical else "numeric"

    def codes(self, values: Any, missing_bin: int) -> np.ndarray:
        """The bin of each value (:func:`bin_dtype`): numbers (NaN missing) or an Arrow array of text (null missing)."""
        if self.categorical:
            found = pc.index_in(values, value_set=string_array(self.categories))
            return filled_integers(found, missing_bin).astype(bin_dtype(missing_bin))
        values = np.asarray(values, dtype=np.float64)
        out = np.searchsorted(self.edges, values, side="left").astype(bin_dtype(missing_bin))
        out[np.isnan(values)] = missing_bin
        return out

    def to_state(self) -> dict:
        return {
            "name": self.name,
            "categorical": self.categorical,
            "edges": [float(e) for e in self.edges],
            "categories": list(self.categories),
        }

    @classmethod
    def from_state(cls, state: dict) -> FeatureBins:
        if not isinstance(state["name"], str) or not isinstance(state["categorical"], bool):
            raise TypeError("a feature's bins need a name and a categorical flag")
        edges = np.asarray(state["edges"], dtype=np.float64)
        categories = tuple(state["categories"])
        increasing = bool(np.all(np.diff(edges) > 0)) and not bool(np.isnan(edges).any())
        if edges.ndim != 1 or not increasing or not all(isinstance(c, str) for c in categories):
            raise ValueError(f"the bins of {state['name']!r} are not increasing edges or text categories")
        if len(edges) + 1 > MAX_BINS or len(categories) > MAX_CATEGORIES:
            raise ValueError(f"the feature {state['name']!r} has more bins than a feature may have")
        return cls(state["name"], state["categorical"], edges, categories)


def quantile_bins(X: np.ndarray, names: list[str], max_bins: int) -> list[FeatureBins]:
    """Numeric bins of a plain array's columns, as :mod:`ilargi_db.preprocess.binning` computes them in DuckDB:
    every distinct value its own bin when at most ``max_bins``, else edges at discrete quantiles."""
    return [FeatureBins(name, False, numeric_edges(X[:, j], max_bins)) for j, name in enumerate(names)]


def numeric_edges(values: np.ndarray, max_bins: int) -> np.ndarray:
    """Upper bin edges of ``values``: the distinct values but the largest when few, else discrete quantiles."""
    values = np.asarray(values, dtype=np.float64)
    return weighted_numeric_edges(values, np.ones(len(values), dtype=np.int64), max_bins)


def weighted_numeric_edges(values: np.ndarray, weights: np.ndarray, max_bins: int) -> np.ndarray:
    """Upper bin edges of the rows that take ``values[i]`` ``weights[i]`` times (NaN missing, weight 0 absent).

    The same edges as :func:`numeric_edges` over the expanded rows, without expanding them: a dimension's values
    weighted by how many training rows take each dimension row bin exactly as the join's rows would. Every
    distinct value is its own bin when at most ``max_bins``; else the edges are the discrete quantiles (the value
    at position ceil(n q) - 1 of the n sorted rows, as DuckDB's ``quantile_disc``).
    """
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.int64)
    taken = ~np.isnan(values) & (weights > 0)
    values, weights = values[taken], weights[taken]
    if not len(values):
        return values  # no value: one bin
    if bool((weights == 1).all()):  # each row once (a fact's own rows, the join's): one sort, no counts
        ordered = np.sort(values)
        distinct = ordered[np.concatenate([[True], ordered[1:] != ordered[:-1]])]
        if len(distinct) <= max_bins:
            return distinct[:-1]
        return np.unique(ordered[discrete_quantile_positions(len(ordered), max_bins)])
    distinct, inverse = np.unique(values, return_inverse=True)
    if len(distinct) <= max_bins:
        return distinct[:-1]
    # Row counts summed as doubles: exact below 2**53 rows.
    counts = np.bincount(inverse.ravel(), weights=weights, minlength=len(distinct)).astype(np.int64)
    ends = np.cumsum(counts)  # rows up to and including each distinct value
    positions = discrete_quantile_positions(int(ends[-1]), max_bins)
    return np.unique(distinct[np.searchsorted(ends, positions, side="right")])


def weighted_categories(values: pa.Array, weights: np.ndarray, max_categories: int) -> tuple[str, ...]:
    """The ``max_categories`` categories most rows take, ``values[i]`` taken by ``weights[i]`` rows (null
    missing), most frequent first, ties by value. Compared byte for byte (binary collation: 'a' is not 'A'),
    as :meth:`FeatureBins.codes` and the SQL macros compare them, whatever the column's collation."""
    weights = np.asarray(weights, dtype=np.int64)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    encoded = pc.dictionary_encode(values)
    labels = encoded.dictionary.to_pylist()
    indices = filled_integers(encoded.indices, -1)
    taken = (indices >= 0) & (weights > 0)
    counts = np.bincount(indices[taken], weights=weights[taken], minlength=len(labels)).astype(np.int64)
    # Python orders text by code point, which is UTF-8's byte order: the tie order is binary too.
    order = sorted(np.flatnonzero(counts).tolist(), key=lambda k: (-int(counts[k]), labels[k]))
    return tuple(labels[k] for k in order[:max_categories])


def quantile_probabilities(max_bins: int) -> list[float]:
    """The probabilities of the quantile edges: k / max_bins for k = 1 .. max_bins - 1."""
    return [k / max_bins for k in range(1, max_bins)]


def discrete_quantile_positions(n: int, max_bins: int) -> np.ndarray:
    """Positions in n sorted values of DuckDB's ``quantile_disc`` at :func:`quantile_probabilities`."""
    return np.array([max(int(np.ceil(n * q)) - 1, 0) for q in quantile_probabilities(max_bins)], dtype=np.int64)


__all__ = [
    "MAX_BINS",
    "MAX_CATEGORIES",
    "FeatureBins",
    "bin_dtype",
    "discrete_quantile_positions",
    "numeric_edges",
    "quantile_bins",
    "quantile_probabilities",
    "weighted_categories",
    "weighted_numeric_edges",
]
