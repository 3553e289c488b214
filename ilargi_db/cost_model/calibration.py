"""Calibration data: the grid of synthetic jobs, where measurements live, and how they are read.

Running the grid trains models, so it lives above training (:mod:`ilargi_db.calibration`). A job is
a synthetic schema (tuple ratio, feature ratio, sparsity, join shape)
and an algorithm; both strategies run the end-to-end :func:`ilargi_db.train`
(planning, data and training: what a user waits for), each ``repeats`` times
alternately, and the fastest run of each counts (the others met noise). The
measurements, with the job's features and this machine's hardware, go to a
CSV file in the cache directory; :mod:`ilargi_db.cost_model.learned` fits the
model from it at first use.
"""

from __future__ import annotations

import csv
import itertools
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from ilargi_db.cost_model.hardware import Hardware, cache_dir
from ilargi_db.errors import IlargiError

GRIDS = ("tiny", "default")
SHAPES = ("star", "left", "mn")
SEEDS = 1000  # grid seeds are below this; held-out jobs use seeds above it

# Parameters of each algorithm in the grid: short fixed iteration counts keep jobs short.
PARAMS: dict[str, dict[str, Any]] = {
    "linear_regression": {},
    "logistic_regression": {"max_iter": 30},
    "kmeans": {"n_clusters": 8, "n_init": 1, "max_iter": 10, "tol": 0.0, "random_state": 0},
    "gnmf": {"n_components": 5, "max_iter": 10, "tol": 0.0, "random_state": 0},
}


@dataclass(frozen=True)
class Job:
    """One synthetic training job: a schema and an algorithm."""

    algorithm: str
    fact_rows: int
    tuple_ratio: float
    fact_features: int
    dim_features: int
    sparsity: float = 0.0
    shape: str = "star"  # "star": 2 dimensions; "left": 1 dimension, LEFT JOIN, 10% dangling; "mn": M:N
    seed: int = 0
    params: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def feature_ratio(self) -> float:
        return self.dim_features / self.fact_features

    def describe(self) -> str:
        return (
            f"{self.algorithm} {self.shape} n={self.fact_rows} TR={self.tuple_ratio:g} FR={self.feature_ratio:g} "
            f"sparsity={self.sparsity:g}"
        )


def grid_jobs(grid: str = "default") -> list[Job]:
    """The jobs of a calibration grid, in a deterministic shuffled order (a budget cut keeps a spread).

    ``"tiny"`` is six jobs of a few thousand rows (seconds in all, for tests);
    ``"default"`` is algorithms x tuple ratio x feature ratio x sparsity x join
    shape at 20,000 and 100,000 fact rows (288 jobs: 5 to 8 minutes on two cores).

    >>> len(grid_jobs("tiny")), len(grid_jobs("default"))
    (6, 288)
    """
    if grid not in GRIDS:
        raise IlargiError(f"unknown calibration grid {grid!r}: choose one of {', '.join(GRIDS)}.")
    if grid == "tiny":
        return [
            Job(a, 3000, tr, 4, dim, shape=shape, seed=i, params=PARAMS[a])
            for i, (a, tr, dim, shape) in enumerate(
                [
                    ("linear_regression", 30, 16, "star"),
                    ("linear_regression", 1, 2, "star"),
                    ("logistic_regression", 10, 8, "left"),
                    ("kmeans", 2, 4, "mn"),
                    ("gnmf", 20, 12, "star"),
                    ("kmeans", 1, 1, "left"),
                ]
            )
        ]
    jobs = []
    combos = itertools.product(PARAMS, (1, 3, 10, 40), ((5, 2), (5, 10), (4, 32)), SHAPES, (20_000, 100_000))
    for i, (algorithm, tr, (fact, dim), shape, rows) in enumerate(combos):
        sparsity = 0.8 if i % 3 == 1 else 0.0  # sparsity alternates instead of doubling the grid
        jobs.append(Job(algorithm, rows, tr, fact, dim, sparsity, shape, seed=i % SEEDS, params=PARAMS[algorithm]))
    random.Random(0).shuffle(jobs)
    return jobs


def build_job(con: duckdb.DuckDBPyConnection, job: Job) -> tuple[str, str | None]:
    """Create the job's tables in ``con``; return its training query and target."""
    from ilargi_db.datasets import make_star_schema

    dim_rows = max(int(round(job.fact_rows / job.tuple_ratio)), 1)
    n_dims = 2 if job.shape == "star" else 1
    schema = make_star_schema(
        con,
        fact_rows=job.fact_rows,
        fact_features=job.fact_features,
        n_dims=n_dims,
        dim_rows=dim_rows,
        dim_features=job.dim_features,
        seed=job.seed,
        sparsity=job.sparsity,
        join="left" if job.shape == "left" else "inner",
        dangling=0.1 if job.shape == "left" else 0.0,
    )
    if job.shape == "mn":  # every dimension key twice: each fact row meets two dimension rows
        con.execute("CREATE OR REPLACE TABLE dim0 AS SELECT * FROM dim0 UNION ALL SELECT * FROM dim0")
    query = schema.query()
    features = query[len("SELECT ") : query.index(", f.y FROM")]
    source = query[query.index(" FROM ") :]
    if job.algorithm == "linear_regression":
        return query, "y"
    if job.algorithm == "logistic_regression":
        return f"SELECT {features}, CAST(f.y > 0.5 AS INTEGER) AS label{source}", "label"
    return f"SELECT {features}{source}", None


def calibration_path(backend: str = "numpy", cache: str | os.PathLike | None = None) -> Path:
    """Where this machine's calibration of ``backend`` lives."""
    return cache_dir(cache) / f"calibration-{backend}.csv"


def write_rows(path: Path, rows: list[dict], hardware: Hardware) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{**row, **hardware.as_features()} for row in rows]
    names = list(dict.fromkeys(k for row in rows for k in row))
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=names)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)  # a reader never sees half a file


def read_rows(path: str | os.PathLike) -> list[dict]:
    """Calibration rows with numbers parsed back."""

    def parse(value: str) -> Any:
        try:
            return float(value)
        except ValueError:
            return value

    with open(path, newline="") as f:
        return [{k: parse(v) for k, v in row.items()} for row in csv.DictReader(f)]


@dataclass(frozen=True)
class CalibrationResult:
    """What :func:`calibrate` measured and where it stored it."""

    n_jobs: int
    seconds: float
    path: Path
    backend: str
    grid: str
    accuracy: float  # the refitted model's decisions on the measured jobs (in sample)
    skipped: int = 0  # grid jobs left out by the time budget

    def __str__(self) -> str:
        cut = f", {self.skipped} left out by the time budget" if self.skipped else ""
        return (
            f"calibrated {self.backend} on {self.n_jobs} jobs of the {self.grid!r} grid in {self.seconds:.1f} s"
            f"{cut}; the refitted model picks the faster strategy on {self.accuracy:.0%} of them.\n"
            f"measurements: {self.path}"
        )
