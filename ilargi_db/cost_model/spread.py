"""How unsure one step's predicted seconds are: its *spread*, the standard deviation of the log of its true
seconds over its predicted seconds, from the kernel model's fit (:func:`kernel_spread`) and from the load probe
(:func:`load_spread`). :mod:`.uncertainty` draws the plans' errors from them; the kernel models carry their own
(:meth:`~ilargi_db.cost_model.kernels.KernelCosts.spread`).
"""

from __future__ import annotations

import math

# |predicted / measured - 1| has a geometric mean of about 0.53 sigma for a log-normal error of sd sigma
# (E ln|Z| = -(gamma + ln 2) / 2 for a standard normal Z): a fit error of e becomes a spread of e / 0.53.
GEOMEAN_PER_SIGMA = 0.53
HELD_OUT_WIDENING = 1.5  # held-out shapes miss by about this much more than the calibration's own fit (bench_plan)
SPREAD_FLOOR = 0.15  # no kernel model is surer than this (run-to-run noise of a 2-core machine)
SPREAD_CEILING = 1.2  # nor this unsure: a factor of about 3.3 either way at one standard deviation
PRIOR_SPREAD = 0.5  # a roofline prior the calibration did not fit


def kernel_spread(fit_error: float | None) -> float:
    """The spread of a kernel model whose calibration fit has geometric-mean relative error ``fit_error``
    (None: not calibrated, a roofline prior).

    >>> kernel_spread(None), round(kernel_spread(0.2), 3), kernel_spread(0.01), kernel_spread(5.0)
    (0.5, 0.566, 0.15, 1.2)
    """
    if fit_error is None or not math.isfinite(fit_error):
        return PRIOR_SPREAD
    return min(max(fit_error / GEOMEAN_PER_SIGMA * HELD_OUT_WIDENING, SPREAD_FLOOR), SPREAD_CEILING)


def load_spread(load: float) -> float:
    """The spread a load probe's reading adds to a parallel step: the probe is a 2 ms glimpse of a machine
    whose other processes come and go, so the slowdown it measured is uncertain by about half its size."""
    return 0.5 * math.log(max(load, 1.0))


__all__ = ["kernel_spread", "load_spread"]
