"""A tree ensemble as SQL: each tree a nested ``CASE``, the trees summed with the baseline.

A split compares the feature itself, not its bin: bin b of a numeric feature holds
``edges[b-1] < x <= edges[b]``, so "bin <= threshold" is ``x <= edges[threshold]`` (the edge an exact
DOUBLE literal), and a threshold at the last bin sends every present value left. NULL and NaN go where
training sent missing values (``missing_left``). A categorical split lists the categories of the smaller
side, compared byte for byte as the encoder compares (:func:`~.macros.category_text`); a category training
did not keep falls in the missing bin, so it follows ``missing_left`` as NULL does. The macro thus equals
``predict`` on the bins exactly (the same leaves; the sum in another order, to 1e-12).

Measured (docs/benchmarks.md): DuckDB binds a CASE ensemble of 500 trees of 63 leaves in about a
second. Larger ensembles (their nodes and IN-list entries, all groups' together) are refused
(:func:`check_macro_size`, :data:`ilargi_db.limits.MACRO_NODES`) with a clear error rather than a macro that
takes minutes to bind; so is a tree deeper than DuckDB's expression depth allows.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa

from ilargi_db.errors import IlargiError
from ilargi_db.limits import MACRO_NODES, SMALLER_TREES
from ilargi_db.linalg.binned_matrix import FeatureBins
from ilargi_db.models.tree_ensemble import TreeEnsemble
from ilargi_db.sql_functions.macros import (
    PREDICT,
    WEIGHTS_SCHEMA,
    balanced_sum,
    binary_bodies,
    call,
    category_text,
    double,
    macro_statements,
)
from ilargi_db.sql_text import quote_identifier, quote_string

MAX_MACRO_DEPTH = 400  # a tree's depth at most: DuckDB refuses expressions nested deeper than 1,000


def edge_literal(value: float) -> str:
    """A split's edge as an exact DOUBLE literal; an infinite one (the data can hold -inf and inf) as DuckDB's.

    >>> edge_literal(float("-inf")), edge_literal(0.5)
    ("'-infinity'::DOUBLE", '5.0000000000000000e-01')
    """
    if math.isinf(value):
        return "'infinity'::DOUBLE" if value > 0 else "'-infinity'::DOUBLE"
    return double(value)


def listed_categories(feature: FeatureBins, going_left: list[int], missing_left: bool) -> list[str]:
    """The categories a categorical split's ``IN`` list names: those of the side missing values (NULL, unseen
    categories) do not take, as ELSE takes them."""
    left = set(going_left)
    return [c for b, c in enumerate(feature.categories) if (b in left) != missing_left]


def macro_nodes(model: Any) -> int:
    """What a tree model's macro holds, counted as :data:`~ilargi_db.limits.MACRO_NODES` bounds it: each node of
    each tree and each entry of its splits' ``IN`` lists (a category is as costly to bind as a node)."""
    t: TreeEnsemble = model.trees_
    bins: list[FeatureBins] = model.encoder_.bins_
    entries = sum(
        len(listed_categories(bins[f], t.category_bins(node), t.missing_left(node)))
        for node, f in enumerate(t.feature.tolist())
        if f >= 0 and bins[f].categorical
    )
    return t.n_nodes + entries


def check_macro_size(models: list[Any]) -> None:
    """Refuse, before anything is written, tree models whose one macro (a model, or one per group) would hold
    more than :data:`~ilargi_db.limits.MACRO_NODES`."""
    MACRO_NODES.check(
        sum(macro_nodes(m) for m in models),
        f"this ensemble's macro{' (all groups)' if len(models) > 1 else ''} would hold {{count}} nodes and "
        "IN-list entries",
        SMALLER_TREES
        + (", or fewer groups (group_by)" if len(models) > 1 else "")
        + ", or score it in Python with ilargi_db.predict",
    )


class TreeMacroWriter:
    """Writes the ``N_predict`` (and, for classification, ``N_predict_class``) macros of a tree ensemble."""

    def __init__(self, name: str, version: int, model: Any, database: str):
        self.name, self.version, self.model, self.database = name, version, model, database
        self.bins: list[FeatureBins] = model.encoder_.bins_
        self.trees: TreeEnsemble = model.trees_
        # The nodes' fields as Python lists, read once: the writer visits every node.
        self.feature, self.left, self.right, self.value = (
            a.tolist() for a in (self.trees.feature, self.trees.left, self.trees.right, self.trees.value)
        )

    def _split(self, node: int, left: str, right: str) -> str:
        """The CASE of one split node, given the SQL of its two subtrees."""
        t = self.trees
        feature = self.bins[self.feature[node]]
        x = quote_identifier(feature.name)
        missing_left = t.missing_left(node)
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
        """The raw score: the baseline plus every tree's value (log-odds for classification)."""
        return balanced_sum([double(self.model.baseline_), *(self._tree(nodes) for nodes in self.trees.trees())])

    def statements(self) -> dict[str, str]:
        """``{macro name: CREATE OR REPLACE MACRO ...}``: the prediction, and the class for classification."""
        return macro_statements(self.database, [b.name for b in self.bins], self.bodies())

    def bodies(self) -> dict[str, str]:
        """``{macro name: its body}``."""
        score, loss = self.score(), self.model.loss_
        if loss.classifies:
            return binary_bodies(self.name, self.model, score)
        return {f"{self.name}{PREDICT}": score if loss.inverse_link is None else call(loss.inverse_link, score)}

    def weights_table(self) -> pa.Table:
        """No category weights: a tree's categories are in its CASEs."""
        return WEIGHTS_SCHEMA.empty_table()


__all__ = ["MAX_MACRO_DEPTH", "TreeMacroWriter", "check_macro_size", "listed_categories", "macro_nodes"]
