"""A tree ensemble as SQL that scores without a ``CASE`` per node: each row's feature codes, then each tree's leaf
found by bit masks read from a table of the model's database (QuickScorer, Lucchese et al., SIGIR 2015).

Why: DuckDB evaluates every node of a nested ``CASE`` once per vector of rows, so a ``CASE`` ensemble of 100 trees
of 63 leaves scores about 0.1M rows a second a core however few rows reach a node, and its macro (megabytes of
literals) takes about half a second to bind on every query (docs/benchmarks.md).

How (:class:`LeafMasks`):

- Each feature some split reads becomes a small integer code per row, computed once: a numeric feature's interval
  among the edges the ensemble's splits cut at (a binary search of ``CASE`` nodes, one per cut, not per split;
  NULL and NaN a code of their own), a categorical one's position among the categories training kept (0: NULL or
  a category not kept, the missing bin; the SQL counts codes from 1, as its lists do). Every bin a code covers
  goes the same way at every split.
- A tree's leaves are numbered left to right, leaf i bit i of a BIGINT (so at most :data:`MAX_LEAVES`). For each
  feature a tree splits on and each code, the table holds the mask of the leaves a row of that code can still
  reach: every leaf, less the left subtree of each split of the tree on that feature that sends the code right.
  The AND of a tree's masks over its features leaves the row's leaf as the lowest bit set (the leftmost leaf no
  split ruled out), so its value is ``leaf_values[offset + bit_count(m xor (m - 1))]``.
- The masks (a list per tree and feature) and the leaf values are one row of ``ilargi.tree_leaves``, read once
  per query (an uncorrelated subquery: a list written into the macro is rebuilt for every vector of rows); the
  codes are computed in a subquery of the row, which DuckDB decorrelates into a join (so a ``LIMIT 1`` still
  scores every row, and such a macro cannot be called inside a lambda, a generated column
  or a CHECK constraint).

The macro equals ``predict`` on the bins: the same leaves, summed as a balanced tree (to 1e-12;
:meth:`LeafMasks.scores`, its NumPy reference, sums them in ``predict``'s order, to the bit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ilargi_db.linalg.feature_bins import FeatureBins
from ilargi_db.models.tree_ensemble import TreeEnsemble
from ilargi_db.plan.reserved import RESERVED_PREFIX as PREFIX  # the subqueries' aliases: no feature takes it
from ilargi_db.sql_functions.macros import (
    TreeScoreWriter,
    balanced_sum,
    call,
    category_text,
    double,
    edge_literal,
    list_of,
)
from ilargi_db.sql_text import quote_identifier, quote_string

MAX_LEAVES = 63  # leaf i is bit i of a BIGINT: 63 bits keep every mask positive, so m - 1 never overflows
TREE_LEAVES_TABLE = "tree_leaves"  # in schema ilargi (sql_functions/registry.sql)
TREE_LEAVES_SCHEMA = pa.schema(
    [
        ("model", pa.string()),
        ("version", pa.int32()),
        ("masks", pa.list_(pa.list_(pa.int64()))),
        ("leaf_values", pa.list_(pa.float64())),
    ]
)


def fits_leaf_masks(trees: TreeEnsemble) -> bool:
    """Whether every tree has at most :data:`MAX_LEAVES` leaves (else its macro is a nested ``CASE``)."""
    leaves = np.add.reduceat((trees.feature < 0).astype(np.int64), trees.tree_start[:-1]) if trees.n_trees else []
    return bool(np.all(np.asarray(leaves) <= MAX_LEAVES))


@dataclass(frozen=True)
class FeatureCodes:
    """How rows of one feature become codes: ``bins[k]`` is a model bin code k covers (every bin it covers goes
    the same way at every split); ``cuts`` a numeric feature's edges between codes (code k: ``cuts[k-1] < x <=
    cuts[k]``, code ``len(cuts) + 1`` missing); a categorical feature's code k > 0 is category k - 1, 0 missing."""

    feature: int
    bins: tuple[int, ...]
    cuts: tuple[float, ...] = ()


@dataclass(frozen=True)
class TreeLookup:
    """One tree of more than one leaf: the features it splits on, each with its block of masks (one mask per
    code), and the offset of its leaf values."""

    blocks: tuple[tuple[int, int], ...]  # (feature, its block of masks: an index into LeafMasks.blocks)
    values_offset: int


class LeafMasks:
    """An ensemble's codes, masks and leaf values (see the module's docstring), computed from its nodes."""

    def __init__(self, trees: TreeEnsemble, bins: list[FeatureBins]):
        if not fits_leaf_masks(trees):
            raise ValueError(f"a tree of more than {MAX_LEAVES} leaves has no leaf masks")
        self.trees, self.bins = trees, bins
        self.codes = {f: self._feature_codes(f) for f in sorted(set(trees.feature[trees.feature >= 0].tolist()))}
        self.blocks: list[np.ndarray] = []  # per (tree, feature it splits on): the mask of each code, int64
        values: list[float] = []
        self.lookups: list[TreeLookup | float] = []  # per tree: its lookup, or a one-leaf tree's value
        for nodes in trees.trees():
            self.lookups.append(self._tree(nodes, values))
        self.values = np.asarray(values, dtype=np.float64)

    def _feature_codes(self, f: int) -> FeatureCodes:
        feature, t = self.bins[f], self.trees
        missing = t.missing_bin
        if feature.categorical:
            return FeatureCodes(f, (missing, *range(feature.n_bins)))
        ways = t.goes_left[t.feature == f][:, : feature.n_bins]  # (splits on f, bins): the way each bin goes
        changes = np.flatnonzero((ways[:, 1:] != ways[:, :-1]).any(axis=0))  # a cut between bin b and b + 1
        cuts = tuple(float(feature.edges[b]) for b in changes.tolist())
        return FeatureCodes(f, (0, *(changes + 1).tolist(), missing), cuts)

    def _tree(self, nodes: range, values: list[float]) -> TreeLookup | float:
        t, first = self.trees, nodes.start
        if t.feature[first] < 0:
            return float(t.value[first])
        # Leaves left to right (an explicit stack: a tree may be hundreds of splits deep), each split's left leaves.
        leaf_bit: dict[int, int] = {}
        stack, order = [first], []
        while stack:
            node = stack.pop()
            order.append(node)
            if t.feature[node] >= 0:
                stack.extend((first + int(t.right[node]), first + int(t.left[node])))
        values_offset = len(values)
        for node in order:
            if t.feature[node] < 0:
                leaf_bit[node] = 1 << len(leaf_bit)
                values.append(float(t.value[node]))
        below = dict(leaf_bit)  # the leaves under each node: children before parents
        for node in reversed(order):
            if node not in leaf_bit:
                below[node] = below[first + int(t.left[node])] | below[first + int(t.right[node])]
        every = below[first]
        splits = np.asarray([n for n in order if n not in leaf_bit])
        left_leaves = np.asarray([below[first + int(t.left[n])] for n in splits.tolist()], dtype=np.int64)
        blocks = []
        for f in np.unique(t.feature[splits]).tolist():
            on_f = t.feature[splits] == f
            goes_right = ~t.goes_left[splits[on_f]][:, list(self.codes[f].bins)]  # (splits on f, codes)
            ruled_out = np.bitwise_or.reduce(np.where(goes_right, left_leaves[on_f, None], 0), axis=0)
            blocks.append((f, len(self.blocks)))
            self.blocks.append((every & ~ruled_out).astype(np.int64))
        return TreeLookup(tuple(blocks), values_offset)

    def scores(self, codes: dict[int, np.ndarray], baseline: np.ndarray) -> np.ndarray:
        """The NumPy reference of the macro: (outputs, rows), each output's ``baseline`` plus its trees' values in
        order, as ``predict`` sums them, for rows given as each feature's codes (:meth:`row_codes`)."""
        rows = len(next(iter(codes.values()))) if codes else 1
        per_round = self.trees.trees_per_round
        out = np.repeat(np.atleast_1d(np.asarray(baseline, dtype=np.float64))[:, None], rows, axis=1)
        for tree, lookup in enumerate(self.lookups):
            if isinstance(lookup, float):
                out[tree % per_round] += lookup
                continue
            m = np.full(rows, -1, dtype=np.int64)
            for f, block in lookup.blocks:
                m &= self.blocks[block][codes[f]]
            lowest = np.log2((m & -m).astype(np.float64)).astype(np.int64)  # a power of two: exact
            out[tree % per_round] += self.values[lookup.values_offset + lowest]
        return out

    def row_codes(self, binned: np.ndarray) -> dict[int, np.ndarray]:
        """Each feature's codes of rows given as model bins (rows, features): what the macro's codes compute (less
        one: SQL's lists count from 1)."""
        out = {}
        for f, codes in self.codes.items():
            of_bin = np.zeros(self.trees.missing_bin + 1, dtype=np.int64)
            if self.bins[f].categorical:
                of_bin[list(codes.bins)] = np.arange(len(codes.bins))
            else:  # bin b takes the code of the last cut below it
                starts = np.asarray(codes.bins[:-1])
                of_bin[: self.bins[f].n_bins] = np.searchsorted(starts, np.arange(self.bins[f].n_bins), "right") - 1
                of_bin[self.trees.missing_bin] = len(codes.bins) - 1
            out[f] = of_bin[binned[:, f]]
        return out


class TreeLeafMaskWriter(TreeScoreWriter):
    """Writes the macros of a tree ensemble whose trees have at most :data:`MAX_LEAVES` leaves as lookups of leaf
    masks (the module's docstring), and the ``ilargi.tree_leaves`` row they read."""

    def __init__(self, name: str, version: int, model: Any, database: str):
        self.name, self.version, self.model, self.database = name, version, model, database
        self.bins: list[FeatureBins] = model.encoder_.bins_
        self.leaf_masks = LeafMasks(model.trees_, self.bins)

    def _code(self, codes: FeatureCodes) -> str:
        feature = self.bins[codes.feature]
        x = quote_identifier(feature.name)
        if feature.categorical:
            found = call("list_position", list_of([quote_string(c) for c in feature.categories]), category_text(x))
            return f"CAST({call('+', f'COALESCE({found}, 0)', '1')} AS INTEGER)"

        def search(low: int, high: int) -> str:  # the code among low..high: how many cuts lie below x, plus one
            if low == high:
                return str(low + 1)
            middle = (low + high) // 2
            below, above = search(low, middle), search(middle + 1, high)
            return f"CASE WHEN {x} <= {edge_literal(codes.cuts[middle])} THEN {below} ELSE {above} END"

        # NULL fails NOT isnan as NaN does: both take the missing code.
        present = f"NOT {call('isnan', f'CAST({x} AS DOUBLE)')}"
        return f"CAST(CASE WHEN {present} THEN {search(0, len(codes.cuts))} ELSE {len(codes.cuts) + 2} END AS INTEGER)"

    def _leaf_value(self, tree: int, lookup: TreeLookup | float) -> str:
        if isinstance(lookup, float):
            return double(lookup)
        m = f"{PREFIX}t{tree}"
        lowest = call("bit_count", call("xor", m, call("-", m, "1")))  # the lowest bit set's position, plus one
        position = call("+", str(lookup.values_offset), f"CAST({lowest} AS INTEGER)")
        return call("list_extract", f"{PREFIX}values", position)

    def _tree_mask(self, lookup: TreeLookup) -> str:
        # A block is a constant list for every row: DuckDB reads it once per vector, the rows' masks from it.
        masks = [
            call("list_extract", call("list_extract", f"{PREFIX}masks", str(block + 1)), f"{PREFIX}c{f}")
            for f, block in lookup.blocks
        ]
        while len(masks) > 1:  # a balanced AND: a tree may split on hundreds of features
            masks = [call("&", *masks[i : i + 2]) if i + 1 < len(masks) else masks[i] for i in range(0, len(masks), 2)]
        return masks[0]

    def score(self) -> str:
        """The raw score (the baseline plus every tree's value; a list of one per class for a multi-class model)."""
        per_round = self.leaf_masks.trees.trees_per_round
        baselines = np.atleast_1d(np.asarray(self.model.baseline_, dtype=np.float64)).tolist()
        values = [self._leaf_value(t, lookup) for t, lookup in enumerate(self.leaf_masks.lookups)]
        scores = [balanced_sum([double(b), *values[k::per_round]]) for k, b in enumerate(baselines)]
        score = scores[0] if len(scores) == 1 else list_of(scores)
        trees = [
            f"{self._tree_mask(lookup)} AS {PREFIX}t{t}"
            for t, lookup in enumerate(self.leaf_masks.lookups)
            if isinstance(lookup, TreeLookup)
        ]
        if not trees:  # every tree a leaf
            return score
        codes = ", ".join(f"{self._code(c)} AS {PREFIX}c{f}" for f, c in self.leaf_masks.codes.items())
        # The registry's columns read qualified and renamed: a feature (a macro parameter) named like one of them
        # would otherwise be substituted into the subquery.
        table = (
            f"(SELECT w.masks AS {PREFIX}masks, w.leaf_values AS {PREFIX}values "
            f"FROM {quote_identifier(self.database)}.ilargi.{TREE_LEAVES_TABLE} w "
            f"WHERE w.model = {quote_string(self.name)} AND w.version = {self.version}) AS {PREFIX}table"
        )
        row = f"(SELECT {codes}) AS {PREFIX}codes"
        leaves = f"(SELECT {', '.join([*trees, f'{PREFIX}values'])} FROM {row}, {table}) AS {PREFIX}leaves"
        # No row for this version (deleted by hand, or a file renamed): an error that says so, never NULL scores.
        missing = quote_string(
            f"model {self.name} version {self.version} has no row in ilargi.{TREE_LEAVES_TABLE} of database "
            f"{self.database}: save or train the model again in this database"
        )
        return f"coalesce((SELECT {score} FROM {leaves}), {call('error', missing)})"

    def registry_rows(self) -> dict[str, pa.Table]:
        """The one row of ``ilargi.tree_leaves`` the macro reads."""
        return {
            TREE_LEAVES_TABLE: pa.Table.from_pylist(
                [
                    {
                        "model": self.name,
                        "version": self.version,
                        "masks": [block.tolist() for block in self.leaf_masks.blocks],
                        "leaf_values": self.leaf_masks.values.tolist(),
                    }
                ],
                schema=TREE_LEAVES_SCHEMA,
            )
        }


__all__ = [
    "MAX_LEAVES",
    "TREE_LEAVES_SCHEMA",
    "TREE_LEAVES_TABLE",
    "FeatureCodes",
    "LeafMasks",
    "TreeLeafMaskWriter",
    "TreeLookup",
    "fits_leaf_masks",
]
