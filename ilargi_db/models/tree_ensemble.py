"""A fitted tree ensemble as the registry stores it (``GradientBoosting.trees_``): checked when read back.

The ensemble is plain lists, one entry per node, node ids within each tree (``tree_start[t]`` is tree
t's first node, ``tree_start[-1]`` the number of nodes): its ``feature`` (-1: a leaf), its children
``left``/``right`` (-1 for a leaf), its ``value``, ``gain`` and ``count``, and its split: ``threshold``
(numeric: the last bin going left, else -1), ``category_bins`` (categorical: the bins going left) and
``missing_left``. A record read back is untrusted (a row edited by hand, a file from elsewhere):
:func:`check_trees` refuses anything predicting could stumble on (a child outside its tree, a cycle, a
feature or bin the model has not) with a ``TypeError`` or ``ValueError``, which the registry reports as
a damaged model. Light: no scikit-learn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ilargi_db.linalg.binned_matrix import FeatureBins

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


def _integers(values: Any, key: str) -> list[int]:
    if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise TypeError(f"trees_[{key!r}] is not a list of integers")
    return values


def _numbers(values: Any, key: str) -> list[float]:
    if not isinstance(values, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise TypeError(f"trees_[{key!r}] is not a list of numbers")
    return [float(v) for v in values]


def check_trees(trees: Any, bins: Sequence[FeatureBins], missing_bin: int) -> dict[str, list]:
    """``trees`` (JSON read back) as a valid ensemble over the features ``bins``, or TypeError/ValueError.

    Children must lie inside their tree with ids greater than their parent's (so no walk cycles), a split's
    feature must be one of the model's, its threshold a bin of that numeric feature, its categories bins
    of that categorical one, and every value finite.
    """
    if not isinstance(trees, dict) or set(trees) != set(TREE_KEYS):
        raise TypeError(f"trees_ is not an object with the keys {', '.join(TREE_KEYS)}")
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
    if not all(math.isfinite(v) for v in value):
        raise ValueError("a leaf value of trees_ is not finite")
    for a, b in zip(start, start[1:]):
        for i in range(b - a):
            node = a + i
            _check_node(node, i, b - a, feature[node], left[node], right[node], bins)
            if feature[node] >= 0:
                _check_split(node, bins[feature[node]], threshold[node], category_bins[node], missing_bin)
    return {key: trees[key] for key in TREE_KEYS}


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


def tree_slices(trees: dict[str, list]) -> list[range]:
    """The node ids of each tree, in order."""
    start = trees["tree_start"]
    return [range(a, b) for a, b in zip(start, start[1:])]


__all__ = ["TREE_KEYS", "check_trees", "tree_slices"]
