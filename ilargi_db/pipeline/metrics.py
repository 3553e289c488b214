"""The metrics of a fitted model: the cheap ones a training reports, and the full set ``evaluate`` reports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ilargi_db.backend import to_host
from ilargi_db.models.algorithm import Metrics
from ilargi_db.models.catalog import SUPERVISED


def training_metrics(model: Any, X: Any, y: Any) -> dict[str, float]:
    """The cheap metrics a training reports (:meth:`~ilargi_db.models.algorithm.JoinEstimator.training_metrics`):
    what the fit already knows, or one more pass over the rows, on the target's labels."""
    supervised = y is not None and model.algorithm_ in SUPERVISED
    labels = model.target_labels(np.asarray(to_host(y), dtype=float)) if supervised else None
    return model.estimator_.training_metrics(X, labels)


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


def _regression(model: Any, X: Any, y: np.ndarray) -> dict[str, float]:
    from sklearn import metrics

    p = model.predict(X)
    return {
        "r2": float(metrics.r2_score(y, p)) if len(y) > 1 else float("nan"),
        "rmse": float(np.sqrt(metrics.mean_squared_error(y, p))),
        "mae": float(metrics.mean_absolute_error(y, p)),
    }


def _two_classes(truth: np.ndarray, guess: np.ndarray, score: np.ndarray, loss: dict[str, float]) -> dict[str, float]:
    """A binary model's metrics from its guesses and its scores (ROC AUC), beside its ``loss``."""
    from sklearn import metrics

    both = len(np.unique(truth)) == 2
    return {
        "accuracy": float(metrics.accuracy_score(truth, guess)),
        "precision": float(metrics.precision_score(truth, guess, zero_division=0)),
        "recall": float(metrics.recall_score(truth, guess, zero_division=0)),
        "f1": float(metrics.f1_score(truth, guess, zero_division=0)),
        **loss,
        "roc_auc": float(metrics.roc_auc_score(truth, score)) if both else float("nan"),
    }


def _classification(model: Any, X: Any, y: np.ndarray) -> dict[str, float]:
    from sklearn import metrics

    if len(model.classes_) > 2:
        return _multiclass_metrics(model.classes_, y, model.predict_proba(X))
    truth = y == model.classes_[1]
    score = model.predict_proba(X)[:, 1]
    loss = float(metrics.log_loss(truth, score, labels=[False, True]))
    return _two_classes(truth, score > 0.5, score, {"log_loss": loss})


def _margin(model: Any, X: Any, y: np.ndarray) -> dict[str, float]:
    """An SVM's class and score: no probability, so its hinge loss for the log-loss."""
    truth = y == model.classes_[1]
    score = model.decision_function(X)
    hinge = np.maximum(0.0, 1.0 - np.where(truth, 1.0, -1.0) * score).mean()
    return _two_classes(truth, score > 0, score, {"hinge_loss": float(hinge)})


# What ``evaluate`` reports, by the metrics that describe the model (its estimator's ``metrics_kind()``).
EVALUATIONS: dict[Metrics, Callable[[Any, Any, Any], dict[str, float]]] = {
    Metrics.REGRESSION: _regression,
    Metrics.CLASSIFICATION: _classification,
    Metrics.MARGIN: _margin,
    Metrics.CLUSTERING: lambda model, X, y: {"inertia": -float(model.score(X))},
    Metrics.FACTORIZATION: lambda model, X, y: {"reconstruction_error": model.reconstruction_error(X)},
}


def metrics_of(model: Any, X: Any, y: Any) -> dict[str, float]:
    """The metrics ``evaluate`` reports, of a fitted ``model`` on encoded rows ``X`` (and labels ``y``)."""
    if y is not None and model.algorithm_ in SUPERVISED:
        y = model.target_labels(np.asarray(to_host(y), dtype=float))
    return EVALUATIONS[model.estimator_.metrics_kind()](model, X, y)
