"""Multinomial logistic regression (softmax cross-entropy) for a target of more than two classes.

scikit-learn's objective for ``LogisticRegression(solver="lbfgs")`` on k > 2 classes: the mean softmax
cross-entropy plus ``||W||^2 / 2Cn`` (the intercepts unpenalized), minimized by L-BFGS over factorized
products: the scores are ``X @ W.T`` (one product for the k columns) and the gradient ``X.T @ (P - Y)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.optimize
from scipy.special import logsumexp
from sklearn.utils.multiclass import check_classification_targets, type_of_target

from ilargi_db._terminal import progress
from ilargi_db.errors import IlargiError
from ilargi_db.models._base import binary_classes, check_finite, record_not_converged, to_host

MULTINOMIAL_SOLVERS = ("lbfgs",)  # the solvers that fit more than two classes


def logistic_classes(y_host: np.ndarray, solver: str) -> np.ndarray:
    """The target's classes, sorted: two for the binary model, more for the multinomial one (lbfgs only)."""
    if type_of_target(y_host) != "continuous":
        check_classification_targets(y_host)
        classes = np.unique(y_host)
        if len(classes) > 2:
            if solver not in MULTINOMIAL_SOLVERS:
                # scikit-learn's words first: its estimator checks look for them
                raise IlargiError(
                    f'Only binary classification is supported by solver="{solver}": the multinomial model of '
                    f'the target\'s {len(classes)} classes is fitted by solver="lbfgs" only. Use solver="lbfgs", '
                    "or encode two classes in the query (e.g. y = 2 AS is_two)."
                )
            return classes
    return binary_classes(y_host, "logistic regression", ", or use kmeans to group rows without a label")


def softmax(scores: np.ndarray) -> np.ndarray:
    """Row-wise softmax of an (n, k) array, stable for large scores."""
    return np.exp(scores - logsumexp(scores, axis=1, keepdims=True))


def multinomial_objective(
    M: Any, onehot: np.ndarray, params: np.ndarray, C: float | None, fit_intercept: bool
) -> tuple[float, np.ndarray, float]:
    """scikit-learn's multinomial objective at ``params`` ((k, d + fit_intercept), flattened), its gradient, the loss.

    ``onehot`` is the (n, k) indicator of each row's class; ``C=None`` means no penalty.
    One product ``M @ W.T`` for the scores and one ``M.T @ (P - Y)`` for the gradient: two passes over X.
    """
    n, d = M.shape
    k = onehot.shape[1]
    P = params.reshape(k, d + fit_intercept)
    W = P[:, :d]
    scores = to_host(M @ M.backend.asarray(np.ascontiguousarray(W.T)))
    if fit_intercept:
        scores = scores + P[:, d]
    log_norm = logsumexp(scores, axis=1)
    mean_loss = float(np.sum(log_norm) - np.sum(scores * onehot)) / n
    residual = np.exp(scores - log_norm[:, None]) - onehot  # P - Y
    strength = 1.0 / (C * n) if C is not None else 0.0
    grad = np.empty_like(P)
    grad[:, :d] = to_host(M.T @ M.backend.asarray(residual, dtype=M.dtype)).T / n + strength * W
    if fit_intercept:
        grad[:, d] = residual.sum(axis=0) / n
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
    onehot = (y_host[:, None] == classes[None, :]).astype(float)
    C = estimator.C if estimator.penalty == "l2" else None
    fit = estimator.fit_intercept
    width = d + fit
    losses: list[float] = []
    last: dict[bytes, float] = {}
    bar = progress(estimator.max_iter, "logistic regression (multinomial, lbfgs)")

    def fun(params):
        value, grad, mean_loss = multinomial_objective(M, onehot, params, C, fit)
        check_finite(value, "the log-loss")
        last.clear()
        last[params.tobytes()] = mean_loss
        return value, grad

    def callback(params):
        known = last.get(params.tobytes())
        losses.append(known if known is not None else multinomial_objective(M, onehot, params, C, fit)[2])
        bar.update()

    result = scipy.optimize.minimize(
        fun,
        np.zeros(len(classes) * width),
        jac=True,
        method="L-BFGS-B",
        callback=callback,
        options={"maxiter": estimator.max_iter, "maxls": 50, "gtol": estimator.tol, "ftol": 64 * np.finfo(float).eps},
    )
    bar.close()
    params = result.x.reshape(len(classes), width)
    estimator.coef_ = params[:, :d].copy()
    estimator.intercept_ = params[:, d].copy() if fit else np.zeros(len(classes))
    estimator.n_iter_ = int(result.nit)
    estimator.loss_curve_ = losses or [multinomial_objective(M, onehot, result.x, C, fit)[2]]
    if result.status == 1:  # scipy: the iteration limit was reached
        record_not_converged(estimator, "logistic regression (multinomial, lbfgs)", estimator.max_iter)
