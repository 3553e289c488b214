"""The losses gradient boosting minimizes, each one object that knows its gradients, baseline and link.

A loss is what changes between objectives; the grower, the registry, the metrics and the SQL macro writer ask
it instead of testing the objective's name:

- ``gradients(raw, y, g, h)`` and ``baseline(y)``: what each tree is fitted to, and the score before any tree;
- ``loss(raw, y)``: the mean loss early stopping watches;
- ``classifies``: whether the model predicts classes (``classes_``, ``predict_proba``, classification metrics);
- ``inverse_link``: the raw score to the target's scale (``predict`` of a regression, the probability of a
  classifier), by name (a regression's as NumPy and DuckDB both call it: ``exp``), or None for the identity.

Scores, gradients and hessians are (trees per round, rows) arrays: one row of them for every loss but the
multi-class log loss (:class:`Softmax`), which grows one tree per class each round, LightGBM's ``multiclass``
objective. A classifier also says which class each row's scores choose (``class_index``) and with what
probabilities (``class_probabilities``), so the estimator and the metrics never test the number of classes.
:func:`loss_for` picks the loss of an objective and a number of classes.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, logsumexp, softmax

from ilargi_db.backend.gradient_kernels import logistic_gradients, poisson_gradients, softmax_gradients


class Loss:
    """What every loss answers (see the module's docstring); ``raw``, ``g`` and ``h`` are (trees per round, rows)."""

    name: str = ""
    classifies: bool = False
    unit_hessian: bool = False  # every row's hessian is 1: histograms need no hessian sums
    # A regression's is a function NumPy and DuckDB both name ("exp": the macro writer calls it by that name); a
    # classifier's ("expit") is its probability, which the classifier's macro writes itself. None: the identity.
    inverse_link: str | None = None
    trees_per_round: int = 1
    boosts = True  # an objective of gradient boosting (a random forest's are averaged, not boosted)
    # How a classifier's scores become its probabilities, by name (the macro writer writes each): "logistic" (binary
    # log-odds), "softmax" (a score per class), "shares" (the classes' shares among a forest's rows). None: regression.
    probability: str | None = None

    def check_target(self, y: np.ndarray) -> None:
        """Refuse targets the loss is not defined on (a ValueError, in the caller's terms)."""

    def baseline(self, y: np.ndarray) -> np.ndarray:
        """The score of every row before any tree, per tree of a round: (trees per round,)."""
        return np.array([self._baseline(y)])

    def _baseline(self, y: np.ndarray) -> float:
        raise NotImplementedError

    def gradients(self, raw: np.ndarray, y: np.ndarray, g: np.ndarray, h: np.ndarray) -> None:
        self._gradients(raw[0], y, g[0], h[0])

    def _gradients(self, raw: np.ndarray, y: np.ndarray, g: np.ndarray, h: np.ndarray) -> None:
        raise NotImplementedError

    def loss(self, raw: np.ndarray, y: np.ndarray) -> float:
        """The mean loss of the scores ``raw`` (trees per round, rows) against ``y``."""
        return self._loss(raw[0], y)

    def _loss(self, raw: np.ndarray, y: np.ndarray) -> float:
        raise NotImplementedError

    def to_target_scale(self, raw: np.ndarray) -> np.ndarray:
        """A regression's predictions (rows,) from its scores (1, rows)."""
        return raw[0] if self.inverse_link is None else INVERSE_LINKS[self.inverse_link](raw[0])

    def fit_metrics(self, raw: np.ndarray, y: np.ndarray) -> dict[str, float]:
        """The cheap metrics a training reports on its rows: a regression's r2, rmse and mae of the predictions."""
        r = self.to_target_scale(raw) - y
        total = float(((y - y.mean()) ** 2).sum())
        squares = float(r @ r)
        return {
            "r2": 1.0 - squares / total if total > 0 and len(y) > 1 else float("nan"),
            "rmse": float(np.sqrt(squares / len(y))),
            "mae": float(np.abs(r).mean()),
        }


class SquaredError(Loss):
    name = "squared_error"
    unit_hessian = True

    def _baseline(self, y: np.ndarray) -> float:
        return float(y.mean())

    def _gradients(self, raw: np.ndarray, y: np.ndarray, g: np.ndarray, h: np.ndarray) -> None:
        g[...] = raw - y  # h stays 1 (on any backend's arrays)

    def _loss(self, raw: np.ndarray, y: np.ndarray) -> float:
        return float(0.5 * np.mean((raw - y) ** 2))


class Classification(Loss):
    """A classifier's loss: ``y`` holds each row's class index (0 to classes - 1, as float64)."""

    classifies = True

    def for_classes(self, n_classes: int) -> Classification:
        """The loss for a target of ``n_classes`` classes."""
        return self

    def class_probabilities(self, raw: np.ndarray) -> np.ndarray:
        """(rows, classes): each row's probability of each class, in ``classes_`` order."""
        raise NotImplementedError

    def class_index(self, raw: np.ndarray) -> np.ndarray:
        """(rows,) int64: the class each row's scores choose (its most probable; the first of a tie)."""
        raise NotImplementedError

    def fit_metrics(self, raw: np.ndarray, y: np.ndarray) -> dict[str, float]:
        """Accuracy and log loss on the training rows."""
        return {"accuracy": float(np.mean(self.class_index(raw) == y)), "log_loss": self.loss(raw, y)}


class LogLoss(Classification):
    """Binary log loss on log-odds; ``y`` is 0/1 (``classes_[1]`` is 1)."""

    name = "log_loss"
    inverse_link = "expit"
    probability = "logistic"

    def for_classes(self, n_classes: int) -> Classification:
        return Softmax(n_classes) if n_classes > 2 else self

    def _baseline(self, y: np.ndarray) -> float:
        p = float(np.clip(y.mean(), 1e-12, 1 - 1e-12))
        return float(np.log(p / (1 - p)))

    def _gradients(self, raw: np.ndarray, y: np.ndarray, g: np.ndarray, h: np.ndarray) -> None:
        logistic_gradients(raw, y, g, h)

    def _loss(self, raw: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(np.logaddexp(0.0, raw) - y * raw))

    def class_probabilities(self, raw: np.ndarray) -> np.ndarray:
        p = expit(raw[0])
        return np.column_stack([1.0 - p, p])

    def class_index(self, raw: np.ndarray) -> np.ndarray:
        return (raw[0] > 0).astype(np.int64)


# LightGBM's floor on a class's share of the rows when its baseline is the log of that share.
MIN_CLASS_SHARE = 1e-15


class Softmax(Classification):
    """Multi-class log loss: one score per class, the softmax of a row's scores its probabilities; a tree per class
    each round, grown on that class's gradients (LightGBM's ``multiclass``: the hessians scaled by k / (k - 1), the
    baseline the log of each class's share of the rows)."""

    name = "log_loss"
    probability = "softmax"

    def __init__(self, n_classes: int):
        if n_classes < 3:
            raise ValueError(f"the multi-class log loss takes 3 classes or more, not {n_classes}")
        self.trees_per_round = int(n_classes)

    def baseline(self, y: np.ndarray) -> np.ndarray:
        shares = np.bincount(y.astype(np.int64), minlength=self.trees_per_round) / max(len(y), 1)
        return np.log(np.maximum(shares, MIN_CLASS_SHARE))

    def gradients(self, raw: np.ndarray, y: np.ndarray, g: np.ndarray, h: np.ndarray) -> None:
        k = self.trees_per_round
        softmax_gradients(raw, y, k / (k - 1.0), g, h)

    def loss(self, raw: np.ndarray, y: np.ndarray) -> float:
        truth = np.take_along_axis(raw, y.astype(np.int64)[None, :], axis=0)[0]
        return float(np.mean(logsumexp(raw, axis=0) - truth))

    def class_probabilities(self, raw: np.ndarray) -> np.ndarray:
        return softmax(raw, axis=0).T

    def class_index(self, raw: np.ndarray) -> np.ndarray:
        return np.argmax(raw, axis=0)


# LightGBM's poisson_max_delta_step: the hessian is taken at raw + 0.7, which bounds a leaf's step where the
# predicted count is near 0 (a leaf of zeros would otherwise step toward -inf).
POISSON_MAX_DELTA_STEP = 0.7


class Poisson(Loss):
    """Poisson deviance on log counts (counts are common targets): ``predict`` is ``exp(raw)``, never negative."""

    name = "poisson"
    inverse_link = "exp"

    def check_target(self, y: np.ndarray) -> None:
        if (y < 0).any() or not y.sum() > 0:
            raise ValueError(
                "objective='poisson' models counts: the target must be 0 or more on every row and above 0 on "
                "some; use objective='squared_error' for a target that can be negative."
            )

    def _baseline(self, y: np.ndarray) -> float:
        return float(np.log(y.mean()))

    def _gradients(self, raw: np.ndarray, y: np.ndarray, g: np.ndarray, h: np.ndarray) -> None:
        poisson_gradients(raw, y, POISSON_MAX_DELTA_STEP, g, h)

    def _loss(self, raw: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(np.exp(raw) - y * raw))


class ClassShares(Classification):
    """A random forest's classes: each tree's leaves hold the share of a class among their (bootstrap) rows, the
    forest's score of the class the mean of its trees'. Its trees split as the gini criterion does (a leaf's
    variance of a class's 0/1 indicator is its gini impurity). Binary: a tree a round, the share of ``classes_[1]``;
    three classes or more: a tree per class each round, the shares normalized to sum to 1."""

    name = "gini"
    boosts = False
    probability = "shares"

    def __init__(self, n_classes: int = 2):
        self.trees_per_round = int(n_classes) if n_classes > 2 else 1

    def for_classes(self, n_classes: int) -> Classification:
        return ClassShares(n_classes)

    def class_probabilities(self, raw: np.ndarray) -> np.ndarray:
        if self.trees_per_round == 1:
            p = np.clip(raw[0], 0.0, 1.0)
            return np.column_stack([1.0 - p, p])
        shares = np.maximum(raw, 0.0)
        total = shares.sum(axis=0)
        return (shares / np.where(total > 0, total, 1.0)).T

    def class_index(self, raw: np.ndarray) -> np.ndarray:
        return (raw[0] > 0.5).astype(np.int64) if self.trees_per_round == 1 else np.argmax(raw, axis=0)

    def loss(self, raw: np.ndarray, y: np.ndarray) -> float:
        """The log loss of the shares (clipped at 1e-15, as scikit-learn's ``log_loss``)."""
        p = self.class_probabilities(raw)[np.arange(len(y)), y.astype(np.int64)]
        return float(-np.mean(np.log(np.clip(p, 1e-15, 1.0))))


INVERSE_LINKS = {"exp": np.exp, "expit": expit}
LOSSES: dict[str, Loss] = {loss.name: loss for loss in (SquaredError(), LogLoss(), Poisson(), ClassShares())}
BOOSTING_OBJECTIVES = tuple(name for name, loss in LOSSES.items() if loss.boosts)


def loss_for(objective: str, n_classes: int = 0) -> Loss:
    """The loss of ``objective`` (a key of :data:`LOSSES`) for a target of ``n_classes`` classes (the log loss of
    three classes or more is the softmax's)."""
    loss = LOSSES[objective]
    return loss.for_classes(n_classes) if isinstance(loss, Classification) else loss
