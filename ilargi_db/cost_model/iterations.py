"""How many iterations a solver will run: from its parameters, and learned from earlier runs.

Direct solvers make one pass. An iterative one stops at ``max_iter`` or when it
converges; before any run on this machine the catalog's typical counts
(:mod:`ilargi_db.models.catalog`, measured at the default tolerances) stand in.
Every training records the iterations it ran (``record``) in the user's cache,
keyed by algorithm, solver, tolerance and ``max_iter``; later predictions use
the median of the recent runs with the same key, and say so.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ilargi_db.cost_model.hardware import cache_dir
from ilargi_db.models.catalog import Solver, algorithm_facts

KEEP = 20  # recent runs remembered per key
_LOCK = threading.Lock()


# How far the true count may be from the estimate (sd of its log): a guess from the benchmarks' typical counts
# misses by up to a few times; the median of earlier runs by their own spread, at least LEARNED_SPREAD.
GUESSED_SPREAD = 0.6
LEARNED_SPREAD = 0.1


@dataclass(frozen=True)
class IterationEstimate:
    """Expected iterations, where the number comes from, how unsure it is (sd of its log) and the most the
    solver may run (None: exactly ``iterations``)."""

    iterations: float
    source: str
    spread: float = 0.0
    ceiling: float | None = None


def _solver(algorithm: str, solver: str) -> Solver | None:
    """The solver's facts when it iterates (None for a direct solver or one the catalog does not know)."""
    try:
        facts = algorithm_facts(algorithm).solver(solver)
    except KeyError:
        return None
    return facts if facts.iterative else None


def _key(algorithm: str, solver: str, params: dict[str, Any], scaled: bool = False, streamed: bool = False) -> str:
    """The history's key: runs with these settings converge alike (standardized columns converge otherwise;
    ``streamed`` runs of a solver whose iterations depend on the placement, too)."""
    facts = _solver(algorithm, solver)
    max_iter, tol = (facts.max_iter, facts.tol) if facts else (1, 0.0)
    bound = int(params.get(algorithm_facts(algorithm).iterations_parameter, max_iter))
    key = f"{algorithm}/{solver}/tol={float(params.get('tol', tol)):g}/max_iter={bound}"
    key += "/streamed" if streamed and facts is not None and facts.iterations_by_placement else ""
    return key + ("/standardized" if scaled else "")


def history_path(cache: str | os.PathLike | None = None) -> Path:
    return cache_dir(cache) / "iterations.json"


def load_history(cache: str | os.PathLike | None = None) -> dict[str, list[float]]:
    """Recent iteration counts by key (empty when nothing was recorded or the file is unreadable)."""
    try:
        found = json.loads(history_path(cache).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    # A hand-edited or half-written file must not stop a training: keep only lists of finite counts.
    return {
        k: [float(x) for x in v if isinstance(x, (int, float)) and math.isfinite(x)]
        for k, v in found.items()
        if isinstance(k, str) and isinstance(v, list)
    }


def record(
    algorithm: str,
    solver: str,
    params: dict[str, Any],
    n_iter: float,
    cache: str | os.PathLike | None = None,
    scaled: bool = False,
    streamed: bool = False,
) -> None:
    """Remember that a run with these parameters (``scaled``: on standardized columns; ``streamed``: over a
    memory budget) took ``n_iter`` iterations (best effort: never fails a training)."""
    if _solver(algorithm, solver) is None:
        return
    path = history_path(cache)
    with _LOCK:
        try:
            history = load_history(cache)
            key = _key(algorithm, solver, params, scaled, streamed)
            history[key] = [*history.get(key, []), float(n_iter)][-KEEP:]
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(history))
            os.replace(tmp, path)
        except (OSError, ValueError, TypeError):  # a cache that cannot be written is not an error of the job
            pass


def expected_iterations(
    algorithm: str,
    solver: str,
    params: dict[str, Any],
    history: dict[str, list[float]] | None = None,
    scaled: bool = False,
    streamed: bool = False,
) -> IterationEstimate:
    """Iterations ``solver`` is expected to run for ``algorithm`` with ``params`` (``streamed``: over a memory
    budget, for a solver whose iterations depend on it).

    >>> expected_iterations("linear_regression", "normal", {}).iterations
    1.0
    >>> estimate = expected_iterations("kmeans", "lloyd", {"max_iter": 20, "tol": 0.0, "n_init": 2})
    >>> estimate.iterations, estimate.source, estimate.spread
    (40.0, 'max_iter=20 (tol=0 never stops early) x 2 initializations', 0.0)
    >>> expected_iterations("logistic_regression", "lbfgs", {}, {"logistic_regression/lbfgs/tol=0.0001/max_iter=100":
    ...                     [12, 14, 13]}).source
    'median of 3 earlier runs with these settings on this machine'
    """
    algorithm_facts(algorithm)  # an unknown algorithm is an error, not one pass
    facts = _solver(algorithm, solver)
    if facts is None:
        return IterationEstimate(1.0, "one pass (a direct solver)")
    bound = algorithm_facts(algorithm).iterations_parameter
    max_iter = int(params.get(bound, facts.max_iter))
    tol = float(params.get("tol", facts.tol))
    early_stopping = algorithm_facts(algorithm).early_stopping_parameter
    if early_stopping is not None and not params.get(early_stopping, False):
        tol = 0.0  # boosting without early stopping runs every round
    runs = (history or {}).get(_key(algorithm, solver, params, scaled, streamed), [])
    inits = max(1, int(params.get("n_init", 1)))  # k-means restarts; other solvers have no n_init
    times = f" x {inits} initializations" if inits > 1 else ""
    if tol <= 0:
        return IterationEstimate(float(max_iter * inits), f"{bound}={max_iter} (tol=0 never stops early){times}")
    ceiling = float(max_iter * inits)
    if runs:
        median = min(float(statistics.median(runs)), float(max_iter)) * inits
        where = f"median of {len(runs)} earlier runs with these settings on this machine"
        logs = [math.log(max(r, 1.0)) for r in runs]
        spread = max(statistics.pstdev(logs), LEARNED_SPREAD) if len(runs) > 2 else GUESSED_SPREAD / 2
        return IterationEstimate(median, where + times, spread, ceiling)
    typical = min(facts.typical_iterations, float(max_iter)) * inits
    source = f"typical of {solver} at these settings in the benchmarks (no run here yet)"
    return IterationEstimate(typical, source, GUESSED_SPREAD, ceiling)
