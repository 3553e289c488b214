"""The linear models' sums over the rows, one pass each (``reduce_rows``).

On a partitioned matrix they run on every partition where it is (streamed, or on a cluster's workers) and
only these sums travel, never an n-length vector.
"""

from __future__ import annotations

from typing import Any


def _squared_error(X: Any, rows: tuple, args: tuple) -> tuple:
    """r = X w + c - y over these rows: X^T r, sum(r) and r . r."""
    (y,), (w, c) = rows, args
    r = X @ w + (c - y)
    return X.T @ r, float(r.sum()), float(r @ r)


def _normal_statistics(X: Any, rows: tuple, args: tuple) -> tuple:
    """Over these rows: X^T X, X^T y, the column sums and sum(y): what the normal equations need, one pass."""
    (y,) = rows
    return X.crossprod(), X.T @ y, X.colsums(), float(y.sum())


def _centered_target(X: Any, rows: tuple, args: tuple) -> tuple:
    """b = y - mean over these rows (centered before any sum, so no digits cancel): X^T b, sum(b), b . b."""
    (y,), (mean,) = rows, args
    b = y - mean
    return X.T @ b, float(b.sum()), float(b @ b)


def _normal_product(X: Any, rows: tuple, args: tuple) -> tuple:
    """q = X p - shift over these rows: X^T q, sum(q), q . q, and q . (y - mean) for the target y when given."""
    p, shift, mean = args
    q = X @ p - shift
    found = (X.T @ q, float(q.sum()), float(q @ q))
    return found + (float(q @ (rows[0] - mean)),) if rows else found


def _logistic(X: Any, rows: tuple, args: tuple) -> tuple:
    """z = X w + c over these rows: the summed log-loss, X^T (sigmoid(z) - y) and sum(sigmoid(z) - y)."""
    (y01,), (w, c) = rows, args
    z = X @ w
    if c:
        z += c
    loss, residual = X.backend.kernels.logistic_loss_residual(z, y01)  # the residual overwrites z
    return float(loss), X.T @ residual, float(residual.sum())


def _logistic_curvature(X: Any, rows: tuple, args: tuple) -> tuple:
    """With p = sigmoid(X w + c) and D = diag(p (1 - p)) over these rows: X^T D X, X^T D 1 and sum(D)."""
    (y01,), (w, c) = rows, args
    _, residual = X.backend.kernels.logistic_loss_residual(X @ w + c, y01)
    p = residual + y01
    weights = p * (1 - p)
    return X.crossprod(weights), X.T @ weights, float(weights.sum())


def _hinge(X: Any, rows: tuple, args: tuple) -> tuple:
    """z = X w + c over these rows against labels -1/1: the summed hinge loss max(0, 1 - y z)."""
    (signs,), (w, c) = rows, args
    margins = 1.0 - signs * (X @ w + c)
    return (float(X.backend.xp.maximum(margins, 0.0).sum()),)
