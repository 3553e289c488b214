"""normalize() on the shapes training queries take, each checked against the materialized join."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import ilargi_db
from ilargi_db import NotFactorizableError, PlanError
from tests.oracle import assert_close, materialized

SHAPES = {
    "two roles of one dimension, LEFT join with gaps and NULL keys": (
        "SELECT f.dep_delay, o.lat AS olat, d.lat AS dlat, d.alt, f.arr_delay FROM flights f "
        "LEFT JOIN airports o ON f.origin = o.faa LEFT JOIN airports d ON f.dest = d.faa"
    ),
    "composite key, snowflake with a LEFT hop": (
        "SELECT f.dep_delay, w.temp, c.gdp, f.arr_delay FROM flights f "
        "JOIN weather w ON f.origin = w.origin AND f.hour = w.hour "
        "JOIN airports a ON f.origin = a.faa LEFT JOIN countries c ON a.country_id = c.id"
    ),
    "M:N join (a tail number twice in planes)": (
        "SELECT f.dep_delay, p.year, p.seats, f.arr_delay FROM flights f JOIN planes p USING (tailnum)"
    ),
    "filters on one source and across sources": (
        "SELECT f.dep_delay, o.lat, f.arr_delay FROM flights f JOIN airports o ON f.origin = o.faa "
        "WHERE f.hour < 3 AND o.lat + f.dep_delay > 40"
    ),
    "filter that is not null-rejecting on a LEFT-joined source": (
        "SELECT f.dep_delay, d.lat, f.arr_delay FROM flights f LEFT JOIN airports d ON f.dest = d.faa "
        "WHERE d.lat IS NULL OR d.lat > 35"
    ),
    "comma join with the key in WHERE": (
        "SELECT f.dep_delay, p.seats, f.arr_delay FROM flights f, planes p WHERE f.tailnum = p.tailnum"
    ),
    "NATURAL join and RIGHT join": (
        "SELECT p.seats, f.dep_delay, w.temp, f.arr_delay FROM planes p NATURAL RIGHT JOIN flights f "
        "LEFT JOIN weather w ON f.origin = w.origin AND f.hour = w.hour"
    ),
    "FULL join: a column fed by two sources": (
        "SELECT COALESCE(f.hour, w.hour) AS hour, f.dep_delay, w.temp, f.arr_delay FROM flights f "
        "FULL JOIN weather w ON f.origin = w.origin AND f.hour = w.hour"
    ),
    "expressions, casts, DECIMAL, BOOLEAN, a constant and a NULL-aware expression": (
        "SELECT f.dep_delay * 2 + 1 AS e, f.distance, f.late, CAST(f.late AS INTEGER) AS li, 1 AS bias, "
        "COALESCE(d.lat, 5) AS dl5, d.lat IS NULL AS no_dest, f.arr_delay FROM flights f "
        "LEFT JOIN airports d ON f.dest = d.faa"
    ),
    "subquery, view and CTE sources": (
        "WITH big AS (SELECT * FROM planes WHERE seats > 100) "
        "SELECT f.dep_delay, b.seats, s.lat, v.alt, f.arr_delay FROM flights f JOIN big b USING (tailnum) "
        "JOIN (SELECT faa, lat FROM airports) s ON f.origin = s.faa LEFT JOIN high_airports v ON f.dest = v.faa"
    ),
}


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("query", SHAPES.values(), ids=SHAPES.keys())
def test_shapes_match_materialized_join(con, query, sparse):
    con.sql("CREATE VIEW high_airports AS SELECT * FROM airports WHERE alt > 15")
    query += " ORDER BY ALL"
    X, y = ilargi_db.normalize(con, query, target="arr_delay", backend="numpy", sparse=sparse)
    T, y_expected = materialized(con, query, "arr_delay")
    assert X.feature_names == [c for c in con.sql(query).columns if c != "arr_delay"]
    assert_close(X.materialize(), T)
    assert_close(y, y_expected)
    w = np.linspace(-1, 1, T.shape[1])
    assert_close(X @ w, T @ w)
    assert_close(X.T @ y_expected, T.T @ y_expected)
    assert_close(X.crossprod(), T.T @ T)
    assert_close((X + 1).crossprod(), (T + 1).T @ (T + 1))


def test_registered_arrow_pandas_and_parquet_sources(con, tmp_path):
    pd = pytest.importorskip("pandas")
    path = tmp_path / "planes.parquet"
    con.sql(f"COPY planes TO '{path}' (FORMAT parquet)")
    con.register("owners", pa.table({"tailnum": ["N1", "N2", "N3"], "fleet": [3.0, 1.0, 7.0]}))
    con.register("makers", pd.DataFrame({"year": [1999, 2004, 2015], "reliability": [0.5, 0.9, 0.7]}))
    query = (
        f"SELECT f.dep_delay, p.seats, o.fleet, m.reliability, f.arr_delay FROM flights f "
        f"JOIN read_parquet('{path}') p USING (tailnum) JOIN owners o ON f.tailnum = o.tailnum "
        f"LEFT JOIN makers m ON p.year = m.year ORDER BY ALL"
    )
    X, y = ilargi_db.normalize(con, query, target="arr_delay", backend="numpy")
    T, y_expected = materialized(con, query, "arr_delay")
    assert_close(X.materialize(), T)
    assert_close(y, y_expected)
    # The key-only join registers temporary scans; none is left behind.
    leftovers = [n for n in con.sql("SELECT view_name FROM duckdb_views()").fetchnumpy()["view_name"]]
    assert not [n for n in leftovers if str(n).startswith("__ilargi")]


def test_deleted_rows_and_filters_keep_row_identity(con):
    con.sql("DELETE FROM airports WHERE faa = 'LGA'")
    query = (
        "SELECT f.dep_delay, o.lat, o.alt, f.arr_delay FROM flights f JOIN airports o ON f.origin = o.faa "
        "WHERE o.alt < 100 ORDER BY ALL"
    )
    X, _ = ilargi_db.normalize(con, query, target="arr_delay", backend="numpy")
    T, _ = materialized(con, query, "arr_delay")
    assert_close(X.materialize(), T)


def test_null_values_are_nan_but_empty_rows_are_zero(con):
    query = (
        "SELECT f.id, w.wind FROM flights f LEFT JOIN weather w ON f.origin = w.origin AND f.hour = w.hour "
        "ORDER BY f.id"
    )
    X, y = ilargi_db.normalize(con, query, backend="numpy")
    assert y is None
    np.testing.assert_array_equal(X.materialize()[:, 1], [3.0, np.nan, 5.5, 6.0, 0.0, 3.0])


def test_unordered_query_matches_as_a_set_of_rows(con):
    query = "SELECT f.dep_delay, o.lat, f.arr_delay FROM flights f JOIN airports o ON f.origin = o.faa"
    X, y = ilargi_db.normalize(con, query, target="arr_delay", backend="numpy")
    T, y_expected = materialized(con, query, "arr_delay")
    ours = np.column_stack([X.materialize(), y])
    theirs = np.column_stack([T, y_expected])
    np.testing.assert_allclose(ours[np.lexsort(ours.T)], theirs[np.lexsort(theirs.T)])


def test_cross_source_feature_is_not_factorizable(con):
    query = "SELECT f.dep_delay * p.seats AS load, o.lat, f.arr_delay FROM flights f JOIN planes p USING (tailnum) "
    query += "JOIN airports o ON f.origin = o.faa"
    with pytest.raises(NotFactorizableError) as err:
        ilargi_db.normalize(con, query, target="arr_delay")
    assert "'load' = f.dep_delay * p.seats reads f and p" in str(err.value)
    assert err.value.features == (("load", "f.dep_delay * p.seats", ("f", "p")),)


@pytest.mark.parametrize(
    "query, target, message",
    [
        ("SELECT [f.dep_delay] AS l, f.arr_delay FROM flights f", "arr_delay", "feature 'l' has type DOUBLE\\[\\]"),
        ("SELECT f.dep_delay, [f.hour] AS h FROM flights f", "h", "target 'h' has type INTEGER\\[\\]"),
    ],
)
def test_columns_that_are_neither_numbers_nor_categories_are_refused(con, query, target, message):
    with pytest.raises(PlanError, match=message):
        ilargi_db.normalize(con, query, target=target, backend="numpy")


def test_bad_backend_name(con):
    with pytest.raises(ValueError, match="backend must be one of"):
        ilargi_db.normalize(con, "SELECT dep_delay FROM flights", backend="tpu")


def test_normalize_changes_nothing_in_the_database(con):
    before = con.sql("SELECT table_name FROM duckdb_tables() ORDER BY ALL").fetchall()
    ilargi_db.normalize(con, "SELECT f.dep_delay, o.lat FROM flights f JOIN airports o ON f.origin = o.faa")
    with pytest.raises(PlanError):
        ilargi_db.normalize(con, "SELECT nothing FROM flights")
    assert con.sql("SELECT table_name FROM duckdb_tables() ORDER BY ALL").fetchall() == before
    assert con.sql("SELECT count(*) FROM flights").fetchall() == [(6,)]


def test_connect_and_install():
    con = ilargi_db.connect()
    assert ilargi_db.install(con) is con
    with pytest.raises(ilargi_db.IlargiError, match="needs a duckdb connection"):
        ilargi_db.install("not a connection")


def test_unordered_scans_keep_row_identity():
    import duckdb

    con = duckdb.connect()
    con.sql("SET preserve_insertion_order = false")
    con.sql("CREATE TABLE f AS SELECT range AS id, range % 7 AS k, range * 1.0 AS x FROM range(300000)")
    con.sql("CREATE TABLE d AS SELECT range AS k, range * 10.0 AS z FROM range(7)")
    X, _ = ilargi_db.normalize(con, "SELECT f.x, d.z FROM f JOIN d ON f.k = d.k ORDER BY f.id", backend="numpy")
    T = X.materialize()
    np.testing.assert_array_equal(T[:, 0], np.arange(300000.0))
    np.testing.assert_array_equal(T[:, 1], (np.arange(300000) % 7) * 10.0)


def test_nonfinite_values_in_unused_rows_do_not_leak(con):
    values = "('JFK', 1.0), ('ZZZ', 'NaN'::DOUBLE), ('YYY', 'inf'::DOUBLE)"
    con.sql(f"CREATE TABLE odd AS SELECT * FROM (VALUES {values}) t(faa, v)")
    query = "SELECT f.dep_delay, o.v FROM flights f JOIN odd o ON f.origin = o.faa ORDER BY ALL"
    X, _ = ilargi_db.normalize(con, query, backend="numpy")
    T, _ = materialized(con, query)
    assert_close(X.T @ np.ones(X.shape[0]), T.sum(axis=0))
    assert_close(X.crossprod(), T.T @ T)


def test_cte_shadowing_a_table(con):
    query = (
        "WITH planes AS (SELECT * FROM planes WHERE seats > 100) "
        "SELECT f.dep_delay, planes.seats FROM flights f JOIN planes USING (tailnum) ORDER BY ALL"
    )
    X, _ = ilargi_db.normalize(con, query, backend="numpy")
    T, _ = materialized(con, query)
    assert_close(X.materialize(), T)


def test_an_m_n_join_keeps_the_fact_block_at_the_size_of_the_fact():
    """A fact whose keys match several dimension rows is scanned, not streamed through the join at its size."""
    con = ilargi_db.connect()
    con.sql("CREATE TABLE fact AS SELECT range AS id, range % 4 AS k, range * 1.0 AS x, range % 3 AS y FROM range(40)")
    con.sql("CREATE TABLE dim AS SELECT range % 4 AS k, range * 0.5 AS z FROM range(20)")  # five rows per key
    # "dim first": the first source's rows repeat once per matching fact row.
    for query, first_rows in [
        ("SELECT f.x, d.z, f.y FROM fact f JOIN dim d USING (k) ORDER BY f.id, d.z", 40),
        ("SELECT d.z, f.x, f.y FROM dim d JOIN fact f USING (k) ORDER BY f.id, d.z", 20),
    ]:
        X, y = ilargi_db.normalize(con, query, target="y", backend="numpy", sparse=False)
        assert X.shape == (200, 2)
        assert X.blocks[0].data.shape[0] == first_rows
        T, y_join = materialized(con, query, "y")
        assert_close(X.materialize(), T)
        assert_close(y, y_join)
        models = {
            s: ilargi_db.train(con, query, target="y", strategy=s, backend="numpy", alpha=0.1)
            for s in ("factorized", "materialized")
        }
        assert_close(models["factorized"].coef_, models["materialized"].coef_, rtol=1e-9)


def test_a_fact_joined_on_unique_keys_is_still_streamed():
    con = ilargi_db.connect()
    con.sql("CREATE TABLE fact AS SELECT range % 10 AS k, range * 1.0 AS x FROM range(40)")
    con.sql("CREATE TABLE dim AS SELECT range AS k, range * 0.5 AS z FROM range(5)")  # keys 5-9 have no match
    X, _ = ilargi_db.normalize(con, "SELECT f.x, d.z FROM fact f JOIN dim d USING (k)", backend="numpy", sparse=False)
    # Streamed: the fact's block holds the 20 rows the join keeps, in output order (a scan would hold all 40).
    assert X.shape == (20, 2) and X.blocks[0].data.shape[0] == 20


def test_a_join_key_that_reads_another_source_is_scanned_not_streamed(con):
    # DuckDB cannot count the right-hand key on its own (it reads f): the fact is scanned, and that is fine.
    query = (
        "SELECT f.dep_delay, o.lat, f.arr_delay FROM flights f JOIN airports o "
        "ON f.origin = o.faa || (SELECT '' FROM countries c WHERE c.id = f.id) ORDER BY f.id"
    )
    X, y = ilargi_db.normalize(con, query, target="arr_delay", backend="numpy", sparse=False)
    T, y_join = materialized(con, query, "arr_delay")
    assert_close(X.materialize(), T)
    assert_close(y, y_join)


def test_with_impute_it_is_the_matrix_train_fits(con):
    """normalize(impute=True) returns the matrix train fits: text and BOOLEAN one-hot (NULL its own category),
    numeric NULLs and empty rows as the training means; a model fitted on it is train's model."""
    from ilargi_db.pipeline import read_training_data
    from ilargi_db.plan import build_join_graph

    query = (
        "SELECT f.dep_delay, f.origin, f.late, d.lat, f.arr_delay FROM flights f LEFT JOIN airports d ON f.dest = d.faa"
    )
    X, y = ilargi_db.normalize(con, query, target="arr_delay", backend="numpy", impute=True)
    joined = read_training_data(con, build_join_graph(con, query, "arr_delay"), "materialized")  # train's join path
    assert X.feature_names == joined.X.feature_names and any(n.startswith("origin") for n in X.feature_names)
    assert_close(X.materialize(), joined.X.materialize())
    np.testing.assert_allclose(y, joined.y)
    model = ilargi_db.train(con, query, "arr_delay", strategy="factorized", backend="numpy", alpha=1.0)
    fitted = ilargi_db.LinearRegression(alpha=1.0).fit(X, y)
    np.testing.assert_allclose(fitted.coef_, model.coef_, rtol=1e-9, atol=1e-12)


def test_text_features_are_one_hot_beside_the_querys_own_numbers(con):
    query = (
        "SELECT f.dep_delay, f.origin, f.late, d.lat, f.arr_delay FROM flights f LEFT JOIN airports d ON f.dest = d.faa"
    )
    X, _ = ilargi_db.normalize(con, query, target="arr_delay", backend="numpy")
    trained = ilargi_db.normalize(con, query, target="arr_delay", backend="numpy", impute=True)[0]
    origins = [n for n in X.feature_names if n.startswith("origin")]
    assert origins and origins == [n for n in trained.feature_names if n.startswith("origin")]  # train's categories
    numbers, _ = ilargi_db.normalize(con, query.replace("f.origin, ", ""), target="arr_delay", backend="numpy")
    kept = [X.feature_names.index(n) for n in numbers.feature_names]  # dep_delay, late (0 or 1), lat (NaN, 0 if empty)
    np.testing.assert_array_equal(X.materialize()[:, kept], numbers.materialize())
    assert_close(X.materialize()[:, [X.feature_names.index(n) for n in origins]].sum(axis=1), np.ones(X.shape[0]))
