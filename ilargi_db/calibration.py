"""``calibrate``: time both strategies on this machine's grid of synthetic jobs and refit the cost model.

It trains models end to end, so it sits above :mod:`ilargi_db.training`; the grid, the measurement files
and the model it refits are the cost estimator's (:mod:`ilargi_db.cost_model`).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import duckdb

from ilargi_db._terminal import progress as progress_bar
from ilargi_db.backend import get_backend
from ilargi_db.cost_model import learned
from ilargi_db.cost_model.calibration import (
    CalibrationResult,
    Job,
    build_job,
    calibration_path,
    grid_jobs,
    read_rows,
    write_rows,
)
from ilargi_db.cost_model.explain import job_features_for
from ilargi_db.cost_model.hardware import detect_hardware
from ilargi_db.errors import IlargiError
from ilargi_db.training import train


def time_strategies(
    con: duckdb.DuckDBPyConnection,
    query: str,
    target: str | None,
    algorithm: str,
    params: dict[str, Any],
    backend: str = "numpy",
    repeats: int = 2,
) -> dict[str, float]:
    """Fastest end-to-end ``train`` seconds of each strategy, the strategies alternating."""
    best = {"factorized": float("inf"), "materialized": float("inf")}
    for r in range(repeats):
        order = ("factorized", "materialized") if r % 2 == 0 else ("materialized", "factorized")
        for strategy in order:
            start = time.perf_counter()
            train(con, query, target=target, algorithm=algorithm, strategy=strategy, backend=backend, **params)
            best[strategy] = min(best[strategy], time.perf_counter() - start)
    return best


def measure_job(con: duckdb.DuckDBPyConnection, job: Job, backend: str = "numpy", repeats: int = 2) -> dict:
    """One calibration row: the job's features (as :func:`explain` computes them) and both timings."""
    query, target = build_job(con, job)
    features = job_features_for(con, query, target, job.algorithm, job.params)
    seconds = time_strategies(con, query, target, job.algorithm, job.params, backend, repeats)
    return {
        **features,
        "backend": backend,
        "job": job.describe(),
        "job_tuple_ratio": job.tuple_ratio,
        "job_feature_ratio": job.feature_ratio,
        "job_shape": job.shape,
        "seconds_factorized": seconds["factorized"],
        "seconds_materialized": seconds["materialized"],
    }


def calibrate(
    budget_seconds: float | None = None,
    grid: str = "default",
    backend: str = "numpy",
    cache_dir: str | os.PathLike | None = None,
    progress: bool | None = None,
) -> CalibrationResult:
    """Measure both strategies on a grid of synthetic jobs on this machine and refit the cost model.

    Parameters
    ----------
    budget_seconds : float or None
        Stop starting new jobs after this many seconds (the jobs run in a
        shuffled order, so a cut grid still spans the ratios). None: the whole grid.
    grid : {"tiny", "default"}
        ``"tiny"`` takes seconds; ``"default"`` 5 to 8 minutes on two cores.
    backend : {"numpy", "cupy"}
        The backend to calibrate; ``explain`` uses the calibration of the backend it runs on.
    cache_dir : path or None
        Where to store it: default ``$ILARGI_CACHE_DIR`` or the platform's cache (``~/.cache/ilargi_db``).
    progress : bool or None
        Show a progress bar; None shows one when stderr is a terminal.

    Returns
    -------
    CalibrationResult
    """
    if budget_seconds is not None and not (budget_seconds > 0):
        raise IlargiError(
            f"budget_seconds must be a positive number of seconds (or None for no limit), got {budget_seconds!r}."
        )
    jobs = grid_jobs(grid)
    if backend not in ("numpy", "cupy"):
        raise IlargiError(f"calibrate a concrete backend: 'numpy' or 'cupy', got {backend!r}.")
    get_backend(backend)  # raises with the install hint when CuPy or the GPU is missing
    hardware = detect_hardware(cache_dir)
    bar = progress_bar(len(jobs), f"calibrating {backend}", show=progress, leave=True)
    start = time.perf_counter()
    rows = []
    con = duckdb.connect()
    try:
        for job in jobs:
            if budget_seconds is not None and rows and time.perf_counter() - start > budget_seconds:
                break
            rows.append(measure_job(con, job, backend))
            bar.update(1)
    finally:
        con.close()
        bar.close()
    path = calibration_path(backend, cache_dir)
    write_rows(path, rows, hardware)
    model = learned.load_model(path, refresh=True, cache=cache_dir)
    accuracy = model.accuracy(read_rows(path))
    summary = {"grid": grid, "jobs": len(rows), "seconds": time.perf_counter() - start, "accuracy": accuracy}
    path.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    return CalibrationResult(
        len(rows), time.perf_counter() - start, path, backend, grid, accuracy, skipped=len(jobs) - len(rows)
    )


__all__ = ["calibrate", "measure_job", "time_strategies"]
