"""Sampling benchmark: a quick try on a seeded sample of the fact against training on every row.

Issue 25 (item 3): ``LIMIT`` and a seeded ``USING SAMPLE`` / ``TABLESAMPLE`` make a first model on 10,000 rows
possible. The star schema of ``make_star_schema`` (a fact with two dimensions), as a DuckDB table or a Parquet
file; each configuration trains the same linear and logistic regressions cold (``reuse=False``), the
configurations alternating, and the table shows the median seconds of ``--repeats`` runs and the rows trained:

- every row of the fact;
- ``USING SAMPLE n ROWS (reservoir, 42)`` after the joins;
- ``TABLESAMPLE n ROWS (reservoir, 42)`` on the fact (a Parquet fact's scan then reads the sampled rows alone);
- ``LIMIT n`` (the first n rows of the fact in rowid order; a DuckDB table only).

    python benchmarks/bench_sample.py --output docs/benchmarks.md
    python benchmarks/bench_sample.py --fact parquet --output docs/benchmarks.md
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import duckdb  # noqa: E402
from harness.cli import command, parser  # noqa: E402
from harness.machine import CORES  # noqa: E402
from harness.report import publish, ran  # noqa: E402

import ilargi_db  # noqa: E402
from ilargi_db.datasets import make_star_schema  # noqa: E402

MODELS = (("linear_regression", "y", {"alpha": 1.0}), ("logistic_regression", "late", {"standardize": True}))


def queries(base: str, fact: str, sample_rows: int, parquet: bool) -> dict[str, str]:
    """The training query of every configuration, with ``fact`` (the fact's FROM item) in place."""
    whole = base.replace("FROM fact AS f", f"FROM {fact} AS f")
    sample = f"{sample_rows} ROWS (reservoir, 42)"
    found = {
        "every row": whole,
        f"USING SAMPLE {sample_rows:,} ROWS (reservoir, 42)": f"{whole} USING SAMPLE {sample}",
        f"TABLESAMPLE {sample_rows:,} ROWS (reservoir, 42) on the fact": whole.replace(
            f"FROM {fact} AS f", f"FROM {fact} AS f TABLESAMPLE {sample}"
        ),
    }
    if not parquet:  # LIMIT orders by rowid: base tables only
        found[f"LIMIT {sample_rows:,}"] = f"{whole} LIMIT {sample_rows}"
    return found


def main(argv: list[str] | None = None) -> None:
    args = parser(__doc__, quick="tiny sizes, one repeat (a smoke run)", rows=2_000_000, repeats=3)
    args.add_argument("--sample-rows", type=int, default=10_000, help="rows of the sample and of the LIMIT")
    args.add_argument("--fact", choices=("table", "parquet"), default="table", help="where the fact lives")
    options = args.parse_args(argv)
    rows, repeats = (50_000, 1) if options.quick else (options.rows, options.repeats)
    sample_rows = min(options.sample_rows, rows // 10)
    began = time.perf_counter()
    warnings.simplefilter("ignore")  # a stop at max_iter is the same on every configuration
    with tempfile.TemporaryDirectory(prefix="ilargi_bench_sample_") as folder:
        con = duckdb.connect()
        schema = make_star_schema(con, fact_rows=rows, dim_rows=max(rows // 100, 10))
        con.execute("ALTER TABLE fact ADD COLUMN late INTEGER")
        con.execute("UPDATE fact SET late = CAST(y > (SELECT median(y) FROM fact) AS INTEGER)")
        fact = "fact"
        if options.fact == "parquet":
            path = Path(folder) / "fact.parquet"
            con.execute(f"COPY fact TO '{path.as_posix()}'")
            fact = f"read_parquet('{path.as_posix()}')"
        configurations = queries(schema.query(target=False), fact, sample_rows, options.fact == "parquet")
        seconds: dict[tuple[str, str], list[float]] = {}
        trained: dict[str, int] = {}
        ilargi_db.train(con, configurations["every row"].replace(" FROM", ", f.y FROM", 1), "y", reuse=False)  # warm
        for _ in range(repeats):
            for name, query in configurations.items():  # alternating: the machine's load falls on every one alike
                for algorithm, target, params in MODELS:
                    labelled = query.replace(" FROM", f", f.{target} FROM", 1)
                    start = time.perf_counter()
                    model = ilargi_db.train(con, labelled, target, algorithm, reuse=False, **params)
                    seconds.setdefault((name, algorithm), []).append(time.perf_counter() - start)
                    trained[name] = model.n_rows_
        con.close()
    lines = [
        f"## A quick try on a sample, the fact {'in Parquet' if options.fact == 'parquet' else 'a table'} "
        "(`benchmarks/bench_sample.py`)",
        "",
        ran(command(__file__, argv), time.perf_counter() - began, f"{CORES} cores", f"fact: {options.fact}"),
        "",
        f"Star schema: {rows:,} fact rows, two dimensions of {max(rows // 100, 10):,} rows; median of {repeats} "
        "cold trainings (`reuse=False`), the configurations alternating.",
        "",
        "| rows trained on | rows | " + " | ".join(f"{a} (s)" for a, _, _ in MODELS) + " |",
        "|---|---:|" + "---:|" * len(MODELS),
    ]
    for name in configurations:
        times = " | ".join(f"{statistics.median(seconds[(name, a)]):.3f}" for a, _, _ in MODELS)
        lines.append(f"| {name} | {trained[name]:,} | {times} |")
    publish(lines, options.output, "bench_sample" if options.fact == "table" else "bench_sample_parquet")


if __name__ == "__main__":
    main()
