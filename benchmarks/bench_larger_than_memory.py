"""A training set larger than this machine's memory, trained end to end by streaming (issue 14).

Writes a star schema into a DuckDB file: a fact of ``--rows`` rows (ids, two foreign keys, eight DOUBLE
features and a target: 11 eight-byte columns, about 40 GB raw at the default 450 million rows) and two
dimensions of ``--dim-rows`` rows x 4 features. The features carry three decimals, as measurements do,
so DuckDB stores them compressed; decoded for training they are the fact's full size, over the 24 GiB
of RAM here. Then, each in a fresh process under ``--budget`` (and DuckDB's own ``memory_limit`` set to
``--duckdb-memory``, so the two together stay inside RAM): linear regression (normal equations) and
logistic regression (L-BFGS, ``--iterations`` iterations), with their seconds, passes and peak resident
memory. Data are generated, never fetched. Slow (about an hour on 2 cores): a benchmark, not a test.

    python benchmarks/bench_larger_than_memory.py --output docs/benchmarks.md
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import duckdb  # noqa: E402
from harness.cli import command, parser  # noqa: E402
from harness.machine import CORES  # noqa: E402
from harness.processes import run_code  # noqa: E402
from harness.report import publish, ran  # noqa: E402
from harness.timing import later_passes  # noqa: E402

from ilargi_db.cost_model.memory import FLOAT_BYTES  # noqa: E402

FEATURES = 8
DIM_FEATURES = 4

RUN = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
import duckdb, ilargi_db
from ilargi_db.linalg import PartitionSource
path, query, target, algorithm, budget, duckdb_memory, iterations = json.loads(sys.argv[1])
from harness.processes import max_rss_bytes
from harness.timing import record_seconds
passes = record_seconds(PartitionSource, "each")  # every operator and sum over rows is one pass over the stream
con = duckdb.connect(path, read_only=True)
con.execute(f"SET memory_limit = '{duckdb_memory}'")
params = dict(tol=0.0, max_iter=iterations) if algorithm == "logistic_regression" else {}
start = time.perf_counter()
m = ilargi_db.train(con, query, target, algorithm, "factorized", "numpy", reuse=False, memory_budget=budget, **params)
out = {
    "seconds": time.perf_counter() - start,
    "timings": m.timings_,
    "streamed": m.streamed_,
    "rows": m.n_rows_,
    "metrics": m.training_metrics_,
    "passes": passes,
    "iterations": getattr(m, "n_iter_", None),
    "peak_resident": max_rss_bytes(),
}
print(json.dumps(out))
"""


def write_star(path: str, rows: int, dim_rows: int) -> float:
    """The star in a DuckDB file, from SQL alone (hashes of the row number: deterministic, no download)."""
    started = time.perf_counter()
    con = duckdb.connect(path)
    value = "((hash(range, {j}) % 2001)::DOUBLE - 1000) / 1000"  # three decimals in [-1, 1]
    con.execute(
        "CREATE TABLE dim0 AS SELECT range AS id, "
        + ", ".join(f"{value.format(j=100 + j)} AS z{j}" for j in range(DIM_FEATURES))
        + f" FROM range({dim_rows})"
    )
    con.execute("CREATE TABLE dim1 AS SELECT * REPLACE (z0 * 2 AS z0) FROM dim0")
    features = ", ".join(f"{value.format(j=j)} AS x{j}" for j in range(FEATURES))
    signal = " + ".join(f"{(j % 3) - 1} * x{j}" for j in range(FEATURES))
    con.execute(
        f"CREATE TABLE fact AS SELECT id, fk0, fk1, {', '.join(f'x{j}' for j in range(FEATURES))}, "
        f"round({signal} + ((hash(id, 99) % 1001)::DOUBLE - 500) / 1000, 3) AS y FROM ("
        f"SELECT range AS id, hash(range, 50) % {dim_rows} AS fk0, hash(range, 51) % {dim_rows} AS fk1, {features} "
        f"FROM range({rows}))"
    )
    con.execute("CHECKPOINT")
    con.close()
    return time.perf_counter() - started


def query(label: bool) -> str:
    fact = ", ".join(f"f.x{j}" for j in range(FEATURES))
    dims = ", ".join(f"d{k}.z{j} AS d{k}_z{j}" for k in range(2) for j in range(DIM_FEATURES))
    target = "CAST(f.y > 0 AS INTEGER) AS label" if label else "f.y"
    return (
        f"SELECT {fact}, {dims}, {target} FROM fact AS f JOIN dim0 AS d0 ON f.fk0 = d0.id "
        "JOIN dim1 AS d1 ON f.fk1 = d1.id"
    )


def gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def main(argv: list[str] | None = None) -> int:
    args_parser = parser(__doc__)
    args_parser.add_argument("--rows", type=int, default=450_000_000)
    args_parser.add_argument("--dim-rows", type=int, default=1_000_000)
    args_parser.add_argument("--budget", default="4GB", help="ilargi's memory_budget")
    args_parser.add_argument("--duckdb-memory", default="4GB", help="DuckDB's memory_limit for the training")
    args_parser.add_argument("--iterations", type=int, default=5, help="logistic regression's L-BFGS iterations")
    args_parser.add_argument("--where", default=tempfile.gettempdir(), help="directory for the DuckDB file")
    args_parser.add_argument("--keep", action="store_true", help="keep the DuckDB file")
    args = args_parser.parse_args(argv)
    started = time.perf_counter()
    folder = tempfile.mkdtemp(prefix="ilargi-big-", dir=args.where)
    path = os.path.join(folder, "star.duckdb")
    try:
        written = write_star(path, args.rows, args.dim_rows)
        on_disk = os.path.getsize(path)
        raw = args.rows * (3 + FEATURES) * FLOAT_BYTES
        print(f"wrote {args.rows:,} rows ({gib(raw)} raw, {gib(on_disk)} on disk) in {written:.0f} s", flush=True)
        results = {}
        for name, algorithm, label in (
            ("linear regression", "linear_regression", False),
            ("logistic regression", "logistic_regression", True),
        ):
            target = "label" if label else "y"
            job = (path, query(label), target, algorithm, args.budget, args.duckdb_memory, args.iterations)
            results[name] = run_code(RUN, *job)
            print(name, json.dumps(results[name])[:600], flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    how = ran(
        command(__file__, argv),
        time.perf_counter() - started,
        f"{CORES} cores",
        f"{gib(memory)} of RAM",
        "NumPy backend",
        minutes=True,
    )
    lines = [
        "## Larger than memory: a 40 GB fact streamed (`benchmarks/bench_larger_than_memory.py`)",
        "",
        f"{how}. A star in a DuckDB "
        f"file: the fact has {args.rows:,} rows x {3 + FEATURES} eight-byte columns ({gib(raw)} raw; "
        f"{gib(on_disk)} on disk, as DuckDB compresses three-decimal values; written in {written / 60:.0f} min), "
        f"two dimensions of {args.dim_rows:,} rows x {DIM_FEATURES} features. memory_budget {args.budget}, DuckDB "
        f"memory_limit {args.duckdb_memory}; each training in a fresh process.",
        "",
        "| training | rows | training data | partitions | spilled | first pass | later passes (median) | "
        "passes | total | peak resident |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        s = r["streamed"] or {}
        passes = r["passes"]
        later = later_passes(passes) if len(passes) > 1 else None
        first = f"{passes[0]:.0f} s" if passes else "-"
        lines.append(
            f"| {name} | {r['rows']:,} | {gib(s.get('needed', 0))} | {s.get('partitions', '-')} | "
            f"{'yes' if s.get('spill') else 'no'} | {first} | "
            f"{f'{later:.0f} s' if later is not None else '-'} | {len(passes) or '-'} | {r['seconds'] / 60:.1f} min | "
            f"{gib(r['peak_resident'])} |"
        )
    lines.append("")
    for name, r in results.items():
        timings = {k: round(v, 1) for k, v in r["timings"].items()}
        lines.append(f"- {name}: training metrics {json.dumps(r['metrics'])}; seconds {json.dumps(timings)}")
    publish(lines, args.output, "bench_larger_than_memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
