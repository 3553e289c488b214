"""The cost estimator: job features, the shipped model, calibration, explain and the auto strategy."""

from __future__ import annotations

import json

import duckdb
import pytest

import ilargi_db
from ilargi_db.calibration import calibrate
from ilargi_db.cost_model import (
    Explanation,
    detect_hardware,
    explain,
    grid_jobs,
    job_features,
    job_stats,
    load_model,
)
from ilargi_db.cost_model.explain import prepare_graph
from ilargi_db.cost_model.features import expected_iterations
from ilargi_db.datasets import make_star_schema
from ilargi_db.errors import IlargiError
from tests.conftest import _gpu_usable


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """No calibration of this machine unless a test makes one: the shipped model decides."""
    monkeypatch.setenv("ILARGI_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def star():
    con = duckdb.connect()
    con.execute("""
        CREATE TABLE fact AS SELECT range AS id, range % 10 AS k, CASE WHEN range % 5 = 0 THEN 99 ELSE range % 4 END
            AS c, range * 0.5 AS x1, 0.0 AS x2, range % 3 AS y FROM range(100);
        CREATE TABLE d1 AS SELECT range AS k, range * 1.0 AS a, range * 2.0 AS b, range * 3.0 AS e,
            ['red', 'green', NULL][range % 3 + 1] AS colour FROM range(20);
        CREATE TABLE d2 AS SELECT range AS c, range * 1.0 AS w FROM range(4);
    """)
    return con


def stats_and_features(con, query, target=None, algorithm="linear_regression", **params):
    graph = prepare_graph(con, query, target)
    stats = job_stats(con, graph)
    return stats, job_features(stats, algorithm, params)


def test_features_of_a_known_star(star):
    query = (
        "SELECT f.x1, f.x2, d1.a, d1.b, d1.e, d1.colour, d2.w, f.y FROM fact f JOIN d1 ON f.k = d1.k "
        "LEFT JOIN d2 ON f.c = d2.c"
    )
    stats, f = stats_and_features(star, query, "y")
    assert stats.n_rows == 100 and stats.fact == "f"
    d1, d2 = stats.source("d1"), stats.source("d2")
    assert (d1.rows, d1.referenced, d1.filled) == (20, 10, 100)  # keys 0..9 of 20 rows (HyperLogLog, exact here)
    assert (d2.rows, d2.referenced, d2.filled) == (4, 4, 80)  # c = 99 on every fifth row: a LEFT-join gap
    assert d1.width == 3 + 3 and d1.categorical_width == 3  # red, green and NULL
    assert stats.source("f").width == 2 and d2.width == 1
    assert f["rows"] == 100 and f["columns"] == 9 and f["n_sources"] == 3 and f["n_dimensions"] == 2
    assert f["tuple_ratio_min"] == 100 / 20 and f["tuple_ratio_max"] == 100 / 4
    assert f["tuple_ratio"] == 100 / 24 and f["feature_ratio"] == 7 / 2
    assert f["redundancy_max"] == 100 / 4  # d2's four rows each serve 20 (+ gaps) output rows
    assert f["empty_share_max"] == pytest.approx(0.2)
    assert f["cells_materialized"] == 900 and f["cells_factorized"] == 2 * 100 + 6 * 20 + 1 * 4 + 3 * 100
    assert f["comp_ratio"] == pytest.approx(900 / 624)
    # Zero cells: x2 all, x1 1 of 100, a/b/e 1 of 20 each, w 1 of 4; a one-hot row of 3 columns has 2 zeros.
    assert f["sparsity"] == pytest.approx((1 + 0.01 + 3 * 0.05 + 0.25 + 2) / 9)
    assert f["categorical_features"] == 1 and f["categorical_source_rows"] == 20


def test_m_to_n_join_counts_the_fan_out(star):
    star.execute("CREATE TABLE d3 AS SELECT k, v FROM (SELECT range AS k FROM range(10)), (VALUES (1.0), (2.0)) t(v)")
    stats, f = stats_and_features(star, "SELECT f.x1, d3.v FROM fact f JOIN d3 ON f.k = d3.k")
    assert stats.n_rows == 200 and stats.source("f").referenced == 100
    assert f["fact_fanout"] == 2.0 and f["rows"] == 200 and f["tuple_ratio"] == 10.0


def test_features_match_the_synthetic_schema_ratios():
    con = duckdb.connect()
    schema = make_star_schema(con, fact_rows=4000, fact_features=4, n_dims=2, dim_rows=100, dim_features=12)
    _, f = stats_and_features(con, schema.query(), "y", "kmeans", n_clusters=3, max_iter=7, tol=0.0)
    assert f["tuple_ratio_min"] == schema.tuple_ratio == 40
    assert f["feature_ratio_max"] == schema.feature_ratio == 3 and f["feature_ratio"] == 6
    assert f["iterations"] == 7 and f["rank"] == 3 and f["redundancy_max"] == pytest.approx(40, rel=0.02)


def test_expected_iterations_follow_the_parameters():
    assert expected_iterations("linear_regression", {}) == 1  # one crossprod
    assert expected_iterations("linear_regression", {"solver": "gd", "max_iter": 50}) == 50
    assert expected_iterations("gnmf", {"max_iter": 500, "tol": 0.0}) == 500
    assert expected_iterations("logistic_regression", {"max_iter": 10}) == 10
    with pytest.raises(IlargiError, match="choose one of"):
        expected_iterations("svm", {})


def _obvious(con, tuple_ratio, dim_features, n_dims):
    schema = make_star_schema(
        con,
        fact_rows=200_000,  # large enough that fixed costs do not make it a near tie
        fact_features=5,
        n_dims=n_dims,
        dim_rows=int(200_000 / tuple_ratio),
        dim_features=dim_features,
        seed=3,
    )
    return explain(con, schema.query(), target="y", backend="numpy")


def test_shipped_model_decides_the_obvious_cases():
    assert load_model().description.startswith("shipped default")
    con = duckdb.connect()
    high = _obvious(con, 50, 20, 2)  # tuple ratio 50, feature ratio 8 over both dimensions
    assert high.strategy == "factorized"
    assert high.predicted_seconds["factorized"] < high.predicted_seconds["materialized"]
    assert high.model.startswith("shipped default")
    one_to_one = _obvious(con, 1, 5, 1)
    assert one_to_one.strategy == "materialized"
    assert one_to_one.features["tuple_ratio"] == 1.0


def test_explanation_reads_and_serialises(star):
    e = explain(star, "SELECT f.x1, d1.a, d1.b, f.y FROM fact f JOIN d1 ON f.k = d1.k", target="y", backend="numpy")
    assert isinstance(e, Explanation) and e.strategy in ("factorized", "materialized")
    assert set(e.predicted_seconds) == {"factorized", "materialized"}
    assert all(t > 0 for t in e.predicted_seconds.values())
    assert e.reasons[0].startswith(f"{e.strategy} is predicted") and e.reasons[-1].startswith("hardware:")
    back = json.loads(json.dumps(e.to_dict()))
    assert back["strategy"] == e.strategy and back["features"]["rows"] == 100
    text = str(e)
    assert text.startswith(f"strategy: {e.strategy}") and "why:" in text and e.model in text
    assert ilargi_db.explain is explain


def test_a_cross_source_feature_is_explained_as_materialized(star):
    e = explain(star, "SELECT f.x1 * d1.a AS p, d1.b, f.y FROM fact f JOIN d1 ON f.k = d1.k", target="y")
    assert e.strategy == "materialized" and list(e.predicted_seconds) == ["materialized"]
    assert "cannot be computed inside one source" in e.reasons[0] and e.reasons[1].startswith("hardware:")


def test_explain_never_trains_nor_writes(tmp_path, monkeypatch):
    path = str(tmp_path / "db.duckdb")
    con = duckdb.connect(path)
    schema = make_star_schema(con, fact_rows=2000, dim_rows=50, n_dims=1, dim_features=4, fact_features=2)
    con.close()

    def no_fit(*args, **kwargs):
        raise AssertionError("explain trained a model")

    for cls in ilargi_db.training.ALGORITHMS.values():
        monkeypatch.setattr(cls, "fit", no_fit)
    read_only = duckdb.connect(path, read_only=True)  # any write would raise
    e = explain(read_only, schema.query(), target="y", algorithm="logistic_regression", max_iter=5)
    assert e.features["iterations"] == 5
    assert sorted(r[0] for r in read_only.sql("SHOW TABLES").fetchall()) == ["dim0", "fact"]


def test_explain_errors_name_the_fix(star):
    query = "SELECT f.x1, d1.a, f.y FROM fact f JOIN d1 ON f.k = d1.k"
    with pytest.raises(IlargiError, match="unknown algorithm 'svm': choose one of linear_regression"):
        explain(star, query, target="y", algorithm="svm")
    with pytest.raises(IlargiError, match="unknown parameter"):
        explain(star, query, target="y", n_clusterz=3, algorithm="kmeans")


def test_calibrate_rejects_bad_arguments(fresh_cache):
    with pytest.raises(IlargiError, match="choose one of tiny, default"):
        calibrate(grid="huge", cache_dir=fresh_cache)
    for budget in (0, -5):
        with pytest.raises(IlargiError, match="positive number of seconds"):
            calibrate(budget_seconds=budget, grid="tiny", cache_dir=fresh_cache)
    with pytest.raises(IlargiError, match="'numpy' or 'cupy'"):
        calibrate(grid="tiny", backend="auto", cache_dir=fresh_cache)
    assert not (fresh_cache / "calibration-numpy.csv").exists()


def test_tiny_calibration_is_used_by_explain(fresh_cache, star):
    result = calibrate(grid="tiny", progress=False)  # the cache directory comes from ILARGI_CACHE_DIR
    assert result.n_jobs == len(grid_jobs("tiny")) == 6 and result.skipped == 0
    assert result.path == fresh_cache / "calibration-numpy.csv" and result.path.exists()
    assert 0 <= result.accuracy <= 1 and "6 jobs" in str(result)
    e = explain(star, "SELECT f.x1, d1.a, f.y FROM fact f JOIN d1 ON f.k = d1.k", target="y", backend="numpy")
    assert e.model.startswith("calibrated on this machine") and str(result.path) in e.model
    assert "plus the 288 shipped ones" in e.model  # six jobs refine the shipped model, not replace it
    # A budget cut stops after the first job, and says so.
    cut = calibrate(budget_seconds=1e-9, grid="tiny", progress=False, cache_dir=fresh_cache / "cut")
    assert cut.n_jobs == 1 and cut.skipped == 5 and "left out by the time budget" in str(cut)


def test_hardware_is_measured_once_and_cached(fresh_cache):
    hw = detect_hardware(fresh_cache, refresh=True)
    assert hw.cores >= 1 and hw.memory_bandwidth_gbs > 0 and hw.gflops > 0
    assert json.loads((fresh_cache / "hardware.json").read_text())
    assert detect_hardware(fresh_cache) is hw


def test_train_auto_uses_the_estimator(star):
    model = ilargi_db.train(star, "SELECT f.x1, d1.a, d1.b, f.y FROM fact f JOIN d1 ON f.k = d1.k", target="y")
    assert model.strategy_ == model.explanation_.strategy
    assert model.decision_.startswith(f"{model.strategy_}: predicted") and "shipped default" in model.decision_
    forced = ilargi_db.train(
        star, "SELECT f.x1, d1.a, f.y FROM fact f JOIN d1 ON f.k = d1.k", target="y", strategy="materialized"
    )
    assert forced.strategy_ == "materialized" and forced.explanation_ is None


def test_the_fitted_model_is_cached_on_disk_and_predicts_like_scikit_learn(fresh_cache, monkeypatch):
    import numpy as np

    from ilargi_db.cost_model import learned
    from ilargi_db.cost_model.calibration import read_rows

    rows = read_rows(learned.shipped_path())
    X = np.asarray([learned.design_row(r, learned.hardware_of(r))[0] for r in rows])
    y = np.log([r["seconds_factorized"] for r in rows])
    fitted = learned._regressor().fit(X, y)
    trees = learned.Trees.export(fitted)
    ours = [trees.predict_one(x.astype(np.float32)) for x in X]
    np.testing.assert_allclose(ours, fitted.predict(X), rtol=1e-12, atol=1e-12)

    first = load_model(refresh=True)
    assert list(fresh_cache.glob("model-v*.npz"))

    def no_fit(*args, **kwargs):
        raise AssertionError("refitted although the exported trees were cached")

    monkeypatch.setattr(learned.CostModel, "fit", no_fit)
    monkeypatch.setattr(learned, "_MODELS", {})
    second = load_model()
    row = rows[0]
    assert second.predict(row, learned.hardware_of(row)) == first.predict(row, learned.hardware_of(row))


def test_train_falls_back_to_the_cell_rule_when_the_estimator_fails(star, monkeypatch):
    import ilargi_db.cost_model

    def broken(*args, **kwargs):
        raise duckdb.IOException("cannot read")

    monkeypatch.setattr(ilargi_db.cost_model, "explain_graph", broken)
    model = ilargi_db.train(star, "SELECT f.x1, d1.a, f.y FROM fact f JOIN d1 ON f.k = d1.k", target="y")
    assert "Amalur's rule" in model.decision_ and "the cost estimator failed: cannot read" in model.decision_
    assert model.explanation_ is None


@pytest.mark.skipif(_gpu_usable(), reason="a GPU is there: calibrating it works")
def test_calibrating_the_gpu_without_one_says_so(fresh_cache):
    with pytest.raises(ilargi_db.BackendUnavailableError):
        calibrate(grid="tiny", backend="cupy", cache_dir=fresh_cache)


def test_a_near_tie_is_not_called_a_win():
    """11 ms against 11 ms reads as "either way", not "factorized wins there" (issue 11)."""
    from ilargi_db.cost_model.explain import _reasons
    from ilargi_db.cost_model.hardware import Hardware

    features = {
        "comp_ratio": 1.0,
        "n_dimensions": 0,
        "iterations": 20,
        "algorithm": "logistic_regression",
        "fact_fanout": 1.0,
        "categorical_features": 0,
    }
    phases = {"factorized": {"data": 0.0110, "iterations": 0.50}, "materialized": {"data": 0.0112, "iterations": 1.0}}
    predicted = {s: {"analytical": 1.0, "correction": 1.0} for s in phases}
    reasons = _reasons(features, phases, predicted, Hardware(2, 10.0, 50.0), "numpy", chosen="factorized")
    data = next(r for r in reasons if r.startswith("joins and data transfers"))
    assert data == "joins and data transfers out of DuckDB take about 11 ms either way (roofline)"
    iterations = next(r for r in reasons if r.startswith("the training iterations"))
    assert iterations.endswith(
        "500 ms factorized vs 1,000 ms materialized (roofline) over 20 expected iterations "
        "of logistic_regression: factorized wins there"
    )
