"""What users of SQL ML expect done for them: one-hot categories, impute NULLs.

The encoder is fitted once, on the training rows, and records its state
(means, category lists) so predictions encode new rows the same way. It works
on the factorized metadata (a dimension's categories are encoded once per
dimension row, as sparse columns inside that source's block) and on a
materialized Arrow table, and both give the same columns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp
import sqlglot

from ilargi_db.errors import IlargiError, spell
from ilargi_db.linalg import Block
from ilargi_db.metadata import BlockMetadata, CategoricalMetadata, DIMetadata
from ilargi_db.metadata.arrow_blocks import (
    arrow_to_block,
    arrow_to_numpy,
    fetch_arrow,
    filled_integers,
    numpy_to_arrow,
    string_array,
)
from ilargi_db.metadata.target_labels import labelled_sql
from ilargi_db.plan.join_graph import JoinGraph
from ilargi_db.plan.sources import with_prefix

NULL_CATEGORY = "NULL"


@dataclass(frozen=True)
class ColumnSpec:
    """How one SELECT feature becomes model columns."""

    name: str
    kind: str  # "numeric" | "categorical"
    mean: float = 0.0  # numeric: the training mean, imputed for NULLs
    categories: tuple[str, ...] = ()  # categorical: sorted training categories
    null_category: bool = False  # categorical: NULL was seen in training (its own column)

    @property
    def width(self) -> int:
        return 1 if self.kind == "numeric" else len(self.categories) + self.null_category

    @property
    def output_names(self) -> list[str]:
        if self.kind == "numeric":
            return [self.name]
        names = [f"{self.name}={c}" for c in self.categories]
        return names + ([f"{self.name}={NULL_CATEGORY}"] if self.null_category else [])


def _category_codes(values: pa.Array, spec: ColumnSpec) -> np.ndarray:
    """The one-hot column of each value (int64), -1 for an unseen category (or a NULL training never saw)."""
    codes = filled_integers(pc.index_in(values, value_set=string_array(spec.categories)), -1)
    if spec.null_category:
        codes[arrow_to_numpy(pc.is_null(values))] = len(spec.categories)
    return codes


def _one_hot(values: pa.Array, spec: ColumnSpec) -> sp.csr_matrix:
    """Rows of ``values`` as one-hot rows; unseen categories (and unseen NULL) are all-zero rows."""
    codes = _category_codes(values, spec)
    hit = codes >= 0
    rows = np.arange(len(values))
    return sp.csr_matrix((np.ones(int(hit.sum())), (rows[hit], codes[hit])), shape=(len(values), spec.width))


def _row_uses(indicator: np.ndarray, source_rows: int, found: dict[tuple[int, int], np.ndarray]) -> np.ndarray:
    """How many output rows take each source row (-1 and -2 take none), counted once per indicator in ``found``."""
    key = (id(indicator), source_rows)  # ``found`` lives no longer than the metadata holding the indicators
    if key not in found:
        rows = indicator if len(indicator) == 0 or indicator.min() >= 0 else indicator[indicator >= 0]
        found[key] = np.bincount(rows, minlength=source_rows)
    return found[key]


SUM_BITS = 126  # an exact sum adds integers below 2**126 in DuckDB's HUGEINT (2**127 would overflow)
MAX_ROWS_BITS = 40  # room for 2**40 training rows: values keep 126 - 41 = 85 bits below the largest


def _present_value(sql: str) -> tuple[str, str]:
    """A numeric feature as DOUBLE, and the condition that it is present (neither NULL nor NaN)."""
    value = f"CAST(({sql}) AS DOUBLE)"
    return value, f"{value} IS NOT NULL AND NOT isnan({value})"


def _aggregate(con: duckdb.DuckDBPyConnection, graph: JoinGraph, items: list[str], what: str) -> dict:
    """One row of aggregates ``items`` over the training rows of ``graph`` (those whose target is set)."""
    select = graph.select.copy()
    select.set("expressions", [sqlglot.parse_one(i, read="duckdb") for i in items])
    for arg in ("order", "limit", "offset"):
        select.set(arg, None)
    if graph.target is not None:
        select = select.where(labelled_sql(graph), dialect="duckdb")
    return fetch_arrow(con, select.sql("duckdb"), what=what).to_pylist()[0]


def _power_of_two(exponent: int) -> str:
    """2**exponent as a DOUBLE in SQL, as two exact factors (each one in a double's range)."""
    half = exponent // 2
    return " * ".join(f"CAST('{math.ldexp(1.0, e)!r}' AS DOUBLE)" for e in (half, exponent - half))


def _fixed_point_sum(sql: str, top: float) -> tuple[str, int]:
    """The SQL summing ``sql`` exactly as fixed-point integers scaled to ``top`` (a bound of its magnitudes),
    and the scale: the sum is that integer times 2**scale.

    Every value becomes x * 2**(bits - e) rounded, where 2**e bounds ``top`` and ``bits`` leaves room for
    2**MAX_ROWS_BITS of them in a HUGEINT: integers add exactly in any order (DuckDB adds doubles in whatever
    order its threads finish), and the total is rounded to a double once. 85 bits below the largest, more
    than a double's 53, make it the exactly rounded sum in all but contrived cases.
    """
    scale = math.frexp(top)[1] - (SUM_BITS - MAX_ROWS_BITS - 1)
    value, present = _present_value(sql)
    return f"CAST(sum(CAST({value} * {_power_of_two(-scale)} AS HUGEINT)) FILTER (WHERE {present}) AS VARCHAR)", scale


def _source_bounds(con: duckdb.DuckDBPyConnection, graph: JoinGraph, numeric: list[int]) -> dict[int, float]:
    """The largest magnitude of each numeric feature read from one source, over all of that source's rows (a
    bound of the training rows', which the join takes from them): one scan per source, no join."""
    by_source: dict[str, list[int]] = {}
    for j in numeric:
        feature = graph.features[j]
        if feature.kind == "source" and len(feature.parts) == 1:
            by_source.setdefault(feature.parts[0].source, []).append(j)
    bounds: dict[int, float] = {}
    prefix = with_prefix(graph.select)
    for alias, features in by_source.items():
        items = []
        for j in features:
            value, present = _present_value(graph.features[j].parts[0].sql)
            items.append(f"max(abs({value})) FILTER (WHERE {present})")
        sql = f"{prefix}SELECT {', '.join(items)} FROM {graph.source(alias).relation_sql}"
        row = con.execute(sql).fetchall()[0]
        bounds.update({j: float(top or 0.0) for j, top in zip(features, row)})
    return bounds


class FeatureEncoder:
    """One-hot encode categorical features and impute numeric NULLs with the training mean.

    Parameters
    ----------
    categorical : sequence of bool
        For each SELECT feature, whether it is categorical.
    impute : bool
        Replace NULLs of numeric features (stored NULLs, and rows an outer join
        left empty) by the training mean. Without it NULLs stay NaN.
    """

    def __init__(self, categorical: list[bool], impute: bool = True):
        self.categorical = list(categorical)
        self.impute = impute

    # -- fitting ------------------------------------------------------------------------

    def fit_metadata(self, meta: DIMetadata) -> FeatureEncoder:
        """Learn means and categories from the factorized training data."""
        sums = np.zeros(meta.n_features)
        counts = np.zeros(meta.n_features)
        uses: dict[tuple[int, int], np.ndarray] = {}  # the features of one source share its indicator
        for block in meta.blocks:
            used = _row_uses(block.indicator, block.n_source_rows, uses).astype(float)
            if np.isnan(block.data.sum()):  # some NULLs: count only the present cells
                present = ~np.isnan(block.data)
                sums[block.columns] += used @ np.where(present, block.data, 0.0)
                counts[block.columns] += used @ present
            else:
                sums[block.columns] += used @ block.data
                counts[block.columns] += used.sum()
            empty = float(np.count_nonzero(block.indicator == -1))
            fill_present = ~np.isnan(block.fill)
            sums[block.columns] += empty * np.where(fill_present, block.fill, 0.0)
            counts[block.columns] += empty * fill_present
        categories: dict[int, tuple[list[str], bool]] = {}
        for cat in meta.categoricals:
            used = _row_uses(cat.indicator, len(cat.values), uses) > 0
            seen = cat.values.filter(numpy_to_arrow(used))
            has_null = seen.null_count > 0
            labels = set(pc.unique(seen.drop_null()).to_pylist())
            if bool((cat.indicator == -1).any()):
                if cat.fill is None:
                    has_null = True
                else:
                    labels.add(cat.fill)
            categories[cat.feature] = (sorted(labels), has_null)
        self._fit(meta.feature_names, sums, counts, categories)
        return self

    def fit_table(self, table: pa.Table, feature_names: list[str]) -> FeatureEncoder:
        """Learn means and categories from a materialized training table (columns in feature order)."""
        sums, counts, categories = np.zeros(len(feature_names)), np.zeros(len(feature_names)), {}
        for j, column in enumerate(table.columns[: len(feature_names)]):
            if self.categorical[j]:
                labels = sorted(pc.unique(column.drop_null()).to_pylist())
                categories[j] = (labels, column.null_count > 0)
            else:
                values = arrow_to_numpy(column).astype(float)
                present = ~np.isnan(values)
                sums[j], counts[j] = values[present].sum(), present.sum()
        self._fit(feature_names, sums, counts, categories)
        return self

    def fit_query(self, con: duckdb.DuckDBPyConnection, graph: JoinGraph) -> FeatureEncoder:
        """Fit on the training rows of ``graph`` without holding them: aggregate queries in DuckDB.

        Sums and counts of each numeric feature (NULL and NaN left out), the categories of each
        categorical one and whether NULL is one, over the rows whose target is set: what the
        materialized read's :meth:`fit_table` computes (streaming and a cluster fit this way). The sums
        are exact (:func:`_exact_sums`): DuckDB adds doubles in whatever order its threads finish, which
        would change the means, and so the model, from run to run.
        """
        n = len(graph.features)
        numeric = [j for j in range(n) if not self.categorical[j]]
        bounds = {j: top for j, top in _source_bounds(con, graph, numeric).items() if math.isfinite(top)}
        items, scales = [], {}
        for j, feature in enumerate(graph.features):
            if self.categorical[j]:
                text = f"CAST(({feature.sql}) AS VARCHAR)"
                items += [
                    f"list(DISTINCT {text}) FILTER (WHERE {text} IS NOT NULL) AS a{j}",
                    f"bool_or({text} IS NULL) AS b{j}",
                ]
                continue
            value, present = _present_value(feature.sql)  # named by position: equal expressions, two columns
            if j in bounds:  # the scale known from the source alone: the exact sum in this one pass
                total, scales[j] = _fixed_point_sum(feature.sql, bounds[j]) if bounds[j] > 0 else ("0", 0)
                items.append(f"{total} AS a{j}")
            else:  # a feature of several sources, or infinite somewhere: its scale first, its sum after
                items.append(f"max(abs({value})) FILTER (WHERE {present}) AS a{j}")
            items.append(f"count(*) FILTER (WHERE {present}) AS b{j}")
        values = list(_aggregate(con, graph, items, "the encoder's statistics").values())
        sums, counts, categories, later = np.zeros(n), np.zeros(n), {}, {}
        for j in range(n):
            first, second = values[2 * j], values[2 * j + 1]
            if self.categorical[j]:
                categories[j] = (sorted(first or []), bool(second))
                continue
            counts[j] = float(second or 0)
            if j in scales:
                sums[j] = math.ldexp(float(int(first or 0)), scales[j])  # int -> float rounds once, correctly
            else:
                later[j] = float(first or 0.0)
        items = []
        for j, top in later.items():
            if counts[j] and top > 0 and math.isfinite(top):
                total, scales[j] = _fixed_point_sum(graph.features[j].sql, top)
                items.append(f"{total} AS s{j}")
            else:
                sums[j] = top if not math.isfinite(top) else 0.0  # inf (or NaN) as a double sum gives
        if items:
            found = _aggregate(con, graph, items, "the encoder's sums")
            for name, total in found.items():
                j = int(name[1:])
                sums[j] = math.ldexp(float(int(total)), scales[j])
        return self.fit_sums(graph.feature_names, sums, counts, categories)

    def _fit(self, names, sums, counts, categories) -> None:
        specs = []
        for j, name in enumerate(names):
            if self.categorical[j]:
                labels, has_null = categories[j]
                specs.append(ColumnSpec(name, "categorical", categories=tuple(labels), null_category=has_null))
            else:
                mean = sums[j] / counts[j] if counts[j] else 0.0
                specs.append(ColumnSpec(name, "numeric", mean=float(mean)))
        self._set_specs(specs)

    def _set_specs(self, specs: list[ColumnSpec]) -> None:
        self.specs_ = specs
        widths = np.array([s.width for s in specs], dtype=np.int64)
        self.offsets_ = np.concatenate([[0], np.cumsum(widths)])
        self.feature_names_out_ = [n for s in specs for n in s.output_names]

    # -- transforming -------------------------------------------------------------------

    def check_features(self, feature_names: list[str]) -> None:
        """Refuse rows whose feature columns are not the ones the encoder was fitted on."""
        expected = [s.name for s in self.specs_]
        if list(feature_names) != expected:
            raise IlargiError(
                f"the query's feature columns {list(feature_names)} do not match the model's features "
                f"{expected}: select each of the model's features, named as in training (in any order; other "
                "columns are kept aside)."
            )

    def _impute(self, data: np.ndarray, columns: np.ndarray) -> np.ndarray:
        missing = np.isnan(data)
        if not missing.any():
            return data
        if not self.impute:
            names = sorted({self.specs_[j].name for j in np.asarray(columns)[missing.any(axis=0)]})
            raise IlargiError(
                f"feature(s) {', '.join(map(repr, names))} hold NULLs (or rows an outer join left empty): pass "
                f"{spell('impute', True)} (the default) to use the training mean, or filter or COALESCE them in the "
                "query."
            )
        means = np.array([self.specs_[j].mean for j in columns])
        return np.where(missing, means, data)

    def transform_metadata(self, meta: DIMetadata) -> list[Block]:
        """Blocks of the encoded normalized matrix (numeric blocks imputed, one-hot blocks sparse)."""
        self.check_features(meta.feature_names)
        blocks = [self.transform_block(block) for block in meta.blocks]
        for cat in meta.categoricals:
            block = self.transform_categorical(cat, meta.n_rows)
            if block is not None:
                blocks.append(block)
        return blocks

    def transform_block(self, block: BlockMetadata, index: np.ndarray | None = None) -> Block:
        """One numeric source block, imputed; ``index`` replaces its indicator (a row partition's slice)."""
        index = block.indicator if index is None else index
        data = self._impute(block.data, block.columns)
        empty = bool((index == -1).any())
        fill = self._impute(block.fill.reshape(1, -1), block.columns).ravel() if empty else block.fill
        return Block(data, columns=self.offsets_[block.columns], index=index, fill=np.nan_to_num(fill))

    def transform_categorical(
        self, cat: CategoricalMetadata, n_rows: int, index: np.ndarray | None = None
    ) -> Block | None:
        """One categorical feature's block (None when training saw no category): one-hot on its source's
        rows, or the category codes of a fact-sized source. ``index`` replaces its indicator."""
        spec = self.specs_[cat.feature]
        if spec.width == 0:
            return None
        index = cat.indicator if index is None else index
        columns = self.offsets_[cat.feature] + np.arange(spec.width)
        if len(cat.values) >= n_rows // 2 and index is cat.indicator:
            # A fact-sized source (one row per output row, near enough): the feature is its codes.
            # Output row i takes category codes[i] of a width x width identity: X @ w gathers w by
            # code, X.T @ v counts by code, and no n-row one-hot block is built.
            identity = sp.identity(spec.width, format="csr")
            return Block(identity, columns=columns, index=self._codes(cat, spec))
        fill = _one_hot(string_array([cat.fill]), spec).toarray().ravel()
        return Block(_one_hot(cat.values, spec), columns=columns, index=index, fill=fill)

    def transform_dimensions(
        self, blocks: list[BlockMetadata], categoricals: list[CategoricalMetadata]
    ) -> list[tuple[str, Block]]:
        """``(source, block)`` of each dimension, encoded once for every row partition of the fact.

        The fill is imputed whether or not a partition has empty rows, and a categorical is one-hot on its
        source's rows (never the codes of a fact-sized source); each partition sets the block's index.
        """
        empty = np.array([-1])  # an indicator with an empty row, distinct from the metadata's own
        found = [(b.source, self.transform_block(b, index=empty)) for b in blocks]
        for cat in categoricals:
            block = self.transform_categorical(cat, 2, index=empty)
            if block is not None:
                found.append((cat.source, block))
        return found

    def fit_sums(
        self, names: list[str], sums: np.ndarray, counts: np.ndarray, categories: dict[int, tuple[list[str], bool]]
    ) -> FeatureEncoder:
        """Fit from the training rows' sums and counts of each numeric feature (NULL and NaN left out) and
        the categories each categorical feature takes (with whether NULL is one): what a stream, which
        never holds all rows at once, computes in DuckDB."""
        self._fit(names, sums, counts, categories)
        return self

    @staticmethod
    def _codes(cat: CategoricalMetadata, spec: ColumnSpec) -> np.ndarray:
        """The one-hot column each output row takes (-1: none, an all-zero row: unseen, or NULL unseen)."""
        source_codes = _category_codes(cat.values, spec)
        (fill_code,) = _category_codes(string_array([cat.fill]), spec)
        rows = cat.indicator
        taken = np.take(source_codes, np.maximum(rows, 0))
        return np.where(rows >= 0, taken, fill_code)

    def transform_table(self, table: pa.Table, feature_names: list[str]) -> list[Block]:
        """Blocks (each covering every row) of a materialized table."""
        self.check_features(feature_names)
        numeric = [j for j, s in enumerate(self.specs_) if s.kind == "numeric"]
        blocks = []
        if numeric:
            names = table.column_names  # a new list on each access
            data = arrow_to_block(table, [names[j] for j in numeric])
            blocks.append(Block(self._impute(data, np.array(numeric)), columns=self.offsets_[numeric]))
        for j, spec in enumerate(self.specs_):
            if spec.kind == "categorical" and spec.width:
                values = pc.cast(table.column(j), pa.string()).combine_chunks()
                columns = self.offsets_[j] + np.arange(spec.width)
                blocks.append(Block(_one_hot(values, spec), columns=columns))
        return blocks

    # -- persisting ---------------------------------------------------------------------

    def to_state(self) -> dict:
        """The fitted state as plain JSON-serialisable data (for the model registry)."""
        columns = [
            {
                "name": s.name,
                "kind": s.kind,
                "mean": s.mean,
                "categories": list(s.categories),
                "null_category": s.null_category,
            }
            for s in self.specs_
        ]
        return {"impute": self.impute, "columns": columns}

    @classmethod
    def from_state(cls, state: dict) -> FeatureEncoder:
        """The encoder ``to_state`` described, fitted."""
        specs = [
            ColumnSpec(c["name"], c["kind"], float(c["mean"]), tuple(c["categories"]), bool(c["null_category"]))
            for c in state["columns"]
        ]
        encoder = cls([s.kind == "categorical" for s in specs], impute=bool(state["impute"]))
        encoder._set_specs(specs)
        return encoder
