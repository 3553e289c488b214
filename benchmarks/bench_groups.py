"""Per-group models benchmark: one ridge model per nation over the TPC-H snowflake, ``train(..., group_by=...)``
against a loop of trainings over ``WHERE n.n_name = ...``.

Issue 25's target (item 2): >= 5x faster than the loop, the same models. Both sides start from the query and
train cold (``reuse=False``: a repeat must not time a stored model); the loop first asks DuckDB for the groups,
as a user would. Both run in one process, alternating, fastest of ``--repeats``. The TPC-H tables are written by
``tpchgen-cli``.

    python benchmarks/bench_groups.py --tpch-scale 0.4 --output docs/benchmarks.md
"""

from __future__ import annotations

import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.cli import command, parser  # noqa: E402
from harness.report import publish, ran  # noqa: E402
from harness.timing import timed  # noqa: E402
from harness.workloads import TPCH_FROM, TPCH_SIGNED, load_tpch, tpchgen  # noqa: E402

import ilargi_db  # noqa: E402

GROUP = "nation"
TARGET = "price"
FEATURES = (
    "l.l_quantity, l.l_discount, l.l_tax, l.l_shipmode, o.o_totalprice, o.o_orderpriority, o.o_shippriority, "
    f"c.c_mktsegment, p.p_size, p.p_retailprice, p.p_brand, p.p_container, {TPCH_SIGNED}"
)
QUERY = f"SELECT {FEATURES}, n.n_name AS {GROUP}, l.l_extendedprice AS {TARGET} {TPCH_FROM}"
ONE_GROUP = f"SELECT {FEATURES}, l.l_extendedprice AS {TARGET} {TPCH_FROM} WHERE n.n_name = ?"
SETTINGS = {"alpha": 1.0, "backend": "numpy", "reuse": False}


def grouped(con):
    return ilargi_db.train(con, QUERY, TARGET, group_by=GROUP, **SETTINGS)


def loop(con):
    groups = [g for (g,) in con.sql(f"SELECT DISTINCT n.n_name {TPCH_FROM} ORDER BY 1").fetchall()]
    return {
        g: ilargi_db.train(con, ONE_GROUP.replace("?", "'" + g.replace("'", "''") + "'"), TARGET, **SETTINGS)
        for g in groups
    }


def main(argv: list[str] | None = None) -> int:
    args_parser = parser(__doc__, quick="TPC-H at scale 0.01, one repeat: a smoke run", repeats=3)
    args_parser.add_argument("--tpch-scale", type=float, default=0.1, help="TPC-H scale factor (0.4: 2.4M lineitems)")
    args = args_parser.parse_args(argv)
    scale, repeats = (0.01, 1) if args.quick else (args.tpch_scale, args.repeats)
    executable = tpchgen()
    if executable is None:
        print("tpchgen-cli is not installed (pip install tpchgen-cli)", file=sys.stderr)
        return 1
    warnings.simplefilter("ignore")
    started = time.perf_counter()
    con = ilargi_db.connect()
    with tempfile.TemporaryDirectory(prefix="bench_groups_") as folder:
        load_tpch(con, executable, scale, Path(folder))
    n = con.sql(f"SELECT count(*) {TPCH_FROM}").fetchall()[0][0]
    grouped(con)  # warm: numba's kernels, DuckDB's caches
    ways = {"loop": lambda: loop(con), "group_by": lambda: grouped(con)}
    best, found = dict.fromkeys(ways, float("inf")), {}
    for r in range(repeats):
        for way in ways if r % 2 == 0 else reversed(ways):
            seconds, found[way] = timed(ways[way])
            best[way] = min(best[way], seconds)
    model, alone = found["group_by"], found["loop"]
    gap = max(
        float(np.max(np.abs(model.models_[g].coef_ - m.coef_)) / max(1.0, float(np.max(np.abs(m.coef_)))))
        for g, m in alone.items()
    )
    ratio = best["loop"] / best["group_by"]
    print(
        f"{n:,} lineitems, {len(alone)} groups: loop {best['loop']:.2f} s, group_by {best['group_by']:.2f} s: "
        f"{ratio:.2f}x; largest relative coefficient gap {gap:.1e}",
        file=sys.stderr,
    )
    con.close()
    lines = [
        "## Per-group models: one ridge model per nation (`benchmarks/bench_groups.py`)",
        "",
        ran(command(__file__, argv), time.perf_counter() - started) + ". "
        f"TPC-H snowflake at scale {scale:g} ({n:,} lineitems; six tables, text features one-hot), target "
        f"`l_extendedprice`, one ridge model (alpha 1) per customer nation ({len(alone)} groups). "
        "`train(..., group_by='nation')` against a loop of `train(... WHERE n.n_name = ...)` after a "
        f"`SELECT DISTINCT`; both cold (`reuse=False`), fastest of {repeats}, alternating, NumPy backend. "
        "Target (issue 25): >= 5x faster, the same models.",
        "",
        "| lineitems | groups | loop of trainings | group_by | speed-up | largest coefficient gap |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {n:,} | {len(alone)} | {best['loop']:.2f} s | {best['group_by']:.2f} s | **{ratio:.2f}x** | {gap:.1e} |",
    ]
    publish(lines, args.output, "bench_groups")
    return 0


if __name__ == "__main__":
    sys.exit(main())
