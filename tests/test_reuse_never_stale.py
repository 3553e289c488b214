"""Property: whatever the sequence of trainings and table changes, a model trained with reuse equals the
model a fresh database (the same statements replayed, nothing stored) gives."""

from __future__ import annotations

import duckdb
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ilargi_db

SETUP = [
    "CREATE TABLE f AS SELECT range % 12 AS k, sin(range) AS x, ['p', 'q'][range % 2 + 1] AS c, "
    "2.0 * range + cos(range) AS y FROM range(240)",
    "CREATE TABLE d AS SELECT range AS k, cos(range) AS z, ['a', 'b', 'c'][range % 3 + 1] AS kind, "
    "range * 0.5 AS w FROM range(12)",
    "CREATE VIEW dv AS SELECT * FROM d WHERE k % 4 <> 3",
]

QUERIES = [
    ("SELECT f.x, d.z, d.kind, f.y FROM f JOIN d ON f.k = d.k", "y"),
    ("SELECT f.x, d.z, d.kind, d.w, f.y FROM f JOIN d ON f.k = d.k", "y"),  # one more dimension feature
    ("SELECT f.x, f.c, d.z, f.y FROM f LEFT JOIN dv AS d ON f.k = d.k", "y"),  # a view, LEFT JOIN gaps
    ("SELECT f.x, d.z, d.kind FROM f JOIN d ON f.k = d.k WHERE f.x > -0.5", None),  # k-means, a filter
]

CHANGES = st.one_of(
    st.builds(lambda k, v: f"INSERT INTO f VALUES ({k}, {v}, 'q', {v * 3})", st.integers(0, 14), st.floats(-1, 1)),
    st.builds(lambda k, v: f"UPDATE f SET x = x + {v} WHERE k = {k}", st.integers(0, 11), st.floats(-1, 1)),
    st.builds(lambda k: f"UPDATE f SET y = y * 2 WHERE k = {k}", st.integers(0, 11)),
    st.builds(lambda k: f"DELETE FROM f WHERE k = {k} AND x < 0", st.integers(0, 11)),
    st.builds(lambda k, v: f"UPDATE d SET z = {v} WHERE k = {k}", st.integers(0, 11), st.floats(-2, 2)),
    st.builds(lambda k, s: f"UPDATE d SET kind = '{s}' WHERE k = {k}", st.integers(0, 11), st.sampled_from("abcz")),
    st.builds(lambda k: f"UPDATE d SET w = w + 1 WHERE k = {k}", st.integers(0, 11)),
    st.just("ALTER TABLE d ADD COLUMN IF NOT EXISTS extra DOUBLE DEFAULT 1.0"),
    st.just("ALTER TABLE d ALTER z TYPE FLOAT"),
    st.builds(lambda m: f"CREATE OR REPLACE VIEW dv AS SELECT * FROM d WHERE k % {m} <> 0", st.integers(2, 5)),
    st.builds(  # DROP and CREATE under the same name, other content
        lambda s: (
            "DROP VIEW dv; DROP TABLE d; CREATE TABLE d AS SELECT range AS k, cos(range + "
            f"{s}) AS z, ['a', 'b'][range % 2 + 1] AS kind, range * 1.0 AS w FROM range(12); "
            "CREATE VIEW dv AS SELECT * FROM d WHERE k % 4 <> 3"
        ),
        st.integers(0, 3),
    ),
)
TRAININGS = st.tuples(
    st.integers(0, len(QUERIES) - 1), st.sampled_from(["factorized", "auto"]), st.sampled_from([0.1, 1.0, 10.0])
)
STEPS = st.lists(st.one_of(st.tuples(st.just("sql"), CHANGES), st.tuples(st.just("train"), TRAININGS)), max_size=9)


def fit(con: duckdb.DuckDBPyConnection, which: int, strategy: str, alpha: float, reuse: bool):
    query, target = QUERIES[which]
    if target is None:
        return ilargi_db.train(
            con,
            query,
            algorithm="kmeans",
            n_clusters=3,
            random_state=0,
            strategy=strategy,
            backend="numpy",
            reuse=reuse,
        )
    return ilargi_db.train(con, query, target, alpha=alpha, strategy=strategy, backend="numpy", reuse=reuse)


def fresh(statements: list[str]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for statement in statements:
        con.execute(statement)
    return con


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_a_reused_model_equals_a_fresh_databases(steps):
    statements = list(SETUP)
    con = fresh(statements)
    for kind, step in [("train", (0, "factorized", 1.0)), *steps, ("train", (1, "factorized", 2.0))]:
        if kind == "sql":
            con.execute(step)
            statements.append(step)
            continue
        which, strategy, alpha = step
        model = fit(con, which, strategy, alpha, reuse=True)
        oracle = fit(
            fresh(statements), which, "factorized" if strategy == "factorized" else model.strategy_, alpha, reuse=False
        )
        if QUERIES[which][1] is None:
            np.testing.assert_allclose(model.cluster_centers_, oracle.cluster_centers_, rtol=1e-9, atol=1e-12)
        else:
            np.testing.assert_allclose(model.coef_, oracle.coef_, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(model.intercept_, oracle.intercept_, rtol=1e-9, atol=1e-12)
        assert model.n_rows_ == oracle.n_rows_
