"""The hot loops of histogram gradient boosting as plain array operations: the oracle of the fused kernels
(:mod:`ilargi_db.backend.tree_kernels`) and the CuPy path."""

from __future__ import annotations

from typing import Any

import numpy as np

from ilargi_db.backend import quantization
from ilargi_db.backend.histogram import HIST_FIELDS


class ReferenceTreeKernels:
    """The tree kernels as plain array operations of ``xp`` (the oracle, several passes each)."""

    grows_whole_trees = False  # trees grow one node at a time, through the steps below
    grows_side_by_side = False  # a forest's trees grow one after another (a device runs one tree's passes)

    def __init__(self, xp: Any = np):
        self.xp = xp

    @property
    def quantizes(self) -> bool:
        """Whether :meth:`quantize` takes these arrays: the rule is NumPy's (host arrays only)."""
        return self.xp is np

    def _bins(self, flat, b: int, rows):
        """Every column of block ``b`` for ``rows``: (rows, width) bins, empty rows taking the fill."""
        xp = self.xp
        shapes = flat.shapes  # read on the host
        w, start, first = int(shapes.widths[b]), int(shapes.code_start[b]), int(shapes.first_column[b])
        table = flat.codes[start : start + int(shapes.source_rows[b]) * w].reshape(-1, w)
        fill = flat.fills[first : first + w]
        if shapes.identity[b]:
            return table[rows]
        taken = flat.index[rows, b].astype(xp.int64)
        return xp.where((taken < 0)[:, None], fill[None, :], table[xp.maximum(taken, 0)])

    def quantize(self, g, h, unit_hessian: bool, rows, keys, seed: int):
        return quantization.quantize(g, h, unit_hessian, rows, keys, seed)

    def node_histogram(self, flat, rows, g, h, segment, unit_hessian: bool = False):
        xp = self.xp
        out = xp.zeros((flat.columns.shape[0], flat.n_bins, HIST_FIELDS))
        shapes = flat.shapes  # read on the host
        for b in range(len(shapes.widths)):
            bins = self._bins(flat, b, rows).astype(xp.int64)
            for j in range(int(shapes.widths[b])):
                f = int(shapes.columns[int(shapes.first_column[b]) + j])
                for q, weights in enumerate((g[rows], h[rows], xp.ones(len(rows)))):
                    out[f, :, q] = xp.bincount(bins[:, j], weights=weights, minlength=flat.n_bins)
        return out

    def partition_rows(self, rows, start: int, stop: int, flat, feature: int, goes_left, scratch) -> int:
        xp = self.xp
        b, j = flat.feature_at(feature)
        node = rows[start:stop]
        left = goes_left[self._bins(flat, b, node)[:, j]]
        rows[start:stop] = xp.concatenate([node[left], node[~left]])
        return int(left.sum())

    def partition_histogram(
        self,
        rows,
        start: int,
        stop: int,
        flat,
        feature: int,
        goes_left,
        scratch,
        build_left: bool,
        g,
        h,
        unit_hessian: bool = False,
    ):
        n_left = self.partition_rows(rows, start, stop, flat, feature, goes_left, scratch)
        side = rows[start : start + n_left] if build_left else rows[start + n_left : stop]
        return n_left, self.node_histogram(flat, side, g, h, None, unit_hessian)

    def best_split(
        self, hist, n_bins, categorical, missing_bin: int, l2: float, min_rows: int, goes_left, allowed=None
    ):
        # The split search runs on the host over a few kilobytes: the compiled search is its own reference.
        from ilargi_db.backend.tree_kernels import NumbaTreeKernels  # numba: only where the search runs

        return NumbaTreeKernels().best_split(hist, n_bins, categorical, missing_bin, l2, min_rows, goes_left, allowed)

    def add_leaf_values(self, rows, starts, stops, values, raw) -> None:
        for start, stop, value in zip(starts, stops, values):
            raw[rows[int(start) : int(stop)]] += value

    def add_trees(self, codes, tree_start, feature, goes_left, left, right, value, out) -> None:
        """Each tree's leaf values added to ``out``, tree by tree (children ids within their tree)."""
        xp = self.xp
        for root, end in zip(tree_start[:-1].tolist(), tree_start[1:].tolist()):
            node = xp.full(codes.shape[0], root, dtype=xp.int64)
            for _ in range(end - root):  # at most one step per node
                inner = left[node] >= 0
                if not bool(inner.any()):
                    break
                bins = codes[xp.arange(codes.shape[0]), xp.maximum(feature[node], 0)]
                step = root + xp.where(goes_left[node, bins], left[node], right[node])
                node = xp.where(inner, step, node)
            out += value[node]


__all__ = ["ReferenceTreeKernels"]
