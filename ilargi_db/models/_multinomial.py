"""Multinomial logistic regression (softmax cross-entropy) for a target of more than two classes.

scikit-learn's objective for ``LogisticRegression(solver="lbfgs")`` on k > 2 classes: the mean softmax
cross-entropy plus ``||W||^2 / 2Cn`` (the intercepts unpenalized), minimized by L-BFGS over factorized
products: the scores are ``X @ W.T`` (one product for the k columns) and the gradient ``X.T @ (P - Y)``,
both in one pass over the rows (``reduce_rows``: a streamed or distributed matrix is read once per step).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ilargi_db.errors import IlargiError
from ilargi_db.models._base import binary_classes, minimize_lbfgs, to_host

MULTINOMIAL_SOLVERS = ("lbfgs",)  # the solvers that fit more than two classes


def logistic_classes(y_host: np.ndarray, solver: str) -> np.ndarray:
    """The target's classes, sorted: two for the binary model, more for the multinomial one (lbfgs only)."""
    fix = ", or use kmeans to group rows without a label"
    classes = binary_classes(y_host, "logistic regression", fix, multiclass=True)
    if len(classes) > 2 and solver not in MULTINOMIAL_SOLVERS:
        # scikit-learn's words first: its estimator checks look for them
        raise IlargiError(
            f'Only binary classification is supported by solver="{solver}": the multinomial model of '
            f'the target\'s {len(classes)} classes is fitted by solver="lbfgs" only. Use solver="lbfgs", '
            "or encode two classes in the query (e.g. y = 2 AS is_two)."
        )
    return classes


def softmax(scores: np.ndarray) -> np.ndarray:
    """Row-wise softmax of an (n, k) array, stable for large scores."""
    E = np.exp(scores - scores.max(axis=1, keepdims=True))
    return E / E.sum(axis=1, keepdims=True)


def _softmax_rows(X: Any, rows: tuple, args: tuple) -> tuple:
    """Over these rows (``reduce_rows``), Z = X W^T + b against the one-hot labels Y: the summed
    cross-entropy, X^T (P - Y) and the column sums of P - Y, with P the row-wise softmax of Z."""
    (onehot,), (Wt, b) = rows, args
    xp = X.backend.xp
    Z = X @ Wt + b
    Z -= Z.max(axis=1, keepdims=True)  # the softmax and the loss are unchanged by a shift per row
    E = xp.exp(Z)
    norm = E.sum(axis=1, keepdims=True)
    loss = float((xp.log(norm[:, 0]) - (Z * onehot).sum(axis=1)).sum())
    residual = E / norm - onehot  # P - Y
    return loss, X.T @ residual, residual.sum(axis=0)


def multinomial_objective(
    M: Any, onehot: Any, params: np.ndarray, C: float | None, fit_intercept: bool
) -> tuple[float, np.ndarray, float]:
    """scikit-learn's multinomial objective at ``params`` ((k, d + fit_intercept), flattened), its gradient, the loss.

    ``onehot`` is the (n, k) indicator of each row's class as ``M.keep_rows`` keeps it; ``C=None`` means no
    penalty. One pass over the rows per call (:func:`_softmax_rows`): the scores ``X @ W^T`` and the
    gradient ``X^T (P - Y)`` of a partition are computed together, so a streamed matrix is read once.
    """
    n, d = M.shape
    k = len(params) // (d + fit_intercept)
    P = params.reshape(k, d + fit_intercept)
    W = P[:, :d]
    b = P[:, d] if fit_intercept else np.zeros(k)
    backend = M.backend
    loss, xtr, residual_sum = M.reduce_rows(
        _softmax_rows,
        (onehot,),
        (backend.asarray(np.ascontiguousarray(W.T), dtype=M.dtype), backend.asarray(b, dtype=M.dtype)),
    )
    strength = 1.0 / (C * n) if C is not None else 0.0
    grad = np.empty_like(P)
    grad[:, :d] = to_host(xtr).T / n + strength * W
    if fit_intercept:
        grad[:, d] = to_host(residual_sum) / n
    mean_loss = loss / n
    value = mean_loss + 0.5 * strength * float(np.sum(W * W))
    return value, grad.ravel(), mean_loss


def fit_multinomial(estimator: Any, M: Any, y_host: np.ndarray, warm_start: tuple) -> None:
    """Fit ``estimator`` (a LogisticRegression whose ``classes_`` has k > 2 entries) by L-BFGS, from zeros.

    ``warm_start`` is ``fit``'s (coef_init, intercept_init): refused here (the binary model's shape).
    Sets ``coef_`` (k, d), ``intercept_`` (k,), ``n_iter_`` and ``loss_curve_``; the stopping rule and
    settings are scikit-learn's, so both stop at the same point.
    """
    if any(part is not None for part in warm_start):
        raise IlargiError(
            "coef_init and intercept_init warm-start the binary model only: fit the multinomial one "
            f"({len(estimator.classes_)} classes) without them."
        )
    n, d = M.shape
    classes = estimator.classes_
    onehot = M.keep_rows(M.backend.asarray((y_host[:, None] == classes[None, :]).astype(float), dtype=M.dtype))
    C = estimator.C if estimator.penalty == "l2" else None
    fit = estimator.fit_intercept
    width = d + fit
    what = "logistic regression (multinomial, lbfgs)"
    objective = lambda params: multinomial_objective(M, onehot, params, C, fit)  # noqa: E731
    result, losses = minimize_lbfgs(objective, np.zeros(len(classes) * width), estimator, what)
    params = result.x.reshape(len(classes), width)
    estimator.coef_ = params[:, :d].copy()
    estimator.intercept_ = params[:, d].copy() if fit else np.zeros(len(classes))
    estimator.n_iter_ = int(result.nit)
    estimator.loss_curve_ = losses
