"""The SQL functions run in the caller's session (sql/test/session.test has a record per setting and function);
here what SQL alone cannot show: the session argument is untrusted, a locked configuration, TIMESTAMPTZ groups
under any time zone, and a read-only file's storage budget."""

from __future__ import annotations

import json

import duckdb
import pytest

import ilargi_db
from ilargi_db.metadata.scans import group_text


def _udf(con: duckdb.DuckDBPyConnection, name: str) -> str:
    """The UDF behind public function ``name`` on ``con`` (anyone may call it by this name)."""
    return con.sql(
        "SELECT function_name FROM duckdb_functions() WHERE function_name LIKE ? AND function_type = 'scalar'",
        params=[f"__{name}_%"],
    ).fetchall()[0][0]


@pytest.fixture
def con():
    con = ilargi_db.connect()
    con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, range * 2.0 + 1 AS y FROM range(20)")
    con.execute("SELECT ilargi_train('m', 'linear_regression', 'SELECT x, y FROM t', 'y')").fetchall()
    yield con
    con.close()


@pytest.mark.parametrize(
    "session",
    [
        "not json",
        "{}",
        # A setting that is not a session's (and one a caller may not take back): never applied.
        json.dumps({"database": "memory", "schema": "main", "schemas": [], "settings": {"lock_configuration": "true"}}),
        json.dumps({"database": "memory\x00", "schema": "main", "schemas": [], "settings": {}}),
    ],
)
def test_a_session_argument_not_written_by_the_functions_is_refused_and_changes_nothing(con, session):
    with pytest.raises(duckdb.Error, match="the caller's session must be the JSON object"):
        con.execute(f"SELECT {_udf(con, 'ilargi_drop_model')}('m', ?)", [session]).fetchall()
    assert con.sql("SELECT count(*) FROM ilargi.models").fetchall() == [(1,)]
    assert con.sql("SELECT current_setting('lock_configuration')").fetchall() == [(False,)]


def test_a_session_setting_the_locked_configuration_cannot_carry_is_refused_naming_it(con):
    con.execute("SET TimeZone = 'Asia/Kolkata'")
    con.execute("SET GLOBAL lock_configuration = true")
    with pytest.raises(duckdb.Error, match=r"setting TimeZone is 'Asia/Kolkata'.*lock_configuration"):
        con.execute("SELECT ilargi_drop_model('m')").fetchall()
    assert con.sql("SELECT count(*) FROM ilargi.models").fetchall() == [(1,)]


def test_a_locked_configuration_equal_to_the_defaults_needs_no_set(con):
    con.execute("CREATE SCHEMA s2")
    con.execute("CREATE TABLE s2.u AS SELECT range * 1.0 AS x, range * 3.0 AS y FROM range(10)")
    con.execute("SET search_path = 's2'")  # not a configuration option: allowed under the lock
    con.execute("SET GLOBAL lock_configuration = true")
    summary = json.loads(con.sql("SELECT ilargi_evaluate('m', 'SELECT x, y FROM u')").fetchall()[0][0])
    assert summary["metrics"]["rows"] == 10


@pytest.mark.parametrize("zone", ["Asia/Kolkata", "America/New_York"])
def test_a_timestamptz_group_is_found_in_any_time_zone(zone):
    con = ilargi_db.connect()
    con.execute("SET TimeZone = 'Pacific/Auckland'")
    con.execute(
        "CREATE TABLE g AS SELECT TIMESTAMPTZ '2024-01-01 00:00:00+00' + INTERVAL (range % 2) DAY AS ts, "
        "range * 1.0 AS x, (range * (range % 2 + 1))::DOUBLE AS y FROM range(40)"
    )
    con.execute(
        "SELECT ilargi_train('daily', 'linear_regression', 'SELECT x, ts, y FROM g', 'y', "
        """'{"group_by": "ts", "alpha": 0.0}')"""
    ).fetchall()
    con.execute(f"SET TimeZone = '{zone}'")
    found = con.sql("SELECT round(daily_predict(10.0, ts), 6) FROM (SELECT DISTINCT ts FROM g) ORDER BY ts")
    assert found.fetchall() == [(10.0,), (20.0,)]
    metrics = json.loads(con.sql("SELECT ilargi_evaluate('daily', 'SELECT x, ts, y FROM g')").fetchall()[0][0])
    assert metrics["metrics"]["rows_without_model"] == 0
    model = ilargi_db.load_model(con, "daily")
    assert model.groups_ == ["2024-01-01 00:00:00+00", "2024-01-02 00:00:00+00"]
    con.close()


def test_a_timestamptz_group_text_is_its_text_in_utc():
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    values = "['2024-01-01 00:00:00+00', '2024-02-29 12:34:56.5+05:30', '1969-12-31 23:59:59.123456+00', 'infinity']"
    in_utc = con.sql(f"SELECT CAST(v AS VARCHAR) FROM (SELECT unnest({values}::TIMESTAMPTZ[]) AS v)").fetchall()
    con.execute("SET TimeZone = 'America/Los_Angeles'")
    text = group_text("v", "TIMESTAMP WITH TIME ZONE")
    elsewhere = con.sql(f"SELECT {text} FROM (SELECT unnest({values}::TIMESTAMPTZ[]) AS v)").fetchall()
    assert elsewhere == in_utc


def test_a_storage_budget_on_a_file_opened_read_only_says_read_only(tmp_path):
    path = str(tmp_path / "frozen.duckdb")
    ilargi_db.connect(path).close()
    con = ilargi_db.connect(path, read_only=True)
    with pytest.raises(duckdb.Error, match="this one is open read-only") as refused:
        con.sql("SELECT ilargi_artifact_budget(NULL, '10MB')").fetchall()
    assert "in-memory" not in str(refused.value)
    con.close()


def test_a_schema_in_use_that_is_not_committed_yet_is_refused_saying_so(con):
    con.execute("BEGIN")
    con.execute("CREATE SCHEMA s3")
    con.execute("SET search_path = 's3,main'")
    with pytest.raises(duckdb.Error, match=r"memory\.s3.*not yet committed.*COMMIT it"):
        con.execute("SELECT ilargi_drop_model('m')").fetchall()
    con.execute("ROLLBACK")


def test_a_callers_macros_named_as_duckdbs_functions_do_not_change_the_session_carried():
    con = ilargi_db.connect()
    for macro in ("json_object(a, b)", "current_setting(a)", "current_schemas(a)", "current_database()"):
        con.execute(f"CREATE MACRO {macro} AS NULL")
    con.execute(
        "CREATE TABLE z AS SELECT TIMESTAMPTZ '2024-01-01 00:00:00+00' AS ts, range * 1.0 AS x, range * 2.0 AS y "
        "FROM range(10)"
    )
    con.execute("SET TimeZone = 'Asia/Kolkata'")
    found = con.sql("SELECT ilargi_train('m', 'linear_regression', 'SELECT x, y FROM z WHERE hour(ts) = 5', 'y')")
    assert json.loads(found.fetchall()[0][0])["rows"] == 10
    con.close()


def macros_named(con, name: str) -> list[tuple[str, str]]:
    return con.execute(
        "SELECT schema_name, function_name FROM duckdb_functions() WHERE function_name = ? ORDER BY 1", [name]
    ).fetchall()


def test_a_models_macros_live_in_its_databases_main_schema_whatever_the_search_path():
    # The registry holds a database's models; their macros are its main schema's, so that a search path or USE of
    # another schema neither makes a second copy on retraining nor reaches a user's function of the name there.
    con = ilargi_db.connect()
    con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, 2.0 * range + 1 AS y FROM range(20)")
    con.execute("CREATE SCHEMA x; CREATE MACRO x.m_predict(a) AS 42")
    con.execute("SELECT ilargi_train('m', 'linear_regression', 'SELECT x, y FROM main.t', 'y')")
    con.execute("SET search_path = 'x,main'")
    con.execute("SELECT ilargi_train('m', 'linear_regression', 'SELECT x, y FROM main.t', 'y')")  # version 2
    assert macros_named(con, "m_predict") == [("main", "m_predict"), ("x", "m_predict")]
    assert con.execute("SELECT x.m_predict(1.0), main.m_predict(1.0)").fetchall()[0] == pytest.approx((42, 3.0))
    con.execute("SELECT ilargi_drop_model('m')")
    assert macros_named(con, "m_predict") == [("x", "m_predict")]  # the user's, untouched
