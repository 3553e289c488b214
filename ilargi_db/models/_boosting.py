"""Histogram gradient boosting over joins: regression (squared error, Poisson) and classification (log loss: binary,
or multi-class with one tree per class each round, LightGBM's softmax objective).

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

from ilargi_db._terminal import progress
from ilargi_db.backend import NUMPY
from ilargi_db.linalg.binned_matrix import BinnedMatrix
from ilargi_db.linalg.feature_bins import MAX_BINS, FeatureBins
from ilargi_db.linalg.row_identity import first_by_key, row_keys, spread_copies
from ilargi_db.models._tree_growth import GrowthLimits, Tree, TreeGrower
from ilargi_db.models._tree_model import TreeModel, keep_parameters
from ilargi_db.models.estimator import ClassifierMixin, Interval, RegressorMixin, StrOptions
from ilargi_db.models.losses import BOOSTING_OBJECTIVES
from ilargi_db.models.tree_ensemble import TreeEnsemble

OBJECTIVES = BOOSTING_OBJECTIVES


class GradientBoosting(TreeModel):
    """Gradient-boosted trees on histograms; ``objective="auto"`` picks regression or binary classification.

    Parameters
    ----------
    objective : {"auto", "squared_error", "log_loss", "poisson"}
        "auto": a target with exactly two distinct values (a BOOLEAN one too) is binary classification
        (log loss), any other regression (squared error); ``objective_`` says which ran. "log_loss" on a target
        of three classes or more is multi-class: a tree per class each round, the softmax of the classes' sums
        their probabilities. "poisson": counts (a target of 0 or more), predicted as ``exp`` of the trees' sum
        (:mod:`.losses`).
    n_estimators : int
        Boosting rounds (a tree each, or one per class for multi-class), fewer when early stopping stops.
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
    validation_fraction : float
        With ``early_stopping``, the share of the rows held out to score each round.
    n_iter_no_change : int
        With ``early_stopping``, the rounds without improvement after which boosting stops.
    tol : float
        With ``early_stopping``, the least decrease of the held-out loss that counts as an improvement.
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
        keep_parameters(self, locals())

    # -- fitting ------------------------------------------------------------------------------------------

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

    def _fit_trees(self, X: BinnedMatrix, y: np.ndarray) -> None:
        loss, backend = self.loss_, self.growth_backend(X)
        xp, kernels = backend.xp, backend.tree_kernels
        if self.quantized_gradients and not kernels.quantizes:
            raise ValueError(
                f"quantized_gradients runs on the CPU's kernels, not on backend={backend.name!r}: train on "
                "backend='numpy', or without quantized_gradients."
            )
        # Each row keyed by its values and target (any row order, one model), once: what early stopping holds out
        # and how quantized gradients round.
        seed = self._seed()
        keys = row_keys(X, (y,), seed) if self.early_stopping or self.quantized_gradients else None
        train_rows, held_rows = self._split_rows(X, keys)
        if len(train_rows) == 0:
            raise ValueError("no training rows are left after the validation rows were held out.")
        baseline = loss.baseline(y[train_rows])  # per tree of a round
        self.baseline_ = float(baseline[0]) if len(baseline) == 1 else baseline
        limits = GrowthLimits(self.max_leaves, self.max_depth, self.min_samples_leaf, float(self.l2_regularization))
        quantized = (seed, spread_copies(keys)) if self.quantized_gradients else (None, None)  # copies apart by rank
        grower = TreeGrower(X, train_rows, limits, kernels, loss.unit_hessian, *quantized, backend=backend)
        per_round = loss.trees_per_round
        # (trees per round, rows): each class's scores, and the gradients, where the trees grow (the device's)
        raw = xp.repeat(backend.to_device(baseline)[:, None], X.n_rows, axis=1)
        g, h = xp.zeros_like(raw), xp.ones_like(raw)
        target = backend.to_device(y)
        held_bins = X.dense_bins(held_rows) if len(held_rows) else None
        held_raw = np.repeat(baseline[:, None], len(held_rows), axis=1)  # scored on the host, tree by tree
        trees: list[Tree] = []
        self.train_score_, self.validation_score_ = [], []
        best, since_best = np.inf, 0
        with progress(self.n_estimators, "gradient boosting") as bar:
            for _ in range(self.n_estimators):
                loss.gradients(raw, target, g, h)  # every class's, from the scores before this round's trees
                for k in range(per_round):
                    trees.append(grower.grow(g[k], h[k], float(self.learning_rate), raw[k]))
                bar.update()
                if held_bins is None:
                    continue
                self.train_score_.append(loss.loss(backend.to_host(raw)[:, train_rows], y[train_rows]))
                this_round = TreeEnsemble.of(trees[-per_round:], X.categorical, per_round)
                this_round.add_scores(held_bins, held_raw, NUMPY.tree_kernels)  # on the host, as predict scores
                held_loss = loss.loss(held_raw, y[held_rows])
                self.validation_score_.append(held_loss)
                if held_loss < best - self.tol:
                    best, since_best = held_loss, 0
                else:
                    since_best += 1
                    if since_best >= self.n_iter_no_change:
                        break
        self.n_iter_ = len(trees) // per_round
        self.fit_metrics_ = loss.fit_metrics(backend.to_host(raw), y)
        self.trees_ = TreeEnsemble.of(trees, X.categorical, per_round)
        self.feature_importances_ = self.trees_.importances(X.shape[1])


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
        keep_parameters(self, locals())


class GradientBoostingClassifier(ClassifierMixin, GradientBoosting):
    """Gradient-boosted trees for classification (log loss: binary, or softmax over three classes or more); see
    :class:`GradientBoosting`."""

    objective = "log_loss"

    _parameter_constraints = GradientBoostingRegressor._parameter_constraints

    __init__ = GradientBoostingRegressor.__init__  # the same parameters (scikit-learn reads the signature)


__all__ = ["FeatureBins", "GradientBoosting", "GradientBoostingClassifier", "GradientBoostingRegressor"]
