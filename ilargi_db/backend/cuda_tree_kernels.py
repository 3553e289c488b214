"""The histogram-boosting kernels on a CUDA GPU: a node's histogram in one launch (``node_histogram`` of
:mod:`ilargi_db.backend.cuda_sources`), the rest the reference's array operations.

The reference builds a node's histogram with three ``bincount`` passes per feature (gradient, hessian,
count) after gathering each block's bins; here one thread per (node row, feature) reads its bin through
the block's index and adds the three sums with ``atomicAdd``. The partition, the leaf values and the
prediction stay the reference's (sorts and gathers of whole arrays), the split search runs on the host.

As :mod:`ilargi_db.backend.cuda_kernels` says: its CUDA C is checked against the reference on the host
emulator without a GPU; its speed and its atomics' contention on a GPU are unmeasured until one is lent.
"""

from __future__ import annotations

from typing import Any

from ilargi_db.backend.cuda_kernels import Launcher
from ilargi_db.backend.histogram import HIST_FIELDS
from ilargi_db.backend.tree_reference import ReferenceTreeKernels


class CudaTreeKernels(ReferenceTreeKernels):
    """The tree kernels on a CUDA device: ``xp`` is CuPy (or a namespace with CuPy's ``RawKernel``)."""

    def __init__(self, xp: Any):
        super().__init__(xp)
        self._launch = Launcher(xp)

    def node_histogram(self, flat, rows, g, h, segment, unit_hessian: bool = False):
        """(features, bins, HIST_FIELDS) sums of ``g``, ``h`` and rows per bin over ``rows`` (``segment``: a CPU choice,
        unused here)."""
        xp = self.xp
        n_columns, blocks = flat.columns.shape[0], flat.widths.shape[0]
        hist = xp.zeros((n_columns, flat.n_bins, HIST_FIELDS), dtype=xp.float64)
        positions = "int32" if flat.index.dtype == xp.int32 else "int64"
        bins = "uint8" if flat.codes.dtype == xp.uint8 else "uint16"
        index = xp.asfortranarray(flat.index, dtype=positions)
        if index.size == 0:
            index = xp.zeros(1, dtype=positions)  # no block reads through one
        longs = [xp.ascontiguousarray(a, dtype=xp.int64) for a in (flat.code_start, flat.widths, flat.first_column)]
        args = (
            xp.ascontiguousarray(rows, dtype=xp.int64),
            xp.ascontiguousarray(g, dtype=xp.float64),
            xp.ascontiguousarray(h, dtype=xp.float64),
            xp.int32(bool(unit_hessian)),
            xp.ascontiguousarray(flat.codes, dtype=bins),
            *longs,
            xp.ascontiguousarray(flat.columns, dtype=xp.int64),
            xp.ascontiguousarray(flat.fills, dtype=bins),
            index,
            xp.ascontiguousarray(flat.identity, dtype=xp.bool_),
            hist,
            *(xp.int64(s) for s in (flat.index.shape[0], blocks, n_columns, flat.n_bins)),
        )
        self._launch("node_histogram", positions, len(rows) * n_columns, *args, bins=bins)
        return hist


__all__ = ["CudaTreeKernels"]
