"""Row selections of a normalized matrix, ``X[rows]``, kept factorized.

A selection of output rows is a selection of the fact's rows and of each indicator's entries: the
dimension blocks are shared with the whole matrix, or, for a selection small beside a block (a group's rows),
copied down to the block rows it takes (:data:`COMPACT_BELOW`). scikit-learn's splitters hand rows
over as integer arrays, boolean masks or slices (``sklearn.utils._safe_indexing`` calls ``X[rows, ...]``),
so cross-validation and parameter searches fit on selections without building the join.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ilargi_db.backend import Backend, to_host
from ilargi_db.errors import IlargiError
from ilargi_db.linalg.blocks import Part

ROWS_OF_A_TRANSPOSE = "rows are selected on the untransposed matrix: X[rows].T, not X.T[rows]."


def _whole_rows(key: Any) -> bool:
    """What may follow the rows in ``X[rows, ...]`` / ``X[rows, :]``: every column."""
    return key is Ellipsis or (isinstance(key, slice) and key == slice(None))


def row_positions(key: Any, n_rows: int) -> np.ndarray | int:
    """The positions (a host int64 array) ``key`` selects among ``n_rows`` rows, as NumPy reads it.

    An integer array or list (negative counts from the end), a boolean mask of every row, or a slice;
    ``X[rows, ...]`` and ``X[rows, :]`` are the same. A single integer comes back as an int (one row).
    """
    if isinstance(key, tuple):
        if len(key) == 2 and _whole_rows(key[1]):
            key = key[0]
        else:
            raise IlargiError(
                "a normalized matrix selects rows only (X[rows] or X[rows, :]): its columns are the query's "
                "features; select columns in the query instead."
            )
    if isinstance(key, slice):
        return np.arange(n_rows)[key]
    if isinstance(key, (numbers.Integral, np.integer)) and not isinstance(key, (bool, np.bool_)):
        if not -n_rows <= int(key) < n_rows:
            raise IlargiError(f"row {int(key)} is out of range for a matrix of {n_rows} rows.")
        return int(key) % n_rows
    rows = to_host(key) if hasattr(key, "get") else np.asarray(key)
    if rows.ndim != 1:
        raise IlargiError(f"rows must be given as a 1-D array, a mask or a slice; got shape {rows.shape}.")
    if rows.dtype == bool:
        if len(rows) != n_rows:
            raise IlargiError(f"a boolean mask of rows needs one entry per row ({n_rows}), it has {len(rows)}.")
        return np.flatnonzero(rows)
    if rows.size == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.issubdtype(rows.dtype, np.integer):
        raise IlargiError(f"rows must be integers, a boolean mask or a slice; got values of type {rows.dtype}.")
    rows = rows.astype(np.int64, copy=False)
    outside = (rows < -n_rows) | (rows >= n_rows)
    if outside.any():
        raise IlargiError(
            f"row {int(rows[np.argmax(outside)])} is out of range for a matrix of {n_rows} rows "
            f"(valid: {-n_rows} to {n_rows - 1})."
        )
    return np.where(rows < 0, rows + n_rows, rows)


# A selection of fewer rows than this share of a block's rows keeps only the block rows it takes (a per-group fit:
# a product over the block then costs the group's rows, not the whole dimension's, once per group).
COMPACT_BELOW = 0.5


def select_parts(parts: Sequence[Part], positions: np.ndarray, backend: Backend) -> list[Part]:
    """The parts of the selected rows: a part every row holds itself keeps the selected rows of its data
    (the fact's rows: the fused kernels' dense path stays); an indexed part keeps its data, shared, and the
    selected entries of its index; or, when the selection is small beside the block (:data:`COMPACT_BELOW`),
    a copy of the block rows it takes, indexed anew."""
    xp = backend.xp
    rows = xp.asarray(positions)
    selected = []
    for part in parts:
        if part.index is None:
            selected.append(Part(part.data[rows], part.columns, None, backend))
            continue
        index = xp.take(part.index, rows)
        if len(positions) < COMPACT_BELOW * part.n_block_rows:
            taken, index = xp.unique(index, return_inverse=True)
            selected.append(Part(part.data[taken], part.columns, index.astype(part.index.dtype, copy=False), backend))
        else:
            selected.append(Part(part.data, part.columns, index, backend))
    return selected


__all__ = ["ROWS_OF_A_TRANSPOSE", "row_positions", "select_parts"]
