"""Nothing stored in the database, or shadowing DuckDB's functions in it, changes what a stored model computes."""

from __future__ import annotations

import json
import os

import duckdb
import numpy as np
import pytest

import ilargi_db
from ilargi_db.reuse.fingerprint import parse_tree_nodes
from ilargi_db.sql_functions.macros import MACRO_FUNCTIONS

ROWS = """CREATE TABLE t AS SELECT range AS id, CASE WHEN range % 7 = 0 THEN 'nan'::DOUBLE
    WHEN range % 11 = 0 THEN NULL ELSE range * 0.37 % 5 END AS x, ['a', 'b', 'c', NULL][range % 4 + 1] AS c,
    (range * 0.37 % 5) + (range % 4) AS y, range % 3 = 0 AS big, range % 3 AS three FROM range(60)"""
# (model name, target, algorithm, parameters): one model of every kind of macro the writers make.
MODELS = [
    ("lin", "y", "linear_regression", {}),
    ("logit", "big", "logistic_regression", {}),
    ("multi", "three", "logistic_regression", {"solver": "lbfgs"}),
    ("svm", "big", "linear_svc", {}),
    ("km", None, "kmeans", {"n_clusters": 3, "random_state": 0}),
    ("gb", "y", "gradient_boosting", {"n_estimators": 5}),
    ("gbc", "big", "gradient_boosting", {"n_estimators": 5, "objective": "log_loss"}),
    ("gbp", "y", "gradient_boosting", {"n_estimators": 5, "objective": "poisson"}),
]


def shadow(function: str) -> str:
    """A database macro of ``function``'s name answering 0 for one to three arguments (DuckDB would call it)."""
    return f'CREATE MACRO "{function}"(a) AS 0, (a, b) AS 0, (a, b, c) AS 0'


@pytest.fixture(scope="module")
def stored():
    """A database with every kind of model saved, and each macro's rows as predict scores them before any shadow."""
    con = ilargi_db.connect()
    con.execute(ROWS)
    expected = {}
    for name, target, algorithm, parameters in MODELS:
        columns = "x, c" + (f", {target}" if target else "")
        query = f"SELECT {columns} FROM t ORDER BY id"
        model = ilargi_db.train(con, query, target=target, algorithm=algorithm, **parameters)
        ilargi_db.save_model(con, name, model)
        for macro in model.macros_:  # the class (or the cluster) and the probability where there is one
            expected[macro] = con.sql(f"SELECT {macro}(x, c) FROM t ORDER BY id").fetchall()
    np.testing.assert_allclose(  # the macros equal predict with nothing shadowed
        np.array(expected["lin_predict"], dtype=float)[:, 0],
        ilargi_db.predict(con, ilargi_db.load_model(con, "lin"), "SELECT x, c FROM t ORDER BY id"),
        rtol=1e-9,
    )
    return con, expected


@pytest.mark.parametrize("function", sorted(MACRO_FUNCTIONS))
def test_a_database_macro_shadowing_a_function_a_model_macro_calls_changes_nothing(stored, function):
    con, expected = stored
    con.execute(shadow(function))
    try:
        for macro, rows in expected.items():
            found = con.sql(f"SELECT {macro}(x, c) FROM t ORDER BY id").fetchall()
            assert np.allclose(np.array(found, dtype=float), np.array(rows, dtype=float), equal_nan=True), macro
    finally:
        con.execute(f'DROP MACRO "{function}"')


def test_a_model_macro_calls_no_function_a_database_can_shadow():
    """Every function call in a model macro names DuckDB's built-in by its catalog (MACRO_FUNCTIONS lists them)."""
    con = ilargi_db.connect()
    con.execute(ROWS)
    for name, target, algorithm, parameters in MODELS:
        query = "SELECT x, c" + (f", {target}" if target else "") + " FROM t"
        ilargi_db.save_model(con, name, ilargi_db.train(con, query, target=target, algorithm=algorithm, **parameters))
    macros = [m for (listed,) in con.sql("SELECT macros FROM ilargi.models").fetchall() for m in listed]
    bodies = con.execute(
        "SELECT macro_definition FROM duckdb_functions() WHERE function_name IN (SELECT unnest(?::VARCHAR[]))",
        [macros],
    ).fetchall()
    assert len(bodies) == len(macros) > len(MODELS)
    for (body,) in bodies:
        tree = json.loads(con.execute("SELECT json_serialize_sql(?)", ["SELECT " + body]).fetchall()[0][0])
        # l[i] is an operator node that binds to array_extract, [a, b] and [e FOR x IN l] are function nodes
        calls = [n for n in parse_tree_nodes(tree) if n.get("class") == "FUNCTION" or n.get("type") == "ARRAY_EXTRACT"]
        assert all((n.get("catalog"), n.get("schema")) == ("system", "main") for n in calls), body[:300]
        assert {n["function_name"] for n in calls} <= MACRO_FUNCTIONS


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device whose writes fail: disk full)")
def test_a_save_the_disk_cannot_hold_says_so_and_stores_nothing(tmp_path):
    path = tmp_path / "models.db"
    con = ilargi_db.connect(str(path))
    con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, range * 2.0 + 1 AS y FROM range(20)")
    model = ilargi_db.train(con, "SELECT x, y FROM t", target="y", algorithm="linear_regression")
    ilargi_db.save_model(con, "first", model)
    con.execute("CHECKPOINT")  # everything in the database file: the save's COMMIT writes the log alone
    os.symlink("/dev/full", f"{path}.wal")  # every write of the log fails: No space left on device
    with pytest.raises(duckdb.Error, match="No space left on device"):
        ilargi_db.save_model(con, "second", model)
    con.close()
    os.remove(f"{path}.wal")
    with duckdb.connect(str(path)) as reopened:
        assert reopened.sql("SELECT name FROM ilargi.models").fetchall() == [("first",)]
        assert reopened.sql(
            "SELECT count(*) FROM duckdb_functions() WHERE function_name = 'second_predict'"
        ).fetchall() == [(0,)]


@pytest.mark.parametrize("algorithm", ["logistic_regression", "linear_svc", "gradient_boosting"])
def test_class_labels_a_double_cannot_keep_exact_are_refused_before_training(algorithm):
    """9007199254740993 and ...995 read as DOUBLE are ...992 and ...996: the model would answer labels not in the
    data, so training refuses, saying how to number the classes."""
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE t AS SELECT range * 1.0 AS x, "
        "(9007199254740993 + 2 * (range % 2))::BIGINT AS label FROM range(30)"
    )
    with pytest.raises(ilargi_db.IlargiError, match=r"class label of about 9007199254740992, at or beyond 2\^53"):
        ilargi_db.train(con, "SELECT x, label FROM t", target="label", algorithm=algorithm)
    # a label the model can keep exact is trained as before
    model = ilargi_db.train(con, "SELECT x, label - 9007199254740000 AS label FROM t", "label", algorithm)
    assert set(model.classes_) == {993.0, 995.0}


def test_a_row_edited_to_another_algorithm_drops_no_function_the_model_did_not_make():
    # The row now claims a logistic model, whose macros include m_predict_class: a user's macro of that name
    # carries no mark of model m, so dropping m leaves it, as retraining would refuse to replace it.
    con = ilargi_db.connect()
    con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, 2.0 * range + 1 AS y FROM range(20)")
    con.execute("SELECT ilargi_train('m', 'linear_regression', 'SELECT x, y FROM t', 'y')")
    con.execute("CREATE MACRO m_predict_class(a) AS 'mine'")
    con.execute(
        "UPDATE ilargi.models SET algorithm = 'logistic_regression', macros = ['m_predict', 'm_predict_class'] "
        "WHERE name = 'm'"
    )
    con.execute("SELECT ilargi_drop_model('m')")
    left = "SELECT function_name FROM duckdb_functions() WHERE function_name LIKE 'm\\_%' ESCAPE '\\' ORDER BY 1"
    assert con.execute(left).fetchall() == [("m_predict_class",)]
    assert con.execute("SELECT m_predict_class(1)").fetchall() == [("mine",)]


def test_a_model_per_timestamptz_group_finds_its_groups_whatever_the_database_shadows():
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE g AS SELECT range * 1.0 AS x, TIMESTAMPTZ '2024-01-01 00:00:00+00' + to_days(range % 2) AS ts, "
        "(range % 2) * 10.0 + range AS y FROM range(40)"
    )
    con.execute("""SELECT ilargi_train('per_day', 'linear_regression', 'SELECT x, ts, y FROM g', 'y',
        '{"group_by": "ts"}')""").fetchall()
    scored = "SELECT per_day_predict(x, ts) FROM g ORDER BY x"
    before = con.sql(scored).fetchall()
    assert None not in {p for (p,) in before}
    for function in ("timezone", "regexp_replace"):
        con.execute(shadow(function))
    assert con.sql(scored).fetchall() == before
