"""DuHL benchmark: which partitions to hold in fast memory, to the same duality gap.

Ridge, logistic regression and a linear SVM by primal-dual coordinate descent (``ilargi_db.models.duhl``)
with a working set of ``--working-set`` partitions in fast memory: the largest duality gaps (DuHL), the
next partitions in turn (sequential streaming) or a random choice. Reported: partition reads from the slow
tier and seconds to reach the mean duality gap ``--tol`` (or where it stood after ``--rounds`` rounds).

Two slow tiers: a synthetic matrix whose rows in a tenth of the partitions are 8x larger (the gaps
concentrate, as in real data with heavy rows), held in row partitions; and a star schema streamed from
DuckDB under a memory budget (the spilled partitions read back from local disk, as ``train`` streams).

    python benchmarks/bench_duhl.py --output docs/benchmarks.md
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
from harness.cli import command, parser  # noqa: E402
from harness.machine import CORES  # noqa: E402
from harness.report import publish, ran  # noqa: E402

import ilargi_db  # noqa: E402
from ilargi_db.backend import get_backend  # noqa: E402
from ilargi_db.datasets import make_star_schema  # noqa: E402
from ilargi_db.linalg import Block, PartitionedMatrix  # noqa: E402
from ilargi_db.models.duhl import duhl_fit  # noqa: E402
from ilargi_db.pipeline.placement import StreamPlan  # noqa: E402
from ilargi_db.pipeline.readers import ReadSettings  # noqa: E402
from ilargi_db.pipeline.streaming import read_streamed  # noqa: E402  the reader train() streams with
from ilargi_db.plan import build_join_graph, categorical_flags  # noqa: E402
from ilargi_db.preprocess import FeatureEncoder  # noqa: E402


def synthetic(n: int, d: int, parts: int):
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(n, d))
    rows[: n // 10] *= 8.0
    y = rows @ rng.normal(size=d) + 0.1 * rng.normal(size=n)
    return PartitionedMatrix.from_blocks([Block(rows, columns=np.arange(d))], n, n // parts, backend="numpy"), y


def streamed_star(rows: int):
    con = ilargi_db.connect()
    star = make_star_schema(con, fact_rows=rows, fact_features=8, n_dims=2, dim_rows=rows // 100, dim_features=4)
    graph = build_join_graph(con, star.query(), "y")
    encoder = FeatureEncoder(categorical_flags(graph))
    read = ReadSettings(encoder, fit=True, backend=get_backend("numpy"))
    plan = StreamPlan(0, 0, rows // 40, 40, spill=True, spill_why="", why="")
    data = read_streamed(con, graph, read, plan)
    return data.X, data.y, data.stream


def main(argv: list[str] | None = None) -> int:
    args_parser = parser(__doc__)
    args_parser.add_argument("--working-set", type=int, default=4)
    args_parser.add_argument("--tol", type=float, default=1e-6)
    args_parser.add_argument("--rounds", type=int, default=400)
    args = args_parser.parse_args(argv)
    started = time.perf_counter()
    X, y = synthetic(100_000, 20, 40)
    star, star_y, stream = streamed_star(200_000)
    labels = np.where(y > np.median(y), 1.0, -1.0)
    star_labels = np.where(star_y > np.median(star_y), 1.0, -1.0)
    cases = {
        "synthetic, heavy rows in 10% of 40 partitions (in memory)": (X, y, 0.1, "squared"),
        "star schema, 200,000 rows in 40 partitions streamed from DuckDB": (star, star_y, 0.1, "squared"),
        "synthetic, as above, labels y > median": (X, labels, 1e-3, "logistic"),
        "star schema, as above, labels y > median": (star, star_labels, 1e-3, "logistic"),
        "synthetic, as above, labels y > median ": (X, labels, 1e-3, "hinge"),
    }
    lines = [
        "## DuHL: the working set by duality gap (`benchmarks/bench_duhl.py`)",
        "",
        "{ran}. SDCA with "
        f"{args.working_set} partitions held; to a mean duality gap of {args.tol:g} (at most {args.rounds} "
        "rounds). Ridge: the squared loss, lambda = 0.1; logistic regression and a linear SVM (the hinge "
        "loss): lambda = 0.001. Reads: partitions brought from the slow tier (into the working set, or "
        "streaming by to refresh their gaps).",
        "",
        "| data | loss | selection | reads | coordinate epochs | seconds | gap reached |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    try:
        for name, (matrix, target, lam, loss) in cases.items():
            for selection in ("gap", "sequential", "random"):
                fit = duhl_fit(matrix, target, lam, args.working_set, args.tol, loss, selection, args.rounds)
                mark = "" if fit.gap_ <= args.tol else " (not reached)"
                lines.append(
                    f"| {name.strip()} | {loss} | {'DuHL (largest gaps)' if selection == 'gap' else selection} | "
                    f"{fit.loads_:,} | {fit.epochs_:,} | {fit.seconds_:.2f} s | {fit.gap_:.1e}{mark} |"
                )
                print(lines[-1], file=sys.stderr)
    finally:
        stream.close()
    how = ran(command(__file__, argv), time.perf_counter() - started, f"{CORES} cores")
    publish([line.replace("{ran}", how) for line in lines], args.output, "bench_duhl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
