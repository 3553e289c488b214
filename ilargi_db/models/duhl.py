"""DuHL (Duenner, Parnell, Jaggi, NeurIPS 2017): primal-dual coordinate descent over two levels of memory.

Regularized linear models, min_w 1/n sum_i phi_i(x_i . w) + lambda/2 ||w||^2, solved in the dual by
stochastic dual coordinate ascent (SDCA) with the fact's rows as coordinates: alpha_i per row,
w = X^T alpha / (lambda n). Three losses:

- ``"squared"`` (ridge): phi_i(z) = 1/2 (z - y_i)^2, a closed-form coordinate step;
- ``"logistic"``: phi_i(z) = log(1 + exp(-y_i z)) with y_i in {-1, 1}, a few safeguarded Newton steps on
  the coordinate's one-dimensional dual;
- ``"hinge"`` (a linear SVM): phi_i(z) = max(0, 1 - y_i z), a closed-form clipped step.

Each row's duality gap, gap_i = phi_i(x_i . w) + phi_i*(-alpha_i) + alpha_i x_i . w (>= 0), says how much it
has left to give, and the mean of the gaps bounds the primal suboptimality: a stopping certificate. When
the data exceed the fast memory (the budget, or a GPU), DuHL keeps the row partitions with the largest
gaps there, runs coordinate epochs on them, and refreshes the gaps of the others as they stream by.
``selection="sequential"`` (every partition in turn) and ``"random"`` (a random working set) are the
baselines it is compared with (``benchmarks/bench_duhl.py``).

An intercept, two ways (an unpenalized one is a linear constraint sum_i alpha_i = 0 in the dual, which
single-coordinate steps cannot keep):

- ``center=True`` (the squared loss only): the columns and y centered as each partition is read, the
  intercept ``mean(y) - mean(X) . w`` after: exact and unpenalized, scikit-learn's ``Ridge``;
- ``intercept_scaling=s > 0``: a constant column of value s appended to every row, its weight penalized
  like the others and the intercept ``s * w_s``: liblinear's, so scikit-learn's ``LinearSVC`` (and
  ``LogisticRegression(solver="liblinear")``) with the same ``intercept_scaling``.

>>> import numpy as np
>>> from ilargi_db.linalg import Block, PartitionedMatrix
>>> rng = np.random.default_rng(0)
>>> X = PartitionedMatrix.from_blocks([Block(rng.normal(size=(400, 3)), columns=[0, 1, 2])], 400, 50, backend="numpy")
>>> y = X @ np.array([1.0, -2.0, 0.5])
>>> fit = duhl_ridge(X, y, lam=1e-2, working_set=2, tol=1e-9)
>>> exact = np.linalg.solve(X.crossprod() + 1e-2 * 400 * np.eye(3), X.T @ y)
>>> fit.gap_ <= 1e-9, bool(np.abs(fit.coef_ - exact).max() < 1e-4)
(True, True)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse

from ilargi_db.backend import to_host
from ilargi_db.backend.compiled import float64_values
from ilargi_db.backend.duhl_kernels import LOSSES, duality_gaps, sdca_epoch, sparse_sdca_epoch
from ilargi_db.errors import DivergenceError, IlargiError
from ilargi_db.linalg import PartitionedMatrix, ScaledMatrix, as_matrix
from ilargi_db.models.catalog import duhl_reads_entries, duhl_row_bytes

SETTLED_GAP = 0.0  # a hinge row whose gap is at most this at the epoch's start is skipped by it


def _nonfinite(values: np.ndarray) -> str:
    bad = ~np.isfinite(values)
    return f"{int(bad.sum())} NaN or infinite value(s) (the first: {values[bad].flat[0]})"


CHUNK_BYTES = 8 << 20  # a matrix not in row partitions is cut into chunks of about this size, as DuHL holds them


@dataclass
class DenseRows:
    """A partition's rows as the model sees them (standardized, centered, with the constant column), dense."""

    rows: np.ndarray

    def __post_init__(self) -> None:
        self.rows = float64_values(self.rows)  # as the kernels read it: once, not per epoch

    def __len__(self) -> int:
        return self.rows.shape[0]

    def problem(self) -> str | None:
        """What makes the rows unfit to train on (NaN or infinite values), or None."""
        return None if np.isfinite(self.rows).all() else _nonfinite(self.rows)

    def margins(self, w: np.ndarray) -> np.ndarray:
        """x_i . w for every row."""
        return self.rows @ w

    def epoch(self, y: np.ndarray, alpha: np.ndarray, w: np.ndarray, scale: float, loss: str, order: Any) -> None:
        sdca_epoch(self.rows, y, alpha, w, scale, loss, order)


@dataclass
class SparseRows:
    """A partition's rows as the model sees them, x_i - o: their stored entries x_i (a CSR matrix, each column's
    standardizing scale applied) and the offset o all rows share (the columns' means over their scales, the
    centering, minus the constant column's value). A step reads a row's entries only
    (:func:`~ilargi_db.backend.duhl_kernels.sparse_sdca_epoch`), though standardizing or centering a one-hot column
    makes every row's value in it nonzero."""

    entries: Any  # scipy.sparse.csr_matrix (rows x columns)
    offset: np.ndarray

    def __post_init__(self) -> None:
        if self.entries.dtype != np.float64:  # as the kernels read it: once, not per epoch
            self.entries = self.entries.astype(np.float64)
        self.entries.sort_indices()
        self.offset_products = np.asarray(self.entries @ self.offset, dtype=np.float64)  # x_i . o
        squares = np.asarray(self.entries.multiply(self.entries).sum(axis=1), dtype=np.float64).ravel()
        # ||x_i - o||^2, which cancellation may leave a rounding below 0 where the row equals o
        self.norms = np.maximum(squares - 2.0 * self.offset_products + float(self.offset @ self.offset), 0.0)

    def __len__(self) -> int:
        return self.entries.shape[0]

    def problem(self) -> str | None:
        for values in (self.entries.data, self.offset):
            if not np.isfinite(values).all():
                return _nonfinite(values)
        return None

    def margins(self, w: np.ndarray) -> np.ndarray:
        return self.entries @ w - float(self.offset @ w)

    def epoch(self, y: np.ndarray, alpha: np.ndarray, w: np.ndarray, scale: float, loss: str, order: Any) -> None:
        sparse_sdca_epoch(self.entries, self.offset_products, self.norms, self.offset, y, alpha, w, scale, loss, order)


class RowPartitions:
    """The rows of a matrix as row partitions, what DuHL holds in fast memory, each read counted.

    A :class:`~ilargi_db.linalg.PartitionedMatrix` (in memory or streamed, standardized through a
    :class:`~ilargi_db.linalg.ScaledMatrix` or not) gives its own partitions; any other matrix is cut into
    chunks of about :data:`CHUNK_BYTES` as held. A partition is held as its rows' stored entries and an offset
    (:class:`SparseRows`) where those are few (a one-hot encoding's: ``catalog.duhl_reads_entries``), else dense
    (:class:`DenseRows`). ``center`` (column means) is subtracted and a constant column ``intercept_scaling``
    appended (when > 0): in the offset, or as each partition is made dense. ``whole``: one partition of
    every row (each of X's read once), for a working set that holds them all: SDCA's coordinate order is
    then random over every row, where partition by partition it is block coordinate ascent, which the
    coupling between the blocks slows (two halves of 6,000 rows: 1,077 epochs to a ridge gap of 1e-9
    where one block took 22).
    """

    def __init__(self, X: Any, center: Any = None, intercept_scaling: float = 0.0, whole: bool = False):
        base, mean, scale = X, None, None
        if isinstance(X, ScaledMatrix):
            base, mean, scale = X.base, to_host(X.mean), to_host(X.scale)
        n, d = X.shape
        self.shape = (n, d + (intercept_scaling > 0))
        # Rows whose stored entries are few step through them; the layout says so before any partition is read.
        M = base if isinstance(base, PartitionedMatrix) else as_matrix(base)
        self.entries_per_row = M.entries_per_row()
        self._sparse = duhl_reads_entries(self.entries_per_row, self.shape[1])
        # Each partition two ways: its stored entries (host CSR), or its rows dense.
        if isinstance(base, PartitionedMatrix):
            self.bounds = np.asarray(base.row_offsets, dtype=np.int64)
            self._entries = lambda p: base.partitions[p].row_entries()
            self._dense = lambda p: base.partitions[p].materialize()
        else:
            step = max(1, int(CHUNK_BYTES // duhl_row_bytes(self.entries_per_row, max(d, 1))))
            chunks = np.append(np.arange(0, n, step), n).astype(np.int64) if n else np.zeros(1, np.int64)
            self.bounds = chunks  # the chunks' own bounds stay with them: ``whole`` replaces self.bounds below
            # The positions made where the rows are: no index of a chunk's length copied to a device.
            self._entries = lambda p: M.row_entries(M.backend.xp.arange(chunks[p], chunks[p + 1]))
            self._dense = lambda p: M.rows(M.backend.xp.arange(chunks[p], chunks[p + 1]))
        if whole and len(self.bounds) > 2:
            entries, dense, parts = self._entries, self._dense, range(len(self.bounds) - 1)
            self.bounds = np.array([0, n], dtype=np.int64)
            self._entries = lambda p: scipy.sparse.vstack([entries(q) for q in parts], format="csr")
            self._dense = lambda p: np.concatenate([np.asarray(to_host(dense(q))) for q in parts])
        self._mean, self._scale = mean, scale
        self._center = None if center is None else np.asarray(to_host(center), dtype=np.float64)
        self._intercept_scaling = float(intercept_scaling)
        # Sparse rows are x / scale - offset, the constant column's value -offset alone (it has no entries).
        offset = np.zeros(d) if mean is None else np.asarray(mean, dtype=np.float64) / scale
        offset = offset if center is None else offset + self._center
        self._offset = np.append(offset, -self._intercept_scaling) if intercept_scaling > 0 else offset

    @property
    def n_partitions(self) -> int:
        return len(self.bounds) - 1

    @property
    def row_bytes(self) -> float:
        """The bytes a row takes as held: its entries, or its values dense (``catalog.duhl_row_bytes``)."""
        return duhl_row_bytes(self.entries_per_row, self.shape[1])

    def rows(self, p: int) -> slice:
        return slice(int(self.bounds[p]), int(self.bounds[p + 1]))

    def block(self, p: int) -> DenseRows | SparseRows:
        """Partition ``p``'s rows on the host, as the model sees them: their entries and the shared offset where
        they are sparse (a one-hot encoding's), dense otherwise."""
        return self._sparse_rows(self._entries(p)) if self._sparse else self._dense_rows(self._dense(p))

    def _sparse_rows(self, entries: Any) -> SparseRows:
        """The rows as entries and an offset. A column most rows store (a number) is standardized and centered in
        its entries, as the dense rows are, and has no offset: x . w less o . w would cancel the digits of a
        column far from 0 beside its spread (1e8 +- 100: every digit). The offset holds the rest (one-hot
        columns: a mean over a scale of at most 1 / scale)."""
        raw = scipy.sparse.csr_matrix(entries, dtype=np.float64)
        n, d = raw.shape
        stored = np.flatnonzero(np.bincount(raw.indices, minlength=d) * 2 >= max(n, 1))
        weights = np.ones(d) if self._scale is None else 1.0 / np.asarray(self._scale, dtype=np.float64)
        weights[stored] = 0.0  # those columns are written whole below
        entries = scipy.sparse.csr_matrix(raw @ scipy.sparse.diags(weights))
        entries.eliminate_zeros()
        offset = self._offset.copy()
        if len(stored):
            values = self._dense_rows(raw[:, stored].toarray(), stored).rows
            at = (np.repeat(np.arange(n), len(stored)), np.tile(stored, n))
            entries = scipy.sparse.csr_matrix(entries + scipy.sparse.csr_matrix((values.ravel(), at), shape=(n, d)))
            offset[stored] = 0.0
        if self.shape[1] > d:  # the constant column: no entry of its own, -offset gives its value
            entries.resize((n, self.shape[1]))
        return SparseRows(entries, offset)

    def _dense_rows(self, rows: Any, columns: Any = None) -> DenseRows:
        """The rows dense, standardized, centered and with the constant column; ``columns``: these columns only
        (of the matrix's), without the constant column."""
        rows = np.asarray(to_host(rows), dtype=np.float64)
        pick = slice(None) if columns is None else columns
        if self._mean is not None:
            rows = (rows - self._mean[pick]) / self._scale[pick]
        if self._center is not None:
            rows = rows - self._center[pick]
        if self._intercept_scaling > 0 and columns is None:
            rows = np.hstack([rows, np.full((rows.shape[0], 1), self._intercept_scaling)])
        return DenseRows(rows)


@dataclass
class DuHLFit:
    """What :func:`duhl_fit` found, and how it got there."""

    coef_: np.ndarray
    gap_: float  # the mean duality gap at the end (bounds the primal suboptimality)
    epochs_: int  # coordinate epochs on working-set partitions
    loads_: int  # partitions moved into the fast memory (what streaming costs)
    seconds_: float
    history_: list[tuple[int, float, float]] = field(default_factory=list)  # (loads, seconds, gap)
    intercept_: float = 0.0
    certificates_: int = 0  # passes that refreshed every partition's gap (the rest streamed by)
    start_gap_: float = 0.0  # the mean gap at w = 0 (the primal objective there): what tol may be relative to
    steps_: int = 0  # coordinate steps taken (a hinge epoch skips the rows with nothing to give)


def duhl_ridge(X: Any, y: Any, lam: float, working_set: int, tol: float = 1e-6, **options: Any) -> DuHLFit:
    """Ridge regression (the squared loss) by :func:`duhl_fit`."""
    return duhl_fit(X, y, lam, working_set, tol, loss="squared", **options)


def _checked(y: Any, lam: float, working_set: int, loss: str, selection: str, center: bool) -> np.ndarray:
    """:func:`duhl_fit`'s settings checked, and ``y`` as finite float64 on the host (labels -1/1 but for ridge)."""
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {', '.join(map(repr, LOSSES))}, got {loss!r}.")
    if selection not in ("gap", "sequential", "random"):
        raise ValueError(f"selection must be 'gap', 'sequential' or 'random', got {selection!r}.")
    if working_set < 1:
        raise ValueError(f"working_set must hold at least one partition, got {working_set}.")
    if not lam > 0:
        raise ValueError(f"lam must be positive (the dual needs a strongly convex penalty), got {lam}.")
    if center and loss != "squared":
        raise ValueError("center=True gives an exact intercept for the squared loss only: use intercept_scaling.")
    y = np.asarray(to_host(y), dtype=np.float64)
    if not np.isfinite(y).all():
        raise IlargiError(f"y holds {_nonfinite(y)}: DuHL trains on finite numbers; leave those rows out.")
    if loss != "squared" and not np.isin(y, (-1.0, 1.0)).all():
        raise ValueError(f"the {loss} loss needs labels -1 and 1, got {np.unique(y)[:5].tolist()}.")
    return y


def _means(X: Any, y: np.ndarray) -> tuple[np.ndarray, float]:
    """The column means (one pass, memoized on a normalized matrix) and the mean of y: ridge's centering."""
    return to_host(as_matrix(X).colsums()) / max(X.shape[0], 1), float(y.mean()) if len(y) else 0.0


def start_gap(y: np.ndarray, loss: str) -> float:
    """The mean duality gap at alpha = 0, w = 0: the primal objective at 0 (the dual is 0 there)."""
    if loss == "squared":
        return 0.5 * float(y @ y) / max(len(y), 1)
    return float(np.log(2.0)) if loss == "logistic" else 1.0


def duhl_fit(
    X: Any,
    y: Any,
    lam: float,
    working_set: int,
    tol: float = 1e-6,
    loss: str = "squared",
    selection: str = "gap",
    max_rounds: int = 1000,
    epochs_per_round: int = 1,
    random_state: int = 0,
    center: bool = False,
    intercept_scaling: float = 0.0,
) -> DuHLFit:
    """SDCA over the rows of ``X``, ``working_set`` row partitions in fast memory.

    ``X``: a :class:`~ilargi_db.linalg.PartitionedMatrix` (its partitions), or any matrix (cut into
    chunks, see :class:`RowPartitions`). ``loss``: ``"squared"`` (ridge), ``"logistic"`` or ``"hinge"``
    (labels -1 and 1 for the last two). Each round: pick the working set (``"gap"``: the largest duality
    gaps, DuHL; ``"sequential"``: the next partitions in turn; ``"random"``), load those not already held
    (a load is a partition read, and counted), run ``epochs_per_round`` SDCA epochs on them, refresh their
    gaps; every ``n_partitions / working_set`` rounds the partitions not held stream by once to refresh
    their gaps (which also gives the exact certificate). Stops when the mean gap is at most ``tol``.
    ``center`` and ``intercept_scaling``: the intercept (see the module's docstring).
    """
    y = _checked(y, lam, working_set, loss, selection, center)
    began = time.perf_counter()
    means, y_mean = _means(X, y) if center else (None, 0.0)
    y = y - y_mean
    whole = working_set >= RowPartitions(X).n_partitions  # all held: one block, its rows in a random order
    source = RowPartitions(X, means, intercept_scaling, whole)
    n, d = source.shape
    k = source.n_partitions
    scale = 1.0 / (lam * n)
    w = np.zeros(d)
    alpha = np.zeros(n)
    gaps = np.full(k, np.inf)  # the sum of each partition's gaps (unknown before it is seen)
    held: dict[int, DenseRows | SparseRows] = {}  # partition -> its rows (the fast memory)
    # A held partition's row gaps, with the count of epochs (moves of w and alpha) they were taken after: the
    # refresh after an epoch, the certificate and the next epoch's shrinking read them again while nothing moved.
    known: dict[int, tuple[int, np.ndarray]] = {}
    rng = np.random.default_rng(random_state)
    loads = epochs = certificates = steps = 0
    history: list[tuple[int, float, float]] = []
    turn = 0

    def read(p: int) -> DenseRows | SparseRows:
        nonlocal loads
        loads += 1
        rows = source.block(p)
        if (problem := rows.problem()) is not None:  # NaN would spread through w and every coefficient silently
            raise IlargiError(f"partition {p} of X holds {problem}: DuHL trains on finite numbers.")
        return rows

    def rows_of(p: int) -> DenseRows | SparseRows:
        if p not in held:
            held[p] = read(p)
        return held[p]

    def certify() -> float:
        """The mean gap with every partition's gap refreshed at the current w: the others stream by, and the
        held ones too (a later partition's epoch in the round moved w after theirs were refreshed)."""
        nonlocal certificates
        certificates += 1
        for p in range(k):
            refresh(p, held[p] if p in held else read(p))
        gap = float(gaps.sum()) / n
        history.append((loads, time.perf_counter() - began, gap))
        if not np.isfinite(gap):  # NaN compares false with tol: the rounds would run on to max_rounds
            raise DivergenceError(
                "DuHL's duality gap became NaN or infinite: scale the columns (standardize=True), or raise the "
                "L2 penalty."
            )
        return gap

    def row_gaps(p: int, rows: DenseRows | SparseRows) -> np.ndarray:
        """Partition ``p``'s row gaps at the current w (one product with w, unless nothing moved since)."""
        if p in known and known[p][0] == epochs:
            return known[p][1]
        part = source.rows(p)
        found = duality_gaps(rows.margins(w), y[part], alpha[part], loss)
        if p in held:
            known[p] = (epochs, found)
        return found

    def refresh(p: int, rows: DenseRows | SparseRows) -> None:
        gaps[p] = float(row_gaps(p, rows).sum())

    fresh = False  # whether every gap was refreshed at the current w
    for round_ in range(max_rounds):
        if selection == "gap":
            chosen = list(np.argsort(-gaps, kind="stable")[:working_set])
        elif selection == "sequential":
            chosen = [(turn + j) % k for j in range(working_set)]
            turn = (turn + working_set) % k
        else:
            chosen = list(rng.choice(k, size=min(working_set, k), replace=False))
        for p in list(held):  # the fast memory holds the working set only
            if p not in chosen:
                del held[p]
                known.pop(p, None)
        for p in chosen:
            rows = rows_of(int(p))
            part = source.rows(int(p))
            # Shrinking, as liblinear's, for the hinge loss: a row whose gap is zero at the current w sits at its
            # optimum (past the margin, or at its bound inside it), where its step would not move, so the epoch
            # skips it. The gaps are those at the current w: a gap from a refresh before other partitions moved w
            # is stale, and skipping on it measured stalling short of a tight tol. (A logistic or squared row's gap
            # is never exactly zero.)
            if loss == "hinge":
                active = np.flatnonzero(row_gaps(int(p), rows) > SETTLED_GAP)
            else:
                active = np.arange(len(rows))
            for _ in range(epochs_per_round):
                rows.epoch(y[part], alpha[part], w, scale, loss, rng.permutation(active))
                epochs += 1
                steps += len(active)
            refresh(int(p), rows)
        fresh = (round_ + 1) % max(k // working_set, 1) == 0 or not np.isfinite(gaps).all()
        if fresh and certify() <= tol:
            break
    else:  # stopped by max_rounds: gaps refreshed rounds ago understate what w has left; certify at this w
        if not fresh:
            certify()
    coef = w[: d - 1] if intercept_scaling > 0 else w
    intercept = y_mean - float(means @ coef) if center else float(w[-1] * intercept_scaling) if d > len(coef) else 0.0
    gap, seconds = float(gaps.sum()) / n, time.perf_counter() - began
    return DuHLFit(coef, gap, epochs, loads, seconds, history, intercept, certificates, start_gap(y, loss), steps)


__all__ = [
    "CHUNK_BYTES",
    "DenseRows",
    "DuHLFit",
    "RowPartitions",
    "SparseRows",
    "duhl_fit",
    "duhl_ridge",
    "start_gap",
]
