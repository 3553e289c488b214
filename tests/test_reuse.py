"""The artifact store: reuse that never goes stale, two tiers, budgets, and what it says."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

import ilargi_db
from ilargi_db.errors import IlargiError
from ilargi_db.plan import build_join_graph, categorical_flags
from ilargi_db.reuse import artifacts, clear_artifacts, fingerprint_job, payload_files, set_artifact_budget
from ilargi_db.reuse.codec import MAGIC, pack, unpack
from ilargi_db.reuse.seal import artifact_secret
from ilargi_db.reuse.store import MEMORY, DatabaseTier
from tests.conftest import loading_artifacts_costs_nothing

STAR = "SELECT f.x, d.z, d.kind, f.y FROM f JOIN d ON f.k = d.k"


def make_star(con: duckdb.DuckDBPyConnection, n: int = 300) -> None:
    con.execute(
        f"CREATE OR REPLACE TABLE f AS SELECT range % 20 AS k, sin(range) AS x, 2.0 * range AS y FROM range({n})"
    )
    con.execute(
        "CREATE OR REPLACE TABLE d AS SELECT range AS k, cos(range) AS z, ['a', 'b', 'c'][range % 3 + 1] AS kind, "
        "range * 0.5 AS w FROM range(20)"
    )


def keys(con, query=STAR, target="y"):
    graph = build_join_graph(con, query, target)
    return fingerprint_job(con, graph, categorical_flags(graph))


def reused(model) -> str:
    return " | ".join(model.reused_)


@pytest.fixture
def star():
    con = ilargi_db.connect()
    make_star(con)
    return con


# -- fingerprints ---------------------------------------------------------------------------------


def test_a_fingerprint_follows_every_change_to_what_the_job_reads(star):
    con = star
    first = keys(con)
    assert first.reusable and first == keys(con)  # the same content, the same keys
    changes = [
        "INSERT INTO f VALUES (1, 0.5, 7.0)",
        "UPDATE f SET x = x + 1 WHERE k = 3",
        "DELETE FROM f WHERE k = 4",
        "UPDATE d SET kind = 'z' WHERE k = 2",
        "ALTER TABLE d ALTER z TYPE FLOAT",
        "CREATE OR REPLACE TABLE d AS SELECT range AS k, cos(range) AS z, 'a' AS kind FROM range(20)",
    ]
    seen = {first.stats_key}
    for change in changes:
        con.execute(change)
        now = keys(con)
        assert now.stats_key not in seen, change
        seen.add(now.stats_key)


def test_a_column_the_job_does_not_read_changes_nothing(star):
    before = keys(star)
    star.execute("UPDATE d SET w = w + 1")  # d.w is not selected
    assert keys(star) == before


def test_an_update_of_one_column_spoils_only_its_artifacts(star):
    before = keys(star)
    star.execute("UPDATE d SET z = z + 1 WHERE k = 5")
    after = keys(star)
    assert after.rows_key == before.rows_key  # the join's rows did not change
    changed = [j for j in before.column_keys if before.column_keys[j] != after.column_keys[j]]
    assert changed == [1]  # d.z alone


def test_a_table_dropped_and_created_with_the_same_content_keeps_its_keys(star):
    before = keys(star)
    make_star(star)
    assert keys(star) == before  # right to reuse: nothing it was made from differs


PARQUET_FACT = "SELECT range % 5 AS k, range * 1.0 AS x, range * 2.0 AS y FROM range(50)"
VIEW_QUERY = "SELECT f.x, d.z, f.y FROM fv AS f JOIN d ON f.k = d.k"


def parquet_star(tmp_path):
    """A view ``fv`` over a Parquet file of 50 rows (its path returned) and a table ``d`` it joins."""
    con = ilargi_db.connect()
    path = tmp_path / "f.parquet"
    con.execute(f"COPY ({PARQUET_FACT}) TO '{path}'")
    con.execute("CREATE TABLE d AS SELECT range AS k, range * 3.0 AS z FROM range(5)")
    con.execute(f"CREATE VIEW fv AS SELECT * FROM read_parquet('{path}')")
    return con, path


def test_views_files_and_dataframes_are_fingerprinted_by_content(tmp_path):
    con, path = parquet_star(tmp_path)
    query = VIEW_QUERY
    first = keys(con, query)
    con.execute(f"COPY (SELECT range % 5 AS k, range * 1.5 AS x, range * 2.0 AS y FROM range(50)) TO '{path}'")
    assert keys(con, query).stats_key != first.stats_key  # a changed file
    con.execute("CREATE OR REPLACE VIEW fv AS SELECT k, x * 2 AS x, y FROM read_parquet('" + str(path) + "')")
    assert keys(con, query).stats_key != first.stats_key  # a replaced view
    frame = pd.DataFrame({"k": [0, 1, 2], "x": [1.0, 2.0, 3.0], "y": [1.0, 0.0, 2.0]})
    con.register("frame", frame)
    framed = "SELECT f.x, d.z, f.y FROM frame AS f JOIN d ON f.k = d.k"
    before = keys(con, framed)
    con.register("frame", frame.assign(x=[1.0, 2.0, 4.0]))  # re-registered with other content
    assert keys(con, framed).stats_key != before.stats_key


def test_rows_of_zeros_added_to_a_view_or_a_file_change_its_fingerprint(tmp_path):
    con, path = parquet_star(tmp_path)
    before = keys(con, VIEW_QUERY)
    zeros = "SELECT 0 AS k, 0.0 AS x, 0.0 AS y FROM range(20)"
    con.execute(f"COPY ({PARQUET_FACT} UNION ALL {zeros}) TO '{path}'")
    assert keys(con, VIEW_QUERY).stats_key != before.stats_key


def test_what_duckdb_compares_as_equal_but_a_model_tells_apart_changes_the_fingerprint(tmp_path):
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE f AS SELECT range % 4 AS k, ['ab', 'Cd'][range % 2 + 1] AS kind, range * 1.0 AS y FROM range(40)"
    )
    con.execute("CREATE TABLE d (k BIGINT, name VARCHAR COLLATE NOCASE, z DOUBLE)")
    con.execute("INSERT INTO d VALUES (0, 'x', 0.0), (1, 'y', 1.0), (2, 'z', 2.0), (3, 'w', 3.0)")
    query = "SELECT f.kind, d.name, d.z, f.y FROM f JOIN d ON f.k = d.k"
    seen = {keys(con, query).stats_key}
    for change in [
        "UPDATE d SET name = upper(name)",  # case only, under the column's NOCASE collation
        "CREATE TABLE d2 (k BIGINT, name VARCHAR, z DOUBLE); INSERT INTO d2 SELECT * FROM d ORDER BY k; "
        "DROP TABLE d; ALTER TABLE d2 RENAME TO d",  # the same rows, without the collation
        "SET default_collation = 'nocase'",
        "UPDATE f SET kind = upper(kind) WHERE kind = 'ab'",  # case only, under the default collation
    ]:
        con.execute(change)
        now = keys(con, query).stats_key
        assert now not in seen, change
        seen.add(now)


def test_a_negative_zero_written_into_a_file_changes_its_fingerprint(tmp_path):
    con = ilargi_db.connect()
    path = tmp_path / "f.parquet"
    con.execute("CREATE TABLE d AS SELECT range AS k, range * 3.0 AS z FROM range(5)")
    query = f"SELECT 1.0 / f.x AS inverse, d.z, f.y FROM read_parquet('{path}') AS f JOIN d ON f.k = d.k"
    write = "COPY (SELECT range % 5 AS k, {zero}::DOUBLE AS x, range * 2.0 AS y FROM range(50)) TO '" + str(path) + "'"
    con.execute(write.format(zero="'0.0'"))
    before = keys(con, query)
    con.execute(write.format(zero="'-0.0'"))  # 1.0 / x is now -inf, not inf
    assert keys(con, query).stats_key != before.stats_key


@pytest.mark.parametrize(
    "query", ["SELECT COLUMNS('^x$'), d.z, f.y FROM f JOIN d USING (k)", "SELECT #2, d.z, f.y FROM f JOIN d USING (k)"]
)
def test_columns_read_by_pattern_or_position_are_fingerprinted(star, query):
    before = keys(star, query)
    assert before.reusable
    star.execute("UPDATE f SET x = x + 1 WHERE k = 3")
    assert keys(star, query).stats_key != before.stats_key


@pytest.mark.parametrize(
    "feature, why",
    [
        ("f.x + random()", "random"),
        ("f.x + epoch(now())", "now"),
        ("f.x + day(current_date)", "CURRENT_DATE"),
        ("f.x + epoch(CURRENT_TIMESTAMP)", "CURRENT_TIMESTAMP"),
        ("f.x + epoch(age(TIMESTAMP '2020-01-01' + to_days(f.k::INTEGER)))", "age"),
        ("(SELECT max(z) FROM d)", "subquery"),
        ("plus_one(f.x)", "plus_one"),
    ],
)
def test_a_job_whose_expressions_are_not_pure_functions_of_the_data_is_not_reused(star, feature, why):
    star.execute("CREATE MACRO plus_one(v) AS v + 1")
    query = f"SELECT {feature} AS a, d.z, f.y FROM f JOIN d ON f.k = d.k"
    found = keys(star, query)
    assert not found.reusable and why in found.why_not
    model = ilargi_db.train(star, query, "y", backend="numpy")
    assert any(line.startswith("no reuse") and why in line for line in model.reused_)


@pytest.mark.parametrize(
    "feature",
    [
        "f.x - 1",
        "year(DATE '2020-01-01' + f.k::INTEGER)",
        "date_diff('day', TIMESTAMPTZ '2020-01-01 00:00+00', TIMESTAMPTZ '2020-03-01 00:00+00' + to_days(f.k::INT))",
        "month(timezone('UTC', TIMESTAMP '2020-01-01' + to_hours(f.k::INTEGER)))",
        "strftime(TIMESTAMPTZ '2020-01-01 00:00+00' + to_days(f.k::INTEGER), '%d')::INTEGER",
    ],
)
def test_arithmetic_and_dates_are_pure_functions_of_the_data_and_are_reused(star, feature):
    # Overloads on time-zone-aware values depend on the session's TimeZone and Calendar, both in every key.
    query = f"SELECT {feature} AS a, d.z, f.y FROM f JOIN d ON f.k = d.k"
    assert keys(star, query).reusable, keys(star, query).why_not
    run = dict(backend="numpy", strategy="factorized")
    ilargi_db.train(star, query, "y", **run)
    assert "the encoded matrix" in reused(ilargi_db.train(star, query, "y", **run))


def test_a_time_zone_change_spoils_what_depends_on_it(star):
    hour = "hour(TIMESTAMPTZ '2020-01-01 00:00+00' + to_hours(f.k::INTEGER))"
    query = f"SELECT {hour} AS h, d.z, f.y FROM f JOIN d USING (k)"
    star.execute("SET TimeZone = 'UTC'")
    utc = keys(star, query)
    star.execute("SET TimeZone = 'Asia/Kolkata'")
    assert keys(star, query).rows_key != utc.rows_key


# -- reuse in process ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "algorithm, params",
    [
        ("linear_regression", {"alpha": 0.5}),
        ("logistic_regression", {"C": 2.0}),
        ("kmeans", {"n_clusters": 3, "random_state": 0}),
        ("gnmf", {"n_components": 2, "random_state": 0, "max_iter": 20}),
    ],
)
def test_a_reused_job_gives_the_cold_jobs_model(star, algorithm, params):
    query = STAR if algorithm != "logistic_regression" else STAR.replace("f.y", "f.y > 300 AS late")
    target = {"linear_regression": "y", "logistic_regression": "late"}.get(algorithm)
    query = query if target else query.replace(", f.y", "")
    if algorithm == "gnmf":  # non-negative data
        query = query.replace("f.x, d.z", "abs(f.x) AS x, d.w")
    run = dict(algorithm=algorithm, backend="numpy", strategy="factorized", **params)
    ilargi_db.train(star, query, target, **run)  # leaves its artifacts
    warm = ilargi_db.train(star, query, target, **run)
    cold = ilargi_db.train(star, query, target, reuse=False, **run)
    assert "the encoded matrix" in reused(warm) and cold.reused_ == ["no reuse: reuse is off for this call"]
    for name in ("coef_", "cluster_centers_", "components_"):
        if hasattr(cold.estimator_, name):
            np.testing.assert_allclose(getattr(warm, name), getattr(cold, name), rtol=1e-12, atol=1e-12)


def test_another_hyperparameter_reuses_the_gram_matrix(star, monkeypatch):
    from ilargi_db.linalg import CROSSPROD, NormalizedMatrix

    run = dict(backend="numpy", strategy="factorized", solver="normal")
    ilargi_db.train(star, STAR, "y", alpha=1.0, **run)
    computed = []  # each X^T X asked of a matrix that has not memoized it: computed, not reused
    real = NormalizedMatrix.crossprod

    def counted(self, weights=None):
        if weights is None and CROSSPROD not in self.memoized_sums():
            computed.append(CROSSPROD)
        return real(self, weights)

    monkeypatch.setattr(NormalizedMatrix, "crossprod", counted)
    warm = ilargi_db.train(star, STAR, "y", alpha=3.0, **run)
    assert computed == [] and "the encoded matrix" in reused(warm)  # X^T X memoized on the stored matrix
    cold = ilargi_db.train(star, STAR, "y", alpha=3.0, reuse=False, **run)
    assert computed == [CROSSPROD]
    np.testing.assert_allclose(warm.coef_, cold.coef_, rtol=1e-10)


def test_a_new_feature_reads_only_its_column(star, monkeypatch):
    ilargi_db.train(star, STAR, "y", backend="numpy", strategy="factorized")
    wider = STAR.replace("d.kind,", "d.kind, d.w,")
    from ilargi_db.reuse import rowid_reads

    read = []
    real = rowid_reads.fetch_columns
    monkeypatch.setattr(rowid_reads, "fetch_columns", lambda *a: read.append((a[2], a[3])) or real(*a))
    model = ilargi_db.train(star, wider, "y", backend="numpy", strategy="factorized")
    assert read == [("d", [3])]  # d.w alone, by rowid
    assert "the key-only join" in reused(model) and "feature 'x'" in reused(model)
    cold = ilargi_db.train(star, wider, "y", backend="numpy", strategy="factorized", reuse=False)
    np.testing.assert_allclose(model.coef_, cold.coef_, rtol=1e-10, atol=1e-12)


def test_an_updated_dimension_column_is_read_again_and_the_rest_reused(star):
    ilargi_db.train(star, STAR, "y", backend="numpy", strategy="factorized")
    star.execute("UPDATE d SET z = z * 10 WHERE k < 3")
    model = ilargi_db.train(star, STAR, "y", backend="numpy", strategy="factorized")
    assert "the key-only join" in reused(model) and "feature 'z'" not in reused(model)
    cold = ilargi_db.train(star, STAR, "y", backend="numpy", strategy="factorized", reuse=False)
    np.testing.assert_allclose(model.coef_, cold.coef_, rtol=1e-10, atol=1e-12)


def test_reuse_false_keeps_nothing():
    con = ilargi_db.connect()
    make_star(con, n=123)  # content no other test made
    clear_artifacts()
    ilargi_db.train(con, STAR, "y", backend="numpy", reuse=False)
    assert artifacts(con) == []
    with pytest.raises(IlargiError, match="reuse must be True, False or .memory."):
        ilargi_db.train(con, STAR, "y", reuse="yes")


def test_explain_says_what_would_be_reused_and_prices_it():
    star = ilargi_db.connect()
    make_star(star, n=457)  # content no other test stores
    before = ilargi_db.explain(star, STAR, "y", backend="numpy")
    assert not any(r.startswith("reuses") for r in before.reasons)
    ilargi_db.train(star, STAR, "y", backend="numpy", strategy="factorized")
    after = ilargi_db.explain(star, STAR, "y", backend="numpy")
    assert any(r.startswith("reuses the encoded matrix") for r in after.reasons)
    assert after.predicted_seconds["factorized"] <= before.predicted_seconds["factorized"]
    cold = ilargi_db.explain(star, STAR, "y", backend="numpy", reuse=False)
    assert not any(r.startswith("reuses") for r in cold.reasons)


# -- the in-process tier's budget --------------------------------------------------------------


def test_the_memory_tier_keeps_to_its_budget_by_utility():
    from ilargi_db.reuse.store import Artifact, MemoryTier

    tier = MemoryTier(budget=1000)
    assert tier.put(Artifact("a", "column", "a", np.zeros(50), 400, compute_seconds=1.0))
    assert tier.put(Artifact("b", "column", "b", np.zeros(50), 400, compute_seconds=0.1))
    # c is worth more per byte than b: b leaves
    assert tier.put(Artifact("c", "column", "c", np.zeros(50), 400, compute_seconds=0.5))
    assert set(tier.items) == {"a", "c"}
    # d is worth less than everything kept: refused
    assert not tier.put(Artifact("d", "column", "d", np.zeros(50), 400, compute_seconds=0.01))
    assert not tier.put(Artifact("e", "column", "e", np.zeros(5000), 4000, compute_seconds=9.0))  # over the budget
    tier.budget = 500
    tier.shrink()
    assert set(tier.items) == {"a"}


def test_budgets_are_checked_and_set():
    old = MEMORY.budget
    try:
        assert set_artifact_budget(memory="2MB")["memory"] == 2_000_000
        with pytest.raises(IlargiError, match="a size such as '512MB'"):
            set_artifact_budget(memory="lots")
        with pytest.raises(IlargiError, match="database file"):
            set_artifact_budget(ilargi_db.connect(), storage="1GB")
    finally:
        MEMORY.budget = old


def test_payloads_never_unpickle():
    value = {"a": np.arange(3), "text": __import__("pyarrow").array(["x", None]), "n": 3, "fill": None}
    back = unpack(pack(value))
    assert back["n"] == 3 and back["fill"] is None and back["text"].to_pylist() == ["x", None]
    np.testing.assert_array_equal(back["a"], np.arange(3))
    with pytest.raises(TypeError, match="not plain data"):
        pack({"evil": np.array([object()], dtype=object)})
    header = json.dumps({"arrays": [["evil", "|O", [1], 0, "C"]], "arrow": [], "plain": {}}).encode()
    forged = MAGIC + len(header).to_bytes(8, "little") + header + b"\0" * 64
    with pytest.raises(ValueError, match="dtype object"):
        unpack(forged)


def test_a_payload_member_outside_the_payload_is_refused():
    header = json.dumps({"arrays": [["big", "<f8", [10**9], 0, "C"]], "arrow": [], "plain": {}}).encode()
    forged = MAGIC + len(header).to_bytes(8, "little") + header + b"\0" * 64
    with pytest.raises(ValueError, match="outside the payload"):
        unpack(forged)


# -- the database tier ---------------------------------------------------------------------------


FILE_RUN = dict(backend="numpy", strategy="factorized", solver="normal")


def test_only_what_loads_faster_than_it_computes_is_stored(tmp_path):
    con = ilargi_db.connect(str(tmp_path / "store.duckdb"))
    make_star(con, n=20_000)
    ilargi_db.train(con, STAR, "y", **FILE_RUN)
    stored = con.execute("SELECT kind, nbytes, compute_seconds FROM ilargi.artifacts").fetchall()
    # The read's artifacts (the key-only join and its columns) all together or none: one serves nothing alone.
    read = [(nbytes, seconds) for kind, nbytes, seconds in stored if kind in ("rows", "column")]
    others = [(nbytes, seconds) for kind, nbytes, seconds in stored if kind not in ("rows", "column")]
    assert all(DatabaseTier.worth_loading(nbytes, seconds) for nbytes, seconds in others)
    if read:
        assert DatabaseTier.worth_loading(sum(n for n, _ in read), sum(s for _, s in read))
        assert len(read) == 1 + 3  # the key-only join and every feature (x, z, kind)


def store_everything(path: str, n: int, patch: pytest.MonkeyPatch) -> duckdb.DuckDBPyConnection:
    """A file database whose store holds every artifact of one training, as a slower machine would store them."""
    clear_artifacts()  # nothing in this process's tier: the training makes every artifact
    con = ilargi_db.connect(path)
    make_star(con, n=n)
    loading_artifacts_costs_nothing(patch)
    ilargi_db.train(con, STAR, "y", **FILE_RUN)
    stored = con.execute("SELECT kind FROM ilargi.artifacts").fetchall()
    assert {"stats", "rows", "column", "gram"} <= {kind for (kind,) in stored}
    return con


def test_a_new_process_reuses_what_the_database_stores(tmp_path, monkeypatch):
    path = str(tmp_path / "store.duckdb")
    with monkeypatch.context() as patched:
        store_everything(path, 20_000, patched).close()
        clear_artifacts()  # as a new process finds it
        con = ilargi_db.connect(path)
        model = ilargi_db.train(con, STAR, "y", alpha=2.0, **FILE_RUN)
    assert "the job's statistics (stats, from database" in reused(model)
    assert "the key-only join (rows, from database" in reused(model)
    cold = ilargi_db.train(con, STAR, "y", alpha=2.0, reuse=False, **FILE_RUN)
    np.testing.assert_allclose(model.coef_, cold.coef_, rtol=1e-10)


def test_sql_lists_the_artifacts_of_both_tiers_and_clears_the_databases(tmp_path, monkeypatch):
    with monkeypatch.context() as patched:
        con = store_everything(str(tmp_path / "store.duckdb"), 2_000, patched)
    listed = json.loads(con.sql("SELECT ilargi_artifacts()").fetchall()[0][0])
    assert {a["tier"] for a in listed} == {"memory", "database"}
    now = con.execute("SELECT count(*) FROM ilargi.artifacts").fetchall()[0][0]
    assert json.loads(con.sql("SELECT ilargi_clear_artifacts()").fetchall()[0][0])["database"] == now
    assert con.execute("SELECT count(*) FROM ilargi.artifacts").fetchall() == [(0,)]


def test_the_storage_budget_holds(tmp_path):
    path = str(tmp_path / "budget.duckdb")
    con = ilargi_db.connect(path)
    make_star(con, n=5_000)
    set_artifact_budget(con, storage="20KB")
    ilargi_db.train(con, STAR, "y", backend="numpy", strategy="factorized")
    total = con.execute("SELECT coalesce(sum(nbytes), 0) FROM ilargi.artifacts").fetchall()[0][0]
    assert 0 < total <= 20_000


def test_reads_never_write_artifacts_to_the_database(tmp_path):
    path = str(tmp_path / "ro.duckdb")
    con = duckdb.connect(path)
    make_star(con)
    con.close()
    ro = duckdb.connect(path, read_only=True)
    model = ilargi_db.train(ro, STAR, "y", backend="numpy")  # a read-only database: memory only
    assert model.n_rows_ == 300 and not DatabaseTier.exists(ro)
    ro.close()
    con = duckdb.connect(path)
    con.execute("BEGIN")
    ilargi_db.train(con, STAR, "y", backend="numpy", alpha=4.0)  # the caller's transaction: not ours to commit
    con.execute("ROLLBACK")
    ilargi_db.explain(con, STAR, "y", backend="numpy")
    ilargi_db.predict(con, model, STAR)
    assert not DatabaseTier.exists(con)


# -- warm starts --------------------------------------------------------------------------------


def test_logistic_regression_starts_from_the_best_earlier_model_on_the_same_rows():
    con = ilargi_db.connect()
    make_star(con, n=2_000)
    label = STAR.replace("f.y FROM", "f.y > 2000 AS late FROM")
    run = dict(algorithm="logistic_regression", backend="numpy", strategy="factorized", tol=1e-8, max_iter=500)
    first = ilargi_db.train(con, label, "late", C=1.0, **run)
    assert not any("warm start" in line for line in first.reused_)
    warm = ilargi_db.train(con, label, "late", C=1.5, **run)
    cold = ilargi_db.train(con, label, "late", C=1.5, reuse=False, **run)
    assert any("warm start from an earlier logistic_regression" in line for line in warm.reused_)
    assert warm.n_iter_ < cold.n_iter_
    np.testing.assert_allclose(warm.coef_, cold.coef_, rtol=1e-4, atol=1e-6)  # the same optimum
    # A job with one more column starts from it too: zeros for the new column.
    wider = label.replace("d.kind,", "d.kind, d.w,")
    more = ilargi_db.train(con, wider, "late", C=1.5, **run)
    assert any("warm start" in line and "columns)" in line and " of these " in line for line in more.reused_)
    again = ilargi_db.train(con, wider, "late", C=1.5, reuse=False, **run)
    np.testing.assert_allclose(more.coef_, again.coef_, rtol=1e-4, atol=1e-6)


def test_conjugate_gradients_start_from_an_earlier_model():
    con = ilargi_db.connect()
    make_star(con, n=1_500)
    run = dict(backend="numpy", strategy="factorized", solver="cg", tol=1e-10, max_iter=1_000)
    ilargi_db.train(con, STAR, "y", alpha=1.0, **run)
    warm = ilargi_db.train(con, STAR, "y", alpha=1.1, **run)
    cold = ilargi_db.train(con, STAR, "y", alpha=1.1, reuse=False, **run)
    assert any("warm start" in line for line in warm.reused_) and warm.n_iter_ <= cold.n_iter_
    np.testing.assert_allclose(warm.coef_, cold.coef_, rtol=1e-6)


SEPARABLE = STAR.replace("f.y FROM", "f.x > d.z AS late FROM")  # large coefficients: a long way from zeros
AFTER = [  # (job, its parameters, an earlier job's different parameters: a start far from the optimum)
    ("logistic", dict(algorithm="logistic_regression"), dict(C=1.0), dict(C=0.01)),
    ("cg", dict(solver="cg"), dict(alpha=1.0), dict(alpha=2.0)),
]
LOSS = {"logistic": ("log_loss", dict(abs=1e-4)), "cg": ("rmse", dict(rel=1e-6))}  # what each default tol leaves


@pytest.mark.parametrize("kind, run, params, earlier", AFTER, ids=[a[0] for a in AFTER])
@pytest.mark.parametrize("tol", [0.1, 0.5])
def test_a_loose_tol_never_warm_starts_so_the_model_is_the_cold_one(kind, run, params, earlier, tol):
    con = ilargi_db.connect()
    make_star(con, n=2_000)
    query, target = (SEPARABLE, "late") if kind == "logistic" else (STAR, "y")
    run = dict(run, backend="numpy", strategy="factorized", tol=tol)
    clear_artifacts()  # as a new process finds it: no earlier model but the one below
    ilargi_db.train(con, query, target, **earlier, **run)
    after = ilargi_db.train(con, query, target, **params, **run)
    cold = ilargi_db.train(con, query, target, **params, reuse=False, **run)
    assert not any("warm start" in line for line in after.reused_)
    np.testing.assert_array_equal(after.coef_, cold.coef_)  # what trained before changes nothing
    assert after.intercept_ == cold.intercept_


@pytest.mark.parametrize("kind, run, params, earlier", AFTER, ids=[a[0] for a in AFTER])
def test_at_the_default_tol_a_warm_start_is_faster_and_reaches_the_cold_optimum(kind, run, params, earlier):
    con = ilargi_db.connect()
    make_star(con, n=2_000)
    query, target = (SEPARABLE, "late") if kind == "logistic" else (STAR, "y")
    run = dict(run, backend="numpy", strategy="factorized")
    clear_artifacts()
    ilargi_db.train(con, query, target, **earlier, **run)
    warm = ilargi_db.train(con, query, target, **params, **run)
    cold = ilargi_db.train(con, query, target, **params, reuse=False, **run)
    assert any("warm start" in line for line in warm.reused_)
    assert warm.n_iter_ < cold.n_iter_
    # The same optimum, to within what the default tol leaves: the loss to the tol, the coefficients to 1%.
    loss, within = LOSS[kind]
    assert warm.training_metrics_[loss] == pytest.approx(cold.training_metrics_[loss], **within)
    np.testing.assert_allclose(warm.coef_, cold.coef_, rtol=1e-2, atol=1e-2 * np.abs(cold.coef_).max())


def test_k_means_never_warm_starts(star):
    run = dict(algorithm="kmeans", n_clusters=3, random_state=0, backend="numpy", strategy="factorized")
    query = STAR.replace(", f.y", "")
    ilargi_db.train(star, query, **run)
    again = ilargi_db.train(star, query, **run)
    assert not any("warm start" in line for line in again.reused_)  # not convex: a start would change it


def test_a_warm_start_of_the_wrong_width_is_refused():
    from ilargi_db.models import LinearRegression, LogisticRegression

    X, y = np.random.default_rng(0).normal(size=(30, 3)), np.arange(30) % 2
    with pytest.raises(ValueError, match="coef_init must hold 3 finite numbers"):
        LogisticRegression().fit(X, y, coef_init=np.zeros(2))
    with pytest.raises(ValueError, match="coef_init must hold 3 finite numbers"):
        LinearRegression(solver="cg").fit(X, y * 1.0, coef_init=[0.0, np.nan, 1.0])
    with pytest.warns(UserWarning, match="stopped at max_iter=2"):
        zero_tol = LinearRegression(solver="cg", tol=0.0, max_iter=2).fit(X, y * 1.0)
    assert zero_tol.n_iter_ == 2 and np.abs(zero_tol.coef_).sum() > 0  # tol=0 iterates, as max_iter says


# -- what a key, a payload or the caller's transaction could get wrong (each reproduced first) -----------


def test_features_of_a_view_in_another_row_order_never_pair_with_the_stored_join():
    con = ilargi_db.connect()
    con.execute("CREATE TABLE f AS SELECT range % 50 AS k, sin(range) AS x, 0.0 AS y FROM range(2000)")
    con.execute("CREATE TABLE d AS SELECT range AS k, cos(range * 1.3) AS z FROM range(50)")
    con.execute("UPDATE f SET y = 2 * x + 5 * (SELECT z FROM d WHERE d.k = f.k)")
    con.execute("CREATE VIEW dv AS SELECT k, z FROM d ORDER BY random()")  # another row order on every read
    first = "SELECT f.x, dv.z, f.y FROM f JOIN dv ON f.k = dv.k"
    second = "SELECT f.x, dv.z * 2 AS z2, f.y FROM f JOIN dv ON f.k = dv.k"  # the same rows key
    run = dict(backend="numpy", strategy="factorized")
    for _ in range(3):
        ilargi_db.train(con, first, "y", **run)
        ilargi_db.train(con, second, "y", **run)
        again = ilargi_db.train(con, first, "y", impute=False, **run)  # not the kept matrix: rows and columns
        cold = ilargi_db.train(con, first, "y", impute=False, reuse=False, **run)
        np.testing.assert_allclose(again.coef_, cold.coef_, rtol=1e-9)


@pytest.mark.parametrize(
    "setting", ["SET TimeZone = 'Asia/Kolkata'", "SET default_collation = 'nocase'", "SET integer_division = true"]
)
def test_settings_that_change_expressions_are_part_of_the_key(setting):
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE t AS SELECT range * 1.0 AS x, (range % 7) AS i, ['a', 'A', 'b'][range % 3 + 1] AS s, "
        "TIMESTAMPTZ '2024-01-01 20:00:00+00' + to_hours(range % 9) AS ts, 2.0 * range AS y FROM range(200)"
    )
    query = "SELECT t.x, hour(t.ts) AS h, t.i / 2 AS half, t.y FROM t WHERE t.s = 'a'"
    run = dict(backend="numpy", strategy="factorized")
    ilargi_db.train(con, query, "y", **run)
    con.execute(setting)
    reused = ilargi_db.train(con, query, "y", **run)
    cold = ilargi_db.train(con, query, "y", reuse=False, **run)
    assert reused.n_rows_ == cold.n_rows_
    np.testing.assert_allclose(reused.coef_, cold.coef_, rtol=1e-9, atol=1e-12)


def test_a_macro_named_like_a_built_in_is_not_taken_for_it(star):
    query = "SELECT abs(f.x) AS a, d.z, f.y FROM f JOIN d ON f.k = d.k"
    ilargi_db.train(star, query, "y", backend="numpy", strategy="factorized")
    star.execute("CREATE OR REPLACE TEMP MACRO abs(v) AS v * v")
    model = ilargi_db.train(star, query, "y", backend="numpy", strategy="factorized")
    assert any("abs() is defined in this database" in line for line in model.reused_)


def test_two_queries_naming_the_same_columns_differently_keep_their_names(star):
    run = dict(backend="numpy", strategy="factorized")
    ilargi_db.train(star, "SELECT f.x AS a, d.z AS b, f.y FROM f JOIN d ON f.k = d.k", "y", **run)
    renamed = ilargi_db.train(star, "SELECT f.x AS p, d.z AS q, f.y FROM f JOIN d ON f.k = d.k", "y", **run)
    assert list(renamed.feature_names_in_) == ["p", "q"]
    assert len(ilargi_db.predict(star, renamed, "SELECT f.x AS p, d.z AS q FROM f JOIN d ON f.k = d.k")) == 300


def stored_files(con) -> list[Path]:
    """The payload files of ``con``'s database tier, as ilargi_artifacts() lists them."""
    return [Path(a["location"]) for a in artifacts(con) if a["tier"] == "database"]


@pytest.mark.parametrize("damage", ["flip", "truncate", "grow", "garbage", "swap", "missing"])
def test_a_payload_file_damaged_cut_short_swapped_or_gone_is_a_miss(tmp_path, damage, monkeypatch):
    with monkeypatch.context() as patched:  # stored and loaded, however fast this machine recomputes it
        con = store_everything(str(tmp_path / f"{damage}.duckdb"), 20_000, patched)
        files = stored_files(con)
        assert len(files) >= 4 and all(f.is_file() for f in files)
        contents = [f.read_bytes() for f in files]
        for i, path in enumerate(files):
            blob = bytearray(contents[i])
            if damage == "flip":
                blob[len(blob) // 2] ^= 0xFF
            elif damage == "truncate":
                blob = blob[: len(blob) // 2]
            elif damage == "grow":
                blob += b"\0" * 64
            elif damage == "garbage":
                blob = bytearray(b"garbage")
            elif damage == "swap":  # another artifact's whole, sealed file under this one's name
                blob = bytearray(contents[(i + 1) % len(files)])
            if damage == "missing":
                path.unlink()
            else:
                path.write_bytes(bytes(blob))
        clear_artifacts()
        model = ilargi_db.train(con, STAR, "y", alpha=2.0, **FILE_RUN)
    assert "from database" not in reused(model)  # unreadable: recomputed, no error
    cold = ilargi_db.train(con, STAR, "y", alpha=2.0, reuse=False, **FILE_RUN)
    np.testing.assert_allclose(model.coef_, cold.coef_, rtol=1e-10)


@pytest.mark.parametrize("planted", ["file symlink", "directory symlink", "others may write", "fifo"])
def test_what_someone_plants_beside_the_database_is_never_followed(tmp_path, planted, monkeypatch):
    path = str(tmp_path / "planted.duckdb")
    with monkeypatch.context() as patched:
        con = store_everything(path, 5_000, patched)
        directory = Path(DatabaseTier.location(con))
        files = stored_files(con)
        if planted == "file symlink":  # each file moved away, a symlink to it in its place
            for f in files:
                moved = tmp_path / f"moved-{f.name}"
                f.rename(moved)
                f.symlink_to(moved)
        elif planted == "directory symlink":
            directory.rename(tmp_path / "moved")
            directory.symlink_to(tmp_path / "moved")
        elif planted == "others may write":
            directory.chmod(0o777)
        else:
            for f in files:
                f.unlink()
                os.mkfifo(f)
        clear_artifacts()
        model = ilargi_db.train(con, STAR, "y", alpha=2.0, **FILE_RUN)  # never blocks on a FIFO, never fails
    assert "from database" not in reused(model)
    if planted in ("directory symlink", "others may write"):  # and says why nothing is kept beside it
        assert any("it is not a directory of this user's" in w for w in model.warnings_)
    if planted != "fifo":
        assert not any(f.name.startswith(".writing-") for f in directory.iterdir())


@pytest.mark.parametrize("bad", [10**6, -5, 2**40])
def test_a_stored_indicator_out_of_range_is_a_miss(tmp_path, bad, monkeypatch):
    clear_artifacts()  # the process's tier may hold this job already: then nothing would be stored
    con = ilargi_db.connect(str(tmp_path / "indicator.duckdb"))
    make_star(con, n=2_000)
    run = dict(backend="numpy", strategy="factorized", solver="normal")
    with monkeypatch.context() as patched:  # store everything, however fast this machine recomputes it
        loading_artifacts_costs_nothing(patched)
        ilargi_db.train(con, STAR, "y", **run)
        rows = con.execute("SELECT key, payload, nbytes FROM ilargi.artifacts_store WHERE kind = 'rows'").fetchall()
        assert rows
        secret = artifact_secret()
        with payload_files.opened_directory(str(tmp_path / "indicator.duckdb")) as directory:
            for key, payload, nbytes in rows:  # sealed as ours, yet one indicator points nowhere: decoding checks
                value = payload_files.read(directory, secret, key, "rows", payload, nbytes)
                value["indicator/d"] = np.full_like(value["indicator/d"], bad)
                sealed = payload_files.write(directory, secret, key, "rows", value)
                size = (Path(DatabaseTier.location(con)) / payload_files.file_name(sealed)).stat().st_size
                con.execute(
                    "UPDATE ilargi.artifacts_store SET payload = ?, nbytes = ? WHERE key = ?", [sealed, size, key]
                )
        clear_artifacts()
        model = ilargi_db.train(con, STAR, "y", alpha=2.0, **run)
    cold = ilargi_db.train(con, STAR, "y", alpha=2.0, reuse=False, **run)
    np.testing.assert_allclose(model.coef_, cold.coef_, rtol=1e-10)


def test_training_inside_the_callers_transaction_on_a_file_leaves_it_intact(tmp_path):
    con = ilargi_db.connect(str(tmp_path / "txn.duckdb"))
    make_star(con)
    con.execute("BEGIN")
    con.execute("INSERT INTO f VALUES (1, 0.5, 7.0)")
    assert ilargi_db.train(con, STAR, "y", backend="numpy").n_rows_ == 301
    assert con.execute("SELECT count(*) FROM f").fetchall() == [(301,)]  # still the caller's, still open
    con.execute("COMMIT")
    assert con.execute("SELECT count(*) FROM f").fetchall() == [(301,)]


def test_a_new_feature_is_read_on_the_jobs_rows_only(star):
    star.execute(
        "CREATE OR REPLACE TABLE g AS SELECT range % 20 AS k, sin(range) AS x, "
        "CASE WHEN range % 5 = 0 THEN 'n/a' ELSE (range * 0.5)::VARCHAR END AS s, 2.0 * range AS y "
        "FROM range(300)"
    )
    base = "SELECT g.x, d.z, g.y FROM g JOIN d ON g.k = d.k WHERE g.s <> 'n/a'"
    wider = "SELECT g.x, CAST(g.s AS DOUBLE) AS sv, d.z, g.y FROM g JOIN d ON g.k = d.k WHERE g.s <> 'n/a'"
    run = dict(backend="numpy", strategy="factorized")
    ilargi_db.train(star, base, "y", **run)
    model = ilargi_db.train(star, wider, "y", **run)  # the cast fails on the rows the filter leaves out
    cold = ilargi_db.train(star, wider, "y", reuse=False, **run)
    np.testing.assert_allclose(model.coef_, cold.coef_, rtol=1e-9, atol=1e-12)


def test_a_warm_start_never_changes_a_fit_stopped_by_max_iter():
    con = ilargi_db.connect()
    make_star(con, n=2_000)
    label = STAR.replace("f.y FROM", "f.y > 2000 AS late FROM")
    run = dict(algorithm="logistic_regression", backend="numpy", strategy="factorized")
    ilargi_db.train(con, label, "late", C=1.0, **run)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # both stop at max_iter=2
        warm = ilargi_db.train(con, label, "late", C=1.0, max_iter=2, **run)
        cold = ilargi_db.train(con, label, "late", C=1.0, max_iter=2, reuse=False, **run)
    np.testing.assert_allclose(warm.coef_, cold.coef_, rtol=1e-12)
    assert not any("warm start" in line for line in warm.reused_)
    unpenalized = ilargi_db.train(con, label, "late", penalty=None, **run)
    assert not any("warm start" in line for line in unpenalized.reused_)  # no single optimum to share


def test_the_store_never_imports_the_cost_model():
    """The store reports what it holds (reuse/holdings.py); pricing it is the cost model's, which imports reuse."""
    import ast
    from pathlib import Path

    import ilargi_db.reuse

    for path in Path(ilargi_db.reuse.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            assert not any(name.startswith("ilargi_db.cost_model") for name in names), path.name


def test_a_read_assembled_from_its_artifacts_is_laid_out_as_a_cold_read(star):
    """Column-major blocks, as the kernels read them (a row-major block is copied on every pass)."""
    from ilargi_db.metadata import extract_metadata
    from ilargi_db.reuse.read_artifacts import assemble, split

    graph = build_join_graph(star, "SELECT f.x, d.z, d.w, f.y FROM f JOIN d ON f.k = d.k", "y")
    categorical = frozenset(j for j, c in enumerate(categorical_flags(graph)) if c)
    cold = extract_metadata(star, graph, categorical=categorical)
    rows, columns = split(graph, categorical, cold)
    stored = {j: unpack(pack(c)) for j, c in columns.items()}  # through the codec, as from a file
    back = assemble(graph, categorical, unpack(pack(rows)), stored)
    assert len(back.blocks) == len(cold.blocks)
    for got, want in zip(back.blocks, cold.blocks):
        np.testing.assert_array_equal(got.data, want.data)
        assert got.data.flags.f_contiguous == want.data.flags.f_contiguous


def test_a_relative_file_is_read_again_under_another_file_search_path(tmp_path):
    # file_search_path decides which file 'part.parquet' is: a read under one is never reused under another.
    for name, scale in (("one", 1.0), ("two", 3.0)):
        (tmp_path / name).mkdir()
        duckdb.sql(
            f"COPY (SELECT range * 1.0 AS x, {scale} * range AS y FROM range(50)) TO '{tmp_path / name}/part.parquet'"
        )
    con = ilargi_db.connect()
    query = "SELECT p.x, p.y FROM 'part.parquet' p"
    run = dict(backend="numpy", strategy="factorized")
    con.execute(f"SET file_search_path = '{tmp_path / 'one'}'")
    assert ilargi_db.train(con, query, "y", **run).coef_[0] == pytest.approx(1.0)
    con.execute(f"SET file_search_path = '{tmp_path / 'two'}'")
    assert ilargi_db.train(con, query, "y", **run).coef_[0] == pytest.approx(3.0)


def test_a_source_wider_than_one_hash_item_keys_each_column_by_its_own_content():
    """A wide source's column hashes come in several items of the hash query: a change to a column in a later
    item changes that column's key, and no other."""
    from ilargi_db.reuse.fingerprint import HASHES_PER_ITEM

    width = HASHES_PER_ITEM + 44
    con = ilargi_db.connect()
    columns = ", ".join(f"range * {i} AS x{i}" for i in range(width))
    con.execute(f"CREATE TABLE t AS SELECT {columns}, range AS y FROM range(10)")
    query = "SELECT " + ", ".join(f"x{i}" for i in range(width)) + ", y FROM t"
    graph = build_join_graph(con, query, "y")
    before = fingerprint_job(con, graph, categorical_flags(graph))
    con.execute(f"UPDATE t SET x{width - 10} = x{width - 10} + 1 WHERE y = 3")
    after = fingerprint_job(con, graph, categorical_flags(graph))
    assert before.reusable and after.reusable and len(before.column_keys) == width
    assert [j for j in before.column_keys if before.column_keys[j] != after.column_keys[j]] == [width - 10]
