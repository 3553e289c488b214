"""``ilargi sql``, the shell: DuckDB's shell's row limit, output modes and dot commands, and ilargi_db's JSON
summaries shown as short tables. Driven as a user drives it: statements on stdin, ``-c``, or typed lines."""

from __future__ import annotations

import csv
import io
import json
import re

import duckdb
import pytest

import ilargi_db
from ilargi_db import cli
from ilargi_db.shell import DEFAULT_MAXROWS, Session, readable

ROWS = "CREATE TABLE t AS SELECT range AS i, range / 3 AS x, ['a', 'b'][range % 2 + 1] AS c, 2.0 * range + 1 AS y "
TRAIN = "SELECT ilargi_train('m', 'linear_regression', 'SELECT x, c, y FROM t', 'y');"


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "shell.duckdb")
    with duckdb.connect(path) as con:
        con.execute(ROWS + "FROM range(100)")
    return path


def sql(db: str, script: str, capsys, *flags: str) -> str:
    """What ``ilargi sql --db DB`` prints with ``script`` on its standard input (status 0)."""
    stdin = io.StringIO(script)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdin", stdin)
        assert cli.main(["sql", "--db", db, *flags]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def typed(lines: list[str], prompts: list[str]):
    """An ``input`` that types ``lines`` (then Ctrl-D) and records the prompts it was shown."""
    feed = iter(lines)

    def read(prompt: str) -> str:
        prompts.append(prompt)
        try:
            return next(feed)
        except StopIteration:
            raise EOFError from None

    return read


def shown_values(out: str, column: int = 0) -> list[str]:
    """The values of a box table's ``column`` (the lines between its rules)."""
    body = out.split("┤\n", 1)[1].split("\n└", 1)[0]
    return [line.split("│")[column + 1].strip() for line in body.splitlines()]


def test_a_long_result_shows_its_first_and_last_rows_and_says_how_many(db, capsys):
    out = sql(db, "SELECT i FROM t ORDER BY i;", capsys)
    assert DEFAULT_MAXROWS == 40  # as DuckDB's shell
    assert shown_values(out) == [str(i) for i in range(20)] + ["·"] * 3 + [str(i) for i in range(80, 100)]
    assert re.search(r"^  100 rows \(40 shown\) +1 column$", out, re.M)
    # 3 rows over the limit are all shown (the dots would take as many lines), with no footer.
    out = sql(db, "SELECT i FROM t WHERE i < 43;", capsys)
    assert len(shown_values(out)) == 43 and "shown" not in out


def test_maxrows_sets_how_many_rows_box_mode_shows(db, capsys):
    out = sql(db, ".maxrows 6\nSELECT i FROM t ORDER BY i;\n.maxrows", capsys)
    assert shown_values(out) == ["0", "1", "2", "·", "·", "·", "97", "98", "99"]
    assert "100 rows (6 shown)" in out and out.rstrip().endswith("maxrows: 6")
    assert "100 rows (10 shown)" in sql(db, "SELECT i FROM t;", capsys, "--maxrows", "10")
    assert cli.main(["sql", "--db", db, "-c", ".maxrows 0"]) == 1
    assert ".maxrows takes a positive number of rows, got '0'" in capsys.readouterr().err
    # The other modes write every row, as DuckDB's (its limit is its box mode's).
    assert len(sql(db, ".mode csv\nSELECT i FROM t;", capsys).splitlines()) == 101


def test_a_box_wider_than_maxwidth_leaves_middle_columns_out(db, capsys):
    wide = "SELECT " + ", ".join(f"'{name * 12}' AS {name}" for name in "abcdefgh") + ";"
    assert len(sql(db, wide, capsys).splitlines()[0]) > 120  # piped (not a terminal): every column, as DuckDB
    out = sql(db, ".maxwidth 80\n" + wide, capsys)
    assert all(len(line) <= 80 for line in out.splitlines())
    assert [c.strip() for c in out.splitlines()[1].split("│")[1:-1]] == ["a", "b", "c", "…", "g", "h"]
    assert re.search(r"^  1 rows +8 columns \(5 shown\)$", out, re.M)


def test_box_is_the_default_mode_with_types_under_names_and_numbers_right_aligned(db, capsys):
    out = sql(db, ".mode\nSELECT i, c FROM t WHERE i IN (1, 10) ORDER BY i;", capsys)
    assert out.splitlines() == [
        "current output mode: box",
        "┌───────┬─────────┐",
        "│   i   │    c    │",
        "│ int64 │ varchar │",
        "├───────┼─────────┤",
        "│     1 │ b       │",
        "│    10 │ a       │",
        "└───────┴─────────┘",
    ]
    assert "0 rows" in sql(db, "SELECT i FROM t WHERE false;", capsys)  # an empty result says so


def test_the_modes_line_csv_json_and_markdown(db, capsys):
    query = "SELECT i, y / 3 AS third, c, NULL AS n FROM t WHERE i IN (1, 2) ORDER BY i;"
    out = sql(db, f".mode line\n{query}", capsys)
    assert out.split("\n\n")[0].splitlines() == ["    i = 1", "third = 1.0", "    c = b", "    n = NULL"]
    out = sql(db, f".mode csv\n{query}", capsys)
    assert out.splitlines() == ["i,third,c,n", "1,1.0,b,", "2,1.6666666666666667,a,"]  # every digit
    out = sql(db, f".mode json\n{query}", capsys)
    assert json.loads(out) == [
        {"i": 1, "third": 1.0, "c": "b", "n": None},
        {"i": 2, "third": 1.6666666666666667, "c": "a", "n": None},
    ]
    out = sql(db, f".mode markdown\n{query}", capsys)
    assert out.splitlines()[:3] == [
        "|  i  |  third   |  c  |  n   |",
        "|----:|---------:|-----|------|",
        "|   1 |      1.0 | b   | NULL |",
    ]
    assert sql(db, query, capsys, "--mode", "csv").splitlines()[0] == "i,third,c,n"
    assert cli.main(["sql", "--db", db, "-c", ".mode html"]) == 1
    assert "unknown output mode 'html': choose one of box, line, csv, json, markdown." in capsys.readouterr().err


def test_doubles_show_seven_significant_digits_where_people_read_them():
    shown = [1 / 3, 2 / 3 * 1000, 0.1 + 0.2, 2.0, -1.5, 123456789.123456, 1e-7, 2.5e20, float("nan"), float("-inf")]
    assert [readable(x) for x in shown] == [
        "0.3333333", "666.6667", "0.3", "2.0", "-1.5", "123456789.1", "1e-07", "2.5e+20", "nan", "-inf",
    ]  # fmt: skip


def test_output_sends_results_to_a_file_until_output_alone(db, tmp_path, capsys):
    target = tmp_path / "out.csv"
    out = sql(db, f".mode csv\n.output {target}\nSELECT 1 AS a;\nSELECT 2 AS b;\n.output\nSELECT 3 AS c;", capsys)
    assert target.read_text() == "a\n1\nb\n2\n" and out == "c\n3\n"
    once = tmp_path / "once.csv"
    out = sql(db, f".mode csv\n.once {once}\nSELECT 1 AS a;\nSELECT 2 AS b;", capsys)
    assert once.read_text() == "a\n1\n" and out == "b\n2\n"
    assert cli.main(["sql", "--db", db, "-c", f".output {tmp_path}/no/such/folder/x.csv"]) == 1
    assert "cannot write to" in capsys.readouterr().err


def test_read_runs_a_files_statements_and_dot_commands_in_the_same_session(db, tmp_path, capsys):
    job = tmp_path / "job.sql"
    job.write_text(".mode csv\nSELECT count(*) AS n FROM t;\n")
    assert sql(db, f".read {job}\nSELECT 7 AS after;", capsys) == "n\n100\nafter\n7\n"  # the mode stays set
    job.write_text("SELECT 1;\nSELECT nope FROM t;\n")
    assert cli.main(["sql", "--db", db, "-c", f".read {job}"]) == 1
    assert f"{job}: statement 2 (line 2), 'SELECT nope FROM t;'" in capsys.readouterr().err
    assert cli.main(["sql", "--db", db, "-c", f".read {tmp_path}/missing.sql"]) == 1
    assert "cannot read" in capsys.readouterr().err
    job.write_text(f".read {job}\n")
    assert cli.main(["sql", "--db", db, "-c", f".read {job}"]) == 1
    assert f".read nested 16 deep: does '{job}' read itself?" in capsys.readouterr().err


def test_open_closes_the_database_and_opens_another(db, tmp_path, capsys):
    other = str(tmp_path / "other.duckdb")
    sql(db, f".open {other}\nCREATE TABLE fresh AS SELECT 1 AS one;\n.open\nSELECT 2 AS two;", capsys)
    with duckdb.connect(other, read_only=True) as con:
        assert con.sql("SELECT * FROM fresh").fetchall() == [(1,)]
    prompts: list[str] = []
    with ilargi_db.connect(db) as con:  # a database that cannot be opened leaves the current one open
        session = Session(con, ilargi_db.connect)
        session.interact(typed([f".open {tmp_path}/no/such/dir/x.duckdb", "SELECT count(*) AS n FROM t;"], prompts))
    out, err = capsys.readouterr()
    assert "Error: " in err and shown_values(out) == ["100"]
    with duckdb.connect(db, read_only=True) as con:  # the first database was left as it was
        assert con.sql("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'fresh'").fetchall() == [(0,)]


def test_tables_lists_yours_schema_qualified_and_ilargi_dbs_own_apart(db, capsys):
    out = sql(db, "CREATE SCHEMA s; CREATE VIEW s.v AS SELECT 1 AS a;\n" + TRAIN + "\n.tables", capsys)
    listing = out[out.rindex("┌") :]
    assert shown_values(listing) == ["main.t", "s.v"] and shown_values(listing, 1) == ["table", "view"]
    assert "ilargi.models" not in listing.split("\n└")[0]
    assert re.search(r"^ilargi_db's own: ilargi\..*ilargi\.models.* \(\.models lists the models\)$", out, re.M)
    assert shown_values(sql(db, ".tables s.%", capsys)) == ["s.v"]  # a LIKE pattern, as DuckDB's
    assert sql(db, ".tables zz%", capsys) == "no tables or views like 'zz%'\n"
    assert sql(db, ".schema s.v", capsys) == "CREATE VIEW s.v AS SELECT 1 AS a;\n"


def test_an_empty_enter_stays_at_the_prompt(db, capsys):
    prompts: list[str] = []
    with ilargi_db.connect(db) as con:
        Session(con, ilargi_db.connect).interact(typed(["", "  ", "SELECT 4", "", "+ 2 AS six;", ".quit"], prompts))
    assert prompts == ["ilargi> ", "ilargi> ", "ilargi> ", "   ...> ", "   ...> ", "ilargi> "]
    assert shown_values(capsys.readouterr().out) == ["6"]  # a blank line inside a statement is part of it


def test_the_shell_goes_on_after_an_error_and_ends_a_statement_after_a_comment(db, capsys):
    prompts: list[str] = []
    with ilargi_db.connect(db) as con:
        lines = ["SELECT nope FROM t;", ".nope", "SELECT 1 AS one; -- done", "SELECT 2 AS two;"]
        Session(con, ilargi_db.connect).interact(typed(lines, prompts))
    out, err = capsys.readouterr()
    assert "Error: statement 1 (line 1), 'SELECT nope FROM t;'" in err and "Binder Error" in err
    assert "Error: unknown command .nope: .help lists the dot commands." in err
    assert "one" in out and "two" in out and "   ...> " not in prompts


def test_training_explaining_evaluating_and_dropping_print_short_tables(db, capsys):
    out = sql(db, TRAIN, capsys)
    assert "SELECT x, c, y" not in out and '{"' not in out and len(out) < 2000  # no call header, no JSON wall
    fields = shown_values(out)
    assert fields[:4] == ["model", "strategy", "why", "rows"] and {"r2", "rmse", "mae", "seconds", "macros"} <= set(
        fields
    )
    assert shown_values(out, 1)[0] == "m version 1 (linear_regression)"
    out = sql(db, "SELECT ilargi_explain('linear_regression', 'SELECT x, c, y FROM t', 'y');", capsys)
    assert shown_values(out)[:3] == ["strategy", "predicted", "how sure"] and len(out) < 3000
    out = sql(db, "SELECT ilargi_evaluate('m', 'SELECT x, c, y FROM t WHERE i > 50');", capsys)
    assert shown_values(out) == ["model", "r2", "rmse", "mae", "rows"] and shown_values(out, 1)[-1] == "49"
    out = sql(db, "SELECT ilargi_drop_model('m');", capsys)
    assert shown_values(out, 1) == ["m: 1 version and its macros"]


def test_the_whole_json_is_behind_mode_json_and_an_alias_keeps_the_summary(db, capsys):
    summary = json.loads(sql(db, ".mode json\n" + TRAIN, capsys))
    assert summary["version"] == 1 and "seconds" in summary and "why" in summary
    out = sql(db, TRAIN.replace(");", ") AS trained;"), capsys)
    assert shown_values(out)[0] == "model" and shown_values(out, 1)[0] == "m version 2 (linear_regression)"
    out = sql(db, TRAIN.replace(");", ") ->> 'strategy' AS strategy;"), capsys)  # a projection is plain SQL
    assert out.splitlines()[1].strip("│ ") == "strategy" and "model" not in out
    out = sql(db, ".mode line\nSELECT ilargi_evaluate('m', 'SELECT x, c, y FROM t');", capsys)
    assert out.splitlines()[0] == "model = m version 3" and out.splitlines()[1].startswith("   r2 = ")


def test_a_batch_prints_one_row_per_model(db, capsys):
    models = '[{"name": "a", "algorithm": "linear_regression"}, {"name": "b", "algorithm": "linear_regression"}]'
    out = sql(db, f"SELECT ilargi_train_batch('SELECT x, c, y FROM t', 'y', '{models}');", capsys)
    assert shown_values(out) == ["a", "b"] and shown_values(out, 4)[0].startswith("r2 ")


def test_a_value_named_like_a_summary_but_not_shaped_like_one_is_shown_as_it_is(db, capsys):
    out = sql(db, """SELECT '{"version": 1}'::JSON AS "ilargi_train('m')";""", capsys, "--mode", "csv")
    assert out == 'ilargi_train(\'m\')\n"{""version"": 1}"\n'
    out = sql(db, """SELECT 'not json' AS "ilargi_explain(x)";""", capsys, "--mode", "csv")
    assert out.splitlines()[1] == "not json"


# Statements whose literals, quoted names or comments hold what ends or comments out a statement elsewhere,
# typed one line each, and each statement's text as DuckDB reads it.
LITERALS = [
    ["SELECT 'a--b' AS s;"],
    ['SELECT 1 AS "x--y";'],
    ["SELECT 'a/*b' AS s;"],
    ["SELECT $$ -- ; $$ AS d;"],
    ["SELECT $tag$ $$ ; $tag$ AS d;"],
    ["SELECT E'it\\'s; -- no' AS e;"],
    ["SELECT 'one;", "two' AS s;"],  # a ';' at the end of a line, inside a string
    ["SELECT 2 /* a;", "b */ AS two;"],  # and inside a comment
    ["SELECT 3 AS three; -- a comment after the end"],
]


def test_a_literal_or_comment_holding_a_comment_marker_or_a_semicolon_neither_ends_nor_hides_a_statement(db, capsys):
    prompts: list[str] = []
    with ilargi_db.connect(db) as con:
        expected = [con.sql("\n".join(lines)).fetchall()[0][0] for lines in LITERALS]  # DuckDB's own reading
        lines = ["-- a comment alone: the prompt stays", *(line for statement in LITERALS for line in statement)]
        Session(con, ilargi_db.connect, mode="csv").interact(typed(lines, prompts))
    out, err = capsys.readouterr()
    assert err == "" and [row[0] for row in csv.reader(io.StringIO(out)) if row][1::2] == [str(v) for v in expected]
    continued = [p for lines in LITERALS for p in ["ilargi> ", *["   ...> "] * (len(lines) - 1)]]
    assert prompts == ["ilargi> ", *continued, "ilargi> "]
    # In a script, a dot command's line inside a string is part of the string, and one after an ending ';'
    # (even one followed by a comment) is a command.
    script = "SELECT 'a;\n.mode csv\nb' AS s;\nSELECT 1 AS one; -- note\n.mode csv\nSELECT 'x--;' AS t;"
    out = sql(db, script, capsys)
    assert "│ a;\\n.mode csv\\nb │" in out and out.endswith("t\nx--;\n")


def test_every_dot_commands_arguments_are_checked_before_anything_is_done(db, tmp_path, capsys):
    binary = tmp_path / "data.bin"
    binary.write_bytes(b"\xff\xfe\x00 not text")
    lines = [
        ".maxrows 10^30",
        ".maxrows " + "1" + "0" * 30,  # a number too large for a row limit
        ".maxrows " + "9" * 5000,  # more digits than Python converts
        ".maxrows ²",  # a digit to str.isdigit, not a number
        ".maxwidth ²",
        ".maxwidth -5",
        ".timer",
        ".read one two",
        ".read 'unclosed",
        f".read {binary}",
        ".help me",
        ".maxrows",
        ".maxwidth",
        "SELECT 1 AS one;",
    ]
    with ilargi_db.connect(db) as con:
        Session(con, ilargi_db.connect).interact(typed(lines, []))
    out, err = capsys.readouterr()
    assert out.splitlines()[:2] == ["maxrows: 40", "maxwidth: the terminal"] and shown_values(out) == ["1"]
    errors = err.splitlines()
    assert len(errors) == 11 and all(line.startswith("Error: ") for line in errors)  # one line each, no traceback
    rows_fix = "say .maxrows 100 (at most 1000000000; .mode csv writes every row)."
    width_fix = "say .maxwidth 120 (at most 1000000; 0: the terminal's width)."
    assert errors[0] == f"Error: .maxrows takes a positive number of rows, got '10^30': {rows_fix}"
    assert "got '1000000000000000000000000000000'" in errors[1] and "got '9999999999" in errors[2]
    assert len(errors[2]) < 200 and "got '²'" in errors[3]
    assert errors[4:6] == [
        f"Error: .maxwidth takes a number of characters, got {got!r}: {width_fix}" for got in ("²", "-5")
    ]
    assert errors[6:] == [
        "Error: .timer takes on or off, got '': say .timer on.",
        "Error: Usage: .read FILE (quote a path with blanks: .read 'my job.sql')",  # DuckDB's wording
        """Error: .read: a quote is not closed in "'unclosed": close it (.read 'my job.sql').""",
        f"Error: cannot read '{binary}': it is not UTF-8 text; give the path of a .sql file.",
        "Error: Usage: .help",
    ]
    with pytest.raises(SystemExit):  # argparse's message: --maxrows: a positive number of rows, at most ...
        cli.main(["sql", "--db", db, "--maxrows", "1" + "0" * 30, "-c", "SELECT 1"])
    assert "argument --maxrows: a positive number of rows, at most 1000000000, got '1" in capsys.readouterr().err


SANDBOX = ["SET allowed_directories = [?]", "SET enable_external_access = false", "SET lock_configuration = true"]


def test_the_dot_commands_that_reach_files_stay_in_the_connections_sandbox(db, tmp_path, capsys):
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "job.sql").write_text("SELECT 5 AS five;\n")
    (outside / "secret.sql").write_text("SELECT 'secret' AS s;\n")
    lines = [
        f".read {allowed}/job.sql",  # allowed_directories: DuckDB would read it too
        f".read {outside}/secret.sql",
        f".read {allowed}/../outside/secret.sql",
        f".output {outside}/out.csv",
        f".once {outside}/once.csv",
        f".open {outside}/other.duckdb",
        ".open",  # a new in-memory database, in the same sandbox
        "SELECT current_setting('enable_external_access') AS access, current_setting('lock_configuration') AS lock;",
        "SET enable_external_access = true;",
        f".read {outside}/secret.sql",
    ]
    with ilargi_db.connect(db) as con:
        for setting in SANDBOX:
            con.execute(setting, [str(allowed)] if "?" in setting else [])
        session = Session(con, ilargi_db.connect, mode="csv")
        session.interact(typed(lines, []))
        session.con.close()
    out, err = capsys.readouterr()
    assert out.splitlines() == ["five", "5", "access,lock", "false,true", ""]
    errors = err.splitlines()
    refused = "this connection has enable_external_access = false and the path is not under its allowed_directories"
    assert [line.split(" cannot reach ")[0] for line in errors if refused in line] == [
        "Error: .read", "Error: .read", "Error: .output", "Error: .once", "Error: .open", "Error: .read",
    ]  # fmt: skip
    assert "the configuration has been locked" in err and "secret" not in out
    assert sorted(p.name for p in outside.iterdir()) == ["secret.sql"]  # nothing written or created there


def test_safe_mode_refuses_the_dot_commands_that_reach_files_and_sql_that_reaches_outside(db, tmp_path, capsys):
    (tmp_path / "job.sql").write_text("SELECT 1;\n")
    for command in (f".read {tmp_path}/job.sql", f".output {tmp_path}/o.csv", f".once {tmp_path}/o.csv", ".open"):
        assert cli.main(["sql", "--db", db, "--safe", "-c", command]) == 1
        name = command.split()[0]
        refused = f"{name} cannot be used in --safe mode (it reaches the file system)."  # DuckDB's words for -safe
        assert capsys.readouterr().err == f"ilargi sql: error: {refused}\n"
    assert not (tmp_path / "o.csv").exists()
    assert cli.main(["sql", "--db", db, "--safe", "-c", f"SELECT * FROM read_csv('{tmp_path}/job.sql')"]) == 1
    assert "Permission Error" in capsys.readouterr().err
    # The database itself, its tables and ilargi_db's functions work as before.
    out = sql(db, "CREATE TABLE u AS SELECT 2 AS two;\nSELECT count(*) AS n FROM t, u;\n" + TRAIN, capsys, "--safe")
    assert shown_values(out) == ["100"] and shown_values(out[out.rindex("┌") :])[0] == "model"
