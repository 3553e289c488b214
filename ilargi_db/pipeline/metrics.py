"""The metrics of a fitted model: the cheap ones a training reports, and the full set ``evaluate`` reports."""

from __future__ import annotations

from typing import Any

import numpy as np

from ilargi_db.backend import to_host
from ilargi_db.linalg import as_matrix
from ilargi_db.models.catalog import SUPERVISED, algorithm_facts


def _regression_sums(X: Any, rows: tuple, args: tuple) -> tuple:
    """Over these rows (``reduce_rows``), r = X w + b - y: r . r, sum |r| and sum (y - mean y)^2."""
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


def metrics_kind(model: Any) -> str:
    """What metrics describe ``model``: its algorithm's, or for boosting its fitted objective's."""
    kind = algorithm_facts(model.algorithm_).metrics
    if kind == "objective":
        return "classification" if model.loss_.classifies else "regression"
    return kind


def training_metrics(model: Any, X: Any, y: Any) -> dict[str, float]:
    """The cheap metrics a training reports: what the fit already knows, or one more pass over the rows.

    Sums over the rows (``reduce_rows``): a streamed or distributed matrix computes them where its rows
    are, without an n-length vector of scores. Ranking metrics (ROC AUC) and the like cost a sort of every
    row: :func:`evaluate` reports them.
    """
    kind = algorithm_facts(model.algorithm_).metrics
    if kind == "objective":  # boosting scored its training rows as it fitted: no pass over them again
        return dict(model.estimator_.fit_metrics_)
    if kind == "clustering":
        return {"inertia": float(model.inertia_)}
    if kind == "factorization":
        return {"reconstruction_error": float(model.reconstruction_err_)}
    M = as_matrix(X)  # what training holds (a normalized matrix, or row partitions of one), or a plain array
    y = model.target_labels(np.asarray(to_host(y), dtype=float))
    n = len(y)
    if kind == "classification" and len(model.classes_) > 2:  # multinomial: coef_ is (k, d)
        index = M.keep_rows(M.backend.asarray(np.searchsorted(model.classes_, y)))
        W, b = M.backend.asarray(np.asarray(model.coef_, dtype=float).T), M.backend.asarray(model.intercept_)
        right, log_loss = M.reduce_rows(_multinomial_sums, (index,), (W, b))
        return {"accuracy": right / n, "log_loss": log_loss / n}
    w, b = M.backend.asarray(np.asarray(model.coef_, dtype=float)), float(model.intercept_)
    if kind == "regression":
        y_mean = float(y.mean())
        squares, absolute, total = M.reduce_rows(_regression_sums, (M.keep_rows(M.backend.asarray(y)),), (w, b, y_mean))
        return {
            "r2": 1.0 - squares / total if total > 0 and n > 1 else float("nan"),
            "rmse": float(np.sqrt(squares / n)),
            "mae": absolute / n,
        }
    if kind == "margin":  # an SVM: no probability, its hinge loss instead
        signs = M.keep_rows(M.backend.asarray(np.where(y == model.classes_[1], 1.0, -1.0)))
        right, hinge = M.reduce_rows(_margin_sums, (signs,), (w, b))
        return {"accuracy": right / n, "hinge_loss": hinge / n}
    truth = M.keep_rows(M.backend.asarray((y == model.classes_[1]).astype(float)))
    right, log_loss = M.reduce_rows(_classification_sums, (truth,), (w, b))
    return {"accuracy": right / n, "log_loss": log_loss / n}


def _multiclass_metrics(classes: np.ndarray, y: np.ndarray, proba: np.ndarray) -> dict[str, float]:
    """A multinomial model's metrics: precision, recall, f1 and ROC AUC averaged over the classes (macro, one
    class against the rest), as scikit-learn's ``average="macro"`` gives them."""
    from sklearn import metrics

    guess = classes[np.argmax(proba, axis=1)]
    present = np.isin(classes, y)
    return {
        "accuracy": float(metrics.accuracy_score(y, guess)),
        "precision": float(metrics.precision_score(y, guess, average="macro", zero_division=0)),
        "recall": float(metrics.recall_score(y, guess, average="macro", zero_division=0)),
        "f1": float(metrics.f1_score(y, guess, average="macro", zero_division=0)),
        "log_loss": float(metrics.log_loss(y, proba, labels=classes)),
        # every class seen among the rows, or ROC AUC is undefined
        "roc_auc": float(metrics.roc_auc_score(y, proba, multi_class="ovr", labels=classes))
        if present.all()
        else float("nan"),
    }


def metrics_of(model: Any, X: Any, y: Any) -> dict[str, float]:
    """The metrics ``evaluate`` reports, of a fitted ``model`` on encoded rows ``X`` (and labels ``y``)."""
    from sklearn import metrics

    kind = metrics_kind(model)
    if model.algorithm_ in SUPERVISED:
        y = model.target_labels(np.asarray(to_host(y), dtype=float))
    if kind == "regression":
        p = model.predict(X)
        return {
            "r2": float(metrics.r2_score(y, p)) if len(y) > 1 else float("nan"),
            "rmse": float(np.sqrt(metrics.mean_squared_error(y, p))),
            "mae": float(metrics.mean_absolute_error(y, p)),
        }
    if kind == "classification" and len(model.classes_) > 2:
        return _multiclass_metrics(model.classes_, y, model.predict_proba(X))
    if kind in ("margin", "classification"):
        truth = y == model.classes_[1]
        if kind == "margin":  # an SVM's class and score: no probability, so its hinge loss for the log-loss
            score = model.decision_function(X)
            hinge = np.maximum(0.0, 1.0 - np.where(truth, 1.0, -1.0) * score).mean()
            guess, loss = score > 0, {"hinge_loss": float(hinge)}
        else:
            score = model.predict_proba(X)[:, 1]
            guess, loss = score > 0.5, {"log_loss": float(metrics.log_loss(truth, score, labels=[False, True]))}
        both = len(np.unique(truth)) == 2
        return {
            "accuracy": float(metrics.accuracy_score(truth, guess)),
            "precision": float(metrics.precision_score(truth, guess, zero_division=0)),
            "recall": float(metrics.recall_score(truth, guess, zero_division=0)),
            "f1": float(metrics.f1_score(truth, guess, zero_division=0)),
            **loss,
            "roc_auc": float(metrics.roc_auc_score(truth, score)) if both else float("nan"),
        }
    if kind == "clustering":
        return {"inertia": -float(model.score(X))}
    return {"reconstruction_error": model.reconstruction_error(X)}
