"""Cluster benchmark: training on a Dask LocalCluster of 1 and 2 workers, and a scaling model for 8-64.

A star schema's fact is written as Parquet files; logistic regression (L-BFGS, ``tol=0``: exactly
``--iterations`` iterations, each one ``X @ w`` and one ``X.T @ v`` on the workers) and linear regression
(normal equations) train with ``cluster=client``, against the same job on one machine without Dask.
Per-iteration seconds fit the model t(p) = c n / p + o + q p: compute split over p workers, a fixed
cost per iteration (scheduling, the driver's solver step) and a per-worker cost (a d-float parameter
sent and a d-float partial returned per worker and product). With 1 and 2 workers on this 2-core machine
the fit is checked against what was measured and projected to 8-64 workers on paper.

    python benchmarks/bench_cluster.py --output docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import write_section  # noqa: E402

import ilargi_db  # noqa: E402
from ilargi_db.datasets import make_star_schema  # noqa: E402


def timed(work) -> tuple[float, object]:
    start = time.perf_counter()
    out = work()
    return time.perf_counter() - start, out


def main(argv: list[str] | None = None) -> int:
    from dask.distributed import Client, LocalCluster

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    started = time.perf_counter()
    where = Path(tempfile.mkdtemp(prefix="ilargi-cluster-bench-"))
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
    ilargi_db.train(con, logistic, "label", strategy="factorized", **lr)  # warm the kernels
    one_machine = {
        "logistic": timed(lambda: ilargi_db.train(con, logistic, "label", strategy="factorized", **lr))[1],
        "linear": timed(lambda: ilargi_db.train(con, linear, "y", strategy="factorized", backend="numpy", reuse=False)),
    }
    rows = [("one machine, no Dask", one_machine["logistic"], one_machine["linear"][0])]
    measured = {}
    for workers in (1, 2):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
            with Client(cluster) as client:
                ilargi_db.train(con, logistic, "label", cluster=client, **lr)  # the workers' kernels warm
                model = ilargi_db.train(con, logistic, "label", cluster=client, **lr)
                seconds, _ = timed(lambda c=client: ilargi_db.train(con, linear, "y", cluster=c, backend="numpy"))
                rows.append((f"Dask, {workers} worker(s)", model, seconds))
                measured[workers] = model.timings_["training"] / model.n_iter_
    n, d = args.rows, one_machine["logistic"].coef_.shape[0] + 1
    # t(p) = c n / p + o + q p. c: the kernels' seconds per row, from one machine without Dask (its
    # per-iteration time is the products over all rows); q: the bytes a worker exchanges per iteration
    # (2 products x 2 d floats, at the loopback's ~1 GB/s); o: what a 1-worker cluster adds on top (tasks,
    # scheduling, serialization). Fitted on one machine and 1 worker; checked against 2 workers.
    model = one_machine["logistic"]
    c = model.timings_["training"] / model.n_iter_ / n
    q = 2 * 2 * 8 * d / 1e9
    o = measured[1] - c * n - q
    predict = {p: c * n / p + o + q * p for p in (1, 2, 8, 16, 32, 64)}
    command = " ".join(["python benchmarks/bench_cluster.py", *(sys.argv[1:] if argv is None else argv)])
    lines = [
        "## Dask: training on a cluster (`benchmarks/bench_cluster.py`)",
        "",
        f"Command: `{command}` ({time.perf_counter() - started:.0f} s wall time, {time.strftime('%Y-%m-%d %H:%M')}, "
        f"2 cores). Star schema: {args.rows:,} fact rows x 8 features in {args.files} Parquet files, two dimensions "
        f"of {args.rows // 100:,} rows x 8 features; LocalCluster workers are processes with one thread each. "
        f"Logistic regression: L-BFGS, `tol=0`, {args.iterations} iterations (one `X @ w` and one `X.T @ v` on the "
        "workers each); linear regression: normal equations, total seconds including reading.",
        "",
        "| configuration | logistic s / iteration | logistic training | linear total |",
        "|---|---:|---:|---:|",
    ]
    for name, model, linear_seconds in rows:
        per = model.timings_["training"] / model.n_iter_
        lines.append(f"| {name} | {per:.3f} s | {model.timings_['training']:.2f} s | {linear_seconds:.2f} s |")
    lines += [
        "",
        f"Scaling model, per iteration: t(p) = c n / p + o + q p with c = {c * 1e9:.2f} ns per row (one machine "
        f"without Dask), o = {o * 1e3:.1f} ms (what one worker adds: tasks, scheduling, serialization) and "
        f"q = {q * 1e6:.2f} us per worker (2 x 2 x {d} floats). Fitted on one machine and one worker; two "
        f"workers measured {measured[2]:.3f} s against {predict[2]:.3f} s predicted "
        f"({(measured[2] - predict[2]) / predict[2]:+.0%}). On paper:",
        "",
        "| workers | 1 | 2 | 8 | 16 | 32 | 64 |",
        "|---|---:|---:|---:|---:|---:|---:|",
        "| predicted s / iteration | " + " | ".join(f"{predict[p]:.3f}" for p in (1, 2, 8, 16, 32, 64)) + " |",
        "| measured | " + f"{measured[1]:.3f} | {measured[2]:.3f} | | | | |",
    ]
    section = "\n".join(lines) + "\n"
    print(section)
    if args.output:
        write_section(args.output, "bench_cluster", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
