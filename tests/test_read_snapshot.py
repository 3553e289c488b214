"""ilargi_db only reads: a training query that writes is refused everywhere, and every job reads one snapshot."""

from __future__ import annotations

import json
import threading

import duckdb
import numpy as np
import pytest

import ilargi_db
from ilargi_db import PlanError, cli
from ilargi_db.plan import builder, statement
from ilargi_db.read_snapshot import ReadSnapshot, in_transaction

GOOD = "SELECT f.x, d.z, f.y FROM f JOIN d ON f.k = d.k"
DELETE_IN_WITH = "WITH gone AS (DELETE FROM victim RETURNING id) SELECT f.x, d.z, f.y FROM f JOIN d ON f.k = d.k"


def tables(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    con.execute(
        "CREATE TABLE f AS SELECT range AS id, range % 7 AS k, range * 1.0 AS x, 3.0 * range AS y FROM range(70)"
    )
    con.execute("CREATE TABLE d AS SELECT range AS k, range * 2.0 AS z FROM range(7)")
    con.execute("CREATE TABLE victim AS SELECT range AS id FROM range(5)")
    con.execute("CREATE SEQUENCE numbers")
    return con


@pytest.fixture
def con():
    con = tables(ilargi_db.connect())
    yield con
    con.close()


def victim_rows(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    return con.cursor().execute("SELECT id FROM victim ORDER BY id").fetchall()


UNTOUCHED = [(0,), (1,), (2,), (3,), (4,)]

WRITES = [
    (DELETE_IN_WITH, "DELETE statement in the WITH clause (gone)"),
    ("WITH g AS (INSERT INTO victim VALUES (9) RETURNING id) SELECT f.x, f.y FROM f", "INSERT statement"),
    ("WITH g AS (UPDATE victim SET id = id + 1 RETURNING id) SELECT f.x, f.y FROM f", "UPDATE statement"),
    ("WITH g AS MATERIALIZED (DELETE FROM victim RETURNING id) SELECT f.x, f.y FROM f", "DELETE statement"),
    ("WITH g AS (DELETE FROM victim RETURNING id) SELECT f.x, f.y FROM f JOIN g ON f.k = g.id", "DELETE statement"),
    ("WITH g AS (DELETE FROM victim RETURNING id) FROM f SELECT f.x, f.y", "DELETE statement"),
    ("WITH g AS (DELETE FROM victim RETURNING id) SELECT f.x FROM f UNION ALL SELECT 1", "DELETE statement"),
    (
        "SELECT f.x, f.y FROM f WHERE f.k IN (WITH g AS (DELETE FROM victim RETURNING id) SELECT id FROM g)",
        "DELETE statement in the WITH clause (g)",
    ),
    (
        "WITH a AS (WITH g AS (DELETE FROM victim RETURNING id) SELECT id FROM g) SELECT f.x, f.y FROM f, a "
        "WHERE f.k = a.id",
        "DELETE statement",
    ),
    ("SELECT f.x, nextval('numbers') AS n, f.y FROM f", "advances a sequence"),
]


@pytest.mark.parametrize("query, message", WRITES, ids=[q[:40] for q, _ in WRITES])
def test_a_query_that_writes_is_refused_before_anything_runs(con, query, message):
    with pytest.raises(PlanError, match="ilargi_db only reads") as err:
        ilargi_db.build_join_graph(con, query, "y")
    assert message in str(err.value)
    assert victim_rows(con) == UNTOUCHED


def test_copy_inside_with_is_refused_by_duckdbs_own_parser(con, tmp_path):
    # sqlglot cannot parse a COPY inside WITH; DuckDB runs it (and writes the file).
    path = tmp_path / "leak.csv"
    with pytest.raises(PlanError, match=r"holds a COPY statement in the WITH clause \(g\): ilargi_db only reads"):
        ilargi_db.train(con, f"WITH g AS (COPY victim TO '{path}') SELECT f.x, f.y FROM f", "y")
    assert not path.exists()


def test_the_sequence_is_not_advanced(con):
    with pytest.raises(PlanError, match="advances a sequence"):
        ilargi_db.train(con, "SELECT f.x, nextval('numbers') AS n, f.y FROM f", "y")
    assert con.execute("SELECT nextval('numbers')").fetchall() == [(1,)]


HIDDEN_NEXTVAL = {
    "a view": (
        "CREATE VIEW numbered AS SELECT nextval('numbers') AS n, x, y FROM f",
        "SELECT v.x, v.y FROM numbered v",
    ),
    "a view of a view": (
        "CREATE VIEW numbered AS SELECT nextval('numbers') AS n, x, y FROM f; "
        "CREATE VIEW outer_view AS SELECT x, y FROM numbered",
        "SELECT v.x, v.y FROM outer_view v",
    ),
    "a scalar macro": ("CREATE MACRO bump(a) AS a + 0 * nextval('numbers')", "SELECT bump(f.x) AS x, f.y FROM f"),
    "a macro in a view": (
        "CREATE MACRO bump(a) AS a + 0 * nextval('numbers'); CREATE VIEW bumped AS SELECT bump(x) AS x, y FROM f",
        "SELECT b.x, b.y FROM bumped b",
    ),
    "a table macro": (
        "CREATE MACRO numbered(k) AS TABLE SELECT nextval('numbers') AS n, x, y FROM f LIMIT k",
        "SELECT v.x, v.y FROM numbered(10) v",
    ),
}


@pytest.mark.parametrize("in_transaction_of_the_caller", [False, True], ids=["autocommit", "in a transaction"])
@pytest.mark.parametrize("where", list(HIDDEN_NEXTVAL))
def test_a_nextval_hidden_in_a_view_or_macro_is_refused_and_the_sequence_is_not_advanced(
    con, where, in_transaction_of_the_caller
):
    # In the caller's transaction the read-only wall is off: DuckDB would advance the sequence on every read.
    ddl, query = HIDDEN_NEXTVAL[where]
    con.execute(ddl)
    if in_transaction_of_the_caller:
        con.begin()
    for call in (
        lambda: ilargi_db.train(con, query, "y"),
        lambda: ilargi_db.train(con, query, "y", strategy="materialized"),
        lambda: ilargi_db.explain(con, query, "y"),
    ):
        with pytest.raises(PlanError, match=r"nextval\('numbers'\), which advances a sequence: ilargi_db only reads"):
            call()
    if in_transaction_of_the_caller:
        con.commit()
    assert con.execute("SELECT last_value FROM duckdb_sequences() WHERE sequence_name = 'numbers'").fetchall() == [
        (None,)
    ]


def test_every_entry_point_refuses_a_query_that_writes(con, tmp_path, capsys):
    model = ilargi_db.train(con, GOOD, "y", strategy="factorized")
    ilargi_db.save_model(con, "good", model)
    calls = {
        "train": lambda: ilargi_db.train(con, DELETE_IN_WITH, "y"),
        "train materialized": lambda: ilargi_db.train(con, DELETE_IN_WITH, "y", strategy="materialized"),
        "explain": lambda: ilargi_db.explain(con, DELETE_IN_WITH, "y"),
        "evaluate": lambda: ilargi_db.evaluate(con, model, DELETE_IN_WITH),
        "predict": lambda: ilargi_db.predict(con, model, DELETE_IN_WITH),
        "normalize": lambda: ilargi_db.normalize(con, DELETE_IN_WITH, "y"),
        "prediction_sql": lambda: ilargi_db.prediction_sql(con, model, DELETE_IN_WITH),
    }
    for name, call in calls.items():
        with pytest.raises(PlanError, match="DELETE statement"):
            call()
        assert victim_rows(con) == UNTOUCHED, name
    quoted = DELETE_IN_WITH.replace("'", "''")
    for sql in (
        f"SELECT ilargi_train('bad', 'linear_regression', '{quoted}', 'y')",
        f"SELECT ilargi_explain('linear_regression', '{quoted}', 'y')",
        f"SELECT ilargi_evaluate('good', '{quoted}')",
    ):
        with pytest.raises(duckdb.Error, match="DELETE statement"):
            con.execute(sql)
        assert victim_rows(con) == UNTOUCHED, sql
    assert con.execute("SELECT count(*) FROM ilargi.models").fetchall() == [(1,)]

    path = str(tmp_path / "cli.duckdb")
    tables(duckdb.connect(path)).close()
    for argv in (
        ["train", "bad", "linear_regression", DELETE_IN_WITH, "--target", "y", "--db", path],
        ["explain", "linear_regression", DELETE_IN_WITH, "--target", "y", "--db", path],
    ):
        assert cli.main(argv) == 1
        assert "DELETE statement" in capsys.readouterr().err
    check = duckdb.connect(path, read_only=True)
    assert victim_rows(check) == UNTOUCHED
    check.close()


def test_the_read_only_transaction_stops_a_write_the_planner_missed(con, monkeypatch):
    # The second wall: with both parse checks switched off, DuckDB itself refuses the write.
    monkeypatch.setattr(statement, "refuse_writes", lambda s: s)
    monkeypatch.setattr(builder, "check_reads_only", lambda con, query: None)
    for strategy in ("factorized", "materialized"):
        with pytest.raises((PlanError, duckdb.Error), match="read-only"):
            ilargi_db.train(con, DELETE_IN_WITH, "y", strategy=strategy)
        assert victim_rows(con) == UNTOUCHED
    assert not in_transaction(con)  # rolled back: the connection is usable
    assert ilargi_db.train(con, GOOD, "y").n_rows_ == 70


def test_reads_end_their_transaction_and_keep_the_callers(con):
    ilargi_db.train(con, GOOD, "y")
    assert not in_transaction(con)  # ilargi_db's own read-only transaction ended
    con.execute("BEGIN")
    con.execute("INSERT INTO f VALUES (70, 0, 70.0, 210.0)")  # not committed: only this transaction sees it
    assert ilargi_db.train(con, GOOD, "y").n_rows_ == 71
    assert ilargi_db.explain(con, GOOD, "y").features["rows"] == 71
    assert in_transaction(con)  # the caller's transaction is still open, and still the caller's to end
    con.execute("ROLLBACK")
    assert con.execute("SELECT count(*) FROM f").fetchall() == [(70,)]


def test_the_estimator_failing_inside_the_snapshot_still_trains(con, monkeypatch):
    # A statement that fails aborts the transaction; the fallback rule reads on in a fresh snapshot.
    from ilargi_db.cost_model import choose
    from ilargi_db.pipeline import planning

    def statistics_that_fail(con, graph):  # the statistics' statement fails on the job's connection, as counted
        try:
            con.sql("SELECT error('the estimator broke')").fetchall()
        except duckdb.Error as err:
            raise ilargi_db.IlargiError(f"could not count the rows of the training query's sources: {err}") from err

    for counts_them in (planning, choose):  # the job counts them once; the cost model again when that failed
        monkeypatch.setattr(counts_them, "job_stats", statistics_that_fail)
    model = ilargi_db.train(con, GOOD, "y", reuse=False)  # not statistics an earlier test stored
    assert "the cost model failed" in model.decision_ and "the estimator broke" in model.decision_
    assert model.n_rows_ == 70 and not in_transaction(con)


def test_nested_snapshots_reuse_the_outer_one(con):
    with ReadSnapshot(con) as outer:
        assert outer.owned and in_transaction(con)
        with ReadSnapshot(con) as inner:
            assert not inner.owned
        assert in_transaction(con)
    assert not in_transaction(con)


# -- one snapshot per job -------------------------------------------------------------------------------------------

M = 211  # a prime: k -> 7 k mod M permutes the dimension's values, and z = 0.5 k holds in every committed state
SNAPSHOT_QUERY = "SELECT d.k, d.z FROM f JOIN d ON f.d = d.id"
SCRAMBLE = f"UPDATE d SET k = (k * 7) % {M}, z = 0.5 * ((k * 7) % {M})"


@pytest.fixture
def star():
    con = ilargi_db.connect()
    con.execute(f"CREATE TABLE f AS SELECT range AS id, range % {M} AS d FROM range(20000)")
    con.execute(f"CREATE TABLE d AS SELECT range AS id, range::DOUBLE AS k, 0.5 * range AS z FROM range({M})")
    yield con
    con.close()


def assert_one_state(model) -> None:
    assert model.training_metrics_["r2"] == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(model.coef_, [0.5], atol=1e-9)


def test_a_change_between_the_scans_and_the_join_is_not_seen(star, monkeypatch):
    import ilargi_db.metadata

    writer = star.cursor()
    join = ilargi_db.metadata.compute_indicators

    def change_then_join(*args, **kwargs):
        writer.execute(SCRAMBLE)  # committed after the scans, before the key-only join
        return join(*args, **kwargs)

    monkeypatch.setattr(ilargi_db.metadata, "compute_indicators", change_then_join)
    assert_one_state(ilargi_db.train(star, SNAPSHOT_QUERY, "z", strategy="factorized"))
    assert_one_state(ilargi_db.train(star, SNAPSHOT_QUERY, "z", strategy="auto"))
    # The SQL function reads on a cursor: the same snapshot holds there.
    summary = json.loads(
        star.execute(
            f"SELECT ilargi_train('m', 'linear_regression', '{SNAPSHOT_QUERY}', 'z', "
            """'{"strategy": "factorized"}')"""
        ).fetchall()[0][0]
    )
    assert summary["metrics"]["r2"] == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("strategy", ["factorized", "materialized"])
def test_training_under_a_concurrent_writer_sees_one_committed_state(star, strategy):
    writer = star.cursor()
    stop = threading.Event()
    commits = []

    def scramble():
        while not stop.is_set():
            writer.execute(SCRAMBLE)
            commits.append(1)

    thread = threading.Thread(target=scramble)
    thread.start()
    try:
        models = [ilargi_db.train(star, SNAPSHOT_QUERY, "z", strategy=strategy) for _ in range(10)]
    finally:
        stop.set()
        thread.join()
    assert len(commits) > 10  # the writer did commit while training read
    for model in models:
        assert model.strategy_ == strategy
        assert_one_state(model)
