"""``solver="duhl"``: the linear models fitted in the dual by DuHL (:mod:`ilargi_db.models.duhl`).

What the estimators share to run it: their parameters mapped onto DuHL's objective
1/n sum_i loss_i + lambda/2 ||w||^2 (:func:`~ilargi_db.models.catalog.l2_penalty`), the working set
(every partition of a matrix in memory; of a streamed one, as many as fit the room of the partitions the
memory budget was sized for), the intercept, and the certificate: ``duality_gap_`` bounds how far the
fitted objective is above the optimum (in DuHL's scale; scikit-learn's objective is C n times it for
logistic regression and the SVM, and ridge's 2n times it), ``tol`` the gap to reach relative to the gap at
the start (w = 0: the mean loss there, log 2 for logistic regression, 1 for the SVM).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ilargi_db.backend import to_host
from ilargi_db.errors import IlargiError, spell
from ilargi_db.linalg import PartitionedMatrix, ScaledMatrix
from ilargi_db.models._base import record_not_converged
from ilargi_db.models.catalog import (
    DUHL_HELD_PARTITIONS,
    algorithm_facts,
    duhl_working_set,
    l2_penalty,
)
from ilargi_db.models.duhl import DuHLFit, RowPartitions, duhl_fit, start_gap


def host_rows(y: Any) -> np.ndarray:
    """A per-row vector on the host, whether whole or kept in a partitioned matrix's pieces (``keep_rows``)."""
    pieces = getattr(y, "pieces", None)
    if pieces is None:
        return np.asarray(to_host(y), dtype=np.float64)
    if not all(hasattr(p, "shape") for p in pieces):  # futures on a cluster's workers
        raise IlargiError(
            f"{spell('solver', 'duhl')} holds its working set in this process: leave out cluster, or choose "
            "another solver."
        )
    return np.concatenate([np.asarray(to_host(p), dtype=np.float64) for p in pieces])


def working_set(M: Any, rows: RowPartitions) -> int:
    """Partitions DuHL holds: all of a matrix in memory; of a streamed one, those that fit, as DuHL holds them, in
    the room of the :data:`DUHL_HELD_PARTITIONS` partitions the memory budget was sized for (at least one)."""
    base = M.base if isinstance(M, ScaledMatrix) else M
    if not isinstance(base, PartitionedMatrix) or not base.streamed:
        return rows.n_partitions
    held = rows.row_bytes * rows.shape[0] / rows.n_partitions
    return duhl_working_set(rows.n_partitions, DUHL_HELD_PARTITIONS * base.nbytes, held)


HELD_SHARE_OF_MEMORY = 0.5  # DuHL's held rows may take at most this share of the machine's memory


def check_held_rows(rows: RowPartitions, held: int) -> None:
    """Refuse, before anything is built, a working set whose rows would not fit in memory (rows dense where
    their entries are many: n x d doubles where the rest of the library keeps them factorized)."""
    n, d = rows.shape
    rows_bytes = rows.row_bytes * n * held / max(rows.n_partitions, 1)
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): nothing to compare with
        return
    if rows_bytes > HELD_SHARE_OF_MEMORY * memory:
        raise IlargiError(
            f"{spell('solver', 'duhl')} holds its working set in memory: {rows_bytes / 2**30:,.1f} GiB here "
            f"({n:,} rows x {d:,} columns), over half this machine's memory. Give a "
            "memory_budget (it then holds what fits and streams the rest), or choose another solver."
        )


def fit_duhl(
    estimator: Any, algorithm: str, M: Any, y: Any, loss: str, *, center: bool = False, intercept_scaling: float = 0.0
) -> DuHLFit:
    """Fit ``estimator``'s problem on ``M`` by DuHL and set ``duality_gap_``, ``n_iter_``, ``working_set_``.

    ``y``: the target (the squared loss) or labels -1 and 1; ``center`` or ``intercept_scaling``: the
    intercept (:mod:`ilargi_db.models.duhl`). A stop at ``max_iter`` certificates is recorded as not converged.
    """
    y = host_rows(y)
    n = M.shape[0]
    lam = l2_penalty(algorithm, estimator.get_params(), n)
    if not lam > 0:
        raise IlargiError(
            f"{spell('solver', 'duhl')} solves the dual, which needs a positive L2 penalty: set "
            f"{algorithm_facts(algorithm).penalty.fix}, or choose another solver."
        )
    rows = RowPartitions(M, intercept_scaling=intercept_scaling)  # how DuHL will hold them: nothing read yet
    held, partitions = working_set(M, rows), rows.n_partitions
    check_held_rows(rows, held)
    # An iteration: an epoch's worth of coordinate steps on the working set, then the certificate's pass.
    rounds = estimator.max_iter * max(partitions // held, 1)
    centered = y - y.mean() if center and n else y
    target = estimator.tol * start_gap(centered, loss)
    fit = duhl_fit(
        M,
        y,
        lam,
        held,
        target,
        loss,
        max_rounds=rounds,
        center=center,
        intercept_scaling=intercept_scaling,
    )
    estimator.duality_gap_ = fit.gap_
    estimator.n_iter_ = fit.certificates_
    estimator.working_set_ = held
    estimator.partition_loads_ = fit.loads_
    if fit.gap_ > target:
        record_not_converged(estimator, f"{algorithm} (duhl)", estimator.max_iter)
    return fit


__all__ = ["fit_duhl", "host_rows", "working_set"]
