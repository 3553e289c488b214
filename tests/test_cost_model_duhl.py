"""DuHL in the cost model: priced in memory and streamed, chosen where its passes cost less."""

from __future__ import annotations

import duckdb
import pytest

import ilargi_db
from ilargi_db.cost_model import job_stats
from ilargi_db.cost_model.hardware import Hardware
from ilargi_db.cost_model.kernels import KernelCosts
from ilargi_db.cost_model.plan import candidate_plans, cheapest_streamed, duhl_passes, streamed_plan
from ilargi_db.models.catalog import Strategy
from ilargi_db.pipeline.planning import plan_graph

# Fixed priors (not this machine's measurements): the choice below depends on them only.
COSTS = KernelCosts.prior(Hardware(cores=2, memory_bandwidth_gbs=40.0, gflops=30.0))
ROWS, COLUMNS = 200_000, 20
RIDGE = {"alpha": 1.0, "max_gram_bytes": 1}  # as for data too wide for the normal equations: cg or duhl
DUHL_KEY = "linear_regression/duhl/tol=1e-06/max_iter=1000"


@pytest.fixture(scope="module")
def dense():
    """A fact of dense numeric columns: DuHL's dense rows take about what the streamed partitions take."""
    con = duckdb.connect()
    columns = ", ".join(f"sin(range * {j + 1}) AS x{j}" for j in range(COLUMNS))
    con.execute(f"CREATE TABLE fact AS SELECT {columns}, range % 7 AS y FROM range({ROWS})")
    query = "SELECT " + ", ".join(f"x{j}" for j in range(COLUMNS)) + ", y FROM fact"
    return con, query


def factorized_plans(con, query, history):
    stats = job_stats(con, plan_graph(con, query, "y")[0])
    plans = candidate_plans(
        stats, "linear_regression", RIDGE, COSTS, strategies=(Strategy.FACTORIZED,), history=history
    )
    return {p.solver: p for p in plans}


def streamed(plans, partitions, spill):
    needed = 8 * ROWS * (COLUMNS + 1)
    return cheapest_streamed([streamed_plan(p, needed, partitions, spill, memory=2**36) for p in plans.values()])


def test_the_choice_flips_to_duhl_under_a_budget_when_its_passes_cost_more_than_its_steps(dense):
    con, query = dense
    # DuHL converged here in 20 iterations streamed before (learned apart: in memory it iterates over one
    # block, streamed partition by partition); conjugate gradients take their typical 60.
    plans = factorized_plans(con, query, {f"{DUHL_KEY}/streamed": [20.0] * 3})
    fitting = sorted((p for p in plans.values() if p.fits), key=lambda p: p.seconds)
    assert fitting[0].solver == "cg"  # in memory: its parallel products beat DuHL's serial coordinate steps
    # Over the budget, in 5 partitions re-read from DuckDB (no spill) on every pass: DuHL holds one of them
    # and reads the others about 2.75 times an iteration, conjugate gradients read all of them every iteration.
    chosen, why = streamed(plans, partitions=5, spill=False)
    assert chosen.solver == "duhl" and chosen.placement == "streamed"
    assert (
        why.startswith("streamed, duhl chosen: duhl") and "cg " in why and "normal would exceed max_gram_bytes" in why
    )
    again = {s.name: s for s in chosen.steps}["reading the partitions again"]
    assert again.count == pytest.approx(duhl_passes(20.0, 5, 1) - 1) and "1 held by DuHL" in again.shape
    # Where DuHL needs as many iterations as its typical count (40), its passes cost more: cg streams; runs in
    # memory teach nothing about streamed ones.
    assert streamed(factorized_plans(con, query, {DUHL_KEY: [5.0] * 3}), partitions=5, spill=False)[0].solver == "cg"


def test_duhl_is_not_a_candidate_without_a_penalty_nor_where_not_one_partition_fits_dense(dense):
    con, query = dense
    stats = job_stats(con, plan_graph(con, query, "y")[0])
    unpenalized = candidate_plans(stats, "linear_regression", {"max_gram_bytes": 1}, COSTS)
    assert {p.solver for p in unpenalized} == {"normal", "cg"}  # ridge needs alpha > 0 for the dual
    plan = factorized_plans(con, query, {})["duhl"]
    # A partition dense bigger than the room the budget keeps for two of them (wide one-hot rows, say):
    tight = streamed_plan(plan, needed=plan.held_bytes // 4, partitions=8, spill=True, memory=2**36)
    assert not tight.fits and "DuHL's working set" in tight.limit


def test_duhl_passes_fall_as_more_of_the_partitions_are_held():
    assert duhl_passes(10.0, 8, 8) == 3.0  # all held: the column means, the loss and the metrics
    passes = [duhl_passes(10.0, 8, held) for held in range(1, 9)]
    assert passes == sorted(passes, reverse=True)


def test_explain_says_which_solver_streams_and_why(dense):
    con, query = dense
    explanation = ilargi_db.explain(con, query, "y", backend="numpy", reuse=False, memory_budget="16MB", **RIDGE)
    line = next(r for r in explanation.reasons if r.startswith("would stream"))
    assert "streamed, " in line and "duhl" in line and "passes over the partitions" in line
    assert explanation.placed is not None and explanation.placed.solver in ("cg", "duhl")
