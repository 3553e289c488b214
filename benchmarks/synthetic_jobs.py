"""Synthetic training jobs for the benchmarks: a star, LEFT or M:N schema of given ratios, and an algorithm.

A job is a generated schema (tuple ratio, feature ratio, sparsity, join shape)
and an algorithm; ``build_job`` creates its tables and returns its training query.
Seeds below ``SEEDS`` were the old cost model's calibration grid; held-out jobs use seeds above it.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from typing import Any

import duckdb

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


def read_rows(path: str | os.PathLike) -> list[dict]:
    """Calibration rows with numbers parsed back."""

    def parse(value: str) -> Any:
        try:
            return float(value)
        except ValueError:
            return value

    with open(path, newline="") as f:
        return [{k: parse(v) for k, v in row.items()} for row in csv.DictReader(f)]
