"""A tree model's SQL macro: its size, the time DuckDB takes to bind it, and rows scored per second.

Issue 38's first target: 100 trees of 63 leaves bind in under 0.5 s and score at least 1M rows a second per
core. The rows: ``--rows`` of a table with a text column of 250 values (a team), one of 7 (a position) and four
numbers, the target a sum of their effects; the model trained on its first 50,000 rows (100 trees, 63 leaves),
saved, then scored by its macro: a table of one row (what binding costs every query), ``LIMIT 1`` of the whole
table (the codes' subquery is decorrelated into a join over every row), and every row on one thread and on
DuckDB's default threads; ``ilargi_db.predict`` beside it, as Python scores the same rows. The macro finds each
tree's leaf by masks (``sql_functions/tree_leaf_masks.py``).

    python benchmarks/bench_tree_macro.py --output docs/benchmarks.md     # about a minute
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness.cli import command, parser  # noqa: E402
from harness.report import publish, ran  # noqa: E402

import ilargi_db  # noqa: E402
from ilargi_db.sql_functions.macros import balanced_sum  # noqa: E402
from ilargi_db.sql_functions.tree_leaf_masks import LeafMasks  # noqa: E402

TABLE = """
CREATE TABLE players AS SELECT range AS id,
    'team' || (hash(range) % 250)::VARCHAR AS team, 'pos' || (hash(range * 7) % 7)::VARCHAR AS pos,
    (hash(range * 3) % 1000)::DOUBLE AS x1, (hash(range * 5) % 100)::DOUBLE AS x2,
    (hash(range * 13) % 10000)::DOUBLE / 7 AS x3, (hash(range * 17) % 37)::DOUBLE AS x4
FROM range({rows})
"""
TARGET = """
CREATE TABLE training AS SELECT *, (hash(team) % 100) * 0.01 + (hash(pos) % 10) * 0.1 + x1 * 0.001
    + sin(x2 / 10) + CASE WHEN x3 > 700 THEN 0.5 ELSE 0 END + (hash(range * 11) % 100) * 0.005 AS y
FROM players JOIN range(50000) ON id = range
"""
FEATURES = "team, pos, x1, x2, x3, x4"
GROUPED = "team, x1, x2, x3, x4"  # a model per position
PARAMS = dict(n_estimators=100, max_leaves=63, min_samples_leaf=20)


def table_reads(model) -> tuple[int, int]:
    """What the model's leaf-mask macro reads from its table for each row: a mask per tree and feature it splits on,
    and a value per tree."""
    lookups = LeafMasks([model.trees_], [model.baseline_], model.encoder_.bins_).lookups
    return sum(len(lookup.blocks) for lookup in lookups), len(lookups)


def reads_alone(reads: int) -> str:
    """A query of as many reads of a one-row table's list for each row of ``players`` as the macro makes, summed, and
    nothing else: what DuckDB's ``list_extract`` alone costs the macro (each read at its own position, so that
    DuckDB cannot compute two as one)."""
    index = "SELECT (hash(id) % 64)::INTEGER + 1 AS c FROM players"
    table = f"SELECT list(range) AS l FROM range({64 + reads})"
    return f"SELECT {balanced_sum([f'l[c + {i}]' for i in range(reads)])} FROM ({index}), ({table})"


def best_seconds(run, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        run()
        times.append(time.perf_counter() - began)
    return min(times)


def command_line(con, model, grouped, repeats: int = 3) -> dict[str, list[float]]:
    """``ilargi predict`` (the macro) and ``ilargi evaluate`` (Python) of each model on its 50,000 training rows, each
    a fresh process on a file holding the table and the models: seconds of every run."""
    ilargi = str(Path(sys.executable).with_name("ilargi"))
    runs: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "models.db")
        file = ilargi_db.connect(path)
        file.register("training_rows", con.sql("SELECT * FROM training").arrow())
        file.execute("CREATE TABLE training AS SELECT * FROM training_rows")
        ilargi_db.save_model(file, "m", model)
        ilargi_db.save_model(file, "g", grouped)
        file.close()
        for name, features in (("m", FEATURES), ("g", f"{GROUPED}, pos")):
            for verb, query in (("predict", f"SELECT {features} FROM training"),
                                ("evaluate", f"SELECT {features}, y FROM training")):  # fmt: skip
                runs[f"{name} {verb}"] = []
                for _ in range(repeats):
                    began = time.perf_counter()
                    subprocess.run([ilargi, verb, name, query, "--db", path, "--mode", "csv"], check=True,
                                   stdout=subprocess.DEVNULL)  # fmt: skip
                    runs[f"{name} {verb}"].append(time.perf_counter() - began)
    return runs


def spread(seconds: list[float]) -> str:
    return f"{min(seconds):.2f}-{max(seconds):.2f} s"


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__, rows=1_000_000).parse_args(argv)
    started = time.perf_counter()
    con = ilargi_db.connect()
    con.execute(TABLE.format(rows=args.rows))
    con.execute(TARGET)
    model = ilargi_db.train(con, f"SELECT {FEATURES}, y FROM training", "y", "gradient_boosting", **PARAMS)
    ilargi_db.save_model(con, "m", model)
    size = len(
        con.execute("SELECT macro_definition FROM duckdb_functions() WHERE function_name = 'm_predict'").fetchone()[0]
    )
    con.execute("CREATE TABLE one_player AS SELECT * FROM players LIMIT 1")
    one_row = best_seconds(lambda: con.execute(f"SELECT m_predict({FEATURES}) FROM one_player").fetchall())
    limit_one = best_seconds(lambda: con.execute(f"SELECT m_predict({FEATURES}) FROM players LIMIT 1").fetchall())
    every_row = f"SELECT sum(m_predict({FEATURES})) FROM players"
    default_threads = best_seconds(lambda: con.execute(every_row).fetchall())
    threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
    con.execute("SET threads = 1")
    one_thread = best_seconds(lambda: con.execute(every_row).fetchall())
    masks, values = table_reads(model)
    floor = best_seconds(lambda: con.execute(f"SELECT sum(s) FROM ({reads_alone(masks + values)}) AS r(s)").fetchall())

    con.execute(f"SET threads = {threads}")
    python = best_seconds(lambda: ilargi_db.predict(con, model, f"SELECT {FEATURES} FROM players"))
    # A model per position (7 groups, each 100 trees of 63 leaves): one macro over every group's trees.
    grouped = ilargi_db.train(con, f"SELECT {GROUPED}, pos, y FROM training", "y", "gradient_boosting",
                              group_by="pos", **PARAMS)  # fmt: skip
    ilargi_db.save_model(con, "g", grouped)
    grouped_size = len(
        con.execute("SELECT macro_definition FROM duckdb_functions() WHERE function_name = 'g_predict'").fetchone()[0]
    )
    grouped_one_row = best_seconds(lambda: con.execute(f"SELECT g_predict({GROUPED}, pos) FROM one_player").fetchall())
    con.execute("SET threads = 1")
    grouped_one_thread = best_seconds(
        lambda: con.execute(f"SELECT sum(g_predict({GROUPED}, pos)) FROM players").fetchall()
    )
    con.execute(f"SET threads = {threads}")
    grouped_python = best_seconds(lambda: ilargi_db.predict(con, grouped, f"SELECT {GROUPED}, pos FROM players"))
    grouped_nodes = sum(one.trees_.n_nodes for one in grouped.models_.values())
    commands = command_line(con, model, grouped)
    splits = int((model.trees_.feature >= 0).sum())
    categorical = sum(1 for f in model.trees_.feature if f >= 0 and model.bins_[f].categorical)
    lines = [
        "| macro | a table of 1 row (binding) | `LIMIT 1` of every row | every row, 1 thread | rows a second a core | "
        f"every row, {threads} threads | `ilargi_db.predict`, every row |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| {model.trees_.n_nodes:,} nodes ({splits:,} splits, {categorical:,} categorical), {size / 1e6:.2f} MB "
        f"| {one_row:.3f} s | {limit_one:.2f} s | {one_thread:.2f} s | {args.rows / one_thread / 1e6:.3f}M "
        f"| {default_threads:.2f} s | {python:.2f} s |",
        f"| a model per position ({len(grouped.models_)} groups), {grouped_nodes:,} nodes, {grouped_size / 1e6:.2f} MB "
        f"| {grouped_one_row:.3f} s | | {grouped_one_thread:.2f} s | {args.rows / grouped_one_thread / 1e6:.3f}M | "
        f"| {grouped_python:.2f} s |",
    ]
    publish(
        [
            "## A tree model's SQL macro: binding and scoring (`benchmarks/bench_tree_macro.py`)",
            "",
            f"{ran(command(__file__, argv), time.perf_counter() - started)}. 100 trees of 63 leaves on a text "
            f"column of 250 values, one of 7 and four numbers; {args.rows:,} rows scored; best of 3. A model per "
            "position: the same trees' parameters for each of the 7 positions, on the other five features.",
            "",
            *lines,
            "",
            f"What bounds the rows a second: the macro reads its table {masks + values:,} times for each row "
            f"({masks:,} masks, one for each tree and feature it splits on, and {values} leaf values). Those reads "
            f"alone, summed and nothing else computed, take {floor:.2f} s for the {args.rows:,} rows on one thread "
            f"({args.rows / floor / 1e6:.2f}M rows a second a core): {floor / args.rows / (masks + values) * 1e9:.1f} "
            "ns for each of DuckDB's `list_extract`s.",
            "",
            "The command line on the 50,000 training rows, each run a fresh process (3 runs): `ilargi predict` scores "
            "through the macro, `ilargi evaluate` in Python (issue 38: predict within 1.5x of evaluate).",
            "",
            "| model | `ilargi predict` | `ilargi evaluate` | ratio (best runs) |",
            "|---|---:|---:|---:|",
            *(
                f"| {label} | {spread(commands[name + ' predict'])} | {spread(commands[name + ' evaluate'])} "
                f"| {min(commands[name + ' predict']) / min(commands[name + ' evaluate']):.2f}x |"
                for name, label in (("m", "one model"), ("g", "a model per position"))
            ),
        ],
        args.output,
        "bench_tree_macro",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
