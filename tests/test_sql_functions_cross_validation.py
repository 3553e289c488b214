"""``ilargi_cross_validate`` (SQL) and ``ilargi cross-validate`` (the command line): ``ilargi_db.cross_validate``'s
rows as a table, one per parameter set; the database read, never written; bad options refused before a read."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from pathlib import Path

import duckdb
import numpy as np
import pytest

import ilargi_db
from ilargi_db import cli
from ilargi_db.shell import CROSS_VALIDATION, Session
from ilargi_db.sql_functions.cross_validation import COLUMNS

QUERY = """SELECT s.amount, s.discount, c.age, c.segment, r.income, s.y
FROM sales s JOIN customers c ON s.customer = c.id LEFT JOIN regions r ON c.region = r.id"""
LABELLED = QUERY.replace("s.y", "s.y > 38 AS high")
# Features of like scales: the linear SVM's dual solver converges on them unstandardized.
SCALED = LABELLED.replace("s.amount, s.discount, c.age,", "s.amount / 100 AS amount, s.discount, c.age / 50 AS age,")
SCALED = SCALED.replace("r.income,", "r.income / 10 AS income,")
ALPHAS = [0.01, 1.0, 30.0, 1000.0]


@pytest.fixture(scope="module")
def path(tmp_path_factory) -> str:
    """A snowflake (sales -> customers -> regions) in a file, with a text feature and customers of no region."""
    path = str(tmp_path_factory.mktemp("cv") / "shop.duckdb")
    con = duckdb.connect(path)
    con.execute("CREATE TABLE regions AS SELECT range AS id, range * 1.5 + 2 AS income FROM range(5)")
    con.execute(
        "CREATE TABLE customers AS SELECT range AS id, 18 + (range * 13) % 50 AS age, "
        "['retail', 'corporate', 'home'][range % 3 + 1] AS segment, range % 6 AS region FROM range(37)"
    )
    con.execute(
        "CREATE TABLE sales AS SELECT range % 37 AS customer, 100 + (range * 7919) % 40 - 20.0 AS amount, "
        "((range * 104729) % 1000) / 1000.0 AS discount, "
        "0.3 * (100 + (range * 7919) % 40 - 20.0) - 10 * ((range * 104729) % 1000) / 1000.0 "
        "+ 0.2 * (18 + ((range % 37) * 13) % 50) + 4 * sin(range) AS y FROM range(400)"
    )
    con.close()
    return path


def sql_rows(con: duckdb.DuckDBPyConnection, algorithm: str, query: str, target: str, options: dict) -> list[dict]:
    cursor = con.execute(
        "SELECT * FROM ilargi_cross_validate(?, ?, ?, ?)", [algorithm, query, target, json.dumps(options)]
    )
    names = [d[0] for d in cursor.description]
    return [{**dict(zip(names, row)), "params": json.loads(row[0])} for row in cursor.fetchall()]


def without_seconds(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "fit_seconds"} for row in rows]


@pytest.mark.parametrize(
    ("algorithm", "query", "target", "options"),
    [
        ("linear_regression", QUERY, "y", {"cv": 5, "param_grid": {"alpha": ALPHAS}, "scoring": "r2"}),
        (
            "logistic_regression",
            LABELLED,
            "high",
            {
                "cv": 4,
                "param_grid": [{"C": [0.01, 1.0]}, {"C": [10.0], "fit_intercept": [False]}],
                "scoring": "roc_auc",
                "solver": "newton",
                "random_state": 3,
            },
        ),
        ("linear_svc", SCALED, "high", {"cv": 3, "param_grid": {"C": [0.1, 1.0]}}),
    ],
    ids=["ridge", "logistic", "svc"],
)
def test_the_sql_table_holds_the_python_functions_rows(path, algorithm, query, target, options):
    con = ilargi_db.connect(path)
    sql = sql_rows(con, algorithm, query, target, options)
    python = ilargi_db.cross_validate(con, query, target, algorithm, **options)
    con.close()
    assert [r["params"] for r in sql] == [r["params"] for r in python]
    assert [r["rank"] for r in sql] == [r["rank"] for r in python]
    for mine, theirs in zip(sql, python):
        np.testing.assert_allclose(mine["fold_scores"], theirs["fold_scores"], rtol=0, atol=1e-12)
        assert mine["mean_score"] == pytest.approx(theirs["mean_score"], abs=1e-12)
        assert mine["std_score"] == pytest.approx(theirs["std_score"], abs=1e-12)
        assert mine["fit_seconds"] > 0
    assert len(sql) == len(python) > 1 and len(sql[0]["fold_scores"]) == options["cv"]


def test_the_table_has_the_documented_columns_and_the_shell_knows_them(path):
    con = ilargi_db.connect(path)
    described = con.sql(
        f"DESCRIBE SELECT * FROM ilargi_cross_validate('linear_regression', $${QUERY}$$, 'y')"
    ).fetchall()
    con.close()
    assert [(name, kind) for name, kind, *_ in described] == list(COLUMNS)
    assert CROSS_VALIDATION == tuple(name for name, _ in COLUMNS)


def digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_cross_validation_reads_a_read_only_database_and_stores_nothing(path):
    before, files = digest(path), sorted(Path(path).parent.iterdir())
    con = ilargi_db.connect(path, read_only=True)
    rows = sql_rows(con, "linear_regression", QUERY, "y", {"cv": 3, "param_grid": {"alpha": [1.0, 10.0]}})
    con.close()
    assert len(rows) == 2
    assert digest(path) == before and sorted(Path(path).parent.iterdir()) == files
    con = ilargi_db.connect(path)
    sql_rows(con, "linear_regression", QUERY, "y", {"cv": 3})
    assert con.sql("SELECT count(*) FROM ilargi.models").fetchall() == [(0,)]
    con.close()


def test_explain_plans_the_call_without_running_it():
    con = ilargi_db.connect()  # no tables: running it would fail on the missing one
    plan = con.sql("EXPLAIN SELECT * FROM ilargi_cross_validate('linear_regression', 'SELECT x, y FROM missing', 'y')")
    assert plan.fetchall()
    with pytest.raises(duckdb.Error, match="missing"):
        con.sql("SELECT * FROM ilargi_cross_validate('linear_regression', 'SELECT x, y FROM missing', 'y')").fetchall()
    con.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cv": True}, "option 'cv' must be the number of folds, an integer of 2 or more, got True."),
        ({"param_grid": {}}, "option 'param_grid' must be a JSON object of arrays"),
        ({"param_grid": [{"alpha": [1.0]}, []]}, "option 'param_grid' must be a JSON object of arrays"),
        ({"param_grid": {"alpha": [1.0, True]}}, "option 'alpha' of linear_regression must be a number in JSON"),
        ({"param_grid": {"alpha": [-1.0]}}, "'alpha' parameter of LinearRegression must be a float"),
        ({"scoring": 3}, "option 'scoring' must name one of scikit-learn's scorers"),
        ({"backend": "gpu"}, "backend"),
        ({"standardize": "yes"}, "option 'standardize' must be true or false in JSON"),
        ({"strategy": "auto"}, "unknown option(s) 'strategy' for linear_regression"),
    ],
)
def test_bad_options_are_refused_before_anything_is_read(options, message):
    con = ilargi_db.connect()  # no tables: a read would fail with another error
    with pytest.raises(duckdb.Error, match=re.escape(message)):
        sql_rows(con, "linear_regression", "SELECT f.x, f.y FROM missing f", "y", options)
    con.close()


def test_standardize_is_refused_for_trees_before_anything_is_read():
    con = ilargi_db.connect()
    with pytest.raises(duckdb.Error, match="standardize.* is for linear and logistic regression"):
        sql_rows(con, "random_forest", "SELECT f.x, f.y FROM missing f", "y", {"standardize": True})
    con.close()


# -- the shell and the command line ---------------------------------------------------------


def test_the_shell_shows_every_folds_score_folded_not_cut(path, capsys):
    con = ilargi_db.connect(path)
    Session(con, ilargi_db.connect).run_sql(
        f"""SELECT * FROM ilargi_cross_validate('linear_regression', $${QUERY}$$, 'y', '{{"cv": 10}}');"""
    )
    out = capsys.readouterr().out
    (row,) = sql_rows(con, "linear_regression", QUERY, "y", {"cv": 10})
    con.close()
    assert "…" not in out
    shown = "".join(line.split("│")[5] for line in out.splitlines() if line.count("│") == 7)  # the fold_scores cells
    assert len(row["fold_scores"]) == 10 and shown.count(",") == 9


CROSS_VALIDATE = ["cross-validate", "linear_regression", QUERY, "--target", "y", "--cv", "4"]


def test_the_command_prints_the_table_the_shell_prints(path, capsys):
    grid = json.dumps({"alpha": ALPHAS})
    assert cli.main([*CROSS_VALIDATE, "--grid", grid, "--db", path, "--mode", "csv"]) == 0
    printed = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    con = ilargi_db.connect(path)
    sql = f"""SELECT * FROM ilargi_cross_validate('linear_regression', $${QUERY}$$, 'y',
        '{{"cv": 4, "param_grid": {grid}}}');"""
    Session(con, ilargi_db.connect, mode="csv").run_sql(sql)
    con.close()
    shown = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert printed[0] == shown[0] == list(CROSS_VALIDATION)
    assert [row[:-1] for row in printed] == [row[:-1] for row in shown]  # all but the seconds
    assert len(printed) == 1 + len(ALPHAS)


def test_the_command_prints_json_and_leaves_the_database_as_it_was(path, capsys):
    before = digest(path)
    argv = [*CROSS_VALIDATE, "--grid", '{"alpha": [1.0, 30.0]}', "--options", '{"fit_intercept": false}']
    assert cli.main([*argv, "--scoring", "neg_mean_squared_error", "--db", path, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    con = duckdb.connect(path, read_only=True)
    python = ilargi_db.cross_validate(
        con,
        QUERY,
        "y",
        "linear_regression",
        cv=4,
        param_grid={"alpha": [1.0, 30.0]},
        fit_intercept=False,
        scoring="neg_mean_squared_error",
    )
    con.close()
    assert without_seconds(printed) == without_seconds(python)
    assert digest(path) == before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cv", "1"], "--cv must be the number of folds, an integer of 2 or more, got 1."),
        (["--grid", '{"alpha": 1.0}'], "'alpha' of --grid must be a non-empty JSON array of the values to try"),
        (["--grid", "alpha=1"], "--grid are not valid JSON"),
        (["--options", '{"cv": 3}'], "cv given twice, as --cv and in --options: give it once."),
        (["--scoring", "r_squared"], "--scoring must name one of scikit-learn's scorers"),
    ],
)
def test_the_command_refuses_bad_flags_in_their_terms(path, capsys, argv, message):
    assert cli.main([*CROSS_VALIDATE, *argv, "--db", path]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ilargi cross-validate: error: ") and message in err and "Traceback" not in err


def test_the_command_needs_a_target_a_database_and_a_supervised_algorithm(path, capsys):
    assert cli.main(["cross-validate", "linear_regression", QUERY, "--db", path]) == 1
    assert "linear_regression needs a target to score: pass --target <label column>." in capsys.readouterr().err
    assert cli.main(["cross-validate", "linear_regression", QUERY, "--target", "y"]) == 1
    assert "pass --db FILE" in capsys.readouterr().err
    assert cli.main(["cross-validate", "kmeans", QUERY, "--target", "y", "--db", path]) == 1
    assert "cross-validation scores supervised models, one of" in capsys.readouterr().err
