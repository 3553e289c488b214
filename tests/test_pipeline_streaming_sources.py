"""Any fact a query reads streams over the memory budget: views, Parquet and CSV files, subqueries, frames.

A base table is read by rowid range on every pass; any other fact is read once, in partitions of output
rows spilled to local disk, and later passes read the spill. Either way the model equals the in-memory one.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile

import numpy as np
import pyarrow as pa
import pytest

import ilargi_db
from ilargi_db.errors import NotStreamable, SpillLost
from tests.temp_cleaner import clean_spills_on_the_second_pass

FACT_ROWS = 30_000
RUN = dict(strategy="factorized", backend="numpy", reuse=False)
BUDGET = "300KB"  # about a tenth of the training data


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("facts")
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE fact AS SELECT range AS id, range % 300 AS k, sin(range) AS x1, cos(range * 0.7) AS x2, "
        "CASE WHEN range % 11 = 0 THEN NULL ELSE (range % 13) * 0.1 END AS x3, ['u', 'v', 'w'][range % 3 + 1] AS kind, "
        f"3 * sin(range) + cos(range * 0.7) + (range % 7) * 0.1 AS y FROM range({FACT_ROWS})"
    )
    con.execute(f"COPY fact TO '{root}/fact.parquet' (FORMAT parquet, ROW_GROUP_SIZE 4096)")
    os.makedirs(root / "parts")
    for part in range(3):  # several files, read in the glob's order
        con.execute(
            f"COPY (SELECT * FROM fact WHERE id % 3 = {part}) TO '{root}/parts/{part}.parquet' (FORMAT parquet)"
        )
    con.execute(f"COPY fact TO '{root}/fact.csv'")
    return root


@pytest.fixture
def con(files):
    con = ilargi_db.connect()
    con.execute(f"CREATE TABLE fact AS SELECT * FROM '{files}/fact.parquet'")
    con.execute(
        "CREATE TABLE dim AS SELECT range AS k, range * 0.01 AS z1, ['a', 'b', 'c'][range % 3 + 1] AS grp "
        "FROM range(300)"
    )
    return con


def star(fact: str) -> str:
    return f"SELECT f.x1, f.x2, f.x3, f.kind, d.z1, d.grp, f.y FROM {fact} f JOIN dim d ON f.k = d.k"


FACTS = {
    "a base table": lambda con, root: "fact",
    "a view over a table": lambda con, root: con.execute("CREATE VIEW v AS SELECT * FROM fact WHERE id >= 0") and "v",
    "a view over Parquet": lambda con, root: (
        con.execute(f"CREATE VIEW v AS FROM read_parquet('{root}/fact.parquet')") and "v"
    ),
    "read_parquet": lambda con, root: f"read_parquet('{root}/fact.parquet')",
    "a Parquet glob": lambda con, root: f"read_parquet('{root}/parts/*.parquet')",
    "a quoted Parquet file": lambda con, root: f"'{root}/fact.parquet'",
    "read_csv": lambda con, root: f"read_csv('{root}/fact.csv')",
    "a subquery": lambda con, root: "(SELECT * FROM fact WHERE x1 > -2)",
    "a registered Arrow table": lambda con, root: (
        con.register("frame", con.sql("FROM fact").to_arrow_table()) and "frame"
    ),
}


@pytest.mark.parametrize("kind", list(FACTS))
def test_every_fact_a_query_reads_streams_to_the_in_memory_model(con, files, kind):
    query = star(FACTS[kind](con, files))
    whole = ilargi_db.train(con, query, "y", solver="normal", **RUN)
    streamed = ilargi_db.train(con, query, "y", solver="normal", memory_budget=BUDGET, **RUN)
    assert streamed.streamed_["partitions"] >= 5 and "Streamed:" in streamed.decision_
    np.testing.assert_allclose(streamed.coef_, whole.coef_, rtol=1e-9, atol=1e-12)
    assert streamed.intercept_ == pytest.approx(whole.intercept_, rel=1e-9, abs=1e-12)
    assert streamed.n_rows_ == whole.n_rows_ == FACT_ROWS


def test_a_single_table_query_over_a_parquet_file_streams(con, files):
    query = f"SELECT x1, x2, kind, y FROM '{files}/fact.parquet'"
    whole = ilargi_db.train(con, query, "y", **RUN)
    streamed = ilargi_db.train(con, query, "y", memory_budget="100KB", **RUN)
    assert streamed.streamed_["partitions"] > 1
    np.testing.assert_allclose(streamed.coef_, whole.coef_, rtol=1e-9, atol=1e-12)


def test_lbfgs_streamed_from_parquet_reaches_the_in_memory_model_within_its_tolerance(con, files):
    query = star(f"read_parquet('{files}/fact.parquet')").replace("f.y FROM", "f.y > 0.5 AS late FROM")
    params = dict(tol=1e-8, max_iter=200, standardize=True, **RUN)
    whole = ilargi_db.train(con, query, "late", "logistic_regression", **params)
    streamed = ilargi_db.train(con, query, "late", "logistic_regression", memory_budget=BUDGET, **params)
    assert streamed.streamed_["spill"]
    np.testing.assert_allclose(streamed.coef_, whole.coef_, rtol=1e-5, atol=1e-6)


def test_a_fact_read_once_is_read_from_duckdb_once_whatever_the_passes(con, files, monkeypatch):
    query = star(f"read_csv('{files}/fact.csv')").replace("f.y FROM", "f.y > 0.5 AS late FROM")
    queries = []
    real = ilargi_db.metadata.stream.arrow_batches
    monkeypatch.setattr(ilargi_db.metadata.stream, "arrow_batches", lambda *a: queries.append(a) or real(*a))
    model = ilargi_db.train(con, query, "late", "logistic_regression", tol=0, max_iter=5, memory_budget=BUDGET, **RUN)
    assert model.n_iter_ >= 5 and len(queries) == 1


def test_a_fact_read_once_needs_room_on_disk_and_says_so(con, files, monkeypatch):
    full = shutil.disk_usage(tempfile.gettempdir())._replace(free=0)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: full)
    query = star(f"read_csv('{files}/fact.csv')")
    with pytest.raises(NotStreamable, match="not a base table.*keeps its partitions on local disk.*TMPDIR"):
        ilargi_db.train(con, query, "y", memory_budget=BUDGET, **RUN)
    said = ilargi_db.explain(con, query, "y", backend="numpy", memory_budget=BUDGET)  # before anything runs
    assert "cannot stream" in str(said) and "keeps its partitions on local disk" in str(said)
    for fact in ("fact", f"read_parquet('{files}/fact.parquet')"):  # read again by rowid or file range instead
        assert ilargi_db.train(con, star(fact), "y", memory_budget=BUDGET, **RUN).streamed_["spill"] is False


def test_a_lost_spill_file_of_a_fact_read_once_stops_training_with_what_to_do(con, files, monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    clean_spills_on_the_second_pass(monkeypatch, tmp_path)
    query = star(f"read_csv('{files}/fact.csv')").replace("f.y FROM", "f.y > 0.5 AS late FROM")
    with pytest.raises(SpillLost, match="removed or cut short .* train again"):
        ilargi_db.train(con, query, "late", "logistic_regression", tol=0, max_iter=3, memory_budget=BUDGET, **RUN)
    assert not glob.glob(str(tmp_path / "ilargi-stream-*"))


def test_explain_and_training_agree_that_a_parquet_fact_streams(con, files):
    query = star(f"read_parquet('{files}/fact.parquet')")
    said = ilargi_db.explain(con, query, "y", backend="numpy", memory_budget=BUDGET, reuse=False)
    assert said.placed is not None and "stream" in str(said).lower()
    assert said.placed.placement == "streamed"
    assert ilargi_db.train(con, query, "y", memory_budget=BUDGET, **RUN).streamed_ is not None


def test_a_registered_frame_with_unlabelled_rows_streams_only_the_labelled_ones(con):
    frame = pa.table({"x": np.arange(8000, dtype=float), "y": [None if i % 4 == 0 else 2.0 * i for i in range(8000)]})
    con.register("labels", frame)
    model = ilargi_db.train(con, "SELECT x, y FROM labels", "y", memory_budget="60KB", **RUN)
    assert model.n_rows_ == 6000 and model.streamed_["partitions"] > 2
    assert model.coef_[0] == pytest.approx(2.0) and model.intercept_ == pytest.approx(0.0, abs=1e-9)


def memory_limit(con) -> str:
    return con.sql("SELECT current_setting('memory_limit')").fetchall()[0][0]


def test_a_streamed_job_holds_duckdbs_default_memory_limit_to_its_budget_and_resets_it(con):
    default = memory_limit(con)
    model = ilargi_db.train(con, star("fact"), "y", memory_budget=BUDGET, **RUN)
    assert "DuckDB's memory_limit held at 128.0 MiB meanwhile" in model.decision_
    assert memory_limit(con) == default


def test_a_memory_limit_the_caller_set_is_kept(con):
    con.execute("SET memory_limit = '3GB'")
    mine = memory_limit(con)
    model = ilargi_db.train(con, star("fact"), "y", memory_budget=BUDGET, **RUN)
    assert "memory_limit held" not in model.decision_ and memory_limit(con) == mine
    con.execute("RESET memory_limit")


def test_parquet_files_are_read_by_file_and_row_range_the_same_rows_on_every_read(con, files, monkeypatch):
    query = star(f"read_parquet('{files}/parts/*.parquet')").replace("f.y FROM", "f.y > 0.5 AS late FROM")
    params = dict(tol=0, max_iter=4, memory_budget=BUDGET, **RUN)
    spilled = ilargi_db.train(con, query, "late", "logistic_regression", **params)
    full = shutil.disk_usage(tempfile.gettempdir())._replace(free=0)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: full)  # no room to spill: every pass reads the files
    reread = ilargi_db.train(con, query, "late", "logistic_regression", **params)
    assert reread.streamed_["partitions"] >= 6 and not reread.streamed_["spill"]  # 3 files, 2 or more ranges each
    np.testing.assert_array_equal(reread.coef_, spilled.coef_)  # the same rows in the same order: bit for bit


def test_a_lost_spill_file_of_parquet_is_read_from_the_file_again(con, files, monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    query = star(f"read_parquet('{files}/fact.parquet')").replace("f.y FROM", "f.y > 0.5 AS late FROM")
    params = dict(tol=0, max_iter=3, memory_budget=BUDGET, **RUN)
    expected = ilargi_db.train(con, query, "late", "logistic_regression", **params)
    clean_spills_on_the_second_pass(monkeypatch, tmp_path)
    model = ilargi_db.train(con, query, "late", "logistic_regression", **params)
    np.testing.assert_array_equal(model.coef_, expected.coef_)


def test_a_parquet_call_whose_files_differ_in_columns_is_read_once(con, files, tmp_path):
    con.execute(f"COPY (SELECT *, 1 AS extra FROM fact WHERE id < 100) TO '{tmp_path}/more.parquet' (FORMAT parquet)")
    fact = f"read_parquet(['{files}/fact.parquet', '{tmp_path}/more.parquet'], union_by_name = true)"
    whole = ilargi_db.train(con, star(fact), "y", solver="normal", **RUN)
    streamed = ilargi_db.train(con, star(fact), "y", solver="normal", memory_budget=BUDGET, **RUN)
    assert streamed.n_rows_ == FACT_ROWS + 100
    np.testing.assert_allclose(streamed.coef_, whole.coef_, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("fact", ["'fact.parquet'", "fact.parquet", "'./fact.parquet'"])
def test_a_file_named_in_from_is_called_what_duckdb_calls_it(con, files, monkeypatch, fact):
    monkeypatch.chdir(files)  # DuckDB reads a relative path from the working directory
    query = f"SELECT fact.x1, x2, y FROM {fact}"  # DuckDB names the file's relation after its stem: fact
    whole = ilargi_db.train(con, query, "y", **RUN)
    streamed = ilargi_db.train(con, query, "y", memory_budget="100KB", **RUN)
    assert whole.feature_names_in_.tolist() == ["x1", "x2"] and streamed.streamed_["partitions"] > 1
    np.testing.assert_allclose(streamed.coef_, whole.coef_, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("source", ["parquet", "view"])
def test_wide_one_hot_data_streams_from_any_fact_to_the_in_memory_model(con, tmp_path, source):
    # 1,500 categories of the fact and 300 of a dimension: about 1,800 one-hot columns.
    con.execute(
        "CREATE TABLE wide AS SELECT range AS id, range % 300 AS k, 'c' || (range * 7919 % 1500) AS code, "
        "sin(range) AS x, cos(range) + (range * 7919 % 1500) * 0.001 AS y FROM range(20000)"
    )
    con.execute("CREATE TABLE kinds AS SELECT range AS k, 'g' || range AS grp FROM range(300)")
    if source == "parquet":
        con.execute(f"COPY wide TO '{tmp_path}/wide.parquet' (FORMAT parquet)")
        fact = f"read_parquet('{tmp_path}/wide.parquet')"
    else:
        con.execute("CREATE VIEW wide_view AS SELECT * FROM wide")
        fact = "wide_view"
    query = f"SELECT f.x, f.code, g.grp, f.y FROM {fact} f JOIN kinds g ON f.k = g.k"
    params = dict(alpha=1.0, solver="normal", **RUN)
    whole = ilargi_db.train(con, query, "y", **params)
    streamed = ilargi_db.train(con, query, "y", memory_budget="200KB", **params)
    assert len(whole.coef_) > 1_700 and streamed.streamed_["partitions"] >= 5
    np.testing.assert_allclose(streamed.coef_, whole.coef_, rtol=1e-9, atol=1e-10)
