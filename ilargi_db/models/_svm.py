"""A linear support vector machine over joined tables, fitted in the dual by DuHL."""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np

from ilargi_db.models._base import (
    HostTargetScoreMixin,
    as_matrix,
    binary_classes,
    check_input,
    to_host,
    warn_if_not_converged,
)
from ilargi_db.models._duhl_solver import fit_duhl
from ilargi_db.models._linear import _LinearModel
from ilargi_db.models._row_sums import _hinge
from ilargi_db.models.algorithm import Metrics
from ilargi_db.models.estimator import ClassifierMixin, Interval
from ilargi_db.models.training_metrics import hinge_metrics


class LinearSVC(HostTargetScoreMixin, ClassifierMixin, _LinearModel):
    """Binary linear SVM: the hinge loss with an L2 penalty, scikit-learn's ``LinearSVC(loss="hinge")``.

    Minimizes ``0.5 ||w||^2 + C sum_i max(0, 1 - s_i (x_i w + b))`` with s_i = +-1, in the dual
    (``dual=True``, as liblinear) by DuHL: coordinate steps on row partitions, those of largest duality gap
    held in memory (all of them when the data are; under ``train``'s ``memory_budget``, the rest streamed).

    Parameters
    ----------
    C : float, default=1.0
        Inverse regularization strength (DuHL's lambda = 1 / (C n)).
    fit_intercept : bool, default=True
        Fit ``intercept_`` as liblinear does: the weight of a constant column of value
        ``intercept_scaling``, penalized like the others. scikit-learn's ``LinearSVC`` with the same
        ``intercept_scaling`` fits the same model.
    intercept_scaling : float, default=1.0
        The constant column's value; a larger one penalizes the intercept less.
    tol : float, default=1e-4
        Stop when the duality gap falls below ``tol`` times its value at the start (1, the hinge at w = 0).
    max_iter : int, default=1000
        Iterations: an epoch's worth of coordinate steps, then a pass refreshing every row's gap.

    Attributes
    ----------
    classes_ : ndarray of shape (2,)
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
    duality_gap_ : float
        The mean duality gap at the end: the objective is at most C n times it above the optimum.
    n_iter_ : int
    loss_curve_ : list of float
        The mean hinge loss at the end.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
    >>> LinearSVC(C=10.0).fit(X, [0, 0, 1, 1]).predict([[0.5], [2.5]])
    array([0, 1])
    """

    _parameter_constraints: dict = {
        "C": [Interval(Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "intercept_scaling": [Interval(Real, 0, None, closed="neither")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        C: float = 1.0,
        fit_intercept: bool = True,
        intercept_scaling: float = 1.0,
        tol: float = 1e-4,
        max_iter: int = 1000,
    ):
        self.C = C
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.tol = tol
        self.max_iter = max_iter

    def fit(self, X: Any, y: Any, *, warn: bool = True) -> LinearSVC:
        """Fit on a NormalizedMatrix (factorized, in memory or streamed) or an array/sparse matrix.

        ``warn=False`` keeps a stop at ``max_iter`` in ``convergence_warning_`` only.
        """
        self._validate_params()
        self.convergence_warning_ = None
        X, y_host = check_input(self, X, y, reset=True)
        self.classes_ = binary_classes(y_host, "a linear SVM")
        M = as_matrix(X)
        signs = np.where(np.asarray(y_host) == self.classes_[1], 1.0, -1.0)
        scaling = self.intercept_scaling if self.fit_intercept else 0.0
        fit = fit_duhl(self, "linear_svc", M, signs, "hinge", intercept_scaling=scaling)
        self.coef_, self.intercept_ = fit.coef_, fit.intercept_
        kept = M.keep_rows(M.backend.asarray(signs, dtype=M.dtype))
        (hinge,) = M.reduce_rows(_hinge, (kept,), (M.backend.asarray(fit.coef_), fit.intercept_))
        self.loss_curve_ = [hinge / max(M.shape[0], 1)]
        if warn:
            warn_if_not_converged(self)
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        """The signed distance to the hyperplane, times ||w||: positive for ``classes_[1]``."""
        return to_host(self._decision(X))

    def predict(self, X: Any) -> np.ndarray:
        score = self.decision_function(X)  # checks the fit first
        return self.classes_[(score > 0).astype(int)]

    metrics = Metrics.MARGIN  # what the pipeline asks (models/algorithm.py)

    def training_metrics(self, X: Any, y: Any) -> dict[str, float]:
        return hinge_metrics(self, X, y)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags
