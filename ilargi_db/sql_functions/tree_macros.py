"""A tree ensemble as SQL: each tree a nested ``CASE``, the trees summed with the baseline: the macro of a model per
group, or of trees of more than :data:`~.tree_leaf_masks.MAX_LEAVES` leaves (others find their leaves by masks,
:mod:`.tree_leaf_masks`).

A split compares the feature itself, not its bin: bin b of a numeric feature holds
``edges[b-1] < x <= edges[b]``, so "bin <= threshold" is ``x <= edges[threshold]`` (the edge an exact
DOUBLE literal), and a threshold at the last bin sends every present value left. NULL and NaN go where
training sent missing values (``missing_left``). A categorical split of a feature of a few categories lists
those of the side missing values do not take, compared byte for byte as the encoder compares
(:func:`~.macros.category_text`); a category training did not keep falls in the missing bin, so it follows
``missing_left`` as NULL does. A feature of more than :data:`LISTED_CATEGORIES` categories is looked up once
per row instead (its position among the categories training kept, 0 for NULL and a category not kept: the
missing bin), in a subquery of the row that the trees are computed in, and each of its splits reads one bit of
a mask (:func:`category_mask`): an ``IN`` list of a few hundred names per split made macros of megabytes that
took seconds to bind and ran 7x slower (docs/benchmarks.md). Such a macro, holding a subquery, cannot be called
inside a lambda, a generated column or a CHECK constraint (DuckDB refuses subqueries there); per-group macros
keep their lists (a subquery per group is planned again for each group on every query). The macro equals
``predict`` on the bins exactly (the same leaves; the sum in another order, to 1e-12).

Measured (docs/benchmarks.md): DuckDB binds a CASE ensemble of 500 trees of 63 leaves in about a
second. Larger ensembles (their nodes and listed categories, all groups' together) are refused
(:func:`check_macro_size`, :data:`ilargi_db.limits.MACRO_NODES`) with a clear error rather than a macro that
takes minutes to bind; so is a tree deeper than DuckDB's expression depth allows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ilargi_db.errors import IlargiError
from ilargi_db.limits import MACRO_NODES, SMALLER_TREES
from ilargi_db.linalg.feature_bins import FeatureBins
from ilargi_db.models.tree_ensemble import TreeEnsemble
from ilargi_db.sql_functions.macros import (
    GROUPED_INLINE_CATEGORIES,
    TreeScoreWriter,
    balanced_sum,
    call,
    category_text,
    double,
    edge_literal,
    list_of,
)
from ilargi_db.sql_functions.tree_leaf_masks import writes_leaf_masks
from ilargi_db.sql_text import quote_identifier, quote_string

MAX_MACRO_DEPTH = 400  # a tree's depth at most: DuckDB refuses expressions nested deeper than 1,000
# A categorical feature of more categories than this is looked up once per row, its splits reading a bit of a
# mask; one of fewer lists the names of a split's side, which costs a node per name to bind but no subquery.
LISTED_CATEGORIES = 64
CODES = "__ilargi_codes"  # the subquery's row of each looked-up feature's bin plus one (TreeMacroWriter.category_code)


def category_mask(feature: FeatureBins, going_left: list[int], missing_left: bool) -> str:
    """A categorical split as the BIT literal its CASE reads: bit 0 whether missing values go left, bit b + 1
    whether bin b (``feature.categories[b]``) does.

    >>> category_mask(FeatureBins("k", True, categories=("a", "b", "c")), [1], missing_left=True)
    "'1010'::BIT"
    """
    left = set(going_left)
    bits = "1" if missing_left else "0"
    bits += "".join("1" if b in left else "0" for b in range(len(feature.categories)))
    return f"'{bits}'::BIT"


def listed_categories(feature: FeatureBins, going_left: list[int], missing_left: bool) -> list[str]:
    """The categories a categorical split's ``IN`` list names: those of the side missing values (NULL, unseen
    categories) do not take, as ELSE takes them."""
    left = set(going_left)
    return [c for b, c in enumerate(feature.categories) if (b in left) != missing_left]


def looked_up(feature: FeatureBins, inline_categories: int = LISTED_CATEGORIES) -> bool:
    """Whether the macro looks ``feature``'s category up once per row (else its splits list names)."""
    return feature.categorical and len(feature.categories) > inline_categories


def macro_nodes(models: list[Any], grouped: bool = False, group_type: str | None = None) -> int:
    """What the one macro of ``models`` (a model, or every group's of a model per group: ``grouped``, its group
    column of ``group_type``) holds, counted as :data:`~ilargi_db.limits.MACRO_NODES` bounds it.

    A macro of leaf masks (:func:`.tree_leaf_masks.writes_leaf_masks`): their nodes, and each category of a categorical
    feature some split reads, listed once (a model per group's share their bins). Else (a ``CASE`` per split):
    each node of each tree and each entry of its splits' ``IN`` lists (a category is as costly to bind as a node);
    a split of a looked-up feature (more than :data:`LISTED_CATEGORIES` categories, not grouped) is one node, its
    mask one literal."""
    bins: list[FeatureBins] = models[0].encoder_.bins_
    if writes_leaf_masks([m.trees_ for m in models], grouped, group_type):
        split_on = set().union(*(m.trees_.feature[m.trees_.feature >= 0].tolist() for m in models))
        return sum(m.trees_.n_nodes for m in models) + sum(
            len(bins[f].categories) for f in split_on if bins[f].categorical
        )
    inline = GROUPED_INLINE_CATEGORIES if grouped else LISTED_CATEGORIES
    total = 0
    for m in models:
        t: TreeEnsemble = m.trees_
        entries = sum(
            len(listed_categories(bins[f], t.category_bins(node), t.missing_left(node)))
            for node, f in enumerate(t.feature.tolist())
            if f >= 0 and bins[f].categorical and not looked_up(bins[f], inline)
        )
        total += t.n_nodes + entries
    return total


def check_macro_size(models: list[Any], grouped: bool = False, group_type: str | None = None) -> None:
    """Refuse, before anything is written, tree models whose one macro (a model, or one per group: ``grouped``)
    would hold more than :data:`~ilargi_db.limits.MACRO_NODES`."""
    MACRO_NODES.check(
        macro_nodes(models, grouped, group_type),
        f"this ensemble's macro{' (all groups)' if len(models) > 1 else ''} would hold {{count}} nodes and "
        "listed categories",
        SMALLER_TREES
        + (", or fewer groups (group_by)" if len(models) > 1 else "")
        + ", or score it in Python with ilargi_db.predict",
    )


class TreeMacroWriter(TreeScoreWriter):
    """Writes the ``N_predict`` (and, for classification, ``N_predict_class``) macros of a tree ensemble."""

    def __init__(self, name: str, version: int, model: Any, database: str, inline_categories: int | None = None):
        """``inline_categories``: a feature of more categories is looked up once per row (default
        :data:`LISTED_CATEGORIES`; the per-group writer lists every feature's)."""
        self.name, self.version, self.model, self.database = name, version, model, database
        self.inline_categories = LISTED_CATEGORIES if inline_categories is None else inline_categories
        self.bins: list[FeatureBins] = model.encoder_.bins_
        self.trees: TreeEnsemble = model.trees_
        # The nodes' fields as Python lists, read once: the writer visits every node.
        self.feature, self.left, self.right, self.value = (
            a.tolist() for a in (self.trees.feature, self.trees.left, self.trees.right, self.trees.value)
        )
        # The features of many categories some split reads, in feature order: each row's category looked up once.
        self.coded_features = sorted(
            {f for f in self.feature if f >= 0 and looked_up(self.bins[f], self.inline_categories)}
        )

    def category_code(self, feature: int) -> str:
        """The row's bin of looked-up ``feature`` plus one (0: NULL or a category training did not keep): a column of
        the row the macro looks the categories up in once (:meth:`score`)."""
        return f"{CODES}.{self._code_column(feature)}"

    def _code_column(self, feature: int) -> str:
        return quote_identifier(f"__ilargi_c{self.coded_features.index(feature)}")  # no feature takes the prefix

    def _codes(self) -> str:
        """Each looked-up feature's :meth:`category_code`: the SELECT list of the codes' row."""
        codes = []
        for f in self.coded_features:
            feature = self.bins[f]
            categories = list_of([quote_string(c) for c in feature.categories])
            found = call("list_position", categories, category_text(quote_identifier(feature.name)))
            codes.append(f"COALESCE({found}, 0) AS {self._code_column(f)}")
        return ", ".join(codes)

    def _split(self, node: int, left: str, right: str) -> str:
        """The CASE of one split node, given the SQL of its two subtrees."""
        t = self.trees
        f = self.feature[node]
        feature = self.bins[f]
        x = quote_identifier(feature.name)
        missing_left = t.missing_left(node)
        if f in self.coded_features:
            going_left = t.category_bins(node)
            if len(going_left) == len(feature.categories) and missing_left:
                return left
            if not going_left and not missing_left:
                return right
            mask = category_mask(feature, going_left, missing_left)
            return f"CASE WHEN {call('get_bit', mask, self.category_code(f))} = 1 THEN {left} ELSE {right} END"
        if feature.categorical:
            listed = listed_categories(feature, t.category_bins(node), missing_left)
            listed_side, other = (right, left) if missing_left else (left, right)
            if not listed:
                return other
            values = ", ".join(quote_string(c) for c in listed)
            return f"CASE WHEN {category_text(x)} IN ({values}) THEN {listed_side} ELSE {other} END"
        threshold = t.threshold(node)
        if threshold >= len(feature.edges):  # every present value goes left
            return left if missing_left else f"CASE WHEN NOT {call('isnan', x)} THEN {left} ELSE {right} END"
        edge = edge_literal(float(feature.edges[threshold]))
        if missing_left:  # NULL fails the WHEN, NaN the isnan: both go left
            return f"CASE WHEN {x} > {edge} AND NOT {call('isnan', x)} THEN {right} ELSE {left} END"
        return f"CASE WHEN {x} <= {edge} THEN {left} ELSE {right} END"  # NULL fails it; NaN sorts above all

    def _tree(self, nodes: range) -> str:
        """One tree's CASE, built from the leaves up (children have larger ids than their parents)."""
        first = nodes.start
        sql: dict[int, str] = {}
        depth: dict[int, int] = {}
        for node in reversed(nodes):
            if self.feature[node] < 0:
                sql[node], depth[node] = double(self.value[node]), 0
                continue
            left, right = first + self.left[node], first + self.right[node]
            sql[node] = self._split(node, sql.pop(left), sql.pop(right))
            depth[node] = 1 + max(depth[left], depth[right])
        if depth[first] > MAX_MACRO_DEPTH:
            raise IlargiError(
                f"a tree of this model is {depth[first]} splits deep, and DuckDB cannot bind a macro nested deeper "
                f"than {MAX_MACRO_DEPTH}: train with max_depth at most {MAX_MACRO_DEPTH} to store it as SQL."
            )
        return sql[first]

    def score(self) -> str:
        """The raw score: the baseline plus every tree's value (log-odds for binary classification); a model of
        several trees a round (multi-class), the list of its scores, one per class."""
        baselines = np.atleast_1d(np.asarray(self.model.baseline_, dtype=np.float64)).tolist()
        scores = [
            balanced_sum([double(baseline), *(self._tree(nodes) for nodes in self.trees.trees(k))])
            for k, baseline in enumerate(baselines)
        ]
        score = scores[0] if len(scores) == 1 else list_of(scores)
        if not self.coded_features:
            return score
        # The codes computed once per row, in a subquery of the row: bound as a lambda's parameter instead, the
        # trees ran row by row (10x slower than listing names; docs/benchmarks.md).
        return f"(SELECT {score} FROM (SELECT {self._codes()}) AS {CODES})"

    def registry_rows(self) -> dict[str, pa.Table]:
        """None: a tree's categories are in its macro (IN lists, or the lookup and the masks)."""
        return {}


__all__ = [
    "LISTED_CATEGORIES",
    "MAX_MACRO_DEPTH",
    "TreeMacroWriter",
    "category_mask",
    "check_macro_size",
    "listed_categories",
    "looked_up",
    "macro_nodes",
]
