"""The histogram layout of the tree kernels, declared once (every implementation reads these names).

A histogram holds, per feature and bin, :data:`HIST_FIELDS` float64 sums: of the rows' gradients
(:data:`GRADIENT`), hessians (:data:`HESSIAN`) and count (:data:`COUNT`). Spread, it is ``(features,
missing_bin + 1, HIST_FIELDS)`` with a feature's missing values in bin ``missing_bin``; compact (the whole-tree
grower's), feature f's bins of values start at ``slot_start[f]``, its missing values' row after them. The CUDA
sources get the same names as ``#define`` (:data:`LAYOUT`).
"""

from __future__ import annotations

GRADIENT, HESSIAN, COUNT = 0, 1, 2
HIST_FIELDS = 3
LAYOUT = {"HIST_FIELDS": HIST_FIELDS, "GRADIENT": GRADIENT, "HESSIAN": HESSIAN, "COUNT": COUNT}

__all__ = ["COUNT", "GRADIENT", "HESSIAN", "HIST_FIELDS", "LAYOUT"]
