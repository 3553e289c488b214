"""Cluster benchmark: training on a Dask LocalCluster of 1 and 2 workers, and a scaling model for 8-64.

A star schema's fact is written as Parquet files; logistic regression (L-BFGS, ``tol=0``: exactly
``--iterations`` iterations) and linear regression (normal equations) train with ``cluster=client``,
against the same job on one machine without Dask. A pass is one evaluation of the loss and gradient:
on the cluster, one task per partition that computes its partition's loss and gradient where it lives
(d floats out, d floats and a loss back).

Scaling model, per pass: t(p) = c n / p + o + s p on p workers (one task per worker and pass, over the
partitions it holds): the kernels' seconds per row c (one machine, no Dask), split over the workers; a
fixed cost o per pass (the driver's round trip through the scheduler, who holds what); and s per task
(the scheduler's bookkeeping, the d-float messages). o and s are measured apart from any training, with
passes that compute nothing on 1 and 2 workers; the model then predicts the measured training passes
with no parameter fitted to them, and projects 8-64 workers on paper.

    python benchmarks/bench_cluster.py --output docs/benchmarks.md
"""

from __future__ import annotations

import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.cli import command, parser  # noqa: E402
from harness.machine import CORES  # noqa: E402
from harness.report import publish, ran  # noqa: E402
from harness.timing import later_passes, record_seconds, timed  # noqa: E402

import ilargi_db  # noqa: E402
from ilargi_db.datasets import make_star_schema  # noqa: E402
from ilargi_db.models import LogisticRegression  # noqa: E402


def nothing(X, rows, args) -> tuple:
    """A pass that computes nothing: what the round trip and the tasks cost on their own."""
    return (0.0,)


def median_pass(passes: list[float], train) -> tuple[float, object]:
    """The median seconds of the passes ``train()`` makes after its first, and its model."""
    passes.clear()
    model = train()
    return later_passes(passes), model


def empty_pass(client, con, query: str, target: str, repeats: int = 15) -> float:
    """The median seconds of a pass that computes nothing over the job's partitions, resident on the workers."""
    from ilargi_db.cluster import cluster_data
    from ilargi_db.plan import build_join_graph, categorical_flags
    from ilargi_db.preprocess import FeatureEncoder

    graph = build_join_graph(con, query, target)
    X, _, _ = cluster_data(con, graph, FeatureEncoder(categorical_flags(graph)), client)
    return statistics.median(timed(lambda: X.reduce_rows(nothing))[0] for _ in range(repeats))


def main(argv: list[str] | None = None) -> int:
    from dask.distributed import Client, LocalCluster

    args_parser = parser(__doc__, rows=1_000_000)
    args_parser.add_argument("--files", type=int, default=8)
    args_parser.add_argument("--iterations", type=int, default=10)
    args = args_parser.parse_args(argv)
    warnings.simplefilter("ignore")
    started = time.perf_counter()
    where = Path(tempfile.mkdtemp(prefix="ilargi-cluster-bench-"))
    atexit.register(shutil.rmtree, where, True)  # the Parquet files go when the benchmark ends
    con = ilargi_db.connect()
    star = make_star_schema(
        con, fact_rows=args.rows, fact_features=8, n_dims=2, dim_rows=args.rows // 100, dim_features=8, seed=1515
    )
    con.execute(
        f"COPY (SELECT *, CAST(y > 0.5 AS INTEGER) AS label, row_number() OVER () % {args.files} AS part FROM fact) "
        f"TO '{where}' (FORMAT parquet, PARTITION_BY (part))"
    )
    linear = star.query().replace("FROM fact AS f", f"FROM read_parquet('{where}/*/*.parquet') AS f")
    logistic = linear.replace("f.y FROM", "f.label FROM")
    lr = dict(algorithm="logistic_regression", tol=0.0, max_iter=args.iterations, backend="numpy", reuse=False)
    passes = record_seconds(LogisticRegression, "objective")  # an evaluation of the loss: one pass
    ilargi_db.train(con, logistic, "label", strategy="factorized", **lr)  # warm the kernels
    local_pass, local = median_pass(
        passes, lambda: ilargi_db.train(con, logistic, "label", strategy="factorized", **lr)
    )
    linear_local = timed(lambda: ilargi_db.train(con, linear, "y", strategy="factorized", backend="numpy", reuse=False))
    rows = [("one machine, no Dask", local_pass, local, linear_local[0])]
    measured, empty = {}, {}
    for workers in (1, 2):
        # Each worker's kernels get its share of the cores, as a worker on a machine of its own would.
        threads = {"NUMBA_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // workers))}
        with LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, env=threads
        ) as cluster:
            with Client(cluster) as client:
                ilargi_db.train(con, logistic, "label", cluster=client, **lr)  # the workers' kernels warm
                per_pass, model = median_pass(
                    passes, lambda c=client: ilargi_db.train(con, logistic, "label", cluster=c, **lr)
                )
                seconds, _ = timed(lambda c=client: ilargi_db.train(con, linear, "y", cluster=c, backend="numpy"))
                rows.append((f"Dask, {workers} worker(s)", per_pass, model, seconds))
                measured[workers] = per_pass
                empty[workers] = empty_pass(client, con, logistic, "label")
    n = args.rows
    c = local_pass / n
    s_task = empty[2] - empty[1]
    o = empty[1] - s_task

    def predict(p: int) -> float:
        return c * n / p + o + s_task * p

    paper = {p: predict(p) for p in (8, 16, 32, 64)}
    lines = [
        "## Dask: training on a cluster (`benchmarks/bench_cluster.py`)",
        "",
        ran(command(__file__, argv), time.perf_counter() - started, f"{CORES} cores") + ". "
        f"Star schema: {args.rows:,} fact rows x 8 features in {args.files} Parquet files, two dimensions "
        f"of {args.rows // 100:,} rows x 8 features; LocalCluster workers are processes with one thread each, "
        "their kernels on the cores divided among them. "
        f"Logistic regression: L-BFGS, `tol=0`, {args.iterations} iterations; a pass is one evaluation of the "
        "loss and gradient (median over the training); on the cluster each partition's task computes its own "
        "loss and gradient, and only d floats travel each way. Linear regression: normal equations, total "
        "seconds including reading.",
        "",
        "| configuration | logistic s / pass | logistic training | linear total |",
        "|---|---:|---:|---:|",
    ]
    for name, per_pass, model, linear_seconds in rows:
        lines.append(f"| {name} | {per_pass:.4f} s | {model.timings_['training']:.2f} s | {linear_seconds:.2f} s |")
    lines += [
        "",
        f"Scaling model, per pass: t(p) = c n / p + o + s p with c = {c * 1e9:.2f} ns per row (one machine "
        f"without Dask), o = {o * 1e3:.1f} ms per pass and s = {s_task * 1e3:.2f} ms per task (one per worker), "
        f"both from passes that compute nothing on 1 and 2 workers ({empty[1] * 1e3:.1f} and "
        f"{empty[2] * 1e3:.1f} ms). Predicted against measured, no parameter fitted to these runs: 1 worker "
        f"{predict(1):.4f} s against {measured[1]:.4f} s ({(measured[1] - predict(1)) / predict(1):+.0%}), "
        f"2 workers {predict(2):.4f} s against {measured[2]:.4f} s "
        f"({(measured[2] - predict(2)) / predict(2):+.0%}). On paper, the same rows:",
        "",
        "| workers | 1 | 2 | 8 | 16 | 32 | 64 |",
        "|---|---:|---:|---:|---:|---:|---:|",
        "| predicted s / pass | " + " | ".join(f"{v:.4f}" for v in [predict(1), predict(2), *paper.values()]) + " |",
        f"| measured | {measured[1]:.4f} | {measured[2]:.4f} | | | | |",
        f"| speed-up over one worker (predicted) | 1.0 | {predict(1) / predict(2):.1f} | "
        + " | ".join(f"{predict(1) / v:.1f}" for v in paper.values())
        + " |",
    ]
    publish(lines, args.output, "bench_cluster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
