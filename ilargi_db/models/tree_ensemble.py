"""A fitted tree ensemble as one record of node arrays (``GradientBoosting.trees_``), and as the registry stores it.

:class:`TreeEnsemble` holds every tree's nodes back to back (tree t's are ``tree_start[t]:tree_start[t + 1]``,
children ids within their tree) with each split's bins going left as a mask: what prediction reads (one
compiled call for all trees), what the SQL macro writer walks, and what the registry writes as JSON
(:meth:`TreeEnsemble.to_record`) and checks when read back (:meth:`TreeEnsemble.from_record`). An ensemble of
several scores (a multi-class model: a tree per class each round) holds its rounds in order, tree t scoring
output ``t % trees_per_round``.

The stored form is plain lists, one entry per node (and ``trees_per_round``, 1 where a record lacks it): its
``feature`` (-1: a leaf), its children ``left``/``right``
(-1 for a leaf), its ``value``, ``gain`` and ``count``, and its split: ``threshold`` (numeric: the last bin going
left, else -1), ``category_bins`` (categorical: the bins going left) and ``missing_left``. A record read back is
untrusted (a row edited by hand, a file from elsewhere): anything predicting could stumble on (a child outside
its tree, a cycle, a feature or bin the model has not) is refused with a ``TypeError`` or ``ValueError``, which
the registry reports as a damaged model. Light: no scikit-learn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from ilargi_db.linalg.feature_bins import FeatureBins

if TYPE_CHECKING:
    from ilargi_db.models._tree_growth import Tree

TREE_KEYS = (
    "tree_start",
    "feature",
    "left",
    "right",
    "value",
    "gain",
    "count",
    "threshold",
    "missing_left",
    "category_bins",
)
NODE_FIELDS = ("feature", "left", "right", "value", "gain", "count", "goes_left")  # one entry per node


@dataclass(frozen=True, eq=False)
class TreeEnsemble:
    """Every tree's nodes in one record of arrays (see the module's docstring); ``categorical[f]``: feature f's
    splits send a set of bins left (else the bins up to a threshold)."""

    tree_start: np.ndarray  # int64 (trees + 1)
    feature: np.ndarray  # int64, -1 at a leaf
    left: np.ndarray  # int64, within the node's tree, -1 at a leaf
    right: np.ndarray  # int64
    value: np.ndarray  # float64, 0 at a split
    gain: np.ndarray  # float64, 0 at a leaf
    count: np.ndarray  # int64, the training rows of each node
    goes_left: np.ndarray  # (nodes, missing_bin + 1) bool, all False at a leaf
    categorical: np.ndarray  # bool, per feature
    trees_per_round: int = 1  # the scores (classes) the trees are summed into: tree t into t % trees_per_round

    @classmethod
    def of(cls, trees: Sequence[Tree], categorical: np.ndarray, trees_per_round: int = 1) -> TreeEnsemble:
        """The fitted trees, in order (round by round, a round's trees in score order), as one ensemble."""
        sizes = [tree.n_nodes for tree in trees]
        joined = {key: np.concatenate([getattr(tree, key) for tree in trees]) for key in NODE_FIELDS}
        start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        categorical = np.asarray(categorical, dtype=np.bool_)
        return cls(start, **joined, categorical=categorical, trees_per_round=trees_per_round)

    @property
    def n_trees(self) -> int:
        return len(self.tree_start) - 1

    @property
    def n_nodes(self) -> int:
        return len(self.feature)

    @property
    def missing_bin(self) -> int:
        return self.goes_left.shape[1] - 1

    def trees(self, output: int | None = None) -> list[range]:
        """The node ids of each tree, in order (only output ``output``'s trees, where given)."""
        start = self.tree_start.tolist()
        every = [range(a, b) for a, b in zip(start, start[1:])]
        return every if output is None else every[output :: self.trees_per_round]

    @cached_property
    def outputs(self) -> list[TreeEnsemble]:
        """Per score, the trees summed into it, in order, as an ensemble of one score (gathered once: every
        prediction reads them)."""
        if self.trees_per_round == 1:
            return [self]
        return [self._subset(self.trees(output)) for output in range(self.trees_per_round)]

    def _subset(self, kept: Sequence[range]) -> TreeEnsemble:
        """The trees of node ids ``kept`` (ranges of :meth:`trees`), in that order, as an ensemble of one score."""
        nodes = np.concatenate([np.arange(r.start, r.stop) for r in kept])
        start = np.concatenate([[0], np.cumsum([len(r) for r in kept])]).astype(np.int64)
        picked = {k: getattr(self, k)[nodes] for k in NODE_FIELDS}
        return TreeEnsemble(start, **picked, categorical=self.categorical)

    def missing_left(self, node: int) -> bool:
        """Whether split ``node`` sends missing values (NULL, NaN, a category training did not keep) left."""
        return bool(self.goes_left[node, self.missing_bin])

    def threshold(self, node: int) -> int:
        """A numeric split's last bin going left (-1 for a categorical split or a leaf)."""
        f = int(self.feature[node])
        return int(self.goes_left[node, : self.missing_bin].sum()) - 1 if f >= 0 and not self.categorical[f] else -1

    def category_bins(self, node: int) -> list[int]:
        """A categorical split's bins going left (empty for a numeric split or a leaf)."""
        f = int(self.feature[node])
        return (
            np.flatnonzero(self.goes_left[node, : self.missing_bin]).tolist() if f >= 0 and self.categorical[f] else []
        )

    def add_scores(self, codes: np.ndarray, out: np.ndarray, kernels: Any) -> None:
        """Every tree's value for rows given as dense bins (rows, features) added to its score's row of ``out``
        (trees per round, rows), tree by tree in order (the sums of training, to the bit)."""
        for t, scores in zip(self.outputs, out):
            kernels.add_trees(codes, t.tree_start, t.feature, t.goes_left, t.left, t.right, t.value, scores)

    def importances(self, n_features: int) -> np.ndarray:
        """Each feature's share of the splits' total gain (zeros where no tree splits)."""
        split = self.feature >= 0
        gains = np.bincount(self.feature[split], weights=self.gain[split], minlength=n_features)
        total = gains.sum()
        return gains / total if total > 0 else gains

    def __eq__(self, other: object) -> bool:
        """The same nodes (values and gains to the bit), as arrays compare."""
        if not isinstance(other, TreeEnsemble):
            return NotImplemented
        return all(np.array_equal(getattr(self, f.name), getattr(other, f.name)) for f in fields(self))

    __hash__ = None  # type: ignore[assignment]  # arrays: compared, not hashed

    # -- the registry's form ------------------------------------------------------------------------------

    def to_record(self) -> dict[str, list]:
        """The ensemble as the registry stores it: plain lists, node ids within each tree (JSON)."""
        nodes = range(self.n_nodes)
        return {
            "tree_start": self.tree_start.tolist(),
            **{key: getattr(self, key).tolist() for key in ("feature", "left", "right", "value", "gain", "count")},
            "threshold": [self.threshold(i) for i in nodes],
            "missing_left": [self.missing_left(i) if self.feature[i] >= 0 else False for i in nodes],
            "category_bins": [self.category_bins(i) for i in nodes],
            "trees_per_round": self.trees_per_round,
        }

    @classmethod
    def from_record(cls, record: Any, bins: Sequence[FeatureBins], missing_bin: int) -> TreeEnsemble:
        """``record`` (JSON read back) as an ensemble over the features ``bins``, or TypeError/ValueError.

        Children must lie inside their tree with ids greater than their parent's (so no walk cycles), a split's
        feature must be one of the model's, its threshold a bin of that numeric feature, its categories bins
        of that categorical one, and every value finite.
        """
        t = check_trees(record, bins, missing_bin)
        feature = np.asarray(t["feature"], dtype=np.int64)
        goes_left = np.zeros((len(feature), missing_bin + 1), dtype=np.bool_)
        for i in np.flatnonzero(feature >= 0).tolist():
            goes_left[i, : t["threshold"][i] + 1] = True  # a categorical split's threshold is -1
            goes_left[i, t["category_bins"][i]] = True
            goes_left[i, missing_bin] = t["missing_left"][i]
        return cls(
            np.asarray(t["tree_start"], dtype=np.int64),
            feature,
            *(np.asarray(t[key], dtype=np.int64) for key in ("left", "right")),
            *(np.asarray(t[key], dtype=np.float64) for key in ("value", "gain")),
            np.asarray(t["count"], dtype=np.int64),
            goes_left,
            np.array([b.categorical for b in bins], dtype=np.bool_),
            t["trees_per_round"],
        )


def _integers(values: Any, key: str) -> list[int]:
    if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise TypeError(f"trees_[{key!r}] is not a list of integers")
    return values


def _numbers(values: Any, key: str) -> list[float]:
    if not isinstance(values, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise TypeError(f"trees_[{key!r}] is not a list of numbers")
    return [float(v) for v in values]


def check_trees(trees: Any, bins: Sequence[FeatureBins], missing_bin: int) -> dict[str, list]:
    """``trees`` (JSON read back) as valid lists (:meth:`TreeEnsemble.from_record`), or TypeError/ValueError."""
    if not isinstance(trees, dict) or set(trees) - {"trees_per_round"} != set(TREE_KEYS):
        raise TypeError(f"trees_ is not an object with the keys {', '.join(TREE_KEYS)} (and trees_per_round)")
    per_round = trees.get("trees_per_round", 1)  # records written before multi-class lack it
    if not isinstance(per_round, int) or isinstance(per_round, bool) or per_round < 1:
        raise TypeError("trees_['trees_per_round'] is not a positive integer")
    start = _integers(trees["tree_start"], "tree_start")
    feature, left, right = (_integers(trees[k], k) for k in ("feature", "left", "right"))
    threshold = _integers(trees["threshold"], "threshold")
    value, gain, count = (_numbers(trees[k], k) for k in ("value", "gain", "count"))
    missing_left, category_bins = trees["missing_left"], trees["category_bins"]
    if not isinstance(missing_left, list) or not all(isinstance(v, bool) for v in missing_left):
        raise TypeError("trees_['missing_left'] is not a list of true or false")
    if not isinstance(category_bins, list):
        raise TypeError("trees_['category_bins'] is not a list")
    category_bins = [_integers(c, "category_bins") for c in category_bins]
    n = len(feature)
    columns = (left, right, threshold, value, gain, count, missing_left, category_bins)
    if any(len(c) != n for c in columns):
        raise ValueError("the lists of trees_ differ in length")
    if len(start) < 2 or start[0] != 0 or start[-1] != n or any(b <= a for a, b in zip(start, start[1:])):
        raise ValueError("trees_['tree_start'] does not split the nodes into non-empty trees")
    if (len(start) - 1) % per_round:
        raise ValueError(f"trees_ holds {len(start) - 1} trees, not rounds of trees_per_round={per_round}")
    if not all(math.isfinite(v) for v in value):
        raise ValueError("a leaf value of trees_ is not finite")
    for a, b in zip(start, start[1:]):
        for i in range(b - a):
            node = a + i
            _check_node(node, i, b - a, feature[node], left[node], right[node], bins)
            if feature[node] >= 0:
                _check_split(node, bins[feature[node]], threshold[node], category_bins[node], missing_bin)
    return {**{key: trees[key] for key in TREE_KEYS}, "trees_per_round": per_round}


def _check_node(node: int, local: int, size: int, f: int, left: int, right: int, bins: Sequence[FeatureBins]) -> None:
    if f == -1:
        if left != -1 or right != -1:
            raise ValueError(f"leaf {node} of trees_ has children")
        return
    if not 0 <= f < len(bins):
        raise ValueError(f"node {node} of trees_ splits on feature {f}, but the model has {len(bins)}")
    if not (local < left < size and local < right < size and left != right):
        raise ValueError(f"node {node} of trees_ has children outside its tree, or not after it (a cycle)")


def _check_split(node: int, feature: FeatureBins, threshold: int, category_bins: list[int], missing_bin: int) -> None:
    if feature.categorical:
        if threshold != -1 or not all(0 <= b < min(feature.n_bins, missing_bin) for b in category_bins):
            raise ValueError(f"node {node} of trees_ sends bins left that feature {feature.name!r} does not have")
    elif category_bins or not 0 <= threshold < min(feature.n_bins, missing_bin):
        raise ValueError(f"node {node} of trees_ splits feature {feature.name!r} at a bin it does not have")


__all__ = ["TREE_KEYS", "TreeEnsemble", "check_trees"]
