"""Row selections that repeat: each row keyed by its values, never by its position in the read.

A held-out share (``validation=0.2``), early stopping's share and cross-validation's folds must pick the same rows
on every run. A read's row order does not repeat: DuckDB's parallel scans and joins, a view over Parquet with
``preserve_insertion_order = false``, ties in ORDER BY. What identifies a row whatever its arrival is its
values: its features (as read and encoded, before any scaling; the encoder's statistics are exact, so the same
on every run), its label and its group. :func:`row_keys` hashes them, with a seed, into one 64-bit key per row;
:func:`first_by_key` and :func:`folds_by_key` select by key. Rows with the same key are the same values (up to a
2^-64 collision): which of them is picked changes no fit and no score. The k-th copy of a row is keyed by k too,
so a share takes about its share of a repeated row's copies, not all or none of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ilargi_db.backend import to_host
from ilargi_db.linalg.binned_matrix import BinnedMatrix
from ilargi_db.linalg.normalized_matrix import NormalizedMatrix
from ilargi_db.linalg.partitioned_matrix import PartitionedMatrix
from ilargi_db.linalg.scaled_matrix import ScaledMatrix

CHUNK_VALUES = 1 << 20  # the values hashed at once: rows x columns of one dense chunk (8 MiB of float64)
_MIX_1, _MIX_2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)  # SplitMix64's finalizer
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer, element-wise on uint64 (wrapping): every input bit reaches every output bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * _MIX_1
    x = x ^ (x >> np.uint64(27))
    x = x * _MIX_2
    return x ^ (x >> np.uint64(31))


def _salts(n: int, start: int = 0) -> np.ndarray:
    """One salt per column: the same value in another column hashes differently."""
    return _mix((np.arange(start, start + n, dtype=np.uint64) + np.uint64(1)) * _GOLDEN)


def _bits(values: np.ndarray) -> np.ndarray:
    """Numbers as the bits of doubles, one NaN and one zero: equal values, equal bits (a label 1 read as an
    integer or as a double alike)."""
    floats = np.asarray(values).astype(np.float64)
    floats = np.where(np.isnan(floats), np.nan, floats) + 0.0  # one NaN; -0.0 + 0.0 is 0.0
    return floats.view(np.uint64)


def hash_values(values: Any, salts: np.ndarray | None = None) -> np.ndarray:
    """One 64-bit hash per row of a (rows, columns) array of numbers, each taken as a double: equal rows, equal
    hashes (-0.0 as 0.0, every NaN as one), whatever their positions; a sum of per-column hashes (each column
    salted, by default by its position: ``salts``), exact in any order of addition."""
    values = np.asarray(to_host(values))
    if values.ndim == 1:
        values = values[:, None]
    salts = _salts(values.shape[1]) if salts is None else salts
    with np.errstate(over="ignore"):
        return _mix(_bits(values) ^ salts[None, :]).sum(axis=1, dtype=np.uint64)


def _block_hashes(part: Any, salts: np.ndarray) -> np.ndarray:
    """The hash of each row of one block over its output columns (``salts``): a dense block chunk by chunk, a
    sparse one as the hash of its zeros plus what each stored value changes."""
    data, width = part.data, len(salts)
    step = max(1, CHUNK_VALUES // max(width, 1))
    if not part.sparse:
        chunks = [hash_values(data[s : s + step], salts) for s in range(0, data.shape[0], step)]
        return np.concatenate(chunks) if chunks else np.empty(0, dtype=np.uint64)
    coo = (data.get() if hasattr(data, "get") else data).tocoo()  # a device's sparse block copied here
    zero = _mix(np.uint64(0) ^ salts)  # a zero's hash in each column
    with np.errstate(over="ignore"):
        out = np.full(data.shape[0], zero.sum(dtype=np.uint64), dtype=np.uint64)
        np.add.at(out, coo.row, _mix(_bits(coo.data) ^ salts[coo.col]) - zero[coo.col])
    return out


def _factorized_hashes(X: NormalizedMatrix) -> np.ndarray | None:
    """The dense rows' hashes without building them, when every output column is fed by one block: each block's
    rows hashed once, gathered to the output rows by its indicator and added. None where blocks share a column
    (a value is then a sum of blocks' values: hashed from the dense rows)."""
    parts = X._parts  # noqa: SLF001 - the blocks of a matrix of this package, read only
    columns = np.concatenate([p.columns for p in parts]) if parts else np.empty(0, dtype=np.int64)
    if len(np.unique(columns)) != len(columns):
        return None
    salts = _salts(X.shape[1])
    out = np.zeros(X.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for part in parts:
            block = _block_hashes(part, salts[part.columns])
            out += block if part.index is None else block[np.asarray(to_host(part.index), dtype=np.int64)]
    return out


def _hash_partition(X: Any, rows: tuple, args: tuple) -> tuple[list[np.ndarray]]:
    """The row hashes of one partition (or of a whole normalized matrix): factorized, or dense chunk by chunk; a
    list, so that ``reduce_rows`` adding the partitions' tuples concatenates them in partition order."""
    found = _factorized_hashes(X)
    if found is not None:
        return ([found],)
    n, d = X.shape
    step = max(1, CHUNK_VALUES // max(d, 1))
    return ([hash_values(X.rows(np.arange(s, min(n, s + step)))) for s in range(0, n, step)],)


def _hash_binned(X: Any) -> np.ndarray:
    n, d = X.shape
    step = max(1, CHUNK_VALUES // max(d, 1))
    parts = [hash_values(X.dense_bins(np.arange(s, min(n, s + step)))) for s in range(0, n, step)]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)


def _feature_hashes(X: Any) -> np.ndarray:
    """Each row's hash of its features, for every kind of training matrix the readers build."""
    if isinstance(X, BinnedMatrix):  # trees: the bins identify the row as the fit sees it
        return _hash_binned(X)
    if isinstance(X, ScaledMatrix):  # a standardized view: its base's values (the scaling is a view, not the data)
        return _feature_hashes(X.base)
    if isinstance(X, (NormalizedMatrix, PartitionedMatrix)):  # partitions streamed or on a cluster: one pass
        (chunks,) = X.reduce_rows(_hash_partition)
        return np.concatenate(chunks) if chunks else np.empty(0, dtype=np.uint64)
    values = X.toarray() if hasattr(X, "toarray") else X  # a plain (sparse) array
    return hash_values(values)


def label_codes(labels: Any) -> np.ndarray:
    """Labels of any type (numbers, text) as codes that depend only on the set of labels (their sorted ranks)."""
    labels = np.asarray(to_host(labels))
    if labels.dtype.kind in "fbiu":
        return labels  # hashed as numbers: NaN and -0.0 made one there
    return np.unique(labels.astype(str) if labels.dtype.kind == "O" else labels, return_inverse=True)[1].ravel()


def row_keys(X: Any, labels: Sequence[Any] = (), seed: int = 0) -> np.ndarray:
    """One uint64 key per row of ``X``: a seeded hash of its features and of each of ``labels`` (the target, the
    group codes: one entry per row each), the same whatever order the rows came in."""
    keys = _feature_hashes(X)
    for k, label in enumerate(labels):
        if label is None:
            continue
        codes = label_codes(label)
        with np.errstate(over="ignore"):
            keys = keys + _mix(hash_values(codes) ^ _salts(1, start=1_000_003 + k)[0])
    with np.errstate(over="ignore"):
        return _mix(keys ^ _mix(np.uint64(seed) * _GOLDEN + _GOLDEN))


def spread_copies(keys: np.ndarray) -> np.ndarray:
    """``keys`` with each copy of a row told apart by its rank among them: rows of one key are the same values, so
    which of them is the k-th changes nothing, and keying the k-th by k too spreads a row's copies over a
    selection as other rows are spread (a share takes about its share of them, not all or none)."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    first = np.ones(len(keys), dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    starts = np.flatnonzero(first)
    ranks = np.empty(len(keys), dtype=np.uint64)
    ranks[order] = (np.arange(len(keys)) - np.repeat(starts, np.diff(np.append(starts, len(keys))))).astype(np.uint64)
    with np.errstate(over="ignore"):
        return _mix(keys ^ _mix((ranks + np.uint64(1)) * _GOLDEN))


def first_by_key(keys: np.ndarray, count: int) -> np.ndarray:
    """The positions of the ``count`` rows of smallest key (copies of a row spread: :func:`spread_copies`), sorted."""
    order = np.argsort(spread_copies(keys), kind="stable")
    return np.sort(order[:count])


def folds_by_key(keys: np.ndarray, n_folds: int, strata: Any = None) -> np.ndarray:
    """Each row's fold, 0 to ``n_folds - 1``: the rows dealt round in key order, within each stratum (class) when
    given, each stratum starting where the last left off, so every fold gets the same number of rows (one more at
    most) and each class's share."""
    order = np.argsort(keys, kind="stable")
    if strata is not None:
        order = order[np.argsort(label_codes(strata)[order], kind="stable")]  # by class, by key within
    folds = np.empty(len(keys), dtype=np.int64)
    folds[order] = np.arange(len(keys)) % n_folds
    return folds


__all__ = ["first_by_key", "folds_by_key", "hash_values", "label_codes", "row_keys", "spread_copies"]
