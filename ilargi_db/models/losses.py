"""The losses gradient boosting minimizes, each one object that knows its gradients, baseline and link.

A loss is what changes between objectives; the grower, the registry, the metrics and the SQL macro writer ask
it instead of testing the objective's name:

- ``gradients(raw, y, g, h)`` and ``baseline(y)``: what each tree is fitted to, and the score before any tree;
- ``loss(raw, y)``: the mean loss early stopping watches;
- ``classifies``: whether the model predicts classes (``classes_``, ``predict_proba``, classification metrics);
- ``inverse_link``: the raw score to the target's scale (``predict`` of a regression, the probability of a
  classifier), by name (a regression's as NumPy and DuckDB both call it: ``exp``), or None for the identity.

Every array is (rows,) for now, one tree per round; a loss of several trees a round (softmax) gives its
gradients (trees per round, rows).
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from ilargi_db.backend.gradient_kernels import logistic_gradients, poisson_gradients


class Loss:
    """What every loss answers (see the module's docstring)."""

    name: str = ""
    classifies: bool = False
    unit_hessian: bool = False  # every row's hessian is 1: histograms need no hessian sums
    # A regression's is a function NumPy and DuckDB both name ("exp": the macro writer calls it by that name); a
    # classifier's ("expit") is its probability, which the classifier's macro writes itself. None: the identity.
    inverse_link: str | None = None

    def check_target(self, y: np.ndarray) -> None:
        """Refuse targets the loss is not defined on (a ValueError, in the caller's terms)."""

    def baseline(self, y: np.ndarray) -> float:
        raise NotImplementedError

    def gradients(self, raw: np.ndarray, y: np.ndarray, g: np.ndarray, h: np.ndarray) -> None:
        raise NotImplementedError

    def loss(self, raw: np.ndarray, y: np.ndarray) -> float:
        raise NotImplementedError

    def to_target_scale(self, raw: np.ndarray) -> np.ndarray:
        """The raw scores on the target's scale (the probability of ``classes_[1]`` for a classifier)."""
        return raw if self.inverse_link is None else INVERSE_LINKS[self.inverse_link](raw)

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

    def baseline(self, y: np.ndarray) -> float:
        return float(y.mean())

    def gradients(self, raw: np.ndarray, y: np.ndarray, g: np.ndarray, h: np.ndarray) -> None:
        np.subtract(raw, y, out=g)  # h stays 1

    def loss(self, raw: np.ndarray, y: np.ndarray) -> float:
        return float(0.5 * np.mean((raw - y) ** 2))


class LogLoss(Loss):
    """Binary log loss on log-odds; ``y`` is 0/1 (``classes_[1]`` is 1)."""

    name = "log_loss"
    classifies = True
    inverse_link = "expit"

    def baseline(self, y: np.ndarray) -> float:
        p = float(np.clip(y.mean(), 1e-12, 1 - 1e-12))
        return float(np.log(p / (1 - p)))

    def gradients(self, raw: np.ndarray, y: np.ndarray, g: np.ndarray, h: np.ndarray) -> None:
        logistic_gradients(raw, y, g, h)

    def loss(self, raw: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(np.logaddexp(0.0, raw) - y * raw))

    def fit_metrics(self, raw: np.ndarray, y: np.ndarray) -> dict[str, float]:
        """Accuracy and log loss on the training rows."""
        return {"accuracy": float(np.mean((raw > 0) == (y > 0.5))), "log_loss": self.loss(raw, y)}


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

    def baseline(self, y: np.ndarray) -> float:
        return float(np.log(y.mean()))

    def gradients(self, raw: np.ndarray, y: np.ndarray, g: np.ndarray, h: np.ndarray) -> None:
        poisson_gradients(raw, y, POISSON_MAX_DELTA_STEP, g, h)

    def loss(self, raw: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(np.exp(raw) - y * raw))


INVERSE_LINKS = {"exp": np.exp, "expit": expit}
LOSSES: dict[str, Loss] = {loss.name: loss for loss in (SquaredError(), LogLoss(), Poisson())}
