"""Random forests end to end from SQL: ilargi_db against DuckDB join -> pandas -> LightGBM ``boosting="rf"``.

Every side grows the same forest: 100 trees of at most 63 leaves, 20 rows per leaf, 255 bins, a third of the
features drawn at each split, each tree on a bootstrap of the rows. ilargi draws a Poisson bootstrap (about
63% of the rows in each tree, weighted by their counts); LightGBM samples 63.2% of the rows without replacement
(``bagging_fraction=0.632``, its rf mode's only bagging). Held-out rows, data sets and the fresh-process
measurement are ``bench_trees.py``'s (the star, TPC-H and the retail Parquet files); each side's seconds are the
first run's in a fresh process, from the SQL query to the fitted forest, its peak the resident memory it adds.

- ilargi (``factorized``, ``materialized``, ``auto``): ``ilargi_db.train(con, query, target,
  algorithm="random_forest", strategy=...)``, scored by ``ilargi_db.evaluate``.
- ``lightgbm_rf``: ``con.sql(query).to_arrow_table().to_pandas()``, VARCHAR as ``category``,
  ``LGBMRegressor`` / ``LGBMClassifier`` with ``boosting_type="rf"``, its default threads.

    python benchmarks/bench_forest.py --output docs/benchmarks.md      # several minutes
    python benchmarks/bench_forest.py --quick                          # a smoke run
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trees import (  # noqa: E402
    METRIC,
    connect_side,
    frame,
    held_out,
    retail_jobs,
    score_baseline,
    star_jobs,
    tpch_jobs,
)
from harness.cli import command, parser  # noqa: E402
from harness.processes import FreshRunFailed, peak_from_now, run_child  # noqa: E402
from harness.report import ran, write_section  # noqa: E402

import ilargi_db  # noqa: E402

ALGORITHM = "random_forest"
STRATEGIES = ("factorized", "materialized", "auto")
REFERENCE = "lightgbm_rf"
TARGET_SPEEDUP, TARGET_PEAK, TARGET_SCORE = 3.0, 0.6, 0.005  # issue 36's, against join + LightGBM rf
TIMEOUT = 900
FEATURE_SHARE = 1 / 3  # features drawn at each split

ILARGI = dict(
    n_estimators=100,
    max_leaves=63,
    min_samples_leaf=20,
    max_bins=255,
    max_features=FEATURE_SHARE,
    bootstrap=True,
    random_state=0,
)
LIGHTGBM_RF = dict(
    boosting_type="rf",
    n_estimators=100,
    num_leaves=63,
    min_child_samples=20,
    max_bin=255,
    feature_fraction_bynode=FEATURE_SHARE,
    bagging_fraction=0.632,
    bagging_freq=1,
    random_state=0,
    verbose=-1,
)


def fit_lightgbm(con, task: dict):
    import lightgbm

    X, y = frame(con, task["train"], task["target"])
    regression = task["task"] == "regression"
    model = (lightgbm.LGBMRegressor if regression else lightgbm.LGBMClassifier)(**LIGHTGBM_RF)
    model.fit(X, y)
    return model, {c: X[c].cat.categories for c in X.columns if str(X[c].dtype) == "category"}


def child(side: str, spec: str) -> None:
    """One side on one job in this fresh process: print seconds, peak bytes and the held-out score as JSON."""
    task = json.loads(spec)
    con = connect_side(task["db"], side == REFERENCE, ALGORITHM)
    peak = peak_from_now()
    start = time.perf_counter()
    if side == REFERENCE:
        fitted = fit_lightgbm(con, task)
    else:
        objective = "squared_error" if task["task"] == "regression" else "gini"
        fitted = ilargi_db.train(
            con, task["train"], task["target"], algorithm=ALGORITHM, strategy=side, objective=objective, **ILARGI
        )
    seconds, bytes_ = time.perf_counter() - start, peak()
    if side == REFERENCE:
        score = score_baseline(con, task, fitted)  # as bench_trees scores its baselines
    else:
        score = float(ilargi_db.evaluate(con, fitted, task["holdout"])[METRIC[task["task"]]])
    chose = getattr(fitted, "strategy_", None) if side == "auto" else None
    print(json.dumps({"seconds": seconds, "peak": bytes_, "score": score, "chose": chose}))


def measure(task: dict, sides: list[str]) -> dict:
    results = {}
    for side in sides:
        try:
            results[side] = run_child(__file__, side, json.dumps(task), timeout=TIMEOUT)
        except subprocess.TimeoutExpired as error:
            results[side] = {"error": f"timed out after {error.timeout:.0f} s"}
        except FreshRunFailed as error:
            lines = error.stderr.strip().splitlines()
            results[side] = {"error": lines[-1][:300] if lines else str(error)}
        r = results[side]
        shown = (
            f"{r['seconds']:8.2f} s  peak {r['peak'] / 2**20:7.0f} MiB  {METRIC[task['task']]} {r['score']:.4f}"
            if "error" not in r
            else f"failed: {r['error']}"
        )
        print(f"{task['name']:34s} {task['task']:10s} {side:12s} {shown}", flush=True)
    return results


def render(tasks: list[dict], results: list[dict], how: str) -> str:
    lines = [
        "## Random forests end to end (`benchmarks/bench_forest.py`)",
        "",
        f"{how}. Seconds from the SQL query to the fitted forest, the first run in a fresh process; peak = VmHWM "
        f"over the RSS before the run; the held-out score on the rows with `{held_out('key')}` (R2 for regression, "
        "ROC AUC for binary, accuracy for three or four classes). Every side: 100 trees, at most 63 leaves, "
        "20 rows per leaf, 255 bins, a third of the "
        "features at each split, a bootstrap per tree (ilargi: Poisson counts; LightGBM rf: 63.2% of the rows "
        'without replacement). Ratios against DuckDB join -> pandas -> LightGBM `boosting="rf"`.',
        "",
        "| data set | task | side | seconds | peak MiB | held-out | LightGBM rf s / s | peak / LightGBM rf's "
        "| score - LightGBM rf |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    verdicts = []
    for task, found in zip(tasks, results):
        ref = found.get(REFERENCE, {})
        for side, r in found.items():
            if "error" in r:
                lines.append(f"| {task['name']} | {task['task']} | {side} | failed: {r['error']} | | | | | |")
                continue
            ratios = ["", "", ""]
            if ref and "error" not in ref and side != REFERENCE:
                speed, mem, gap = (
                    ref["seconds"] / r["seconds"],
                    r["peak"] / max(ref["peak"], 1),
                    r["score"] - ref["score"],
                )
                ratios = [f"{speed:.2f}x", f"{mem:.2f}", f"{gap:+.4f}"]
                verdicts.append(
                    f"- {task['name']}, {task['task']}, {side}: {speed:.2f}x faster "
                    f"({'PASS' if speed >= TARGET_SPEEDUP else 'MISS'}), peak {mem:.2f} of LightGBM rf's "
                    f"({'PASS' if mem <= TARGET_PEAK else 'MISS'}), score {gap:+.4f} "
                    f"({'PASS' if gap >= -TARGET_SCORE else 'MISS'})"
                )
            label = side + (f" (chose {r['chose']})" if r.get("chose") else "")
            lines.append(
                f"| {task['name']} | {task['task']} | {label} | {r['seconds']:.2f} | {r['peak'] / 2**20:.0f} | "
                f"{METRIC[task['task']]} {r['score']:.4f} | {' | '.join(ratios)} |"
            )
    if verdicts:
        lines += [
            "",
            f"Targets: >= {TARGET_SPEEDUP:g}x faster than join + LightGBM rf, peak <= {TARGET_PEAK:g} of it, held-out "
            f"score not below it by more than {TARGET_SCORE:g}:",
            "",
            *verdicts,
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    found = parser(__doc__, quick="small sizes (100k fact rows, TPC-H SF 0.05), for a smoke run", child=2)
    found.add_argument("--datasets", nargs="+", default=["star", "tpch", "retail"])
    found.add_argument("--sides", nargs="+", help="the sides to run (default: every one)")
    found.add_argument("--tpch-scale", type=float, help="TPC-H scale factor (default 0.5, 0.05 with --quick)")
    args = found.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    rows = 100_000 if args.quick else 1_000_000
    scale = args.tpch_scale or (0.05 if args.quick else 0.5)
    sides = [REFERENCE, *STRATEGIES]
    if args.sides:
        sides = [side for side in sides if side in args.sides]
    started = time.perf_counter()
    builders = {
        "star": lambda folder: star_jobs(folder, rows),
        "tpch": lambda folder: tpch_jobs(folder, scale),
        "retail": lambda folder: retail_jobs(folder, rows),
    }
    with tempfile.TemporaryDirectory() as folder:
        tasks = [t for name in args.datasets for t in builders[name](Path(folder))]
        results = [measure(task, sides) for task in tasks]
    if args.output:
        how = ran(command(__file__, argv), time.perf_counter() - started)
        write_section(args.output, "bench_forest", render(tasks, results, how))
    return 0


if __name__ == "__main__":
    sys.exit(main())
