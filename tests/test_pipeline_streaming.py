"""Training data over a memory budget: the fact streamed in row partitions gives the in-memory model."""

from __future__ import annotations

import json
import math
import os
import tempfile
import tracemalloc

import numpy as np
import pytest

import ilargi_db
from ilargi_db.errors import IlargiError
from ilargi_db.linalg import Block, PartitionedMatrix, PartitionSource
from ilargi_db.metadata.stream import FactStream
from tests.temp_cleaner import clean_spills_on_the_second_pass

FACT_ROWS = 100_000


@pytest.fixture(scope="module")
def con():
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE fact AS SELECT range AS id, range % 500 AS k, range % 37 AS c, sin(range) AS x1, "
        "cos(range * 0.7) AS x2, CASE WHEN range % 11 = 0 THEN NULL ELSE (range % 13) * 0.1 END AS x3, "
        "['u', 'v', 'w', NULL][range % 4 + 1] AS kind, 3 * sin(range) + cos(range * 0.7) + (range % 7) * 0.1 AS y, "
        + ", ".join(f"sin(range * {j + 2}) AS w{j}" for j in range(8))
        + " "
        f"FROM range({FACT_ROWS})"
    )
    con.execute(
        "CREATE TABLE dim AS SELECT range AS k, range * 0.01 AS z1, sqrt(range) AS z2, "
        "['a', 'b', 'c', 'd', 'e'][range % 5 + 1] AS grp FROM range(500)"
    )
    con.execute("CREATE TABLE cat AS SELECT range AS c, range * 1.5 AS q FROM range(30)")  # c of 30..36: gaps
    return con


STAR = (
    "SELECT f.x1, f.x2, f.x3, f.kind, f.w0, f.w1, f.w2, f.w3, f.w4, f.w5, f.w6, f.w7, d.z1, d.z2, d.grp, c.q, f.y "
    "FROM fact f JOIN dim d ON f.k = d.k LEFT JOIN cat c ON f.c = c.c"
)
RUN = dict(strategy="factorized", backend="numpy", reuse=False)


def test_linear_regression_streamed_at_a_tenth_of_the_data_equals_the_in_memory_model(con):
    whole = ilargi_db.train(con, STAR, "y", **RUN)
    needed = ilargi_db.train(con, STAR, "y", memory_budget="1MB", **RUN).streamed_["needed"]
    tracemalloc.start()
    try:
        ilargi_db.train(con, STAR, "y", **RUN)
        in_memory_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        streamed = ilargi_db.train(con, STAR, "y", memory_budget=needed // 10, **RUN)
        streamed_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert streamed.streamed_["partitions"] >= 10 and streamed.streamed_["memory_budget"] == needed // 10
    assert "Streamed:" in streamed.decision_
    np.testing.assert_allclose(streamed.coef_, whole.coef_, rtol=1e-9, atol=1e-12)
    assert streamed.intercept_ == pytest.approx(whole.intercept_, rel=1e-9, abs=1e-12)
    assert streamed.n_rows_ == whole.n_rows_ == FACT_ROWS
    # NumPy's allocations (tracemalloc sees them): partitions, not the whole matrix.
    assert streamed_peak < 0.6 * in_memory_peak, (streamed_peak, in_memory_peak)


@pytest.mark.parametrize(
    "algorithm, params",
    [
        ("logistic_regression", {"tol": 1e-6, "max_iter": 60, "standardize": True}),
        ("kmeans", {"n_clusters": 3, "n_init": 1, "max_iter": 8}),
        ("gnmf", {"n_components": 2, "random_state": 0, "max_iter": 15}),
    ],
)
def test_iterative_solvers_stream_every_pass_and_give_the_same_model(con, algorithm, params):
    if algorithm == "logistic_regression":
        query, target = STAR.replace("f.y FROM", "f.y > 0.5 AS late FROM"), "late"
    else:
        query, target = STAR.replace(", f.y FROM", " FROM"), None
    if algorithm == "gnmf":  # non-negative columns
        query = "SELECT abs(f.x1) AS x1, d.z1, d.z2, d.grp FROM fact f JOIN dim d ON f.k = d.k"
    if algorithm == "kmeans":  # the same start: k-means++ would draw rows by position
        d = ilargi_db.train(con, query, target, algorithm, n_clusters=3, max_iter=1, **RUN).cluster_centers_.shape[1]
        params = {**params, "init": np.random.default_rng(0).random((3, d))}
    whole = ilargi_db.train(con, query, target, algorithm, **params, **RUN)
    streamed = ilargi_db.train(con, query, target, algorithm, memory_budget="1MB", **params, **RUN)
    assert streamed.streamed_["partitions"] > 3
    for name in ("coef_", "cluster_centers_", "components_"):
        if hasattr(whole.estimator_, name):
            np.testing.assert_allclose(getattr(streamed, name), getattr(whole, name), rtol=1e-7, atol=1e-9)
    if algorithm == "kmeans":
        assert np.array_equal(streamed.labels_, whole.labels_)


@pytest.mark.parametrize("memory_budget", ["3MB", None], ids=["streamed", "in memory"])
def test_a_rerun_gives_the_same_model_bit_for_bit(con, memory_budget):
    query = STAR.replace("f.y FROM", "f.y > 0.5 AS late FROM")
    runs = [
        ilargi_db.train(con, query, "late", "logistic_regression", memory_budget=memory_budget, **RUN) for _ in range(3)
    ]
    assert (runs[0].streamed_ is not None) == (memory_budget is not None)
    for run in runs[1:]:
        assert run.coef_.tobytes() == runs[0].coef_.tobytes()
        assert run.intercept_ == runs[0].intercept_
        assert run.encoder_.specs_ == runs[0].encoder_.specs_


def test_the_means_a_stream_imputes_are_the_exactly_rounded_means_of_the_training_rows(con):
    from ilargi_db.pipeline.planning import plan_graph
    from ilargi_db.preprocess import FeatureEncoder

    # Sums of doubles in DuckDB's threads come out in any order: these are exact, so the same on every run.
    query = (
        "SELECT f.x1, f.x3, f.w0 * 1e300 AS huge, f.w1 * 1e-300 AS tiny, d.z2, f.y FROM fact f JOIN dim d ON f.k = d.k"
    )
    graph = plan_graph(con, query, "y")[0]
    encoder = FeatureEncoder([False] * 5).fit_query(con, graph)
    columns = list(zip(*con.sql(query).fetchall()))
    for spec, column in zip(encoder.specs_, columns):
        values = [v for v in column if v is not None]
        assert spec.mean == math.fsum(values) / len(values), spec.name


def test_prefetching_changes_nothing_but_the_wait():
    rng = np.random.default_rng(1)
    fact, dim = rng.normal(size=(5_000, 3)), rng.normal(size=(40, 2))
    index = rng.integers(0, 40, 5_000)
    bounds = list(range(0, 5_001, 600)) + [5_000]

    def make(k):
        start, stop = bounds[k], bounds[k + 1]
        from ilargi_db.linalg import NormalizedMatrix

        blocks = [Block(fact[start:stop], columns=[0, 1, 2]), Block(dim, columns=[3, 4], index=index[start:stop])]
        return NormalizedMatrix(blocks, n_rows=stop - start, backend="numpy")

    sizes = np.diff(bounds).tolist()
    results = []
    for prefetch in (True, False):
        source = PartitionSource(make, len(sizes), prefetch=prefetch)
        X = PartitionedMatrix(source, sizes=sizes, template=make(0))
        v = np.arange(5_000.0)
        results.append((X @ np.ones(5), X.T @ v, X.crossprod()))
        assert source.reads == 3 * len(sizes)  # every pass reads every partition again
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)
    # A pass left early (an error in the consumer) waits for the read in flight and leaves no thread behind.
    source = PartitionSource(make, len(sizes))
    with pytest.raises(RuntimeError):
        for k, _ in enumerate(source):
            if k == 2:
                raise RuntimeError("stop")


def test_spilled_partitions_are_removed_after_training(con, monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its own temp directory: other runs use /tmp too
    model = ilargi_db.train(con, STAR, "y", memory_budget="500KB", **RUN)
    assert model.streamed_["spill"] and not os.listdir(tmp_path)


def test_without_room_to_spill_every_pass_reads_duckdb_again_and_gives_the_same_model(con, monkeypatch):
    import shutil

    query = STAR.replace("f.y FROM", "f.y > 0.5 AS late FROM")
    params = dict(tol=0, max_iter=3, standardize=True, memory_budget="2MB", **{**RUN, "strategy": "auto"})
    spilled = ilargi_db.train(con, query, "late", "logistic_regression", **params)
    assert spilled.streamed_["spill"] and spilled.streamed_["spill_why"].startswith("each partition spilled")
    full = shutil.disk_usage(tempfile.gettempdir())._replace(free=0)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: full)  # a full disk: no room to spill
    queried = []
    real = FactStream.read
    monkeypatch.setattr(FactStream, "read", lambda self, k: queried.append(k) or real(self, k))
    reread = ilargi_db.train(con, query, "late", "logistic_regression", **params)
    partitions = reread.streamed_["partitions"]
    # Nothing spilled, so every pass is a query. Whole passes only: partition 0, read for the template,
    # serves the first pass without a second query.
    assert len(queried) % partitions == 0 and len(queried) >= 3 * partitions
    assert queried[:partitions] == list(range(partitions))
    assert not reread.streamed_["spill"] and "TMPDIR" in reread.streamed_["spill_why"]
    assert "not spilled" in reread.decision_ and reread.plan_["placement"] == "streamed"
    steps = {step["name"]: step for step in reread.plan_["steps"]}
    assert "from DuckDB" in steps["reading the partitions again"]["shape"]
    assert "spilling the partitions" in {step["name"] for step in spilled.plan_["steps"]}
    np.testing.assert_allclose(reread.coef_, spilled.coef_, rtol=1e-9)  # the spill stores C order


def test_linear_regression_reads_a_stream_three_times_statistics_loss_and_metrics(con, monkeypatch):
    reads = []
    real = PartitionSource.__getitem__
    monkeypatch.setattr(PartitionSource, "__getitem__", lambda self, k: reads.append(k) or real(self, k))
    model = ilargi_db.train(con, STAR, "y", memory_budget="1MB", **RUN)
    # One pass each: the sufficient statistics (X^T X, X^T y, sums), the loss, the training metrics.
    assert len(reads) == 3 * model.streamed_["partitions"]


def test_a_spilled_partition_reads_back_exactly(tmp_path):
    from ilargi_db.pipeline.spill import read_spill, write_spill

    arrays = {
        "n_rows": np.array(4),
        "fact": np.asfortranarray(np.arange(12.0).reshape(4, 3)),  # stored in C order, read back equal
        "index/d": np.array([3, 0, -1, 2], dtype=np.int32),
        "empty": np.empty((0, 2)),
        "codes/1": np.arange(4, dtype=np.int64),
    }
    path = str(tmp_path / "0.part")
    back = read_spill(path, write_spill(path, arrays))
    assert list(back) == list(arrays)
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape
        np.testing.assert_array_equal(back[name], array)
    layout = write_spill(path, arrays)
    with open(path, "r+b") as cut:  # a file cut short (a full disk, a crash) is an error, never a wrong matrix
        cut.truncate(100)
    with pytest.raises(IlargiError, match="cut short"):
        read_spill(path, layout)


def test_a_budget_that_cannot_hold_the_dimensions_says_how_much_it_needs(con):
    with pytest.raises(IlargiError, match=r"memory_budget 1000 bytes cannot hold the dimensions .* give at least"):
        ilargi_db.train(con, STAR, "y", memory_budget=1000, **RUN)
    with pytest.raises(IlargiError, match="memory_budget must be a number of bytes or a size such as '512MB'"):
        ilargi_db.train(con, STAR, "y", memory_budget="lots", **RUN)


def test_a_first_source_whose_rows_a_join_repeats_is_refused_over_the_budget(con):
    query = "SELECT d.z1, d.z2, f.x1, f.y FROM dim d JOIN fact f ON f.k = d.k"  # each dim row: 200 fact rows
    with pytest.raises(IlargiError, match="no join may repeat its rows .* Put the largest table first"):
        ilargi_db.train(con, query, "y", memory_budget="2MB", **RUN)
    assert ilargi_db.train(con, query, "y", **RUN).streamed_ is None  # in memory it trains


def test_the_sql_option_streams_too(con):
    summary = json.loads(
        con.sql(
            f"SELECT ilargi_train('streamed', 'linear_regression', $${STAR}$$, 'y', "
            """options := '{"memory_budget": "500KB", "strategy": "factorized"}')"""
        ).fetchall()[0][0]
    )
    assert "Streamed:" in summary["why"]
    with pytest.raises(Exception, match="option 'memory_budget' must be a size"):
        con.sql(
            f"SELECT ilargi_train('streamed', 'linear_regression', $${STAR}$$, 'y', "
            """options := '{"memory_budget": [1]}')"""
        ).fetchall()


def test_dimension_rows_no_training_row_uses_are_treated_as_in_memory(con):
    con.execute("CREATE OR REPLACE TABLE dim2 AS SELECT * FROM dim UNION ALL SELECT 9999, 'inf'::DOUBLE, NULL, 'z'")
    query = STAR.replace("JOIN dim d", "JOIN dim2 d")
    whole = ilargi_db.train(con, query, "y", **RUN)
    streamed = ilargi_db.train(con, query, "y", memory_budget="1MB", **RUN)  # row 9999: inf, used by no fact row
    np.testing.assert_allclose(streamed.coef_, whole.coef_, rtol=1e-9, atol=1e-12)


def test_features_of_the_dimensions_alone_stream_too(con):
    query = "SELECT d.z1, d.z2, d.grp, c.q, f.y FROM fact f JOIN dim d ON f.k = d.k LEFT JOIN cat c ON f.c = c.c"
    whole = ilargi_db.train(con, query, "y", **RUN)
    streamed = ilargi_db.train(con, query, "y", memory_budget="200KB", **RUN)
    assert streamed.streamed_ is not None
    np.testing.assert_allclose(streamed.coef_, whole.coef_, rtol=1e-9, atol=1e-12)


def test_the_default_budget_never_refuses_a_job_that_fits_in_memory(con, monkeypatch):
    from ilargi_db.pipeline import placement

    monkeypatch.setattr(placement, "default_memory_budget", lambda: 1_000)  # "little memory free"
    con.execute("CREATE OR REPLACE VIEW fact_v AS SELECT * FROM fact")
    view = STAR.replace("FROM fact f", "FROM fact_v f")  # cannot stream
    assert ilargi_db.train(con, view, "y", **RUN).streamed_ is None  # trains in memory, as before
    assert ilargi_db.train(con, STAR, "y", **RUN).streamed_ is None  # 1,000 bytes cannot hold the dimensions


def test_a_target_out_of_range_is_refused_as_in_memory(con):
    huge = STAR.replace("f.y FROM", "CASE WHEN f.id = 7 THEN 1e200 ELSE f.y END AS y FROM")
    with pytest.raises(IlargiError, match="target 'y'"):
        ilargi_db.train(con, huge, "y", **RUN)
    with pytest.raises(IlargiError, match="target 'y'"):
        ilargi_db.train(con, huge, "y", memory_budget="1MB", **RUN)


def test_explain_says_a_job_would_stream_and_the_registry_keeps_how_it_ran(con):
    explanation = ilargi_db.explain(con, STAR, "y", backend="numpy", reuse=False, memory_budget="1MB")
    assert any(reason.startswith("would stream: the data need about") for reason in explanation.reasons)
    placed = explanation.placed  # the chosen plan as it would run streamed, priced
    assert placed.placement == "streamed" and placed.solver == explanation.plan.solver
    assert any(f"{placed.seconds:.3g} s predicted streamed" in r for r in explanation.reasons)
    assert "streamed: factorized/" in str(explanation) and explanation.to_dict()["placed"]["placement"] == "streamed"
    assert not any("stream" in r for r in ilargi_db.explain(con, STAR, "y", backend="numpy", reuse=False).reasons)
    model = ilargi_db.train(con, STAR, "y", memory_budget="1MB", **RUN)
    ilargi_db.save_model(con, "streamed_model", model)
    back = ilargi_db.load_model(con, "streamed_model")
    assert back.streamed_ == json.loads(json.dumps(model.streamed_)) and back.streamed_["partitions"] > 1


def test_wide_categorical_data_streams_to_the_in_memory_model():
    """Thousands of one-hot columns: a dimension's names (one-hot on the dimension side) and a fact-side
    category (codes per row, an identity block per partition)."""
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE fact AS SELECT range AS id, range % 3000 AS k, 'c' || (range * 7919 % 2000) AS code, "
        "sin(range) AS x, (sin(range * 0.3) + (range % 3000) * 0.0004 > 0.5) AS late FROM range(30000)"
    )
    con.execute("CREATE TABLE dim AS SELECT range AS k, 'n' || range AS name, cos(range) AS z FROM range(3000)")
    query = "SELECT f.x, f.code, d.name, d.z, f.late FROM fact f JOIN dim d ON f.k = d.k"
    params = dict(tol=0.0, max_iter=8, **RUN)
    whole = ilargi_db.train(con, query, "late", "logistic_regression", **params)
    assert whole.estimator_.coef_.shape[0] > 4_000
    streamed = ilargi_db.train(con, query, "late", "logistic_regression", memory_budget="400KB", **params)
    assert streamed.streamed_["partitions"] > 3
    np.testing.assert_allclose(streamed.coef_, whole.coef_, rtol=1e-7, atol=1e-10)


def test_a_single_table_streams_to_the_in_memory_model(con):
    query = "SELECT x1, x2, x3, kind, w0, y FROM fact"  # no dimension: nothing joins the partitions
    whole = ilargi_db.train(con, query, "y", **RUN)
    streamed = ilargi_db.train(con, query, "y", memory_budget="500KB", **RUN)
    assert streamed.streamed_["partitions"] > 1
    np.testing.assert_allclose(streamed.coef_, whole.coef_, rtol=1e-9, atol=1e-12)


LATE = STAR.replace("f.y FROM", "f.y > 0.5 AS late FROM")
SPILLED = dict(tol=0, max_iter=3, standardize=True, memory_budget="2MB", **RUN)


def test_spill_files_deleted_mid_training_are_read_from_duckdb_again(con, monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # spill here, where the test may delete
    expected = ilargi_db.train(con, LATE, "late", "logistic_regression", **SPILLED)
    clean_spills_on_the_second_pass(monkeypatch, tmp_path)
    model = ilargi_db.train(con, LATE, "late", "logistic_regression", **SPILLED)
    assert model.streamed_["spill"]
    np.testing.assert_allclose(model.coef_, expected.coef_, rtol=1e-9)


def test_a_spill_that_cannot_be_written_reads_from_duckdb_again(con, monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    expected = ilargi_db.train(con, LATE, "late", "logistic_regression", **SPILLED)
    real = FactStream.read

    def read_on_a_broken_disk(self, k):
        if os.path.isdir(self.spill_dir):  # every write there fails with an OSError, as on a full disk
            os.rmdir(self.spill_dir)
            open(self.spill_dir, "w").close()
        return real(self, k)

    monkeypatch.setattr(FactStream, "read", read_on_a_broken_disk)
    model = ilargi_db.train(con, LATE, "late", "logistic_regression", **SPILLED)
    np.testing.assert_allclose(model.coef_, expected.coef_, rtol=1e-9)


def test_spill_buffers_are_reused_once_free_and_a_larger_partition_replaces_a_small_kept_one():
    from ilargi_db.pipeline.spill import SpillBuffers

    buffers = SpillBuffers(keep=1)
    small = buffers.get(10)
    view = small[:5]
    assert buffers.get(10) is not small  # a view of it is alive: not free
    del view, small
    large = buffers.get(100)  # the kept one is free but too small: the larger one takes its place
    assert large.nbytes == 100
    del large
    assert buffers.get(50).nbytes == 100  # reused, not a new 50-byte buffer
