"""One regression tree grown leaf-wise (best first) on a binned matrix, from per-node histograms.

A node's rows are a range of one permutation of the training rows (partitioned in place at each split),
its histogram the sums of (gradient, hessian, rows) per feature bin. The smaller child's histogram is
built from its rows (gathered through each block's index, or summed per source row first where the
source is small: the factorized way); the larger one's is the parent's less it. The leaf of largest
gain splits next, as LightGBM and HistGradientBoosting grow, until ``max_leaves``.

On a GPU backend the rows, the gradients, the bins the kernels read and the histograms stay on the device; each
node's histogram comes to the host once for its split search (a few kilobytes), the split's mask goes back: copies
per node, never per row.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from ilargi_db.backend import NUMPY
from ilargi_db.backend.histogram import COUNT, GRADIENT, HESSIAN, HIST_FIELDS
from ilargi_db.backend.tree_split import GrowthLimits, draw_features, pick_leaf
from ilargi_db.linalg.binned_matrix import BinnedMatrix, FlatBins


@dataclass(eq=False)  # compared by identity: a node is one range of rows
class Node:
    start: int
    stop: int
    depth: int
    hist: np.ndarray  # (features, bins + 1, HIST_FIELDS), where the kernels build it (the device's)
    host: np.ndarray  # the same on the host: the split search reads it
    gain: float = 0.0
    feature: int = -1
    goes_left: np.ndarray | None = None
    id: int = 0

    @property
    def sums(self) -> np.ndarray:
        return self.host[0].sum(axis=0)  # every row is in one bin of each feature


@dataclass(frozen=True)
class Tree:
    """A fitted tree's nodes (node 0 the root), one array per field: ``left[i] == -1`` marks a leaf, whose ``value``
    is its output; a split's ``goes_left[i]`` flags the bins (the missing values' last) that go to ``left[i]``."""

    feature: np.ndarray  # int64, -1 at a leaf
    left: np.ndarray  # int64
    right: np.ndarray  # int64
    value: np.ndarray  # float64, 0 at a split
    gain: np.ndarray  # float64, 0 at a leaf
    count: np.ndarray  # int64, the training rows of each node
    goes_left: np.ndarray  # (nodes, missing_bin + 1) bool, all False at a leaf

    @property
    def n_nodes(self) -> int:
        return len(self.feature)


class _TreeBuilder:
    """A tree's nodes as they are added one split at a time (the per-node grower's), then frozen as a :class:`Tree`."""

    def __init__(self, width: int):
        self.width = width
        self.fields: dict[str, list] = {k: [] for k in ("feature", "left", "right", "value", "gain", "count")}
        self.masks: list[np.ndarray | None] = []

    def add(self, count: int) -> int:
        for key, empty in (("feature", -1), ("left", -1), ("right", -1), ("value", 0.0), ("gain", 0.0)):
            self.fields[key].append(empty)
        self.fields["count"].append(count)
        self.masks.append(None)
        return len(self.masks) - 1

    def split(self, i: int, feature: int, left: int, right: int, gain: float, goes_left: np.ndarray) -> None:
        f = self.fields
        f["feature"][i], f["left"][i], f["right"][i], f["gain"][i] = feature, left, right, gain
        self.masks[i] = goes_left

    def freeze(self) -> Tree:
        goes_left = np.zeros((len(self.masks), self.width), dtype=np.bool_)
        for i, mask in enumerate(self.masks):
            if mask is not None:
                goes_left[i] = mask
        f = self.fields
        ints = {k: np.asarray(f[k], dtype=np.int64) for k in ("feature", "left", "right", "count")}
        floats = {k: np.asarray(f[k], dtype=np.float64) for k in ("value", "gain")}
        return Tree(**ints, **floats, goes_left=goes_left)


# A split must gain more than the rounding of its gradient sums can: (GAIN_FLOOR x the sum of |g|)^2 / (the sum of
# h). A split of gradients that cancel exactly (a node whose sides have the same mean target) gains 0 in exact
# arithmetic and +-1e-34 in floating point, whose sign depends on the order the rows were summed in: without the
# floor the factorized and the materialized read would grow different trees on such a tie.
GAIN_FLOOR = 1e-10


# A dimension's rows are summed first (the factorized way) when its per-source-row sums stay in a core's cache
# and cost fewer cells than gathering its columns for every row of the node.
SEGMENT_BYTES = 32 << 10


def segmented_blocks(flat: FlatBins, n_node_rows: int) -> np.ndarray:
    """Per block: whether a node of ``n_node_rows`` rows sums it per source row first."""
    w, r = flat.widths, flat.source_rows
    cheaper = r * (w + 1) < n_node_rows * (w - 1)
    return ~flat.identity & cheaper & ((r + 1) * 24 <= SEGMENT_BYTES)


class TreeGrower:
    """Grows trees on one binned matrix: the blocks' lookups, the split search's inputs and scratch, kept.

    A layout of one block read row by row (:attr:`FlatBins.rowwise`) grows each tree in one compiled call where the
    kernels have one (``kernels.grows_whole_trees``); any other grows one node at a time, through the kernels'
    histogram, partition and split steps. Both grow the same trees.
    """

    def __init__(
        self,
        X: BinnedMatrix,
        rows: np.ndarray,
        limits: GrowthLimits,
        kernels,
        unit_hessian: bool = False,
        quantized_seed: int | None = None,
        row_keys: np.ndarray | None = None,
        backend: Any = NUMPY,
    ):
        """``quantized_seed``: grow on quantized gradients (:mod:`ilargi_db.backend.quantization`), tree k's drawn
        from this seed plus k and each row's key in ``row_keys`` (uint64, of the row's values: the same rows get the
        same draws in any order); None: on the gradients as they are. ``backend``: where the rows, the gradients
        and the histograms are (``kernels`` are its tree kernels)."""
        self.X, self.limits, self.kernels, self.unit_hessian = X, limits, kernels, unit_hessian
        self.backend, self.xp = backend, backend.xp
        self.quantized_seed, self.n_trees, self.row_keys = quantized_seed, 0, row_keys
        if quantized_seed is not None and (row_keys is None or len(row_keys) != X.n_rows):
            raise ValueError("quantized gradients draw from a key per row: pass row_keys, one per row of X.")
        self.train_rows = backend.to_device(np.array(rows, dtype=np.int64))  # ascending
        # Each node's rows stay ascending: a range of rows (partitioned in place one node at a time, with scratch),
        # or of one of two buffers (the whole-tree grower's: a split writes its children into the other one).
        self.buffers = self.xp.empty((2, len(self.train_rows)), dtype=self.xp.int64)
        self.rows, self.scratch = self.buffers[0], self.buffers[1]
        self.n_bins = X.n_bins
        self.categorical = X.categorical
        self.flat = FlatBins.of(X)  # its shapes and positions, read here
        self.kernel_flat = self.flat.on(backend)  # what the kernels read per row: on the device, uploaded once
        self.whole_trees = self.flat.rowwise and kernels.grows_whole_trees
        self.layout = kernels.row_layout(self.flat) if self.whole_trees else None
        # A whole tree's leaf histograms (compact: each feature's bins, its missing values' last), kept across trees.
        self.hists = np.empty((limits.max_leaves, self.layout.n_slots, HIST_FIELDS)) if self.whole_trees else None
        self.min_gain = 0.0  # the per-node grower's, set by each tree from its gradients (GAIN_FLOOR)
        self._abs_g: np.ndarray | None = None
        # The features a node of the tree being grown may split on: n_pick drawn from feature_seed (every one for
        # boosting; a random forest's max_features), set by grow().
        self.n_pick, self.feature_seed = X.shape[1], 0
        self.allowed = np.ones(X.shape[1], dtype=np.bool_)

    def sibling(self) -> TreeGrower:
        """A grower of the same matrix, layout and limits with scratch of its own: it grows trees on another thread
        beside this one (the binned rows, read-only, are shared, not copied)."""
        other = copy.copy(self)
        other.buffers = self.xp.empty_like(self.buffers)
        other.rows, other.scratch = other.buffers[0], other.buffers[1]
        other.hists = None if self.hists is None else np.empty_like(self.hists)
        other.allowed = np.ones_like(self.allowed)
        other._abs_g = None
        return other

    def histogram(self, rows: np.ndarray, g: np.ndarray, h: np.ndarray) -> np.ndarray:
        """(features, bins + 1, HIST_FIELDS) sums of g, h and rows per bin over ``rows``."""
        segment = segmented_blocks(self.flat, len(rows))
        return self.kernels.node_histogram(self.kernel_flat, rows, g, h, segment, self.unit_hessian)

    def _node(self, start: int, stop: int, depth: int, hist) -> Node:
        return Node(start, stop, depth, hist, self.backend.to_host(hist))

    def _gain_floor_sum(self, g: np.ndarray, rows: np.ndarray) -> float:
        """:data:`GAIN_FLOOR` times the sum of |g| over the tree's ``rows`` (into a buffer kept across trees, not a
        new n-vector per tree; the rows early stopping holds out, or a bootstrap leaves out, not counted)."""
        if len(rows) < len(g):
            g = g[rows]
        if self._abs_g is None or self._abs_g.shape != g.shape:
            self._abs_g = self.xp.empty_like(g)
        return GAIN_FLOOR * float(self.xp.abs(g, out=self._abs_g).sum())

    def _split(self, node: Node) -> Node:
        limits = self.limits
        if (limits.max_depth is not None and node.depth >= limits.max_depth) or (
            node.stop - node.start < 2 * limits.min_samples_leaf
        ):
            return node
        mask = np.zeros(self.X.missing_bin + 1, dtype=np.bool_)
        draw_features(self.feature_seed, node.id, self.n_pick, self.allowed)
        gain, feature = self.kernels.best_split(
            node.host,
            self.n_bins,
            self.categorical,
            self.X.missing_bin,
            limits.l2_regularization,
            limits.min_samples_leaf,
            mask,
            self.allowed,
        )
        if feature >= 0 and gain > self.min_gain:
            node.gain, node.feature, node.goes_left = gain, feature, mask
        return node

    def grow(
        self,
        g: np.ndarray,
        h: np.ndarray,
        learning_rate: float,
        raw: np.ndarray,
        rows: np.ndarray | None = None,
        n_pick: int | None = None,
        feature_seed: int = 0,
    ) -> Tree:
        """One tree fitted to gradients ``g`` and hessians ``h`` (leaf values shrunk by ``learning_rate``), its
        leaves' values added to the raw scores ``raw`` of their training rows.

        ``rows``: this tree's rows (ascending; a random forest's bootstrap), else the grower's training rows.
        ``n_pick``: each node splits on that many features drawn from ``feature_seed`` and the node's id
        (:func:`~ilargi_db.backend.tree_split.draw_features`), else on every feature."""
        rows = self.train_rows if rows is None else self.xp.asarray(rows, dtype=self.xp.int64)
        if len(rows) != self.buffers.shape[1]:
            self.buffers = self.xp.empty((2, len(rows)), dtype=self.xp.int64)
            self.rows, self.scratch = self.buffers[0], self.buffers[1]
        self.n_pick = self.X.shape[1] if n_pick is None else int(n_pick)
        self.feature_seed = int(feature_seed)
        # Every tree starts from the rows in order: a node's rows then come in order (stable partitions), and
        # each pass reads g, h and the bins forward instead of in the last tree's leaf order (5x slower measured).
        self.rows[...] = rows
        quantized = None
        if self.quantized_seed is not None:  # the splits and leaf values of the rounded gradients, in either grower
            seed = self.quantized_seed + self.n_trees
            g, h, packed, scales = self.kernels.quantize(g, h, self.unit_hessian, self.train_rows, self.row_keys, seed)
            quantized = (packed, scales)
        self.n_trees += 1
        if self.whole_trees:
            floor = self._gain_floor_sum(g, rows)
            nodes = self.kernels.grow_tree(
                self.layout, self.buffers, g, h, self.unit_hessian, self.categorical, self.limits, floor,
                learning_rate, self.X.missing_bin, raw, self.hists, quantized, self.n_pick, self.feature_seed,
            )  # fmt: skip
            return Tree(*nodes)
        return self._grow_per_node(g, h, learning_rate, raw, rows)

    def _grow_per_node(self, g: np.ndarray, h: np.ndarray, learning_rate: float, raw: np.ndarray, rows) -> Tree:
        limits, tree = self.limits, _TreeBuilder(self.X.missing_bin + 1)
        root = self._node(0, len(self.rows), 0, self.histogram(self.rows, g, h))
        floor = self._gain_floor_sum(g, rows)
        self.min_gain = floor**2 / (float(root.sums[HESSIAN]) + limits.l2_regularization)
        root.id = tree.add(len(self.rows))
        leaves = [self._split(root)]
        while len(leaves) < limits.max_leaves:
            gains, eligible = np.zeros(len(tree.masks)), np.zeros(len(tree.masks), dtype=np.bool_)
            for leaf in leaves:
                gains[leaf.id], eligible[leaf.id] = leaf.gain, leaf.feature >= 0
            best = pick_leaf(gains, eligible)  # the compiled grower's rule
            if best < 0:
                break
            node = next(leaf for leaf in leaves if leaf.id == best)
            leaves.remove(node)
            leaves.extend(self._split(child) for child in self._children(node, g, h, tree))
        for leaf in leaves:
            grad, hess = leaf.sums[GRADIENT], leaf.sums[HESSIAN]
            tree.fields["value"][leaf.id] = -learning_rate * grad / (hess + limits.l2_regularization)
        # Each leaf's value added to the raw scores of its rows (a leaf's rows are one range of the permutation).
        starts = np.array([leaf.start for leaf in leaves], dtype=np.int64)
        stops = np.array([leaf.stop for leaf in leaves], dtype=np.int64)
        values = np.array([tree.fields["value"][leaf.id] for leaf in leaves])
        self.kernels.add_leaf_values(self.rows, starts, stops, values, raw)
        return tree.freeze()

    def _children(self, node: Node, g: np.ndarray, h: np.ndarray, tree: _TreeBuilder) -> tuple[Node, Node]:
        # The smaller child's rows, counted from the parent's histogram, get a histogram of their own (in the
        # pass that partitions the rows, where it can); the larger child's is the parent's less it.
        n_left_rows = node.host[node.feature, node.goes_left, COUNT].sum()
        small_left = n_left_rows <= (node.stop - node.start) - n_left_rows
        goes_left = self.backend.to_device(node.goes_left)  # the split's mask, where the kernels read it
        if self.flat.rowwise:
            n_left, small_hist = self.kernels.partition_histogram(
                self.rows, node.start, node.stop, self.kernel_flat, node.feature, goes_left, self.scratch,
                small_left, g, h, self.unit_hessian,
            )  # fmt: skip
        else:
            n_left = self.kernels.partition_rows(
                self.rows, node.start, node.stop, self.kernel_flat, node.feature, goes_left, self.scratch
            )
            small = slice(node.start, node.start + n_left) if small_left else slice(node.start + n_left, node.stop)
            small_hist = self.histogram(self.rows[small], g, h)
        middle = node.start + n_left
        small_host = self.backend.to_host(small_hist)
        large = (node.hist - small_hist, node.host - small_host)  # the parent's less the smaller child's
        small = (small_hist, small_host)
        (left_hist, left_host), (right_hist, right_host) = (small, large) if small_left else (large, small)
        left = Node(node.start, middle, node.depth + 1, left_hist, left_host)
        right = Node(middle, node.stop, node.depth + 1, right_hist, right_host)
        left.id, right.id = tree.add(middle - node.start), tree.add(node.stop - middle)
        tree.split(node.id, node.feature, left.id, right.id, node.gain, node.goes_left)
        node.hist = node.host = None  # the parent's histogram is no longer needed
        return left, right


__all__ = ["GAIN_FLOOR", "GrowthLimits", "Node", "Tree", "TreeGrower", "segmented_blocks"]
