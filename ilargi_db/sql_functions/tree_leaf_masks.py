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
- A model per group (:class:`GroupedTreeLeafMaskWriter`) is one such lookup: its groups share their bins, so
  their codes are common, and :class:`LeafMasks` lays every group's blocks and values out alike in the one row (a
  block holds every group's masks, one group after another); the row's group's place among the labels offsets its
  codes once and its reads of values. (One row, not a row per
  group: DuckDB's join on the group would copy the masks into every row.)

The macro equals ``predict`` on the bins: the same leaves, summed as a balanced tree (to 1e-12;
:meth:`LeafMasks.scores`, its NumPy reference, sums them in ``predict``'s order, to the bit).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ilargi_db.errors import IlargiError
from ilargi_db.linalg.feature_bins import FeatureBins
from ilargi_db.models.tree_ensemble import TreeEnsemble
from ilargi_db.plan.reserved import RESERVED_PREFIX as PREFIX  # the subqueries' aliases: no feature takes it
from ilargi_db.sql_functions.macros import (
    TreeScoreWriter,
    balanced_sum,
    call,
    category_text,
    edge_literal,
    group_label,
    list_of,
    macro_statements,
    tree_bodies,
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


def fits_leaf_masks(*ensembles: TreeEnsemble) -> bool:
    """Whether every tree has at most :data:`MAX_LEAVES` leaves (else its macro is a nested ``CASE``), and the
    ensembles (a model per group's) sum their trees into as many scores."""
    if len({e.trees_per_round for e in ensembles}) > 1:
        return False
    for trees in ensembles:
        leaves = np.add.reduceat((trees.feature < 0).astype(np.int64), trees.tree_start[:-1]) if trees.n_trees else []
        if not np.all(np.asarray(leaves) <= MAX_LEAVES):
            return False
    return True


# Types whose equality is coarser than their text (INTERVAL '1 day' = '24 hours', -0.0 = 0.0), alone or nested.
COARSE_EQUALITY = re.compile(r"\b(INTERVAL|FLOAT|FLOAT4|FLOAT8|REAL|DOUBLE)\b")


def groups_read_apart(group_type: str | None) -> bool:
    """Whether a model per group's leaf-mask macro tells every row's group apart: DuckDB decorrelates its subquery
    over the distinct group values by the type's equality, so where that is coarser than the text the groups are
    labelled by, the rows of two groups would share one score (such a model keeps a ``CASE`` on the group)."""
    return group_type is not None and not COARSE_EQUALITY.search(group_type.upper())


def writes_leaf_masks(ensembles: Sequence[TreeEnsemble], grouped: bool = False, group_type: str | None = None) -> bool:
    """Whether the one macro of these ensembles (a model's, or every group's of a model per group: ``grouped``, its
    group column of ``group_type``) finds leaves by masks, else a ``CASE`` per split: what the writer and the
    macro size limit both ask."""
    return fits_leaf_masks(*ensembles) and (not grouped or groups_read_apart(group_type))


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
    """Tree t's place in the layout every group shares: the features some group's tree t splits on, each with
    its block of masks (an index among a group's blocks; one mask per code), and the offset of the tree's leaf
    values among a group's values."""

    blocks: tuple[tuple[int, int], ...]  # (feature, its block of masks)
    values_offset: int


@dataclass(frozen=True)
class GroupTree:
    """One group's tree t: the mask of each code of each feature it splits on, and its leaf values left to right."""

    masks: dict[int, np.ndarray]
    values: list[float]


class LeafMasks:
    """The codes, masks and leaf values (see the module's docstring) of one ensemble, or of the ensembles of a model
    per group, which share their bins: the codes are common to every group (a numeric feature cut wherever some
    group's split cuts it), and each group's blocks and values are laid out alike, so that tree t of every group
    reads its masks and its values at the same places:

    - tree t's blocks are one per feature some group's tree t splits on. A group's tree that does not split on the
      feature rules out no leaf there (a mask of every bit); a one-leaf tree has leaf 0 only (a mask of bit 0).
    - tree t's leaf values take as many places as its most leaves in any group, the rest 0.0; a group of fewer
      trees (stopped early) has one-leaf trees of 0.0 after its last (adding 0.0 changes no sum).
    - a group's values start with its baseline (one per output).

    A block holds every group's masks of its codes, one group after another (group g's code k at g x codes + k: a
    row's codes are offset once by its group, not at each read); the values are every group's, one after another.
    """

    def __init__(self, ensembles: Sequence[TreeEnsemble], baselines: Sequence[Any], bins: list[FeatureBins]):
        if not ensembles or not fits_leaf_masks(*ensembles):
            raise ValueError(f"these trees have no leaf masks (more than {MAX_LEAVES} leaves, or unlike outputs)")
        self.ensembles, self.bins = list(ensembles), bins
        self.outputs = self.ensembles[0].trees_per_round
        self.missing_bin = self.ensembles[0].missing_bin
        features = set().union(*(e.feature[e.feature >= 0].tolist() for e in self.ensembles))
        self.codes = {f: self._feature_codes(f) for f in sorted(features)}
        grown = [[self._tree(e, nodes) for nodes in e.trees()] for e in self.ensembles]
        blocks: list[list[np.ndarray]] = [[] for _ in grown]  # per group: per (tree, feature), each code's mask
        values: list[list[float]] = []
        for baseline in baselines:
            values.append(np.atleast_1d(np.asarray(baseline, dtype=np.float64)).tolist())
            if len(values[-1]) != self.outputs:
                raise ValueError(f"a baseline of {len(values[-1])} scores for trees of {self.outputs}")
        self.lookups: list[TreeLookup] = []
        stopped = GroupTree({}, [0.0])
        for t in range(max(len(trees) for trees in grown)):
            trees = [own[t] if t < len(own) else stopped for own in grown]
            lookup = []
            for f in sorted(set().union(*(tree.masks for tree in trees))):
                lookup.append((f, len(blocks[0])))
                for tree, own in zip(trees, blocks):
                    fill = -1 if tree.masks else 1
                    own.append(tree.masks.get(f, np.full(len(self.codes[f].bins), fill, dtype=np.int64)))
            self.lookups.append(TreeLookup(tuple(lookup), len(values[0])))
            places = max(len(tree.values) for tree in trees)
            for tree, own in zip(trees, values):
                own.extend(tree.values + [0.0] * (places - len(tree.values)))
        self.value_count = len(values[0])  # a group's
        self.blocks = [np.concatenate([own[b] for own in blocks]) for b in range(len(blocks[0]))]
        self.values = np.asarray([v for own in values for v in own], dtype=np.float64)

    def _feature_codes(self, f: int) -> FeatureCodes:
        feature = self.bins[f]
        if feature.categorical:
            return FeatureCodes(f, (self.missing_bin, *range(feature.n_bins)))
        # (splits on f in any group, bins): the way each bin goes
        ways = np.concatenate([e.goes_left[e.feature == f][:, : feature.n_bins] for e in self.ensembles])
        changes = np.flatnonzero((ways[:, 1:] != ways[:, :-1]).any(axis=0))  # a cut between bin b and b + 1
        cuts = tuple(float(feature.edges[b]) for b in changes.tolist())
        return FeatureCodes(f, (0, *(changes + 1).tolist(), self.missing_bin), cuts)

    def _tree(self, t: TreeEnsemble, nodes: range) -> GroupTree:
        first = nodes.start
        if t.feature[first] < 0:
            return GroupTree({}, [float(t.value[first])])
        # Leaves left to right (an explicit stack: a tree may be hundreds of splits deep), each split's left leaves.
        leaf_bit: dict[int, int] = {}
        stack, order = [first], []
        while stack:
            node = stack.pop()
            order.append(node)
            if t.feature[node] >= 0:
                stack.extend((first + int(t.right[node]), first + int(t.left[node])))
        values = []
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
        masks = {}
        for f in np.unique(t.feature[splits]).tolist():
            on_f = t.feature[splits] == f
            goes_right = ~t.goes_left[splits[on_f]][:, list(self.codes[f].bins)]  # (splits on f, codes)
            ruled_out = np.bitwise_or.reduce(np.where(goes_right, left_leaves[on_f, None], 0), axis=0)
            masks[f] = (every & ~ruled_out).astype(np.int64)
        return GroupTree(masks, values)

    def scores(self, codes: dict[int, np.ndarray], groups: np.ndarray | None = None) -> np.ndarray:
        """The NumPy reference of the macro: (outputs, rows), each row's group's baseline plus its trees' values in
        order, as ``predict`` sums them, for rows given as each feature's codes (:meth:`row_codes`) and their
        groups (indexes of the ensembles given; all the first's by default)."""
        rows = len(next(iter(codes.values()))) if codes else 1
        group = np.zeros(rows, dtype=np.int64) if groups is None else np.asarray(groups, dtype=np.int64)
        values = self.values.reshape(len(self.ensembles), self.value_count)
        out = values[group, : self.outputs].T.copy()
        for tree, lookup in enumerate(self.lookups):
            m = np.full(rows, -1 if lookup.blocks else 1, dtype=np.int64)
            for f, block in lookup.blocks:
                m &= self.blocks[block][group * len(self.codes[f].bins) + codes[f]]
            lowest = np.log2((m & -m).astype(np.float64)).astype(np.int64)  # a power of two: exact
            out[tree % self.outputs] += values[group, lookup.values_offset + lowest]
        return out

    def row_codes(self, binned: np.ndarray) -> dict[int, np.ndarray]:
        """Each feature's codes of rows given as model bins (rows, features): what the macro's codes compute (less
        one: SQL's lists count from 1)."""
        out = {}
        for f, codes in self.codes.items():
            of_bin = np.zeros(self.missing_bin + 1, dtype=np.int64)
            if self.bins[f].categorical:
                of_bin[list(codes.bins)] = np.arange(len(codes.bins))
            else:  # bin b takes the code of the last cut below it
                starts = np.asarray(codes.bins[:-1])
                of_bin[: self.bins[f].n_bins] = np.searchsorted(starts, np.arange(self.bins[f].n_bins), "right") - 1
                of_bin[self.missing_bin] = len(codes.bins) - 1
            out[f] = of_bin[binned[:, f]]
        return out

    def registry_row(self, name: str, version: int) -> dict[str, pa.Table]:
        """The one row of ``ilargi.tree_leaves`` the macro reads: every group's blocks and values, back to back."""
        row = {"model": name, "version": version, "masks": [b.tolist() for b in self.blocks]}
        return {
            TREE_LEAVES_TABLE: pa.Table.from_pylist([{**row, "leaf_values": self.values.tolist()}], TREE_LEAVES_SCHEMA)
        }


class LeafMaskSQL:
    """The SQL of :class:`LeafMasks`: each row's codes (for a model per group, offset by the row's group, and where
    its group's values start), each tree's mask, and the scores."""

    def __init__(
        self, name: str, version: int, database: str, leaf_masks: LeafMasks, group: str | None = None,
        labels: Sequence[str] = (),
    ):  # fmt: skip
        """``group``: for a model per group, the SQL of the row's group label; ``labels``: each ensemble's group."""
        self.name, self.version, self.database, self.leaf_masks = name, version, database, leaf_masks
        self.group, self.labels = group, list(labels)

    def _code(self, codes: FeatureCodes) -> str:
        feature = self.leaf_masks.bins[codes.feature]
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

    def _at(self, start: str, position: str) -> str:
        """``position`` among the row's group's values (``start``: where the group's begin)."""
        return position if self.group is None else call("+", start, position)

    def _leaf_value(self, tree: int, lookup: TreeLookup) -> str:
        lowest = "1"  # a one-leaf tree in every group
        if lookup.blocks:
            m = f"{PREFIX}t{tree}"
            # The lowest bit, + 1, as list_extract's BIGINT: one cast per tree (an INTEGER here cost a second one).
            lowest = f"CAST({call('bit_count', call('xor', m, call('-', m, '1')))} AS BIGINT)"
        position = call("+", str(lookup.values_offset), lowest)
        return call("list_extract", f"{PREFIX}values", self._at(f"{PREFIX}gv", position))

    def _tree_mask(self, lookup: TreeLookup) -> str:
        # A block is a constant list for every row: DuckDB reads it once per vector, the rows' masks from it.
        masks = [
            call("list_extract", call("list_extract", f"{PREFIX}masks", str(block + 1)), f"{PREFIX}c{f}")
            for f, block in lookup.blocks
        ]
        while len(masks) > 1:  # a balanced AND: a tree may split on hundreds of features
            masks = [call("&", *masks[i : i + 2]) if i + 1 < len(masks) else masks[i] for i in range(0, len(masks), 2)]
        return masks[0]

    def scores(self) -> str:
        """The raw score over the columns of :meth:`leaves` (the baseline plus every tree's value; a list of one per
        output for a multi-class model)."""
        masks, outputs = self.leaf_masks, self.leaf_masks.outputs
        values = [self._leaf_value(t, lookup) for t, lookup in enumerate(masks.lookups)]
        baselines = [
            call("list_extract", f"{PREFIX}values", self._at(f"{PREFIX}gv", str(k + 1))) for k in range(outputs)
        ]
        scores = [balanced_sum([b, *values[k::outputs]]) for k, b in enumerate(baselines)]
        return scores[0] if len(scores) == 1 else list_of(scores)

    def leaves(self) -> str:
        """The subquery of one row: each tree's mask, the row's group (``__ilargi_g``, from 1; NULL for a group no
        model was trained for) and the table's values."""
        masks = self.leaf_masks
        columns = [f"{self._code(c)} AS {PREFIX}c{f}" for f, c in masks.codes.items()]
        carried = [f"{PREFIX}values"]
        if self.group is not None:  # the row's group first: its codes and values are offset by its place (lateral)
            labels = list_of([quote_string(label) for label in self.labels])
            start = call("-", f"{PREFIX}g", "1")
            columns = [
                f"{call('list_position', labels, self.group)} AS {PREFIX}g",
                f"CAST({call('*', start, str(masks.value_count))} AS BIGINT) AS {PREFIX}gv",  # as list_extract reads
                *(
                    f"{call('+', self._code(c), call('*', start, str(len(c.bins))))} AS {PREFIX}c{f}"
                    for f, c in masks.codes.items()
                ),
            ]
            carried += [f"{PREFIX}g", f"{PREFIX}gv"]
        trees = [
            f"{self._tree_mask(lookup)} AS {PREFIX}t{t}" for t, lookup in enumerate(masks.lookups) if lookup.blocks
        ]
        # The registry's columns read qualified and renamed: a feature (a macro parameter) named like one of them
        # would otherwise be substituted into the subquery.
        table = (
            f"(SELECT w.masks AS {PREFIX}masks, w.leaf_values AS {PREFIX}values "
            f"FROM {quote_identifier(self.database)}.ilargi.{TREE_LEAVES_TABLE} w "
            f"WHERE w.model = {quote_string(self.name)} AND w.version = {self.version}) AS {PREFIX}table"
        )
        row = f"(SELECT {', '.join(columns)}) AS {PREFIX}codes" if columns else f"(SELECT 1) AS {PREFIX}codes"
        return f"(SELECT {', '.join([*trees, *carried])} FROM {row}, {table}) AS {PREFIX}leaves"

    def missing_row(self) -> str:
        """An error that says the table has no row for this version (deleted by hand, or a file renamed): never
        NULL scores."""
        return call(
            "error",
            quote_string(
                f"model {self.name} version {self.version} has no row in ilargi.{TREE_LEAVES_TABLE} of database "
                f"{self.database}: save or train the model again in this database"
            ),
        )


class TreeLeafMaskWriter(TreeScoreWriter):
    """Writes the macros of a tree ensemble whose trees have at most :data:`MAX_LEAVES` leaves as lookups of leaf
    masks (the module's docstring), and the ``ilargi.tree_leaves`` row they read."""

    def __init__(self, name: str, version: int, model: Any, database: str):
        self.name, self.version, self.model, self.database = name, version, model, database
        self.bins: list[FeatureBins] = model.encoder_.bins_
        self.leaf_masks = LeafMasks([model.trees_], [model.baseline_], self.bins)
        self.sql = LeafMaskSQL(name, version, database, self.leaf_masks)

    def score(self) -> str:
        """The raw score (the baseline plus every tree's value; a list of one per class for a multi-class model)."""
        return f"coalesce((SELECT {self.sql.scores()} FROM {self.sql.leaves()}), {self.sql.missing_row()})"

    def registry_rows(self) -> dict[str, pa.Table]:
        """The one row of ``ilargi.tree_leaves`` the macro reads."""
        return self.leaf_masks.registry_row(self.name, self.version)


class GroupedTreeLeafMaskWriter:
    """Writes the macros of a tree model per group, every group's trees of at most :data:`MAX_LEAVES` leaves, as
    one lookup of leaf masks (:class:`LeafMasks` lays the groups' out alike): each row's codes once, offset by its
    group's place among the model's groups, which also finds its values; every group reads the score alike (the
    groups share classes and objective). A group no model was trained for, or NULL, scores NULL."""

    def __init__(self, name: str, version: int, model: Any, database: str):
        self.name, self.version, self.database = name, version, database
        self.group_by, self.models = model.group_by_, model.models_
        self.specs = model.encoder_.specs_
        models = list(model.models_.values())
        self.leaf_masks = LeafMasks([m.trees_ for m in models], [m.baseline_ for m in models], model.encoder_.bins_)
        group = group_label(model.group_by_, model.group_type_)
        self.sql = LeafMaskSQL(name, version, database, self.leaf_masks, group, labels=list(model.models_))

    def statements(self) -> dict[str, str]:
        score = f"{PREFIX}s"
        # The groups agree on classes and objective (checked when fitted and when read back), so they read the score
        # alike: one body per macro over the one score column.
        bodies = [tree_bodies(self.name, one, score) for one in self.models.values()]
        if any(found != bodies[0] for found in bodies):
            raise IlargiError("the groups' models read their scores differently: train them again with one objective.")
        scored = f"(SELECT {self.sql.scores()} AS {score}, {PREFIX}g FROM {self.sql.leaves()})"
        dispatched = {}
        for macro, body in bodies[0].items():
            # A row of no model's group scores NULL (a multi-class score would be a list of NULLs); the list keeps
            # that NULL apart from the table's missing row.
            found = f"(SELECT {list_of([f'CASE WHEN {PREFIX}g IS NOT NULL THEN ({body}) END'])} FROM {scored})"
            dispatched[macro] = call("list_extract", f"coalesce({found}, {self.sql.missing_row()})", "1")
        return macro_statements(self.database, [*(s.name for s in self.specs), self.group_by], dispatched)

    def registry_rows(self) -> dict[str, pa.Table]:
        """The one row of ``ilargi.tree_leaves`` the macro reads: every group's."""
        return self.leaf_masks.registry_row(self.name, self.version)


__all__ = [
    "MAX_LEAVES",
    "TREE_LEAVES_SCHEMA",
    "TREE_LEAVES_TABLE",
    "FeatureCodes",
    "GroupTree",
    "GroupedTreeLeafMaskWriter",
    "LeafMaskSQL",
    "LeafMasks",
    "TreeLeafMaskWriter",
    "TreeLookup",
    "fits_leaf_masks",
    "groups_read_apart",
    "writes_leaf_masks",
]
