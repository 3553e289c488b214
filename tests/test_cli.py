"""The ``ilargi`` command: every subcommand, its output, and errors without tracebacks."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import ilargi_db
from ilargi_db import cli

TABLE = "CREATE TABLE t AS SELECT range * 1.0 AS x, ['a', 'b'][range % 2 + 1] AS c, range * 2.0 + 1 AS y FROM range(60)"


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "cli.duckdb")
    con = duckdb.connect(path)
    con.execute(TABLE)
    con.close()
    return path


def test_help_everywhere(capsys):
    commands = (
        "demo",
        "sql",
        "train",
        "explain",
        "evaluate",
        "predict",
        "drop",
        "models",
        "calibrate",
        "warmup",
        "cross-validate",
        "options",
    )
    for argv in (["--help"], *[[c, "--help"] for c in commands]):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 0
        assert "usage: ilargi" in capsys.readouterr().out


TRAIN_LINE = ["train", "line", "linear_regression", "SELECT x, c, y FROM t", "--target", "y", "--db"]


def test_sql_prints_each_statements_rows_as_a_table(db, capsys):
    assert cli.main(["sql", "--db", db, "-c", "SELECT count(*) AS n, sum(x) AS total FROM t"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split("│")[1:3] == ["   n   ", "     total     "] and lines[4] == "│    60 │        1770.0 │"
    assert (
        cli.main(["sql", "--db", db, "-c", "SELECT count(*) FROM t; SELECT count(*) AS rows FROM t WHERE x < 2"]) == 0
    )
    values = [line for line in capsys.readouterr().out.splitlines() if re.fullmatch(r"│ +\d+ │", line)]
    assert values == ["│           60 │", "│     2 │"]


def test_sql_takes_the_database_as_db_or_as_its_first_argument(db, capsys):
    for argv in (["sql", "--db", db], ["sql", db], ["sql", db, "--db", db]):
        assert cli.main([*argv, "--mode", "csv", "-c", "SELECT count(*) AS n FROM t"]) == 0
        assert capsys.readouterr().out == "n\n60\n"
    assert cli.main(["sql", "other.duckdb", "--db", db, "-c", "SELECT 1"]) == 1
    assert "two databases given (other.duckdb and --db " in capsys.readouterr().err


def test_train_saves_the_next_version_and_prints_it_or_its_json(db, capsys):
    assert cli.main([*TRAIN_LINE, db]) == 0
    out = capsys.readouterr().out  # the shell's short table of ilargi_train's summary
    assert "│ model        │ line version 1 (linear_regression)" in out and "│ macros       │ line_predict" in out
    assert "│ r2           │ " in out and '{"' not in out
    assert cli.main([*TRAIN_LINE, db, "--options", '{"alpha": 1.0}', "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 2


def test_train_takes_the_tree_parameters_and_says_which_objective_ran(db, capsys):
    options = '{"n_estimators": 5, "max_depth": 2, "min_samples_leaf": 2, "objective": "squared_error"}'
    argv = ["train", "boost", "gradient_boosting", "SELECT x, c, y FROM t", "--target", "y", "--db", db]
    assert cli.main([*argv, "--options", options, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["objective"] == "squared_error" and summary["macros"] == ["boost_predict"]


def test_models_lists_the_newest_version_with_every_metric_and_all_of_them_with_all(db, capsys):
    for _ in range(2):
        assert cli.main([*TRAIN_LINE, db, "--json"]) == 0
    capsys.readouterr()
    assert cli.main(["models", "--db", db]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [c.strip() for c in listed[1].split("│")[1:4]] == ["name", "version", "algorithm"]
    assert [c.strip() for c in listed[3].split("│")[1:3]] == ["line", "2"]
    assert "r2 " in listed[3] and ", rmse " in listed[3] and ", mae " in listed[3]  # every metric, none cut
    assert cli.main(["models", "--db", db, "--all", "--mode", "csv"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3  # the header and both versions


def test_an_error_is_one_line_on_stderr_with_status_1_and_changes_nothing(db, capsys):
    argv = ["train", "x; DROP TABLE t", "linear_regression", "SELECT x, y FROM t", "--target", "y", "--db", db]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("ilargi train: error: model name 'x; DROP TABLE t' is not a plain identifier")
    assert "Traceback" not in err and "Python exception occurred" not in err
    assert cli.main(["sql", db, "-c", "SELECT * FROM nope"]) == 1
    assert "Table with name nope does not exist" in capsys.readouterr().err
    con = duckdb.connect(db, read_only=True)
    assert con.sql("SELECT count(*) FROM t").fetchall() == [(60,)]  # the table is still there
    con.close()


def test_sql_file_and_stdin(db, tmp_path, capsys):
    script = tmp_path / "s.sql"
    script.write_text("CREATE TABLE u AS SELECT 1 AS one;\nSELECT one + 1 AS two FROM u;\n")
    assert cli.main(["sql", db, "-f", str(script), "--mode", "csv"]) == 0
    assert capsys.readouterr().out == "two\n2\n"  # CREATE's row count is not printed
    done = subprocess.run(
        [sys.executable, "-m", "ilargi_db.cli", "sql", "--db", db, "--mode", "line"],
        input="SELECT 40 + 2 AS answer;\n",
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == "answer = 42\n" and "leaked" not in done.stderr


def test_shell_reads_statements_across_lines(db, monkeypatch, capsys):
    lines = iter(["SELECT", "  count(*)", "FROM t;", "SELECT * FROM nope;", ".quit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    con = ilargi_db.connect(db)
    cli.shell(con)
    con.close()
    captured = capsys.readouterr()
    assert "│           60 │" in captured.out
    assert "Error: statement 1 (line 1)" in captured.err and "Catalog Error" in captured.err


def test_explain_and_demo(tmp_path, capsys):
    db = str(tmp_path / "demo.duckdb")
    result = cli.demo(db)
    out = capsys.readouterr().out
    for step in ("== Explain", "== Train", "== Evaluate", "== Predict", "== Summary"):
        assert step in out
    assert result["summary"]["strategy"] == result["explain"]["strategy"]  # auto did what explain said
    assert result["held_out"]["r2"] > 0.5 and result["scored_rows"] > 300_000
    # The demo's database keeps the model, and its macro works without ilargi_db.
    con = duckdb.connect(db)
    assert con.sql("SELECT count(*) FROM ilargi.models").fetchall() == [(1,)]
    con.close()
    query = "SELECT f.distance, f.dep_delay, f.arr_delay FROM flights f JOIN airports o ON f.origin = o.faa"
    assert cli.main(["explain", "linear_regression", query, "--target", "arr_delay", "--db", db, "--json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert cli.main(["explain", "linear_regression", query, "--target", "arr_delay", "--db", db, "--plan"]) == 0
    out = capsys.readouterr().out  # both plans step by step
    assert out.startswith(f"strategy: {explained['strategy']} (predicted factorized ") and "why:" in out
    assert cli.main(["explain", "linear_regression", query, "--target", "arr_delay", "--db", db]) == 0
    out = capsys.readouterr().out  # the short table the shell prints for ilargi_explain
    assert f"│ strategy       │ {explained['strategy']}, solver " in out and "│ how sure       │ fastest in " in out


def test_warmup_readies_every_kernel(capsys):
    assert cli.main(["warmup"]) == 0
    assert re.search(r"ilargi warmup: \d+ kernels ready in [\d.]+ s", capsys.readouterr().out)


def test_calibrate_on_the_tiny_grid(tmp_path, capsys):
    assert cli.main(["calibrate", "--grid", "tiny", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "calibrated numpy: " in out and (tmp_path / "kernel_costs_numpy.json").exists()
    with pytest.raises(SystemExit):  # argparse refuses an unknown grid before anything runs
        cli.main(["calibrate", "--grid", "huge", "--cache-dir", str(tmp_path)])
    assert cli.main(["calibrate", "--budget", "-1", "--cache-dir", str(tmp_path)]) == 1
    assert "budget" in capsys.readouterr().err


def test_train_needs_an_existing_database(tmp_path, capsys):
    query = "SELECT x, y FROM t"
    assert cli.main(["train", "m", "linear_regression", query, "--target", "y"]) == 1
    assert "pass --db FILE" in capsys.readouterr().err
    missing = str(tmp_path / "nowhere.duckdb")
    assert cli.main(["train", "m", "linear_regression", query, "--target", "y", "--db", missing]) == 1
    assert f"there is no database at {missing}" in capsys.readouterr().err
    assert not (tmp_path / "nowhere.duckdb").exists()  # refused before anything was created


def test_sql_file_errors_name_the_statement_and_its_line(tmp_path, capsys):
    script = tmp_path / "job.sql"
    script.write_text("CREATE TABLE t AS SELECT 1 AS x;\n\nSELECT x FROM t;\nSELECT nope\n  FROM t;\nSELECT 2;\n")
    assert cli.main(["sql", str(tmp_path / "db.duckdb"), "-f", str(script)]) == 1
    captured = capsys.readouterr()
    assert "statement 3 (line 4), 'SELECT nope'" in captured.err and "nope" in captured.err
    assert captured.out.splitlines()[1:5] == ["│   x   │", "│ int32 │", "├───────┤", "│     1 │"]  # with its header


def test_shell_dot_commands(monkeypatch, capsys):
    con = ilargi_db.connect()
    con.sql("CREATE TABLE sales AS SELECT 1 AS id")
    lines = iter([".help", ".tables", ".schema sales", ".timer on", "SELECT 42 AS answer;", ".models", ".nope"])

    def typed(prompt):
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", typed)
    cli.shell(con)
    out, err = capsys.readouterr()
    for usage in (".schema [TABLE]", ".timer on|off", ".mode [MODE]", ".maxrows [N]", ".output [FILE]", ".read FILE"):
        assert usage in out  # .help
    assert "│ main.sales │ table │" in out and "CREATE TABLE sales(id INTEGER);" in out  # .tables, .schema
    assert "│ answer │" in out and "│     42 │" in out and "Run Time: " in out  # headers, .timer
    assert "│ name │ version │ algorithm │" in out  # .models (an empty registry still shows its columns)
    assert "unknown command .nope: .help lists the dot commands." in err


def test_errors_speak_the_callers_language(db, capsys):
    """One mistake, three surfaces: a Python keyword, a SQL argument or JSON option, a --flag."""
    query = "SELECT x, y FROM t"
    con = duckdb.connect(db)
    with pytest.raises(ilargi_db.IlargiError, match=r"pass target='<label column>'"):
        ilargi_db.train(con, query, algorithm="linear_regression", backend="numpy")
    with pytest.raises(ilargi_db.IlargiError, match=r"\(standardize=True, or|standardize=True is for"):
        ilargi_db.train(con, query, algorithm="gnmf", standardize=True, backend="numpy")
    ilargi_db.install(con)
    with pytest.raises(duckdb.Error, match=r"pass the target argument \('<label column>'\)"):
        con.execute("SELECT ilargi_train('m', 'linear_regression', 'SELECT x, y FROM t', NULL)")
    with pytest.raises(duckdb.Error, match=r"""options := '\{"standardize": true\}' is for"""):
        con.execute("""SELECT ilargi_train('m', 'gnmf', 'SELECT x, y FROM t', NULL, '{"standardize": true}')""")
    con.close()

    assert cli.main(["train", "m", "linear_regression", query, "--db", db]) == 1
    assert "pass --target <label column>." in capsys.readouterr().err
    options = '{"standardize": true}'
    assert cli.main(["train", "m", "gnmf", query, "--options", options, "--db", db]) == 1
    assert """--options '{"standardize": true}' is for linear""" in capsys.readouterr().err
    assert cli.main(["train", "m", "kmeans", query, "--target", "y", "--db", db]) == 1
    assert "pass no --target, and leave 'y' out" in capsys.readouterr().err


def test_a_shell_user_trains_on_a_cluster_by_address(tmp_path, capsys):
    pytest.importorskip("dask.distributed")
    path = str(tmp_path / "db.duckdb")
    with ilargi_db.connect(path) as con:
        con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, 2.0 * range AS y FROM range(20)")
    args = ["train", "m", "linear_regression", "SELECT x, y FROM t", "--target", "y", "--db", path]
    # The address reaches the connection (nothing listens on port 9), and is forgotten after the training.
    assert cli.main([*args, "--cluster", "tcp://127.0.0.1:9"]) == 1
    assert "scheduler at 'tcp://127.0.0.1:9'" in capsys.readouterr().err
    assert ilargi_db.registered_clusters() == []
    assert cli.main([*args, "--cluster", "tcp://127.0.0.1:9", "--options", '{"cluster": "x"}']) == 1
    assert "give the cluster once" in capsys.readouterr().err


def test_evaluate_predict_and_drop_work_on_the_registry_and_print_what_the_shell_prints(db, capsys):
    assert cli.main([*TRAIN_LINE, db, "--json"]) == 0
    capsys.readouterr()
    held_out = "SELECT x, c, y FROM t WHERE x >= 50"
    assert cli.main(["evaluate", "line", held_out, "--db", db]) == 0
    out = capsys.readouterr().out
    assert "│ model           │ line version 1 │" in out and "│ rows            │ 10             │" in out
    assert cli.main(["evaluate", "line", held_out, "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["rows"] == 10

    assert cli.main(["predict", "line", "SELECT x, c FROM t ORDER BY x", "--db", db]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split() == ["│", "x", "│", "c", "│", "prediction", "│"]
    assert "60 rows (40 shown)" in out  # the shell's row limit
    assert cli.main(["predict", "line", "SELECT x, c FROM t WHERE x < 2 ORDER BY x", "--db", db, "--mode", "csv"]) == 0
    rows = [line.split(",") for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["x", "c", "prediction"] and [float(p) for *_, p in rows[1:]] == pytest.approx([1.0, 3.0])

    options = ["--options", '{"n_components": 1}', "--db", db]
    assert cli.main(["train", "parts", "gnmf", "SELECT x, y FROM t", *options, "--json"]) == 0
    capsys.readouterr()
    assert cli.main(["predict", "parts", "SELECT x, y FROM t", "--db", db]) == 1
    assert "model 'parts' (gnmf) has no SQL macro to score with" in capsys.readouterr().err

    assert cli.main(["drop", "line", "--db", db]) == 0
    assert "│ dropped           │ line: 1 version and its macros │" in capsys.readouterr().out
    assert cli.main(["drop", "line", "--db", db]) == 1
    assert "model 'line' does not exist, so there is nothing to drop" in capsys.readouterr().err
    assert cli.main(["evaluate", "line", held_out, "--db", db]) == 1
    assert "model 'line' does not exist" in capsys.readouterr().err


def test_the_commands_on_a_registry_need_an_existing_database(tmp_path, capsys):
    missing = str(tmp_path / "nowhere.duckdb")
    for argv in (["evaluate", "m", "SELECT 1"], ["predict", "m", "SELECT 1"], ["drop", "m"], ["models"]):
        assert cli.main(argv) == 1
        assert f"ilargi {argv[0]} works on a database: pass --db FILE" in capsys.readouterr().err
        assert cli.main([*argv, "--db", missing]) == 1
        assert f"there is no database at {missing}" in capsys.readouterr().err
    assert not (tmp_path / "nowhere.duckdb").exists()  # refused before anything was created


def test_the_shells_banner_names_every_sql_function_a_connection_has():
    from ilargi_db.cli import banner

    con = ilargi_db.connect()
    installed = {
        name
        for (name,) in con.execute(
            "SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_name LIKE 'ilargi\\_%' ESCAPE '\\'"
        ).fetchall()
    }
    assert len(installed) >= 13
    named = set(re.findall(r"ilargi_\w+", banner().split("Installed: ", 1)[1].split(".\n")[0]))
    assert named == installed


def test_options_lists_an_algorithms_parameters_and_the_train_settings(capsys):
    assert cli.main(["options", "kmeans", "--mode", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["option"] for r in rows if r["of"] == "kmeans"} == set(ilargi_db.KMeans().get_params())
    assert [r["option"] for r in rows if r["of"] == "train settings"][:2] == ["strategy", "backend"]
    n_clusters = next(r for r in rows if r["option"] == "n_clusters")
    assert (n_clusters["accepts"], n_clusters["default"]) == ("an int in the range [1, inf)", "8")


def test_options_reference_is_docs_options_md(capsys):
    assert cli.main(["options", "--reference"]) == 0
    assert capsys.readouterr().out == (Path(__file__).parent.parent / "docs" / "options.md").read_text()
