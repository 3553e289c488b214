"""DuHL against L-BFGS, both streamed at a tenth of the data: bytes read from the stream to the same objective.

L2-regularized logistic regression on a star schema whose fact is a base table (or, with ``--parquet``, a
Parquet file read by ``read_parquet``), trained by ``ilargi_db.train`` under ``memory_budget`` = the
data's size / ``--budget-ratio`` (10: the fact streamed in row partitions on every pass). The same
objective for both solvers, mean log-loss + ||w||^2 / (2 C n): ``fit_intercept=False`` and a constant
column in the query (so the intercept is penalized alike; DuHL's own intercept is liblinear's, the lbfgs
one's is not). L-BFGS runs ``max_iter`` = 1, 2, 4, ... iterations; DuHL to relative duality gaps 1e-1,
1e-2, ...; each run's reads are what ``train`` counted (``streamed_["bytes_read"]``: the partitions'
bytes as built, per pass, the first read included). The optimum P* is an in-memory L-BFGS run to
tol=1e-10; objectives are evaluated on the materialized join in this process (not counted).

Reported: per run, partitions and MiB read and the objective's excess over P*; then, per target excess,
the fewest bytes each solver needed to reach it. Timings here are smoke-level only (one run, no repeats).

    python benchmarks/bench_duhl_stream.py --output docs/benchmarks.md
    python benchmarks/bench_duhl_stream.py --quick --parquet   # Parquet facts stream once item 1 is merged
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import warnings  # noqa: E402

import numpy as np  # noqa: E402
from harness.cli import command, parser  # noqa: E402
from harness.machine import CORES  # noqa: E402
from harness.report import publish, ran  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402

import ilargi_db  # noqa: E402
from ilargi_db.datasets import make_star_schema  # noqa: E402

TARGETS = (1e-2, 1e-3, 1e-4, 1e-5)  # excess over the optimum, relative to it
RUN = dict(strategy="factorized", backend="numpy", reuse=False, fit_intercept=False)


def star_query(con, rows: int, parquet: Path | None) -> str:
    """A labelled star (a constant column for the intercept); the fact a base table, or a Parquet file.

    The label: a linear rule over fact and dimension columns plus the fact's noise, cut at its median."""
    star = make_star_schema(con, fact_rows=rows, fact_features=12, n_dims=2, dim_rows=max(rows // 200, 10))
    con.execute("CREATE OR REPLACE TABLE fact AS SELECT *, 1.0 AS one FROM fact")  # the penalized intercept
    query = star.query().replace("SELECT ", "SELECT f.one, ", 1)
    rule = "f.x0 - 2 * f.x1 + d0.z0 - d1.z1 + 0.5 * f.y"
    joins = query[query.index(" FROM ") :]
    cut = con.sql(f"SELECT median({rule}){joins}").fetchall()[0][0]
    query = query.replace("f.y FROM", f"{rule} > {cut!r} AS label FROM")
    if parquet is None:
        return query
    con.execute(f"COPY fact TO '{parquet}' (FORMAT parquet)")
    return query.replace("FROM fact AS f", f"FROM read_parquet('{parquet}') AS f")


def objective(X: np.ndarray, signs: np.ndarray, coef: np.ndarray, C: float) -> float:
    """Mean log-loss + ||w||^2 / (2 C n): ilargi_db's logistic objective (DuHL's P), no intercept."""
    return float(np.logaddexp(0, -signs * (X @ coef)).mean() + coef @ coef / (2 * C * len(signs)))


def main(argv: list[str] | None = None) -> int:
    args_parser = parser(__doc__, quick="a smoke run: 20,000 rows, fewer settings", rows=400_000)
    args_parser.add_argument("--budget-ratio", type=float, default=10.0, help="the data's size over the budget")
    args_parser.add_argument("--C", type=float, default=1.0)
    args_parser.add_argument("--parquet", action="store_true", help="the fact as a Parquet file (read_parquet)")
    args_parser.add_argument("--duhl-max-iter", type=int, default=1000, help="DuHL's iterations at most, per run")
    args = args_parser.parse_args(argv)
    rows = 20_000 if args.quick else args.rows
    started = time.perf_counter()
    con = ilargi_db.connect()
    with tempfile.TemporaryDirectory() as scratch:
        query = star_query(con, rows, Path(scratch) / "fact.parquet" if args.parquet else None)
        table = con.sql(query).df()
        X, signs = table.drop(columns="label").to_numpy(float), np.where(table["label"], 1.0, -1.0)
        try:
            best = ilargi_db.train(
                con, query, "label", "logistic_regression", C=args.C, tol=1e-10, max_iter=10_000, **RUN
            )
            optimum = objective(X, signs, best.coef_, args.C)
            needed = ilargi_db.train(con, query, "label", "logistic_regression", max_iter=1, memory_budget="1MB", **RUN)
        except ilargi_db.IlargiError as err:
            print(f"cannot stream this fact yet: {err}", file=sys.stderr)
            return 2
        budget = int(needed.streamed_["needed"] / args.budget_ratio)
        iterations = (1, 4, 16) if args.quick else (1, 2, 4, 8, 16, 32, 64, 128)
        gaps = (1e-1, 1e-2) if args.quick else (1e-1, 1e-2, 1e-3, 1e-4, 1e-5)
        runs = [("lbfgs", {"solver": "lbfgs", "tol": 0.0, "max_iter": k}) for k in iterations]
        runs += [("duhl", {"solver": "duhl", "tol": t, "max_iter": args.duhl_max_iter}) for t in gaps]
        found = []
        warnings.simplefilter("ignore", ConvergenceWarning)  # the short L-BFGS runs stop early on purpose
        for solver, params in runs:
            began = time.perf_counter()
            model = ilargi_db.train(
                con, query, "label", "logistic_regression", C=args.C, memory_budget=budget, **params, **RUN
            )
            seconds = time.perf_counter() - began
            excess = (objective(X, signs, model.coef_, args.C) - optimum) / abs(optimum)
            s = model.streamed_
            setting = f"max_iter={params['max_iter']}" if solver == "lbfgs" else f"tol={params['tol']:g}"
            found.append((solver, setting, s["partitions_read"], s["bytes_read"], excess, seconds, s["partitions"]))
            print(f"{solver} {setting}: {s['bytes_read'] / 2**20:,.1f} MiB, excess {excess:.2e}", file=sys.stderr)
    fact = "a Parquet file (read_parquet)" if args.parquet else "a base table"
    lines = [
        "## DuHL against L-BFGS streamed (`benchmarks/bench_duhl_stream.py`)",
        "",
        f"{{ran}}. L2 logistic regression (C = {args.C:g}, the intercept a penalized constant column), a star of "
        f"{rows:,} fact rows ({fact}), memory_budget = the data's size / {args.budget_ratio:g} ({budget / 2**20:.1f} "
        f"MiB, {found[0][6]} partitions). Reads: what train() counted from the stream, the first read included; "
        "excess: (objective - optimum) / optimum. Seconds from one run.",
        "",
        "| solver | setting | partitions read | MiB read | excess | seconds |",
        "|---|---|---:|---:|---:|---:|",
    ]
    lines += [f"| {s} | {t} | {p:,} | {b / 2**20:,.1f} | {e:.1e} | {sec:.2f} |" for s, t, p, b, e, sec, _ in found]
    lines += ["", "| target excess | L-BFGS MiB | DuHL MiB | L-BFGS / DuHL |", "|---:|---:|---:|---:|"]
    for target in TARGETS:
        least = {
            s: min((b for solver, _, _, b, e, _, _ in found if solver == s and e <= target), default=None)
            for s in ("lbfgs", "duhl")
        }
        cells = [f"{least[s] / 2**20:,.1f}" if least[s] is not None else "not reached" for s in ("lbfgs", "duhl")]
        ratio = f"{least['lbfgs'] / least['duhl']:.2f}x" if None not in least.values() else "-"
        lines.append(f"| {target:g} | {cells[0]} | {cells[1]} | {ratio} |")
    how = ran(command(__file__, argv), time.perf_counter() - started, f"{CORES} cores")
    publish([line.replace("{ran}", how) for line in lines], args.output, "bench_duhl_stream")
    return 0


if __name__ == "__main__":
    sys.exit(main())
