"""What every tree ensemble estimator shares: binning its input, its target's encoding, its fitted loss, and
prediction from its :class:`~ilargi_db.models.tree_ensemble.TreeEnsemble`.

A subclass (gradient boosting, a random forest) says how it picks its objective (``_objective_for``) and grows its
trees (``_fit_trees``); prediction reads the ensemble through the fitted loss (its link, its classes' probabilities),
so the two predict, score and write macros alike.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any

import numpy as np

from ilargi_db.backend import NUMPY, Backend, get_backend
from ilargi_db.linalg.binned_matrix import BinnedMatrix, bin_array
from ilargi_db.linalg.feature_bins import quantile_bins
from ilargi_db.models._base import exact_classes
from ilargi_db.models.algorithm import Metrics
from ilargi_db.models.estimator import (
    Estimator,
    available_if,
    check_classification_targets,
    check_fitted,
    validate_data,
)
from ilargi_db.models.estimator import random_state as check_random_state
from ilargi_db.models.losses import LOSSES, Loss, loss_for


def _classifies(estimator: Any) -> bool:
    """Whether ``estimator`` classifies (or may: ``objective="auto"`` before fitting): it has predict_proba and
    decision_function then, as scikit-learn's regressors have neither."""
    objective = getattr(estimator, "objective_", estimator.objective)
    return objective == "auto" or LOSSES[objective].classifies


# objective="auto" refuses a target of 3 to this many whole numbers (7 positions coded 0-6 would otherwise be a
# regression on the codes, silently): classes or amounts, the caller says.
AMBIGUOUS_VALUES = 10


def _decides(estimator: Any) -> bool:
    """Whether ``estimator`` has a decision function: a boosted classifier's scores (a forest has only its shares)."""
    return estimator.scores_decide and _classifies(estimator)


class TreeModel(Estimator):
    """The shared part of the tree ensembles (see the module's docstring); ``trees_`` and ``baseline_`` once fitted."""

    classifying_objective = "log_loss"  # what objective="auto" picks for a target of two values
    algorithm_words = "gradient boosting"  # the estimator in an error's words
    scores_decide = True  # a classifier's raw scores are a decision function (log-odds, softmax scores)

    def max_nodes(self) -> int:
        """The most nodes ``trees_`` can hold with these parameters: ``n_estimators`` trees of at most
        ``2 * leaves - 1`` nodes, ``leaves`` the fewer of ``max_leaves`` and ``2 ** max_depth`` (known before any
        row is read; ilargi_db.limits bounds it)."""
        leaves = int(self.max_leaves)
        if self.max_depth is not None and int(self.max_depth) < leaves.bit_length():  # 2**depth < max_leaves
            leaves = min(leaves, 2 ** int(self.max_depth))
        return int(self.n_estimators) * (2 * leaves - 1)

    def node_count(self) -> int:
        """The nodes of the fitted trees (leaves and splits): what :meth:`max_nodes` bounds."""
        check_fitted(self, "trees_")
        return self.trees_.n_nodes

    def size_options(self) -> str:
        """The options :meth:`max_nodes` counts from, in words."""
        words = f"n_estimators={self.n_estimators} trees of max_leaves={self.max_leaves}"
        return words + (f" and max_depth={self.max_depth}" if self.max_depth is not None else "")

    # -- fitting ------------------------------------------------------------------------------------------

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # NaN is a missing value: each split sends it to a side
        return tags

    def _objective_for(self, y: np.ndarray) -> str:
        """``objective``, or where it is "auto" classification for a target of two values or of text labels,
        regression for one of many numbers; a few whole numbers (class codes, or small counts) are refused with
        both fixes, never guessed."""
        if self.objective != "auto":
            return self.objective
        values = np.unique(y)
        if len(values) == 2 or values.dtype.kind not in "biuf":  # two values, or labels (text): classes
            return self.classifying_objective
        if 2 < len(values) <= AMBIGUOUS_VALUES and values.dtype.kind in "biuf" and np.all(np.mod(values, 1) == 0):
            shown = ", ".join(f"{v:g}" for v in values.astype(float))
            raise ValueError(
                f"objective='auto' cannot tell whether the target's {len(values)} whole numbers ({shown}) are classes "
                f"or amounts: pass objective={self.classifying_objective!r} to classify them, or "
                "objective='squared_error' to predict the number."
            )
        return "squared_error"

    def _binned(self, X: Any, y: Any = None, reset: bool = True) -> tuple[BinnedMatrix, Any]:
        """``X`` as a binned matrix (a plain array binned with the fitted bins, or new ones when fitting)."""
        if isinstance(X, BinnedMatrix):
            if reset:
                self.n_features_in_ = X.shape[1]
                self.feature_names_in_ = np.asarray(X.feature_names, dtype=object)
            elif X.shape[1] != self.n_features_in_:
                raise ValueError(f"X has {X.shape[1]} features, but the model expects {self.n_features_in_}.")
            return X, y
        if not reset and any(b.categorical for b in self.bins_):  # text columns: each binned as its feature is
            validate_data(self, X, reset=False, dtype=None, ensure_all_finite=False)  # the names and the width
            rows = X.to_numpy(dtype=object) if hasattr(X, "to_numpy") else np.asarray(X, dtype=object)
            return bin_array(rows, self.bins_, self.missing_bin_), y
        if y is None:
            X = validate_data(self, X, reset=reset, dtype=np.float64, ensure_all_finite="allow-nan")
        else:
            X, y = validate_data(self, X, y, reset=reset, dtype=np.float64, ensure_all_finite="allow-nan")
        if reset:
            names = [str(n) for n in getattr(self, "feature_names_in_", [f"x{j}" for j in range(X.shape[1])])]
            self.bins_ = quantile_bins(X, names, self.max_bins)
        return bin_array(X, self.bins_, self.missing_bin_), y

    def fit(self, X: Any, y: Any, warn: bool = True) -> TreeModel:
        """Fit the ensemble on ``X`` (a binned matrix or an array) and ``y``; ``warn`` is accepted for the pipeline
        (a tree ensemble has nothing to warn of: it grows its trees)."""
        self._validate_params()
        self._check_parameters()
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None.")
        self.missing_bin_ = X.missing_bin if isinstance(X, BinnedMatrix) else self.max_bins
        X, y = self._binned(X, y, reset=True)
        if isinstance(X, BinnedMatrix) and y is not None:
            self.bins_ = list(X.bins)
        y = np.asarray(y).ravel()  # class labels may be text
        if y.shape != (X.n_rows,):
            raise ValueError(f"y must hold one value per row: {y.shape[0]} values for {X.n_rows} rows.")
        self.objective_ = self._objective_for(y)
        y = self._encode_target(y)
        if not np.isfinite(y).all():
            raise ValueError("y must hold one finite number per row (filter NULL targets in the query).")
        self._fit_trees(X, y)
        return self

    @property
    def loss_(self) -> Loss:
        """The fitted objective's loss (for the fitted classes): its gradients, link and whether it classifies."""
        check_fitted(self, "objective_")
        return loss_for(self.objective_, len(getattr(self, "classes_", ())))

    def _encode_target(self, y: np.ndarray) -> np.ndarray:
        if not self.loss_.classifies:
            y = y.astype(np.float64)
            if np.isfinite(y).all():
                self.loss_.check_target(y)
            return y
        if self.objective != "auto":  # asked for ("auto" found two values): a continuous target is refused
            check_classification_targets(y)
        self.classes_ = exact_classes(np.unique(y), self.algorithm_words)
        if len(self.classes_) < 2:
            raise ValueError(
                "classification needs at least two classes in the target; this one has "
                f"{len(self.classes_)}: train on rows of more than one class."
            )
        return np.searchsorted(self.classes_, y).astype(np.float64)  # each row's class index

    def _fit_trees(self, X: BinnedMatrix, y: np.ndarray) -> None:
        raise NotImplementedError

    def _check_parameters(self) -> None:
        """Refuse parameters that contradict each other (each alone checked by ``_parameter_constraints``), before
        anything is read from the data."""

    @staticmethod
    def growth_backend(X: BinnedMatrix) -> Backend:
        """Where the trees grow: the binned matrix's backend (``train(..., backend=...)``), NumPy for plain arrays."""
        return X.backend if X.backend is not None else NUMPY

    def _seed(self) -> int:
        """``random_state`` as a seed (None or a RandomState: one drawn from it)."""
        seed = self.random_state
        if not isinstance(seed, Integral):
            seed = int(check_random_state(seed).randint(np.iinfo(np.int32).max))
        return int(seed)

    # -- predicting ---------------------------------------------------------------------------------------

    def _raw_scores(self, X: Any) -> np.ndarray:
        """(trees per round, rows): each row's baseline plus its trees' values, per class for multi-class (log-odds
        for binary classification)."""
        check_fitted(self, "trees_")
        binned, _ = self._binned(X, reset=False)
        codes = np.ascontiguousarray(binned.dense_bins())
        out = np.repeat(np.atleast_1d(np.asarray(self.baseline_, dtype=np.float64))[:, None], len(codes), axis=1)
        self.trees_.add_scores(codes, out, get_backend("numpy").tree_kernels)
        return out

    @available_if(_decides)
    def decision_function(self, X: Any) -> np.ndarray:
        """Binary: the log-odds of ``classes_[1]`` for each row; multi-class: (rows, classes) scores, whose softmax
        are the probabilities (classification only)."""
        raw = self._raw_scores(X)
        return raw[0] if len(raw) == 1 else raw.T

    @available_if(_classifies)
    def predict_proba(self, X: Any) -> np.ndarray:
        """(rows, classes) probabilities of each class, in ``classes_`` order (classification only)."""
        return self.loss_.class_probabilities(self._raw_scores(X))

    def score(self, X: Any, y: Any) -> float:
        """Accuracy for classification, R2 for regression (scikit-learn's classifiers' and regressors' ``score``)."""
        from sklearn.metrics import accuracy_score, r2_score

        truth = np.asarray(y).ravel()
        if self.loss_.classifies:
            return float(accuracy_score(truth, self.predict(X)))
        return float(r2_score(truth, self.predict(X)))

    # -- what the pipeline asks (models/algorithm.py) ------------------------------------------------------

    def metrics_kind(self) -> Metrics:
        """A classification or a regression, as the fitted objective is."""
        return Metrics.CLASSIFICATION if self.loss_.classifies else Metrics.REGRESSION

    def classifies(self, y: Any = None) -> bool | None:
        """As the objective says, or ``objective="auto"`` would decide for ``y`` (None without it)."""
        if self.objective == "auto" and y is None:
            return None
        return LOSSES[self._objective_for(y)].classifies

    def training_metrics(self, X: Any, y: Any) -> dict[str, float]:
        """What the fit scored its training rows as it went (out of bag for a forest): no pass over them again."""
        return dict(self.fit_metrics_)

    def takes_start(self, n_columns: int, y: Any) -> bool:
        return False  # a tree ensemble grows from its baseline: there is no earlier model to start from

    def start_arguments(self, coef: np.ndarray, intercept: float) -> dict[str, Any]:
        return {}

    def predict(self, X: Any) -> np.ndarray:
        """Regression: the predicted values. Classification: the most probable class of each row."""
        raw = self._raw_scores(X)
        if self.loss_.classifies:
            return self.classes_[self.loss_.class_index(raw)]
        return self.loss_.to_target_scale(raw)


def keep_parameters(estimator: Estimator, params: dict[str, Any]) -> None:
    """Set ``__init__``'s parameters as attributes, unchanged (scikit-learn's convention)."""
    for name, value in params.items():
        if name != "self":
            setattr(estimator, name, value)


__all__ = ["TreeModel", "keep_parameters"]
