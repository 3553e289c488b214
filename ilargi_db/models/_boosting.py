"""Histogram gradient boosting over joins: regression (squared error) and binary classification (log loss).

The estimators fit on a :class:`~ilargi_db.linalg.binned_matrix.BinnedMatrix` (each source's features
binned once per source row, as ``ilargi_db.train`` reads them) or on a plain array (binned here, at
DuckDB's quantiles). Each tree is grown leaf-wise from per-node histograms (:mod:`._tree_growth`);
numeric splits send missing values to the side that gains more, categorical ones choose a set of
categories sorted by their gradient statistics, as LightGBM and HistGradientBoosting do, without one-hot.

The fitted ensemble (``trees_``) is one :class:`~ilargi_db.models.tree_ensemble.TreeEnsemble`: every tree's nodes
in one record of arrays, which prediction, the SQL macro writer and the registry all read.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from ilargi_db._terminal import progress
from ilargi_db.backend import get_backend
from ilargi_db.linalg.binned_matrix import MAX_BINS, BinnedMatrix, FeatureBins, bin_array, quantile_bins
from ilargi_db.linalg.row_identity import first_by_key, row_keys, spread_copies
from ilargi_db.models._base import exact_classes
from ilargi_db.models._tree_growth import GrowthLimits, Tree, TreeGrower
from ilargi_db.models.losses import LOSSES, Loss
from ilargi_db.models.tree_ensemble import TreeEnsemble

OBJECTIVES = tuple(LOSSES)


def _classifies(estimator: Any) -> bool:
    """Whether ``estimator`` classifies (or may: ``objective="auto"`` before fitting): it has predict_proba and
    decision_function then, as scikit-learn's regressors have neither."""
    objective = getattr(estimator, "objective_", estimator.objective)
    return objective == "auto" or LOSSES[objective].classifies


class GradientBoosting(BaseEstimator):
    """Gradient-boosted trees on histograms; ``objective="auto"`` picks regression or binary classification.

    Parameters
    ----------
    objective : {"auto", "squared_error", "log_loss", "poisson"}
        "auto": a target with exactly two distinct values (a BOOLEAN one too) is binary classification
        (log loss), any other regression (squared error); ``objective_`` says which ran. "poisson": counts
        (a target of 0 or more), predicted as ``exp`` of the trees' sum (:mod:`.losses`).
    n_estimators : int
        Boosting rounds (trees), fewer when early stopping stops.
    learning_rate : float
        Shrinkage of each tree's values, in (0, 1].
    max_depth : int or None
        Edges from the root to a leaf at most (None: only ``max_leaves`` bounds a tree).
    max_leaves : int
        Leaves of a tree at most; trees grow best leaf first (LightGBM's ``num_leaves``).
    min_samples_leaf : int
        Training rows of a leaf at least.
    l2_regularization : float
        L2 penalty on leaf values (LightGBM's ``lambda_l2``).
    max_bins : int
        Bins of a numeric feature's values at most (2 to 255; one more bin holds missing values). A categorical
        feature keeps its most frequent categories, up to 1,024 (``MAX_CATEGORIES``), whatever ``max_bins``.
    early_stopping : bool
        Hold out ``validation_fraction`` of the rows (drawn with ``random_state``) and stop once the loss on
        them has not improved by ``tol`` for ``n_iter_no_change`` rounds (those rounds' trees are kept and
        counted in ``n_iter_``, as scikit-learn keeps them); the losses per round on the training
        and the held-out rows are kept (``train_score_``, ``validation_score_``, empty without early stopping).
    random_state : int, RandomState or None
        The seed of the validation rows' keys and of the quantized gradients' rounding (the only randomness): each
        row is keyed by its bins and target, so a seed holds out the same rows whatever order they come in.
    quantized_gradients : bool
        Grow each tree on its gradients rounded at random, without bias, to a few thousand levels (LightGBM's
        ``use_quantized_grad``): histograms summed as integers, two to a machine word, faster; leaf values from
        the rounded sums. Off by default: see docs/benchmarks.md for its effect on speed and held-out scores.
    """

    _parameter_constraints: dict = {
        "objective": [StrOptions({"auto", *OBJECTIVES})],
        "n_estimators": [Interval(Integral, 1, None, closed="left")],
        # At most 1, as XGBoost's eta: a larger step overshoots each tree's Newton step (1e308 overflows to inf).
        "learning_rate": [Interval(Real, 0, 1, closed="right")],
        "max_depth": [Interval(Integral, 1, None, closed="left"), None],
        "max_leaves": [Interval(Integral, 2, None, closed="left")],
        "min_samples_leaf": [Interval(Integral, 1, None, closed="left")],
        "l2_regularization": [Interval(Real, 0, None, closed="left")],
        "max_bins": [Interval(Integral, 2, MAX_BINS, closed="both")],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
        "quantized_gradients": ["boolean"],
    }

    def __init__(
        self,
        objective: str = "auto",
        n_estimators: int = 100,
        learning_rate: float = 0.1,
        max_depth: int | None = None,
        max_leaves: int = 31,
        min_samples_leaf: int = 20,
        l2_regularization: float = 0.0,
        max_bins: int = MAX_BINS,
        early_stopping: bool = False,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 10,
        tol: float = 1e-7,
        random_state: Any = None,
        quantized_gradients: bool = False,
    ):
        _keep(self, locals())

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
        check_is_fitted(self, "trees_")
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
        if self.objective != "auto":
            return self.objective
        return "log_loss" if len(np.unique(y)) == 2 else "squared_error"

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

    def fit(self, X: Any, y: Any, warn: bool = True) -> GradientBoosting:
        """Fit the ensemble on ``X`` (a binned matrix or an array) and ``y``; ``warn`` is accepted for the pipeline
        (boosting has nothing to warn of: it runs its rounds)."""
        self._validate_params()
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
        self._boost(X, y)
        return self

    @property
    def loss_(self) -> Loss:
        """The fitted objective's loss: its gradients, link and whether it classifies."""
        check_is_fitted(self, "objective_")
        return LOSSES[self.objective_]

    def _encode_target(self, y: np.ndarray) -> np.ndarray:
        if not self.loss_.classifies:
            y = y.astype(np.float64)
            if np.isfinite(y).all():
                self.loss_.check_target(y)
            return y
        if self.objective == "log_loss":  # asked for ("auto" found two values): a continuous target is refused
            check_classification_targets(y)
        self.classes_ = exact_classes(np.unique(y), "gradient boosting")
        if len(self.classes_) != 2:
            raise ValueError(
                "Only binary classification is supported. The target needs two distinct values; this one has "
                f"{len(self.classes_)} class(es)."
            )
        return (y == self.classes_[1]).astype(np.float64)

    def _split_rows(self, X: BinnedMatrix, keys: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The training rows and early stopping's held-out rows: those of smallest key (``keys``: each row's, of its
        bins and target seeded with ``random_state``; not its position: the same rows in any read order)."""
        n = X.n_rows
        if not self.early_stopping:
            return np.arange(n), np.empty(0, dtype=np.int64)
        if n < 2:  # at least one row is held out to watch the loss, and one must be left to train on
            raise ValueError(
                f"early_stopping holds out validation_fraction={self.validation_fraction} of the rows (one at "
                f"least) to watch the loss, and {n} row leaves none to train on: train on more rows, or without "
                "early_stopping."
            )
        held = first_by_key(keys, max(1, int(n * self.validation_fraction)))
        is_held = np.zeros(n, dtype=bool)
        is_held[held] = True
        return np.flatnonzero(~is_held), np.flatnonzero(is_held)

    def _seed(self) -> int:
        """``random_state`` as a seed (None or a RandomState: one drawn from it)."""
        seed = self.random_state
        if not isinstance(seed, Integral):
            seed = int(check_random_state(seed).randint(np.iinfo(np.int32).max))
        return int(seed)

    def _boost(self, X: BinnedMatrix, y: np.ndarray) -> None:
        loss = self.loss_
        # Each row keyed by its values and target (any row order, one model), once: what early stopping holds out
        # and how quantized gradients round.
        seed = self._seed()
        keys = row_keys(X, (y,), seed) if self.early_stopping or self.quantized_gradients else None
        train_rows, held_rows = self._split_rows(X, keys)
        if len(train_rows) == 0:
            raise ValueError("no training rows are left after the validation rows were held out.")
        self.baseline_ = loss.baseline(y[train_rows])
        limits = GrowthLimits(self.max_leaves, self.max_depth, self.min_samples_leaf, float(self.l2_regularization))
        kernels = get_backend("numpy").tree_kernels
        quantized = (seed, spread_copies(keys)) if self.quantized_gradients else (None, None)  # copies apart by rank
        grower = TreeGrower(X, train_rows, limits, kernels, loss.unit_hessian, *quantized)
        raw = np.full(X.n_rows, self.baseline_)
        g, h = np.zeros(X.n_rows), np.ones(X.n_rows)
        held_bins = X.dense_bins(held_rows) if len(held_rows) else None
        trees: list[Tree] = []
        self.train_score_, self.validation_score_ = [], []
        best, since_best = np.inf, 0
        with progress(self.n_estimators, "gradient boosting") as bar:
            for _ in range(self.n_estimators):
                loss.gradients(raw, y, g, h)
                trees.append(grower.grow(g, h, float(self.learning_rate), raw))
                bar.update()
                if held_bins is None:
                    continue
                self.train_score_.append(loss.loss(raw[train_rows], y[train_rows]))
                raw[held_rows] += _tree_output(held_bins, trees[-1], kernels)
                held_loss = loss.loss(raw[held_rows], y[held_rows])
                self.validation_score_.append(held_loss)
                if held_loss < best - self.tol:
                    best, since_best = held_loss, 0
                else:
                    since_best += 1
                    if since_best >= self.n_iter_no_change:
                        break
        self.n_iter_ = len(trees)
        self.fit_metrics_ = loss.fit_metrics(raw, y)
        self.trees_ = TreeEnsemble.of(trees, X.categorical)
        self.feature_importances_ = self.trees_.importances(X.shape[1])

    # -- predicting ---------------------------------------------------------------------------------------

    def _raw_scores(self, X: Any) -> np.ndarray:
        """The raw score of each row: the baseline plus every tree's value (log-odds for classification)."""
        check_is_fitted(self, "trees_")
        binned, _ = self._binned(X, reset=False)
        codes = np.ascontiguousarray(binned.dense_bins())
        out = np.full(len(codes), float(self.baseline_))
        self.trees_.add_scores(codes, out, get_backend("numpy").tree_kernels)
        return out

    @available_if(_classifies)
    def decision_function(self, X: Any) -> np.ndarray:
        """The log-odds of ``classes_[1]`` for each row (classification only)."""
        return self._raw_scores(X)

    @available_if(_classifies)
    def predict_proba(self, X: Any) -> np.ndarray:
        """(rows, 2) probabilities of ``classes_[0]`` and ``classes_[1]`` (classification only)."""
        p = self.loss_.to_target_scale(self._raw_scores(X))
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any) -> np.ndarray:
        """Regression: the predicted values. Classification: the more probable class of each row."""
        raw = self._raw_scores(X)
        if self.loss_.classifies:
            return self.classes_[(raw > 0).astype(np.int64)]
        return self.loss_.to_target_scale(raw)


def _keep(estimator: BaseEstimator, params: dict[str, Any]) -> None:
    """Set ``__init__``'s parameters as attributes, unchanged (scikit-learn's convention)."""
    for name, value in params.items():
        if name != "self":
            setattr(estimator, name, value)


def _tree_output(codes: np.ndarray, tree: Tree, kernels) -> np.ndarray:
    """One tree's values for rows given as dense bins (the held-out rows of early stopping)."""
    out = np.zeros(len(codes))
    start = np.array([0, tree.n_nodes], dtype=np.int64)
    kernels.add_trees(
        np.ascontiguousarray(codes), start, tree.feature, tree.goes_left, tree.left, tree.right, tree.value, out
    )
    return out


class GradientBoostingRegressor(RegressorMixin, GradientBoosting):
    """Gradient-boosted regression trees (squared error); see :class:`GradientBoosting` for the parameters."""

    objective = "squared_error"

    _parameter_constraints = {k: v for k, v in GradientBoosting._parameter_constraints.items() if k != "objective"}

    def __init__(
        self,
        n_estimators: int = 100,
        learning_rate: float = 0.1,
        max_depth: int | None = None,
        max_leaves: int = 31,
        min_samples_leaf: int = 20,
        l2_regularization: float = 0.0,
        max_bins: int = MAX_BINS,
        early_stopping: bool = False,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 10,
        tol: float = 1e-7,
        random_state: Any = None,
        quantized_gradients: bool = False,
    ):
        _keep(self, locals())


class GradientBoostingClassifier(ClassifierMixin, GradientBoosting):
    """Gradient-boosted trees for binary classification (log loss); see :class:`GradientBoosting`."""

    objective = "log_loss"

    _parameter_constraints = GradientBoostingRegressor._parameter_constraints

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False  # binary only, for now
        return tags

    __init__ = GradientBoostingRegressor.__init__  # the same parameters (scikit-learn reads the signature)


__all__ = ["FeatureBins", "GradientBoosting", "GradientBoostingClassifier", "GradientBoostingRegressor"]
