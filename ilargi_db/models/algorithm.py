"""What every ilargi_db estimator tells the pipeline about itself, so that the pipeline asks and never switches.

The catalog (:mod:`ilargi_db.models.catalog`) holds the facts known before an estimator exists (its solvers,
how it reads, which macro form scores it). What depends on the estimator's parameters or its fit lives on the
estimator, as the :class:`JoinEstimator` protocol below: how its metrics are reported, whether it classifies a
target, and whether it may start from an earlier model's coefficients. :class:`FixedMetrics` gives the part
that most estimators share.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from ilargi_db.models.catalog import Choice


class Metrics(Choice):
    """Which metrics describe a fitted model (those a training reports, and those ``evaluate`` reports)."""

    REGRESSION = "regression"  # r2, rmse, mae
    CLASSIFICATION = "classification"  # accuracy, log-loss (and precision, recall, f1, ROC AUC when evaluated)
    MARGIN = "margin"  # an SVM's classes from a score without a probability: its hinge loss for the log-loss
    CLUSTERING = "clustering"  # inertia
    FACTORIZATION = "factorization"  # the reconstruction error

    @property
    def classifies(self) -> bool:
        """Whether the model predicts classes (its cross-validation folds keep each class's share)."""
        return self in (Metrics.CLASSIFICATION, Metrics.MARGIN)


@runtime_checkable
class JoinEstimator(Protocol):
    """What the pipeline, the model selection and the registry ask of an estimator besides scikit-learn's API."""

    def metrics_kind(self) -> Metrics:
        """The metrics that describe this fitted estimator."""
        ...

    def classifies(self, y: Any = None) -> bool | None:
        """Whether it classifies the rows of target ``y`` (None: only the rows can say, and ``y`` was not given)."""
        ...

    def training_metrics(self, X: Any, y: Any) -> dict[str, float]:
        """The cheap metrics of this fitted estimator on its training rows ``X`` (labels ``y``): what the fit knows,
        or sums over the rows in one pass (``reduce_rows``: where a streamed or distributed matrix's rows are)."""
        ...

    def takes_start(self, n_columns: int, y: Any) -> bool:
        """Whether a fit of these settings on ``n_columns`` columns and target ``y`` may start from an earlier
        model's coefficients and still land on the cold start's result (within its tolerance)."""
        ...

    def start_arguments(self, coef: np.ndarray, intercept: float) -> dict[str, Any]:
        """The ``fit`` keyword arguments that start it from ``coef`` and ``intercept``."""
        ...


class FixedMetrics:
    """The :class:`JoinEstimator` part of an estimator whose metrics its class fixes, with no start from an earlier
    model by default (a start would change a non-convex fit's result): the convex linear models override
    ``takes_start`` and ``start_arguments``."""

    metrics: ClassVar[Metrics]

    def metrics_kind(self) -> Metrics:
        return self.metrics

    def classifies(self, y: Any = None) -> bool | None:
        return self.metrics.classifies

    def takes_start(self, n_columns: int, y: Any) -> bool:
        return False

    def start_arguments(self, coef: np.ndarray, intercept: float) -> dict[str, Any]:
        return {}
