"""How sure the cost model is, and the choice that minimizes expected regret.

Each step of a plan carries a *spread*: the standard deviation of the log of
its true seconds over its predicted seconds. It comes from the kernel model's
error (the calibration's fit error, widened for shapes the calibration never
saw, or a wide default for the roofline priors), from the iteration count when
the solver iterates (learned runs vary little; a guess varies a lot), and from
the load probe when other processes hold the cores.

The candidates are compared on the same random draws of those errors
(:func:`sample_seconds`): a kernel's error is partly common to every plan that
runs it (the same coefficients price them all), the iteration count's error
is common to the plans of one solver (both strategies iterate alike), and the
load's is common to every parallel step. The plan chosen is the one with the
least *expected regret*: the seconds it loses to the fastest plan of the same
draw, averaged. A plan predicted faster by a hair but unsure (an iteration
count guessed, a kernel model that misses by 2x) has the longer tail of slow
outcomes and loses to one that is never far behind. The draws are seeded, so
one job's choice does not change from process to process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ilargi_db.cost_model.spread import load_spread

if TYPE_CHECKING:
    from ilargi_db.cost_model.plan import PhysicalPlan

DRAWS = 512  # joint draws of the errors: a regret estimate within about a percent, in well under a millisecond
SEED = 23  # fixed: the same job is decided the same way in every process
KERNEL_SHARE = 0.5  # share of a kernel's error variance common to its runs in every plan of a job
REGRET_TIE = 0.01  # plans whose expected regrets differ by less than this are a tie: the data's shape decides
INTERVAL = (0.1, 0.9)  # the predicted range explain reports: 80% of the draws


@dataclass(frozen=True)
class Confidence:
    """How sure the choice is: per plan label, the expected regret, the share of draws it is fastest, and the
    range of its seconds (the ``INTERVAL`` quantiles of the draws)."""

    expected_regret: dict[str, float]
    probability_fastest: dict[str, float]
    ranges: dict[str, tuple[float, float]]

    def describe(self, label: str) -> str:
        """E.g. ``fastest in 97% of the error draws, expected regret 0.4%, 0.12-0.31 s (80% of draws)``."""
        return (
            f"fastest in {self.probability_fastest[label]:.0%} of the cost model's error draws, expected regret "
            f"{self.expected_regret[label]:.1%}, {self.describe_range(label)} "
            f"({INTERVAL[1] - INTERVAL[0]:.0%} of draws)"
        )

    def describe_range(self, label: str) -> str:
        """E.g. ``0.12-0.31 s``: the plan's seconds in ``INTERVAL`` of the draws."""
        return _range(*self.ranges[label])

    def to_dict(self) -> dict:
        return {
            "expected_regret": self.expected_regret,
            "probability_fastest": self.probability_fastest,
            "ranges": self.ranges,
        }


def _range(low: float, high: float) -> str:
    if high < 1:
        return f"{low * 1e3:,.0f}-{high * 1e3:,.0f} ms"
    return f"{low:.3g}-{high:.3g} s"


def sample_seconds(plans: list[PhysicalPlan], draws: int = DRAWS, seed: int = SEED) -> np.ndarray:
    """Seconds of each plan (rows) in ``draws`` joint draws of the kernel, iteration and load errors (columns).

    Deterministic for a given list of plans: the draws are taken in the plans' and steps' order from a seeded
    generator.
    """
    rng = np.random.default_rng(seed)
    common: dict[str, np.ndarray] = {}
    by_solver: dict[str, np.ndarray] = {}
    load = rng.standard_normal(draws)
    out = np.zeros((len(plans), draws))
    share = math.sqrt(KERNEL_SHARE)
    own = math.sqrt(1.0 - KERNEL_SHARE)
    for i, plan in enumerate(plans):
        if plan.solver not in by_solver:
            by_solver[plan.solver] = rng.standard_normal(draws)
        estimate = plan.iterations
        iterations = np.exp(estimate.spread * by_solver[plan.solver])
        if estimate.ceiling is not None:  # a solver never runs past max_iter
            iterations = np.minimum(iterations, estimate.ceiling / max(estimate.iterations, 1e-12))
        load_factor = np.exp(load_spread(plan.load) * load)
        for step in plan.steps:
            if step.kernel not in common:
                common[step.kernel] = rng.standard_normal(draws)
            z = share * common[step.kernel] + own * rng.standard_normal(draws)
            seconds = step.seconds * np.exp(step.spread * z)
            if step.iterative:
                seconds = seconds * iterations
            if step.parallel:
                seconds = seconds * load_factor
            out[i] += seconds
    return out


def regret_choice(plans: list[PhysicalPlan]) -> tuple[PhysicalPlan, Confidence, list[PhysicalPlan]]:
    """The plan of least expected regret among those that fit, how sure that is, and the plans within
    ``REGRET_TIE`` of it (itself first): a tie the caller may break by the data's shape.

    ``plans`` as :func:`~ilargi_db.cost_model.plan.candidate_plans` gives them; a list without a plan that fits
    is priced as it is (the caller reports what it exceeds).
    """
    fitting = [p for p in plans if p.fits] or list(plans)
    seconds = sample_seconds(fitting)
    fastest = seconds.min(axis=0)
    # Seconds lost to the fastest plan of the same draw, averaged, as a share of the fastest plan's average.
    # (Ranked this way a plan's long right tail counts: a ratio's would not, log-symmetric errors cancel in it.)
    regrets = (seconds - fastest).mean(axis=1) / max(float(fastest.mean()), 1e-12)
    winners = np.bincount(seconds.argmin(axis=0), minlength=len(fitting)) / seconds.shape[1]
    best = int(np.argmin(regrets))
    tied = [fitting[best]] + [
        p for j, p in enumerate(fitting) if j != best and regrets[j] <= regrets[best] + REGRET_TIE
    ]
    labels = [p.label for p in fitting]
    quantiles = np.quantile(seconds, INTERVAL, axis=1)
    confidence = Confidence(
        {label: float(r) for label, r in zip(labels, regrets)},
        {label: float(w) for label, w in zip(labels, winners)},
        {label: (float(quantiles[0, j]), float(quantiles[1, j])) for j, label in enumerate(labels)},
    )
    return fitting[best], confidence, tied


__all__ = ["Confidence", "regret_choice", "sample_seconds"]
