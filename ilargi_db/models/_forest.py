"""Random forests over joins: many independent histogram trees, each on a bootstrap of the rows and a draw of the
features at each split, averaged.

Every tree is grown from the one binned read (:class:`~ilargi_db.linalg.binned_matrix.BinnedMatrix`, factorized or
materialized) by the same grower as gradient boosting (:class:`~._tree_growth.TreeGrower`): a tree fits its
rows' targets with one Newton step from zero, so a leaf's value is the weighted mean of its rows' targets and a
split's gain their variance reduction (squared error; the gini criterion for a class's 0/1 indicator).

- The bootstrap is a weight per row, never a copy of the rows: a Poisson count of mean ``max_samples`` (the
  Poisson bootstrap Spark MLlib's forests use), drawn from the row's key (its bins and target), so the same rows
  get the same counts in any order DuckDB returns them; a tree grows on its rows of positive count, with their
  counts as hessians (``min_samples_leaf`` counts distinct rows, as scikit-learn's does).
- ``max_features`` features are drawn at each split (:func:`~ilargi_db.backend.tree_split.draw_features`).
- Classification grows a tree per class each round on the class's indicator (one tree for two classes), as
  LightGBM's ``boosting="rf"`` does; a class's probability is the mean of its trees' leaf shares, normalized
  (:class:`~ilargi_db.models.losses.ClassShares`). Regression averages the trees' means.

Each tree's leaf values are divided by ``n_estimators``: the ensemble's sum is the forest's mean, so prediction,
the registry and the SQL macros read it as they read a boosted ensemble's.
"""

from __future__ import annotations

import math
import queue
from concurrent.futures import Future, ThreadPoolExecutor
from numbers import Integral, Real
from typing import Any

import numpy as np

from ilargi_db._terminal import progress
from ilargi_db.backend import NUMPY
from ilargi_db.backend.parallel import kernel_threads, threads_for
from ilargi_db.backend.tree_grower import poisson_weights
from ilargi_db.linalg.binned_matrix import BinnedMatrix
from ilargi_db.linalg.feature_bins import MAX_BINS
from ilargi_db.linalg.row_identity import row_keys, spread_copies
from ilargi_db.models._tree_growth import GrowthLimits, Tree, TreeGrower
from ilargi_db.models._tree_model import TreeModel, keep_parameters
from ilargi_db.models.estimator import ClassifierMixin, Interval, RegressorMixin, StrOptions
from ilargi_db.models.tree_ensemble import TreeEnsemble

FOREST_OBJECTIVES = ("squared_error", "gini")
SEED_STRIDE = 1_000_003  # tree t's draws are seeded with seed + t * SEED_STRIDE (a prime: no two trees share one)


class RandomForest(TreeModel):
    """A random forest of histogram trees; ``objective="auto"`` picks regression or classification.

    Parameters
    ----------
    objective : {"auto", "squared_error", "gini"}
        "auto": a target of exactly two distinct values (a BOOLEAN one too) is classification ("gini"), any other
        regression ("squared_error"); "gini" classifies a target of any number of classes.
    n_estimators : int
        Trees (rounds of a tree per class for three classes or more).
    max_features : {"sqrt", "log2"}, int, float or None
        Features drawn at each split: "sqrt" or "log2" of the features, a number of them, or a share of them;
        None: "sqrt" for classification and every feature for regression (scikit-learn's defaults).
    bootstrap : bool
        Grow each tree on a bootstrap of the rows (else every tree on every row).
    max_samples : float or None
        The bootstrap's mean count per row (a share of the rows, in (0, 1]); None: 1, a bootstrap as large as the rows.
    max_leaves : int
        Leaves of a tree at most, grown best first (scikit-learn's ``max_leaf_nodes``).
    max_depth : int or None
        Edges from the root to a leaf at most (None: only ``max_leaves`` bounds a tree).
    min_samples_leaf : int
        Distinct training rows of a leaf at least.
    max_bins : int
        Bins of a numeric feature's values at most (2 to 255; one more bin holds missing values).
    oob_score : bool
        Keep the out-of-bag score (``oob_score_``: R2 for regression, accuracy for classification) and each row's
        out-of-bag prediction (``oob_prediction_``). Needs ``bootstrap``. A bootstrapped forest's training metrics
        (``fit_metrics_``) are out of bag whatever this says: each row scored by the trees that left it out,
        computed as the trees grow (a pass of every tree over every row would cost a quarter of the training).
    random_state : int, RandomState or None
        The seed of the bootstraps and the features drawn.
    """

    classifying_objective = "gini"
    algorithm_words = "random forest"
    scores_decide = False  # its scores are class shares: predict_proba, as scikit-learn's forests have only

    _parameter_constraints: dict = {
        "objective": [StrOptions({"auto", *FOREST_OBJECTIVES})],
        "n_estimators": [Interval(Integral, 1, None, closed="left")],
        "max_features": [
            StrOptions({"sqrt", "log2"}),
            Interval(Integral, 1, None, closed="left"),
            Interval(Real, 0, 1, closed="right"),
            None,
        ],
        "bootstrap": ["boolean"],
        "max_samples": [Interval(Real, 0, 1, closed="right"), None],
        "max_leaves": [Interval(Integral, 2, None, closed="left")],
        "max_depth": [Interval(Integral, 1, None, closed="left"), None],
        "min_samples_leaf": [Interval(Integral, 1, None, closed="left")],
        "max_bins": [Interval(Integral, 2, MAX_BINS, closed="both")],
        "oob_score": ["boolean"],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        objective: str = "auto",
        n_estimators: int = 100,
        max_features: Any = None,
        bootstrap: bool = True,
        max_samples: float | None = None,
        max_leaves: int = 255,
        max_depth: int | None = None,
        min_samples_leaf: int = 1,
        max_bins: int = MAX_BINS,
        oob_score: bool = False,
        random_state: Any = None,
    ):
        keep_parameters(self, locals())

    def features_per_split(self, n_features: int) -> int:
        """How many features a split draws from (at least 1, at most ``n_features``)."""
        m = self.max_features
        if m is None:
            m = "sqrt" if self.loss_.classifies else 1.0
        if m == "sqrt":
            k = math.isqrt(n_features) if n_features > 0 else 1
        elif m == "log2":
            k = int(math.log2(n_features)) if n_features > 0 else 1
        elif isinstance(m, Integral):
            k = int(m)
        else:
            k = int(float(m) * n_features)
        return max(1, min(n_features, k))

    def _check_parameters(self) -> None:
        if self.oob_score and not self.bootstrap:
            raise ValueError("oob_score scores each row by the trees its bootstrap left it out of: set bootstrap=True.")

    def _fit_trees(self, X: BinnedMatrix, y: np.ndarray) -> None:
        loss, n, trees_per_round = self.loss_, X.n_rows, self.loss_.trees_per_round
        if loss.classifies:  # each class's 0/1 indicator (binary: classes_[1]'s)
            classes = np.arange(trees_per_round) if trees_per_round > 1 else np.array([1])
            targets = (y[None, :] == classes[:, None]).astype(np.float64)
        else:
            targets = y[None, :]
        # No baseline: the trees' sum is their mean (each fits the targets themselves, from 0).
        self.baseline_ = 0.0 if trees_per_round == 1 else np.zeros(trees_per_round)
        seed = self._seed()
        keys = spread_copies(row_keys(X, (y,), seed)) if self.bootstrap else None
        rate = 1.0 if self.max_samples is None else float(self.max_samples)
        limits = GrowthLimits(self.max_leaves, self.max_depth, self.min_samples_leaf, 0.0)
        backend = self.growth_backend(X)
        xp, kernels = backend.xp, backend.tree_kernels
        grower = TreeGrower(X, np.arange(n), limits, kernels, unit_hessian=not self.bootstrap, backend=backend)
        targets = backend.to_device(targets)
        n_pick = self.features_per_split(X.shape[1])
        share = 1.0 / self.n_estimators  # each tree's leaves scaled: the trees' sum is their mean

        codes = np.ascontiguousarray(X.dense_bins()) if self.bootstrap else None  # to score the rows left out

        def grow_round(t: int, grower: TreeGrower) -> tuple[list[Tree], np.ndarray | None, np.ndarray]:
            """Round t's trees (one per class), from its bootstrap and feature draws alone, and the rows it scores:
            those its bootstrap left out (their indices, and their scores by its trees), or every row."""
            tree_seed = seed + t * SEED_STRIDE
            counts, rows, out = np.ones(n), None, None
            if self.bootstrap:
                counts = poisson_weights(keys, tree_seed, rate)
                rows, out = np.flatnonzero(counts), np.flatnonzero(counts == 0)
                if len(rows) == 0:  # a tiny table's bootstrap drew no row: every row then (none left out)
                    counts, rows, out = np.ones(n), None, None
            h = backend.to_device(counts)  # the rows' weights, where the trees grow
            rows = None if rows is None else backend.to_device(rows)
            g, scratch = xp.empty(n), xp.zeros((trees_per_round, n))
            trees = []
            for k in range(trees_per_round):
                g[...] = -h * targets[k]  # one Newton step from 0: a leaf's value is its rows' mean
                trees.append(grower.grow(g, h, share, scratch[k], rows, n_pick, tree_seed + k))
            if out is None:  # every row is in every tree: the leaves were added to every row's scores
                return trees, None, backend.to_host(scratch)
            scores = np.zeros((trees_per_round, len(out)))
            TreeEnsemble.of(trees, X.categorical, trees_per_round).add_scores(codes[out], scores, NUMPY.tree_kernels)
            return trees, out, scores

        # Each round's scores merged in round order (the same sums on any thread count): out of bag, or every row's.
        sums, counts = np.zeros((trees_per_round, n)), np.zeros(n)
        trees: list[Tree] = []

        def merge(round_trees: list[Tree], out: np.ndarray | None, scores: np.ndarray) -> None:
            trees.extend(round_trees)
            if out is None:
                sums[:] += scores
                counts[:] += 1
            else:
                sums[:, out] += scores
                counts[out] += 1

        grow_in_parallel(grow_round, merge, self.n_estimators, grower)
        self.n_iter_ = self.n_estimators
        self.trees_ = TreeEnsemble.of(trees, X.categorical, trees_per_round)
        self.feature_importances_ = self.trees_.importances(X.shape[1])
        self._keep_scores(sums, counts, y)

    def _keep_scores(self, sums: np.ndarray, counts: np.ndarray, y: np.ndarray) -> None:
        """The training's metrics from each row's summed scores over ``counts`` trees: with a bootstrap, the trees
        that left it out (out of bag, as scikit-learn's ``oob_score``; a row no tree left out is not scored), else
        every tree (the forest's own prediction of its training rows)."""
        seen = counts > 0
        raw = sums[:, seen] * (self.n_estimators / counts[seen])  # each tree's leaves were scaled by 1 / n_estimators
        loss, truth = self.loss_, y[seen]
        self.fit_metrics_ = loss.fit_metrics(raw, truth) if seen.any() else {}
        if not self.oob_score:
            return
        if loss.classifies:
            self.oob_prediction_ = np.full((len(y), len(self.classes_)), np.nan)
            self.oob_prediction_[seen] = loss.class_probabilities(raw)
            self.oob_score_ = float(np.mean(loss.class_index(raw) == truth)) if seen.any() else float("nan")
        else:
            self.oob_prediction_ = np.full(len(y), np.nan)
            self.oob_prediction_[seen] = raw[0]
            total = float(((truth - truth.mean()) ** 2).sum()) if seen.any() else 0.0
            self.oob_score_ = 1.0 - float(((raw[0] - truth) ** 2).sum()) / total if total > 0 else float("nan")


def grow_in_parallel(grow_round, merge, n_rounds: int, grower: TreeGrower) -> None:
    """``merge(*grow_round(t, grower))`` for every round t, merged in round order. On several free cores the rounds
    grow side by side, each on one thread with a grower of its own (:meth:`TreeGrower.sibling`): independent trees
    keep every core busy where a tree's own passes over a node's rows pay on several threads only for large nodes
    (docs/benchmarks.md). A round depends on its seed alone and rounds merge in order: the forest and its scores
    do not depend on the thread count."""
    workers = min(threads_for(n_rounds), n_rounds) if grower.kernels.grows_side_by_side else 1
    with progress(n_rounds, "random forest") as bar:
        if workers == 1:
            for t in range(n_rounds):
                merge(*grow_round(t, grower))
                bar.update()
            return
        spare: queue.SimpleQueue[TreeGrower] = queue.SimpleQueue()
        for g in [grower] + [grower.sibling() for _ in range(workers - 1)]:
            spare.put(g)

        def one_round(t: int):
            taken = spare.get()
            try:
                with kernel_threads(1):
                    return grow_round(t, taken)
            finally:
                spare.put(taken)

        with ThreadPoolExecutor(workers, thread_name_prefix="ilargi-forest") as pool:
            # A window of rounds in flight: a round's scores wait for the rounds before it to merge, so at most
            # this many are held at once (all of them held were 1.9 GB on TPC-H's 3M rows).
            window = 2 * workers
            futures: dict[int, Future] = {t: pool.submit(one_round, t) for t in range(min(window, n_rounds))}
            try:
                for t in range(n_rounds):  # in round order; later rounds grow meanwhile
                    merge(*futures.pop(t).result())
                    if t + window < n_rounds:
                        futures[t + window] = pool.submit(one_round, t + window)
                    bar.update()
            except BaseException:  # an interruption or an error: the rounds not started are dropped
                for future in futures.values():
                    future.cancel()
                raise


class RandomForestRegressor(RegressorMixin, RandomForest):
    """A random forest of regression trees; see :class:`RandomForest` for the parameters."""

    objective = "squared_error"

    _parameter_constraints = {k: v for k, v in RandomForest._parameter_constraints.items() if k != "objective"}

    def __init__(
        self,
        n_estimators: int = 100,
        max_features: Any = 1.0,
        bootstrap: bool = True,
        max_samples: float | None = None,
        max_leaves: int = 255,
        max_depth: int | None = None,
        min_samples_leaf: int = 1,
        max_bins: int = MAX_BINS,
        oob_score: bool = False,
        random_state: Any = None,
    ):
        keep_parameters(self, locals())


class RandomForestClassifier(ClassifierMixin, RandomForest):
    """A random forest classifier (two classes or more); see :class:`RandomForest` for the parameters."""

    objective = "gini"

    _parameter_constraints = RandomForestRegressor._parameter_constraints

    def __init__(
        self,
        n_estimators: int = 100,
        max_features: Any = "sqrt",
        bootstrap: bool = True,
        max_samples: float | None = None,
        max_leaves: int = 255,
        max_depth: int | None = None,
        min_samples_leaf: int = 1,
        max_bins: int = MAX_BINS,
        oob_score: bool = False,
        random_state: Any = None,
    ):
        keep_parameters(self, locals())


__all__ = ["FOREST_OBJECTIVES", "RandomForest", "RandomForestClassifier", "RandomForestRegressor"]
