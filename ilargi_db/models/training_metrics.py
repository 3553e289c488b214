"""The metrics a training reports of a fitted linear model, from sums over its training rows in one pass.

Sums over the rows (``reduce_rows``): a streamed or distributed matrix computes them where its rows are,
without an n-length vector of scores. Ranking metrics (ROC AUC) and the like cost a sort of every row:
``evaluate`` reports them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ilargi_db.linalg import as_matrix


def _regression_sums(X: Any, rows: tuple, args: tuple) -> tuple:
    """Over these rows, r = X w + b - y: r . r, sum |r| and sum (y - mean y)^2."""
    (y,), (w, b, y_mean) = rows, args
    r = X @ w + (b - y)
    return float(r @ r), float(X.backend.xp.abs(r).sum()), float(((y - y_mean) ** 2).sum())


def _classification_sums(X: Any, rows: tuple, args: tuple) -> tuple:
    """Over these rows, z = X w + b against 0/1 truths: the rows classified right, and the summed log-loss."""
    (truth,), (w, b) = rows, args
    z = X @ w + b
    xp = X.backend.xp
    right = float(((z > 0) == (truth > 0.5)).sum())
    return right, float((xp.logaddexp(0, z) - xp.where(truth > 0.5, z, 0.0)).sum())  # -log p of the true class


def _multinomial_sums(X: Any, rows: tuple, args: tuple) -> tuple:
    """Over these rows, scores Z = X W + b (k columns) against class indices: rows classified right, summed log-loss."""
    (index,), (W, b) = rows, args
    Z = X @ W + b
    xp = X.backend.xp
    top = Z.max(axis=1)
    log_norm = top + xp.log(xp.exp(Z - top[:, None]).sum(axis=1))
    true_score = xp.take_along_axis(Z, index[:, None], axis=1)[:, 0]
    return float((Z.argmax(axis=1) == index).sum()), float((log_norm - true_score).sum())


def _margin_sums(X: Any, rows: tuple, args: tuple) -> tuple:
    """Over these rows, z = X w + b against labels -1/1: the rows classified right, and the summed hinge loss."""
    (signs,), (w, b) = rows, args
    z = X @ w + b
    return float((z * signs > 0).sum()), float(X.backend.xp.maximum(1.0 - signs * z, 0.0).sum())


def _weights(M: Any, model: Any) -> tuple[Any, float]:
    return M.backend.asarray(np.asarray(model.coef_, dtype=float)), float(model.intercept_)


def regression_metrics(model: Any, X: Any, y: np.ndarray) -> dict[str, float]:
    """r2, rmse and mae of a fitted linear regression on rows ``X`` with targets ``y``."""
    M, n = as_matrix(X), len(y)  # as_matrix: a normalized matrix, row partitions of one, or a plain array
    w, b = _weights(M, model)
    squares, absolute, total = M.reduce_rows(_regression_sums, (M.keep_rows(M.backend.asarray(y)),), (w, b, y.mean()))
    return {
        "r2": 1.0 - squares / total if total > 0 and n > 1 else float("nan"),
        "rmse": float(np.sqrt(squares / n)),
        "mae": absolute / n,
    }


def log_loss_metrics(model: Any, X: Any, y: np.ndarray) -> dict[str, float]:
    """Accuracy and log-loss of a fitted logistic regression (binary, or multinomial past two classes)."""
    M, n = as_matrix(X), len(y)
    if len(model.classes_) > 2:  # multinomial: coef_ is (k, d)
        index = M.keep_rows(M.backend.asarray(np.searchsorted(model.classes_, y)))
        W, b = M.backend.asarray(np.asarray(model.coef_, dtype=float).T), M.backend.asarray(model.intercept_)
        right, log_loss = M.reduce_rows(_multinomial_sums, (index,), (W, b))
    else:
        truth = M.keep_rows(M.backend.asarray((y == model.classes_[1]).astype(float)))
        right, log_loss = M.reduce_rows(_classification_sums, (truth,), _weights(M, model))
    return {"accuracy": right / n, "log_loss": log_loss / n}


def hinge_metrics(model: Any, X: Any, y: np.ndarray) -> dict[str, float]:
    """Accuracy and hinge loss of a fitted linear SVM: it has no probability for a log-loss."""
    M, n = as_matrix(X), len(y)
    signs = M.keep_rows(M.backend.asarray(np.where(y == model.classes_[1], 1.0, -1.0)))
    right, hinge = M.reduce_rows(_margin_sums, (signs,), _weights(M, model))
    return {"accuracy": right / n, "hinge_loss": hinge / n}
