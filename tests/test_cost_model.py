"""The cost model: job features, plans and their steps, kernel costs, calibration, explain and auto."""

from __future__ import annotations

import functools
import json
import os

import duckdb
import numpy as np
import pytest

import ilargi_db
from ilargi_db.calibration import calibrate
from ilargi_db.cost_model import Explanation, detect_hardware, job_shape, job_stats
from ilargi_db.cost_model.iterations import expected_iterations, load_history
from ilargi_db.cost_model.kernels import Kernel, KernelCosts, kernel_costs, matrix_terms, probe_load
from ilargi_db.cost_model.plan import candidate_plans, data_shape, matrix_shape
from ilargi_db.datasets import make_star_schema
from ilargi_db.errors import IlargiError
from ilargi_db.models.catalog import NAMES, estimator_class
from ilargi_db.pipeline.planning import plan_graph
from tests.conftest import gpu_usable

explain = functools.partial(ilargi_db.explain, reuse=False)  # the cost model's explanation, the store aside


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """No calibration of this machine unless a test makes one: the priors decide."""
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
    graph = plan_graph(con, query, target)[0]
    stats = job_stats(con, graph)
    return stats, job_shape(stats, algorithm, params)


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
    assert f.rows == 100 and f.columns == 9 and f.n_sources == 3 and f.n_dimensions == 2
    assert f.tuple_ratio_min == 100 / 20 and f.tuple_ratio_max == 100 / 4
    assert f.tuple_ratio == 100 / 24 and f.feature_ratio == 7 / 2
    assert f.redundancy_max == 100 / 4  # d2's four rows each serve 20 (+ gaps) output rows
    assert f.empty_share_max == pytest.approx(0.2)
    assert f.cells_materialized == 900 and f.cells_factorized == 2 * 100 + 6 * 20 + 1 * 4 + 3 * 100
    assert f.comp_ratio == pytest.approx(900 / 624)
    # Zero cells: x2 all, x1 1 of 100, a/b/e 1 of 20 each, w 1 of 4; a one-hot row of 3 columns has 2 zeros.
    assert f.sparsity == pytest.approx((1 + 0.01 + 3 * 0.05 + 0.25 + 2) / 9)
    assert f.categorical_features == 1 and f.categorical_source_rows == 20


def test_m_to_n_join_counts_the_fan_out(star):
    star.execute("CREATE TABLE d3 AS SELECT k, v FROM (SELECT range AS k FROM range(10)), (VALUES (1.0), (2.0)) t(v)")
    stats, f = stats_and_features(star, "SELECT f.x1, d3.v FROM fact f JOIN d3 ON f.k = d3.k")
    assert stats.n_rows == 200 and stats.source("f").referenced == 100
    assert f.fact_fanout == 2.0 and f.rows == 200 and f.tuple_ratio == 10.0


def test_features_match_the_synthetic_schema_ratios():
    con = duckdb.connect()
    schema = make_star_schema(con, fact_rows=4000, fact_features=4, n_dims=2, dim_rows=100, dim_features=12)
    _, f = stats_and_features(con, schema.query(), "y", "kmeans", n_clusters=3, max_iter=7, tol=0.0)
    assert f.tuple_ratio_min == schema.tuple_ratio == 40
    assert f.feature_ratio_max == schema.feature_ratio == 3 and f.feature_ratio == 6
    assert f.rank == 3 and f.redundancy_max == pytest.approx(40, rel=0.02)


def test_expected_iterations_follow_the_parameters():
    assert expected_iterations("linear_regression", "normal", {}).iterations == 1  # one crossprod
    assert expected_iterations("linear_regression", "gd", {"max_iter": 50, "tol": 0}).iterations == 50
    assert expected_iterations("gnmf", "mu", {"max_iter": 500, "tol": 0.0}).iterations == 500
    assert expected_iterations("logistic_regression", "lbfgs", {"max_iter": 10}).iterations == 10
    with pytest.raises(IlargiError, match="choose one of"):
        expected_iterations("svm", "lbfgs", {})


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


def test_the_priors_decide_the_obvious_cases():
    con = duckdb.connect()
    high = _obvious(con, 50, 20, 2)  # tuple ratio 50, feature ratio 8 over both dimensions
    assert high.strategy == "factorized" and high.plan.strategy == "factorized"
    assert high.predicted_seconds["factorized"] < high.predicted_seconds["materialized"]
    assert high.model.startswith("priors scaled to this machine")
    one_to_one = _obvious(con, 1, 5, 1)
    assert one_to_one.strategy == "materialized"
    assert one_to_one.features["tuple_ratio"] == pytest.approx(1.0, rel=0.01)  # the fact is sampled: an estimate


def test_explanation_reads_and_serialises(star):
    e = explain(star, "SELECT f.x1, d1.a, d1.b, f.y FROM fact f JOIN d1 ON f.k = d1.k", target="y", backend="numpy")
    assert isinstance(e, Explanation) and e.strategy in ("factorized", "materialized")
    assert set(e.predicted_seconds) == {"factorized", "materialized"}
    assert all(t > 0 for t in e.predicted_seconds.values())
    assert e.reasons[0].startswith(e.plan.label) and e.reasons[-1].startswith("hardware:")
    back = json.loads(json.dumps(e.to_dict()))
    assert back["strategy"] == e.strategy and back["features"]["rows"] == 100
    assert back["plan"]["solver"] == e.solver == "normal" and back["runner_up"]["label"] == e.runner_up.label
    names = [s["name"] for s in back["plan"]["steps"]]
    assert names == [
        "planning",
        "reading the data",
        "X.T @ X",
        "X.T @ y",
        "solve",
        "solver bookkeeping (loss, updates, Python)",
        "training metrics (X @ w)",
    ]
    assert back["plan"]["seconds"] == pytest.approx(sum(s["seconds"] for s in back["plan"]["steps"]))
    text = str(e)
    assert text.startswith(f"strategy: {e.strategy}") and "why:" in text and e.model in text
    assert f"plan: {e.plan.label}" in text and f"runner-up: {e.runner_up.label}" in text


def test_a_cross_source_feature_is_explained_as_materialized(star):
    e = explain(star, "SELECT f.x1 * d1.a AS p, d1.b, f.y FROM fact f JOIN d1 ON f.k = d1.k", target="y")
    assert e.strategy == "materialized" and list(e.predicted_seconds) == ["materialized"]
    assert "cannot be computed inside one source" in e.reasons[0] and e.reasons[-1].startswith("hardware:")
    assert {p.strategy for p in e.plans} == {"materialized"}


def test_explain_never_trains_nor_writes(tmp_path, monkeypatch):
    path = str(tmp_path / "db.duckdb")
    con = duckdb.connect(path)
    schema = make_star_schema(con, fact_rows=2000, dim_rows=50, n_dims=1, dim_features=4, fact_features=2)
    con.close()

    def no_fit(*args, **kwargs):
        raise AssertionError("explain trained a model")

    for cls in map(estimator_class, NAMES):
        monkeypatch.setattr(cls, "fit", no_fit)
    read_only = duckdb.connect(path, read_only=True)  # any write would raise
    e = explain(read_only, schema.query(), target="y", algorithm="logistic_regression", max_iter=5)
    assert e.plan.iterations.iterations == 5
    assert sorted(r[0] for r in read_only.sql("SHOW TABLES").fetchall()) == ["dim0", "fact"]


def test_explain_errors_name_the_fix(star):
    query = "SELECT f.x1, d1.a, f.y FROM fact f JOIN d1 ON f.k = d1.k"
    with pytest.raises(IlargiError, match="unknown algorithm 'svm': choose one of linear_regression"):
        explain(star, query, target="y", algorithm="svm")
    with pytest.raises(IlargiError, match="unknown parameter"):
        explain(star, query, target="y", n_clusterz=3, algorithm="kmeans")


def test_calibrate_rejects_bad_arguments(fresh_cache):
    with pytest.raises(IlargiError, match="grid must be one of tiny, default"):
        calibrate(grid="huge", cache_dir=fresh_cache)
    for budget in (0, -5):
        with pytest.raises(IlargiError, match="budget_seconds must be a positive number"):
            calibrate(budget_seconds=budget, grid="tiny", cache_dir=fresh_cache)
    with pytest.raises(IlargiError, match="calibrate a concrete backend"):
        calibrate(grid="tiny", backend="auto", cache_dir=fresh_cache)
    assert not list(fresh_cache.glob("kernel_costs*"))


def test_tiny_calibration_is_used_by_explain(fresh_cache, star):
    result = calibrate(grid="tiny", progress=False)  # the cache directory comes from ILARGI_CACHE_DIR
    assert result.path == fresh_cache / "kernel_costs_numpy.json" and result.path.exists()
    assert {"lmm", "rmm", "crossprod", "solve", "factorized_data", "materialized_data"} <= set(result.costs.errors)
    assert "kernel timings" in str(result)
    e = explain(star, "SELECT f.x1, d1.a, f.y FROM fact f JOIN d1 ON f.k = d1.k", target="y", backend="numpy")
    assert e.model.startswith("calibrated on this machine")
    assert kernel_costs(detect_hardware()).coefficients["lmm"] == result.costs.coefficients["lmm"]


def test_fit_kernel_recovers_known_coefficients():
    from ilargi_db.calibration import Measurement, fit_kernel

    truth = {"fixed": 2e-5, "dense_cells": 1e-10, "block_entries": 3e-10, "gathered_rows": 5e-10, "parts": 1e-5}
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(30):
        terms = {t: float(rng.integers(0, 10**7)) for t in truth if t != "fixed"}
        terms["parts"] = float(rng.integers(0, 5))
        seconds = truth["fixed"] + sum(truth[t] * v for t, v in terms.items())
        rows.append(Measurement("lmm", terms, seconds, ""))
    fitted, error = fit_kernel(rows, {t: 1.0 for t in truth})
    for term, value in truth.items():
        assert fitted[term] == pytest.approx(value, rel=1e-6)
    assert error < 0.01


def test_plan_shapes_are_the_matrices_train_builds(star):
    """The cost model's picture of each strategy's matrix matches what reading the data builds."""
    from ilargi_db.pipeline import read_training_data

    query = (
        "SELECT f.x1, f.x2, d1.a, d1.b, d1.colour, d2.w, f.y FROM fact f JOIN d1 ON f.k = d1.k LEFT JOIN d2 USING (c)"
    )
    graph = plan_graph(star, query, "y")[0]
    stats = job_stats(star, graph)
    for strategy in ("factorized", "materialized"):
        shape = matrix_shape(stats, strategy)
        X = read_training_data(star, graph, strategy).X
        assert (shape.n, shape.columns) == X.shape, strategy
        assert data_shape(stats, strategy).join_rows == 100
    factorized, materialized = matrix_shape(stats, "factorized"), matrix_shape(stats, "materialized")
    assert factorized.dense == 2 and len(factorized.parts) == 2
    assert materialized.dense == 5 and len(materialized.parts) == 1
    terms = matrix_terms("lmm", factorized)
    assert terms["dense_cells"] == 200 and terms["gathered_rows"] == 200 and terms["block_entries"] == 20 * 3 + 4


def test_a_busy_machine_slows_the_parallel_steps(star):
    graph = plan_graph(star, "SELECT f.x1, d1.a, f.y FROM fact f JOIN d1 ON f.k = d1.k", "y")[0]
    stats = job_stats(star, graph)
    costs = KernelCosts.prior(detect_hardware())
    idle = candidate_plans(stats, "linear_regression", {}, costs)
    busy = candidate_plans(stats, "linear_regression", {}, costs, load=2.0)
    by_label = {p.label: p for p in idle}
    for plan in busy:
        for step, alone in zip(plan.steps, by_label[plan.label].steps):
            assert step.seconds == pytest.approx(alone.seconds * (2 if step.kernel.parallel else 1))
    assert any(not s.kernel.parallel for s in busy[0].steps) and any(s.kernel.parallel for s in busy[0].steps)
    assert 1.0 <= probe_load(2) <= 8.0


def test_a_gram_above_the_bound_is_not_planned(star):
    costs = KernelCosts.prior(detect_hardware())
    graph = plan_graph(star, "SELECT f.x1, d1.a, f.y FROM fact f JOIN d1 ON f.k = d1.k", "y")[0]
    stats = job_stats(star, graph)
    plans = candidate_plans(stats, "linear_regression", {"max_gram_bytes": 8}, costs)
    assert [p.fits for p in plans] == [True, True, False, False] and plans[0].solver == "cg"
    assert {p.limit for p in plans[2:]} == {"max_gram_bytes"}
    only_normal = candidate_plans(stats, "linear_regression", {"solver": "normal"}, costs)
    assert {p.solver for p in only_normal} == {"normal"}


def test_the_cost_model_prices_what_the_artifact_store_holds():
    from ilargi_db.cost_model.plan import reuse_offer
    from ilargi_db.reuse.holdings import Held, ReadHoldings

    join, x = Held("the key-only join", "database", 0.5, 0.1), Held("feature 'x'", "memory", 0.2, 0.0)
    gram = Held("X^T X and column sums", "database", 0.3, 0.01)
    assert reuse_offer(None) is None and reuse_offer(ReadHoldings(needed=2)) is None
    whole = reuse_offer(ReadHoldings(needed=2, data=(join, x), gram=gram))
    assert whole.data_seconds == pytest.approx(0.1) and whole.sums  # the read priced as loading it
    assert whole.saved_seconds == pytest.approx(1.0)  # what making the join, x and the sums took
    assert whole.data_what == "2 stored artifacts from database and memory"
    assert whole.lines == ("2 of 2 data artifacts (from database and memory)", "X^T X")
    part = reuse_offer(ReadHoldings(needed=3, data=(join,)))
    assert part.data_seconds is None and not part.sums  # a column is missing: the read is not replaced
    matrix = reuse_offer(ReadHoldings(Held("the encoded matrix", "memory", 2.0, 0.0), matrix_gram=True))
    assert (matrix.data_seconds, matrix.sums, matrix.saved_seconds) == (0.0, True, 2.0)
    assert matrix.lines == ("the encoded matrix (in memory)", "X^T X")


def test_streamed_and_distributed_plans_price_the_passes_over_the_rows(star):
    from ilargi_db.cost_model.plan import (
        CLUSTER_PASS_SECONDS,
        CLUSTER_TASK_SECONDS,
        PARTITION_PASS_SECONDS,
        PARTITION_QUERY_SECONDS,
        SPILL_READ_BYTES_PER_SECOND,
        distributed_plan,
        solver_passes,
        streamed_plan,
    )

    costs = KernelCosts.prior(detect_hardware())
    graph = plan_graph(star, "SELECT f.x1, d1.a, f.y > 1 AS big FROM fact f JOIN d1 ON f.k = d1.k", "big")[0]
    stats = job_stats(star, graph)
    (plan,) = [
        p
        for p in candidate_plans(stats, "logistic_regression", {"solver": "lbfgs"}, costs)
        if p.strategy == "factorized"
    ]
    passes = solver_passes("lbfgs", plan.iterations.iterations)
    assert passes == pytest.approx(1.15 * plan.iterations.iterations + 2)
    memory = 2**34
    for needed, tier in ((2**20, "memory"), (2**34, "disk")):  # more than half the memory: read from disk
        streamed = streamed_plan(plan, needed, partitions=7, spill=True, memory=memory)
        steps = {s.name: s for s in streamed.steps}
        again = steps["reading the partitions again"]
        assert again.count == pytest.approx(passes - 1) and tier.replace("memory", "page cache") in again.shape
        per_pass = needed / SPILL_READ_BYTES_PER_SECOND[tier] + 7 * PARTITION_PASS_SECONDS  # bytes, and per partition
        assert again.seconds == pytest.approx((passes - 1) * per_pass)
        assert "spilling the partitions" in steps and streamed.label == "factorized/lbfgs/streamed"
        assert streamed.seconds > plan.seconds and streamed.to_dict()["placement"] == "streamed"
    reread = streamed_plan(plan, 2**20, partitions=7, spill=False, memory=memory)
    steps = {s.name: s for s in reread.steps}
    assert "spilling the partitions" not in steps and "from DuckDB" in steps["reading the partitions again"].shape
    read = next(s for s in plan.steps if s.name == "reading the data").seconds
    again = (passes - 1) * (read + 7 * PARTITION_QUERY_SECONDS)  # the read again, and each partition's query
    assert steps["reading the partitions again"].seconds == pytest.approx(again)
    one, four = distributed_plan(plan, 1), distributed_plan(plan, 4)
    assert four.label == "factorized/lbfgs/distributed"
    scheduling = {p: next(s for s in d.steps if s.name == "scheduling").seconds for p, d in ((1, one), (4, four))}
    assert scheduling[4] == pytest.approx(passes * (CLUSTER_PASS_SECONDS + 4 * CLUSTER_TASK_SECONDS))
    lmm = [next(s for s in d.steps if s.name == "X @ w").seconds for d in (one, four)]
    assert lmm[1] == pytest.approx(lmm[0] / 4)  # the matrix kernels split over the workers
    with pytest.raises(ValueError, match="no pass count"):
        solver_passes("sgd", 3)


def test_iterations_are_learned_from_earlier_runs(star, fresh_cache):
    query = "SELECT f.x1, d1.a, f.y > 1 AS big FROM fact f JOIN d1 ON f.k = d1.k"
    model = ilargi_db.train(star, query, target="big", algorithm="logistic_regression", backend="numpy")
    runs = load_history()["logistic_regression/lbfgs/tol=0.0001/max_iter=100"]
    assert runs == [float(model.n_iter_)]
    e = explain(star, query, target="big", algorithm="logistic_regression", backend="numpy")
    assert e.plan.iterations.iterations == model.n_iter_
    assert e.plan.iterations.source.startswith("median of 1 earlier run")


def test_standardized_runs_are_priced_and_learned_apart(star, fresh_cache):
    """Standardized columns converge otherwise: their iterations are kept under their own key, and the plan
    prices the column statistics standardizing computes."""
    query = "SELECT f.x1, d1.a, f.y > 1 AS big FROM fact f JOIN d1 ON f.k = d1.k"
    model = ilargi_db.train(star, query, "big", algorithm="logistic_regression", standardize=True, backend="numpy")
    history = load_history()
    assert history == {"logistic_regression/lbfgs/tol=0.0001/max_iter=100/standardized": [float(model.n_iter_)]}
    scaled = explain(star, query, "big", algorithm="logistic_regression", backend="numpy", standardize=True)
    assert scaled.plan.iterations.source.startswith("median of 1 earlier run")
    assert any(s.name.startswith("standardizing") for s in scaled.plan.steps)
    raw = explain(star, query, "big", algorithm="logistic_regression", backend="numpy")
    assert raw.plan.iterations.source.startswith("typical of lbfgs")
    assert not any(s.name.startswith("standardizing") for s in raw.plan.steps)


def test_a_full_one_hot_beside_an_intercept_is_priced_as_a_singular_solve(star):
    """Its Gram matrix is singular: the normal equations fall back to least squares (about 7x a Cholesky)."""
    query = "SELECT f.x1, d1.a, d1.colour, f.y FROM fact f JOIN d1 ON f.k = d1.k"
    solve = {
        (alpha, intercept): next(
            s
            for p in explain(star, query, "y", solver="normal", alpha=alpha, fit_intercept=intercept).plans
            for s in p.steps
            if s.name == "solve"
        )
        for alpha in (0.0, 1.0)
        for intercept in (True, False)
    }
    assert "singular" in solve[0.0, True].shape
    assert all("singular" not in solve[key].shape for key in ((1.0, True), (0.0, False), (1.0, False)))
    assert solve[0.0, True].seconds > solve[1.0, True].seconds


def test_hardware_is_measured_once_and_cached(fresh_cache):
    hw = detect_hardware(fresh_cache, refresh=True)
    assert hw.cores >= 1 and hw.memory_bandwidth_gbs > 0 and hw.gflops > 0
    assert json.loads((fresh_cache / "hardware.json").read_text())
    assert detect_hardware(fresh_cache) is hw


PLANNED = "SELECT f.x1, d1.a, d1.b, f.y FROM fact f JOIN d1 ON f.k = d1.k"


def test_auto_training_runs_and_records_the_cost_models_plan(star):
    model = ilargi_db.train(star, PLANNED, target="y")
    assert model.strategy_ == model.explanation_.strategy == model.plan_["strategy"]
    assert model.solver_ == model.plan_["solver"] and model.get_params()["solver"] == "auto"
    assert model.solver_reason_.startswith(f"the cost model's plan: {model.plan_['label']}")
    assert model.decision_.startswith(f"{model.plan_['label']}: predicted")


def test_a_strategy_the_caller_forces_is_recorded_as_the_callers(star):
    forced = ilargi_db.train(
        star, "SELECT f.x1, d1.a, f.y FROM fact f JOIN d1 ON f.k = d1.k", target="y", strategy="materialized"
    )
    assert forced.strategy_ == "materialized" and forced.explanation_ is None
    caller = {"strategy": "materialized", "solver": "normal", "backend": "numpy", "chosen_by": "the caller"}
    assert forced.plan_ == caller


def test_a_saved_model_loads_with_its_plan(star):
    model = ilargi_db.train(star, PLANNED, target="y")
    ilargi_db.install(star)
    ilargi_db.save_model(star, "m", model)
    assert ilargi_db.load_model(star, "m").plan_ == json.loads(json.dumps(model.plan_))


def test_train_falls_back_to_the_cell_rule_when_the_estimator_fails(star, monkeypatch):
    import ilargi_db.cost_model.choose

    def broken(*args, **kwargs):
        raise duckdb.IOException("cannot read")

    monkeypatch.setattr(ilargi_db.cost_model.choose, "explain_graph", broken)
    model = ilargi_db.train(star, "SELECT f.x1, d1.a, f.y FROM fact f JOIN d1 ON f.k = d1.k", target="y")
    assert "Amalur's rule" in model.decision_ and "the cost model failed: cannot read" in model.decision_
    assert model.explanation_ is None


@pytest.mark.skipif(gpu_usable(), reason="a GPU is there: calibrating it works")
def test_calibrating_the_gpu_without_one_says_so(fresh_cache):
    with pytest.raises(ilargi_db.BackendUnavailableError):
        calibrate(grid="tiny", backend="cupy", cache_dir=fresh_cache)


def plan_of(strategy, solver, steps, iterations=1.0):
    """A plan of these steps that fits in memory (the cost model's own types)."""
    from ilargi_db.cost_model.iterations import IterationEstimate
    from ilargi_db.cost_model.plan import PhysicalPlan

    return PhysicalPlan(strategy, solver, "numpy", tuple(steps), IterationEstimate(iterations, ""), 1.0, 0, True)


def test_a_near_tie_is_not_called_a_win():
    """Steps within 10% of each other read as "either way", not as a win (issue 11)."""
    from ilargi_db.cost_model.explain import step_reasons
    from ilargi_db.cost_model.plan import Step, StepKind

    def plan(strategy, data, lmm):
        steps = (
            Step("reading the data", Kernel.data(strategy), "rows", 1, data, kind=StepKind.READ),
            Step("X @ w", Kernel.LMM, "n", 20, lmm, True),
        )
        return plan_of(strategy, "lbfgs", steps, 20)

    reasons = [text for _, text, _ in step_reasons(plan("factorized", 0.0110, 0.5), plan("materialized", 0.0112, 1))]
    assert reasons[0] == "reading the data takes about 11 ms either way"
    assert reasons[1].startswith("X @ w takes 500 ms factorized/lbfgs (n) vs 1 s materialized/lbfgs (n)")


def test_amalur_rule_factorizes_when_the_join_holds_over_one_and_a_half_times_the_normalized_cells():
    from ilargi_db.cost_model.shape_rule import FACTORIZE_ABOVE, cell_ratio, join_cells, shape_strategy

    # A fact of 1,000 rows x 2 columns and a dimension of 10 rows x 8: the join repeats the dimension's rows.
    materialized, factorized = join_cells(1_000, [(1_000, 2), (10, 8), (5, 0)], 10)
    assert (materialized, factorized) == (1_000 * 10, 1_000 * 2 + 10 * 8 + 2 * 1_000)  # a row index per block
    assert shape_strategy(cell_ratio(materialized, factorized)) == "factorized"
    assert shape_strategy(cell_ratio(*join_cells(1_000, [(1_000, 2), (1_000, 8)], 10))) == "materialized"
    assert FACTORIZE_ABOVE == 1.5 and shape_strategy(FACTORIZE_ABOVE) == "materialized"  # strictly more


def reading(strategy, solver, seconds, iterations=1.0, spread=0.2, iteration_spread=0.0):
    """A plan whose one step reads the data in ``seconds`` (``spread``: its kernel model's), once per iteration
    when ``iteration_spread`` says the iteration count is unsure."""
    from dataclasses import replace

    from ilargi_db.cost_model.iterations import IterationEstimate
    from ilargi_db.cost_model.plan import Step, StepKind

    iterative = iteration_spread > 0
    read = Kernel.data(strategy)
    step = Step("reading the data", read, "rows", 1, seconds, iterative, spread, iterative, StepKind.READ)
    plan = plan_of(strategy, solver, [step], iterations)
    return replace(plan, iterations=IterationEstimate(iterations, "", iteration_spread))


def test_a_tie_on_expected_regret_between_strategies_goes_to_the_one_the_shape_favours():
    from ilargi_db.cost_model.explain import choose_plan

    factorized, materialized = reading("factorized", "normal", 0.100), reading("materialized", "normal", 0.1005)
    chosen, why, _ = choose_plan([factorized, materialized], 1.1, 10)
    assert chosen is materialized and "the join holds 1.1x the sources' cells, so materialized" in why
    # The shape favours the cheapest already: nothing to say.
    assert choose_plan([factorized, materialized], 3.0, 10)[:2] == (factorized, "")


def test_plans_further_apart_than_their_errors_go_to_the_cheaper():
    from ilargi_db.cost_model.explain import choose_plan

    factorized, far = reading("factorized", "normal", 0.100), reading("materialized", "normal", 0.150)
    chosen, why, confidence = choose_plan([factorized, far], 1.1, 10)
    assert (chosen, why) == (factorized, "")
    assert confidence.probability_fastest["factorized/normal"] > 0.9
    regret = confidence.expected_regret
    assert regret["factorized/normal"] < 0.02 < 0.3 < regret["materialized/normal"]


def test_a_narrow_tie_between_solvers_goes_to_the_direct_one_and_a_wide_one_to_the_cheaper():
    from ilargi_db.cost_model.explain import DIRECT_SOLVER_COLUMNS, choose_plan

    cg, normal = reading("factorized", "cg", 0.100, 60), reading("factorized", "normal", 0.1004)
    chosen, why, _ = choose_plan([cg, normal], 3.0, 10)
    assert chosen is normal and "a direct solver (10 columns)" in why
    assert choose_plan([cg, normal], 3.0, DIRECT_SOLVER_COLUMNS + 1)[0] is cg


def test_a_plan_predicted_faster_but_unsure_loses_to_a_sure_one_close_behind():
    """A guessed iteration count (spread 0.6) has a long tail of slow runs: 8% faster on the median is not enough."""
    from ilargi_db.cost_model.explain import choose_plan

    guessed = reading("factorized", "cg", 0.092, 60, iteration_spread=0.6)
    direct = reading("factorized", "normal", 0.100)
    chosen, why, confidence = choose_plan([guessed, direct], 3.0, 5_000)
    assert chosen is direct
    assert "factorized/normal over factorized/cg, predicted faster" in why and "less sure" in why
    assert confidence.expected_regret["factorized/normal"] < confidence.expected_regret["factorized/cg"]
    low, high = confidence.ranges["factorized/cg"]
    assert low < 0.092 < high and high / low > 3  # the guess is wide
    # Far ahead, the unsure plan wins all the same.
    assert (
        choose_plan([reading("factorized", "cg", 0.03, 60, iteration_spread=0.6), direct], 3.0, 5_000)[0].solver == "cg"
    )


def test_the_choice_is_the_same_every_time():
    """Seeded draws: a near tie is decided the same way in every process (no coin flip)."""
    from ilargi_db.cost_model.explain import choose_plan

    plans = [reading("factorized", "cg", 0.100, 60, iteration_spread=0.3), reading("materialized", "cg", 0.101)]
    picks = {choose_plan(plans, 3.0, 5_000)[0].label for _ in range(20)}
    assert len(picks) == 1


def test_the_load_probe_shares_the_cores_with_the_other_processes_tasks():
    readings = []

    def others(count):
        def read():
            readings.append(count)
            return count

        return read

    assert probe_load(2, read_others=others(2.0)) == 2.0  # two other processes want a core each
    assert readings and set(readings) == {2.0}  # sampled, about once a millisecond
    assert probe_load(4, read_others=others(2.0)) == 1.5
    assert probe_load(2, read_others=others(0.0)) == 1.0  # idle cores
    assert probe_load(2, read_others=others(100.0)) == 8.0  # clipped


def test_the_load_probe_reads_the_kernels_count_of_other_processes_tasks():
    from ilargi_db.cost_model.kernels import other_running_tasks

    reading = other_running_tasks()
    if os.path.exists("/proc/loadavg"):
        assert reading is not None and reading >= 0.0  # this process's own threads left out
    else:
        assert reading is None  # the probe falls back to the load average


def test_a_pinned_plan_load_prices_every_plan_for_it_however_busy_the_machine(monkeypatch):
    con = duckdb.connect()
    schema = make_star_schema(con, fact_rows=5_000, fact_features=2, n_dims=1, dim_rows=200, dim_features=4)
    monkeypatch.setenv("ILARGI_PLAN_LOAD", "3")
    busy = ilargi_db.explain(con, schema.query(), "y")
    assert busy.features["load"] == 3.0
    assert any("other processes hold the cores" in reason for reason in busy.reasons)
    monkeypatch.setenv("ILARGI_PLAN_LOAD", "1")
    assert ilargi_db.explain(con, schema.query(), "y").features["load"] == 1.0


@pytest.mark.parametrize("value", ["busy", "0.5", "nan", "9"])
def test_a_plan_load_that_is_not_a_load_is_refused_naming_the_variable(monkeypatch, value):
    con = duckdb.connect()
    schema = make_star_schema(con, fact_rows=2_000, fact_features=2, n_dims=1, dim_rows=100, dim_features=2)
    monkeypatch.setenv("ILARGI_PLAN_LOAD", value)
    with pytest.raises(IlargiError, match=r"ILARGI_PLAN_LOAD=.* must be a number from 1 \(idle cores\) to 8"):
        ilargi_db.train(con, schema.query(), "y")


def test_reuse_prices_the_steps_by_what_they_do():
    """The read and X^T X of a factorized plan are kinds of step: stored artifacts replace those, whatever the
    steps are called (a step's name is only its display)."""
    from ilargi_db.cost_model.plan import ReuseOffer, StepKind

    con = duckdb.connect()
    schema = make_star_schema(con, fact_rows=2_000, fact_features=2, n_dims=1, dim_rows=50, dim_features=3)
    stats = job_stats(con, plan_graph(con, schema.query(), "y")[0])
    costs = kernel_costs(detect_hardware())
    params = {"solver": "normal"}
    cold = candidate_plans(stats, "linear_regression", params, costs, strategies=("factorized",))
    assert {s.kind for s in cold[0].steps} >= {StepKind.READ, StepKind.GRAM}
    offer = ReuseOffer(data_seconds=0.001, data_what="stored", sums=True)
    (warm,) = candidate_plans(stats, "linear_regression", params, costs, strategies=("factorized",), reuse=offer)
    reused = [s for s in warm.steps if s.kind in (StepKind.READ, StepKind.GRAM)]
    assert [s.kernel for s in reused] == ["reuse", "reuse"] and reused[1].seconds == 0.0
