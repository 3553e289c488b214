"""A training query may pick some of its join's rows: a seeded sample, or LIMIT over an order DuckDB repeats.

Every read of one training sees the same rows, and those are the rows DuckDB's own result of the query holds.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pytest
import sklearn.linear_model

import ilargi_db
from ilargi_db.errors import IlargiError, PlanError
from tests.conftest import loading_artifacts_costs_nothing

FACT_ROWS = 300_000  # three of DuckDB's 122,880-row row groups: threads read them in any order

SEEDED = [
    "SELECT f.x, f.w, d.z, f.y FROM f JOIN d ON f.k = d.k USING SAMPLE 10% (bernoulli, 42)",
    "SELECT f.x, f.w, d.z, f.y FROM f JOIN d ON f.k = d.k USING SAMPLE 5000 ROWS (reservoir, 7)",
    "SELECT f.x, f.w, d.z, f.y FROM f JOIN d ON f.k = d.k WHERE f.w > 1 "
    "USING SAMPLE reservoir(4000 ROWS) REPEATABLE (3)",
    "SELECT f.x, f.w, d.z, f.y FROM f TABLESAMPLE bernoulli(5%) REPEATABLE (42) JOIN d ON f.k = d.k",
    "SELECT f.x, f.w, d.z, f.y FROM f TABLESAMPLE 3000 ROWS (reservoir, 1) LEFT JOIN d ON f.k = d.k",
    "SELECT f.x, f.w, d.z, f.y FROM fv AS f JOIN d ON f.k = d.k USING SAMPLE 10% (bernoulli, 42)",
    "SELECT f.x, f.w, d.z, f.y FROM fv AS f TABLESAMPLE 2% (bernoulli, 5) JOIN d ON f.k = d.k",
    "SELECT f.x, f.w, d.z, f.y FROM d JOIN f TABLESAMPLE 2% (bernoulli, 5) ON f.k = d.k",  # the fact is scanned
    "SELECT f.x, f.w, d.z, f.y FROM f JOIN d TABLESAMPLE 50% (bernoulli, 9) ON f.k = d.k",  # a dimension sampled
    "SELECT f.x, f.w, d.z, f.y FROM 'fact.parquet' AS f JOIN d ON f.k = d.k USING SAMPLE 1% (bernoulli, 42)",
    "SELECT f.x, f.w, d.z, f.y FROM read_parquet('fact.parquet') AS f TABLESAMPLE 1000 ROWS (reservoir, 4) "
    "JOIN d ON f.k = d.k",
]


@pytest.fixture(scope="module")
def star(tmp_path_factory):
    con = duckdb.connect()
    con.execute("SET threads = 4")  # more threads than cores: row groups finish in any order
    con.execute(f"""
        CREATE TABLE f AS SELECT range AS id, range % 97 AS k, ((range * 7919) % 10007) / 1000.0 AS x,
            (range % 13) * 0.5 AS w, ((range * 31) % 101) / 10.0 + (range % 13) AS y FROM range({FACT_ROWS});
        CREATE TABLE d AS SELECT range AS k, sqrt(range) AS z FROM range(90);
        CREATE VIEW fv AS SELECT * FROM f;
    """)
    folder = tmp_path_factory.mktemp("sampling")
    con.execute(f"COPY f TO '{folder / 'fact.parquet'}'")
    con.execute(f"SET file_search_path = '{folder}'")
    yield con
    con.close()


def duckdb_rows(con, query):
    """DuckDB's own result of the query: the features (NULL as the training mean, as train imputes) and the target."""
    values = con.sql(query).fetchnumpy()
    columns = [np.ma.filled(np.ma.asarray(v, dtype=float), np.nan) for v in values.values()]
    T = np.column_stack(columns[:-1])
    return np.where(np.isnan(T), np.nanmean(T, axis=0), T), columns[-1]


def assert_fits(model, T, y):
    reference = sklearn.linear_model.LinearRegression().fit(T, y)
    assert model.n_rows_ == len(y)
    np.testing.assert_allclose(model.predict(T), reference.predict(T), rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("query", SEEDED)
@pytest.mark.parametrize("strategy", ["factorized", "materialized"])
def test_a_seeded_sample_trains_on_the_rows_duckdb_returns_for_it(star, query, strategy):
    T, y = duckdb_rows(star, query)
    assert 0 < len(y) < FACT_ROWS
    model = ilargi_db.train(star, query, "y", "linear_regression", strategy=strategy, reuse=False)
    assert_fits(model, T, y)


# The strategy is fixed: auto may pick another plan when the sample's rows are already read, or when the machine
# is busy, and two plans sum the same rows in a different order (equal to rounding, not to the bit).
@pytest.mark.parametrize("strategy", ["factorized", "materialized"])
def test_a_sampled_training_is_the_same_model_every_time_with_reuse_or_without(star, strategy):
    query = SEEDED[2]  # not a query later tests expect to find unstored
    cold = ilargi_db.train(star, query, "y", "linear_regression", strategy=strategy, reuse=False)
    first = ilargi_db.train(star, query, "y", "linear_regression", strategy=strategy)
    again = ilargi_db.train(star, query, "y", "linear_regression", strategy=strategy)
    assert again.reused_  # the sample's rows, read once, serve the second training
    for model in (first, again):
        np.testing.assert_array_equal(model.coef_, cold.coef_)
        assert model.intercept_ == cold.intercept_


@pytest.mark.parametrize("query", [SEEDED[0], SEEDED[7]])  # sampled in the join; in the fact's own scan
def test_a_feature_added_to_a_sampled_job_reads_its_column_for_the_sampled_rows_alone(star, query, monkeypatch):
    loading_artifacts_costs_nothing(monkeypatch)
    narrow = query.replace("f.w, ", "")
    ilargi_db.train(star, narrow, "y", "linear_regression", strategy="factorized")
    wider = ilargi_db.train(star, query, "y", "linear_regression", strategy="factorized")
    assert any("the key-only join" in line for line in wider.reused_)
    assert_fits(wider, *duckdb_rows(star, query))


def test_a_sample_never_reuses_the_rows_of_the_whole_join_or_of_another_sample(star):
    whole = "SELECT f.x, f.w, d.z, f.y FROM f JOIN d ON f.k = d.k"
    ilargi_db.train(star, whole, "y", "linear_regression")
    for query in (f"{whole} USING SAMPLE 1% (bernoulli, 11)", f"{whole} USING SAMPLE 1% (bernoulli, 12)"):
        model = ilargi_db.train(star, query, "y", "linear_regression")
        assert_fits(model, *duckdb_rows(star, query))


@pytest.mark.parametrize(
    "query, as_duckdb_orders_it",
    [
        # ORDER BY a unique key: DuckDB's answer is deterministic, and ilargi_db's is the same rows.
        (
            "SELECT f.x, f.w, d.z, f.y FROM f JOIN d ON f.k = d.k ORDER BY f.id DESC LIMIT 2000 OFFSET 10",
            "SELECT f.x, f.w, d.z, f.y FROM f JOIN d ON f.k = d.k ORDER BY f.id DESC LIMIT 2000 OFFSET 10",
        ),
        # No ORDER BY: the first rows of the fact in storage (rowid) order.
        (
            "SELECT f.x, f.w, d.z, f.y FROM f JOIN d ON f.k = d.k LIMIT 3000",
            "SELECT f.x, f.w, d.z, f.y FROM f JOIN d ON f.k = d.k ORDER BY f.rowid LIMIT 3000",
        ),
        # Ties at the cut (w takes 13 values): broken by the fact's rowid, then the dimension's.
        (
            "SELECT f.x, f.w, d.z, f.y FROM f LEFT JOIN d ON f.k = d.k ORDER BY f.w LIMIT 2500",
            "SELECT f.x, f.w, d.z, f.y FROM f LEFT JOIN d ON f.k = d.k ORDER BY f.w, f.rowid, d.rowid LIMIT 2500",
        ),
        (
            "SELECT f.x, f.w, d.z, f.y FROM f JOIN d ON f.k = d.k USING SAMPLE 10% (bernoulli, 42) LIMIT 1000",
            "SELECT f.x, f.w, d.z, f.y FROM f JOIN d ON f.k = d.k USING SAMPLE 10% (bernoulli, 42) "
            "ORDER BY f.rowid LIMIT 1000",
        ),
    ],
)
@pytest.mark.parametrize("strategy", ["factorized", "materialized"])
def test_limit_trains_on_the_first_rows_of_its_order_then_of_the_rowids(star, query, as_duckdb_orders_it, strategy):
    model = ilargi_db.train(star, query, "y", "linear_regression", strategy=strategy, reuse=False)
    assert_fits(model, *duckdb_rows(star, as_duckdb_orders_it))


def test_the_plan_counts_the_rows_a_sample_or_limit_keeps(star):
    limited = ilargi_db.explain(star, "SELECT f.x, d.z, f.y FROM f JOIN d ON f.k = d.k LIMIT 1000", "y")
    assert limited.features["rows"] == 1000
    sampled = "SELECT f.x, d.z, f.y FROM f JOIN d ON f.k = d.k USING SAMPLE 1000 ROWS (reservoir, 1)"
    assert ilargi_db.explain(star, sampled, "y").features["rows"] == 1000


@pytest.mark.parametrize(
    "query, says",
    [
        ("SELECT f.x, f.y FROM f USING SAMPLE 10%", "draws whole vectors"),  # a percentage: system by default
        ("SELECT f.x, f.y FROM f USING SAMPLE 10% (system, 42)", "Sample by bernoulli or reservoir with a seed"),
        ("SELECT f.x, f.y FROM f USING SAMPLE 10% (bernoulli)", "has no seed"),
        ("SELECT f.x, f.y FROM f USING SAMPLE 1000 ROWS", "USING SAMPLE RESERVOIR .1000 ROWS. has no seed"),
        ("SELECT f.x, f.y FROM f TABLESAMPLE reservoir(100 ROWS)", "has no seed"),
        ("SELECT s.x, s.y FROM (SELECT * FROM f USING SAMPLE 1%) AS s", "draws whole vectors"),
        ("SELECT f.x, f.y FROM fv AS f LIMIT 100", "source 'f' is not a base table"),
        ("SELECT f.x, f.y FROM f LIMIT 10%", "must be a number of rows"),
        ("SELECT f.x, f.y FROM f ORDER BY f.x LIMIT 1 + 1", "must be a number of rows"),
    ],
)
def test_a_selection_that_could_pick_other_rows_on_another_read_is_refused_with_the_fix(star, query, says):
    with pytest.raises(PlanError, match=says):
        ilargi_db.train(star, query, "y", "linear_regression")


def test_a_sample_over_the_memory_budget_is_not_streamed(star):
    query = "SELECT f.x, f.w, f.y FROM f USING SAMPLE 50% (bernoulli, 42)"
    with pytest.raises(IlargiError, match="cannot keep the rows that USING SAMPLE BERNOULLI"):
        ilargi_db.train(star, query, "y", "linear_regression", memory_budget="1MB")


def test_explain_says_a_sample_over_the_memory_budget_cannot_stream(star):
    query = "SELECT f.x, f.w, f.y FROM f USING SAMPLE 50% (bernoulli, 42)"
    explanation = ilargi_db.explain(star, query, "y", memory_budget="1MB")
    assert explanation.placed is None
    assert "cannot keep the rows that USING SAMPLE BERNOULLI (50 PERCENT)" in explanation.reasons[-1]


def test_a_sample_is_not_sent_to_a_cluster(star):
    query = "SELECT f.x, f.w, f.y FROM 'fact.parquet' AS f USING SAMPLE 1% (bernoulli, 42)"
    with pytest.raises(IlargiError, match="training on a cluster reads its files apart"):
        ilargi_db.train(star, query, "y", "linear_regression", cluster="tcp://127.0.0.1:1")  # refused before connecting


@pytest.mark.parametrize("query", [SEEDED[1], SEEDED[3]])
def test_trees_on_a_sample_grow_alike_from_the_factorized_and_the_materialized_read(star, query):
    T, y = duckdb_rows(star, query)
    fits = [
        ilargi_db.train(star, query, "y", "gradient_boosting", strategy=s, n_estimators=5, reuse=False)
        for s in ("factorized", "materialized")
    ]
    assert fits[0].n_rows_ == fits[1].n_rows_ == len(y)
    np.testing.assert_allclose(fits[0].predict(T), fits[1].predict(T), rtol=1e-9)


def test_evaluate_scores_the_rows_of_the_sample(star):
    query = SEEDED[1]
    model = ilargi_db.train(star, SEEDED[0], "y", "linear_regression", reuse=False)
    T, y = duckdb_rows(star, query)
    metrics = ilargi_db.evaluate(star, model, query)
    assert metrics["rows"] == len(y)
    np.testing.assert_allclose(metrics["mae"], np.abs(model.predict(T) - y).mean(), rtol=1e-9)


@pytest.mark.parametrize(
    "sample",
    ["USING SAMPLE 10% (bernoulli, 42)", "USING SAMPLE 5000 ROWS (reservoir, 42)", "USING SAMPLE 3% (reservoir, 1)"],
)
def test_duckdb_draws_the_same_rows_for_a_seed_whatever_its_threads(star, sample):
    """What the rule rests on (a DuckDB upgrade that breaks it fails here): seeded bernoulli and reservoir samples
    are the same rows on every run and thread count, sampled in the query or in the table before a join."""
    drawn: dict[str, set] = {}
    for threads in (1, 2, 4, 8):
        star.execute(f"SET threads = {threads}")
        for query in (f"SELECT f.id FROM f {sample}", f"SELECT f.id FROM f JOIN d ON f.k = d.k {sample}"):
            for _ in range(2):
                rows = tuple(sorted(id_ for (id_,) in star.execute(query).fetchall()))
                drawn.setdefault(query, set()).add(rows)
    star.execute("SET threads = 4")
    assert all(len(samples) == 1 for samples in drawn.values())


def test_the_readme_states_the_rule_the_planner_keeps(star):
    """The README's examples of a seeded sample plan; the sample it says is refused is, with its fix."""
    from pathlib import Path

    from ilargi_db.plan import build_join_graph

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    rule = text[text.index("A quick try on some of the rows") :]
    rule = rule[: rule.index("\n\n", rule.index("**`LIMIT n [OFFSET m]`**"))]
    accepted = ["USING SAMPLE 10% (bernoulli, 42)", "USING SAMPLE 10000 ROWS (reservoir, 42)"]
    assert all(f"`... {clause}`" in rule for clause in accepted)
    for clause in accepted:
        build_join_graph(star, f"SELECT f.x, f.y FROM f {clause}", "y")
    assert "`system` (what a bare `USING SAMPLE 10%` means)" in rule
    with pytest.raises(PlanError, match="Sample by bernoulli or reservoir with a seed"):
        build_join_graph(star, "SELECT f.x, f.y FROM f USING SAMPLE 10%", "y")


def test_a_query_to_score_previews_rows_with_a_limit_over_any_source(star):
    """Scoring reads its rows once: a LIMIT over a view takes the rows DuckDB returns (training refuses it)."""
    model = ilargi_db.train(star, "SELECT f.x, f.w, d.z, f.y FROM f JOIN d ON f.k = d.k", "y", "linear_regression")
    preview = "SELECT f.x, f.w, d.z, f.y FROM fv AS f JOIN d ON f.k = d.k ORDER BY f.id LIMIT 50"
    every = "SELECT f.x, f.w, d.z, f.y FROM f JOIN d ON f.k = d.k ORDER BY f.id"
    np.testing.assert_allclose(ilargi_db.predict(star, model, preview), ilargi_db.predict(star, model, every)[:50])
    assert ilargi_db.evaluate(star, model, preview.replace("LIMIT 50", "LIMIT 70"))["rows"] == 70
    unordered = ilargi_db.predict(star, model, "SELECT f.x, f.w, d.z FROM fv AS f JOIN d ON f.k = d.k LIMIT 5")
    assert unordered.shape == (5,)
    with pytest.raises(PlanError, match="source 'f' is not a base table"):
        ilargi_db.train(star, preview, "y", "linear_regression")
