"""A tree model's macro finds each tree's leaf by bit masks read from ``ilargi.tree_leaves`` (sql_functions/
tree_leaf_masks): its NumPy reference scores as the ensemble does, to the bit, and the macro equals ``predict`` on
random data (text and numbers, NULL and NaN, categories training never saw, every objective); trees of more than
63 leaves keep a ``CASE`` per split; the rows live and die with the model."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

import ilargi_db
from ilargi_db.sql_functions.tree_leaf_masks import MAX_LEAVES, LeafMasks, fits_leaf_masks

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def macro_text(con, name: str) -> str:
    found = con.execute("SELECT macro_definition FROM duckdb_functions() WHERE function_name = ?", [name])
    return found.fetchone()[0]


@SETTINGS
@given(
    rows=st.integers(40, 400),
    features=st.integers(1, 4),
    leaves=st.integers(2, MAX_LEAVES),
    trees=st.integers(1, 6),
    bins=st.sampled_from([4, 16, 255]),
    seed=st.integers(0, 2**16),
)
def test_the_masks_reference_gives_each_row_the_leaves_its_trees_send_it_to(rows, features, leaves, trees, bins, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, features)) * rng.choice([1e-6, 1.0, 1e9], size=features)
    X[rng.random(X.shape) < 0.1] = np.nan
    y = np.nan_to_num(X[:, 0] / np.nanstd(X[:, 0])) ** 2 + rng.normal(size=rows)
    model = ilargi_db.GradientBoostingRegressor(
        n_estimators=trees, max_leaves=leaves, max_bins=bins, min_samples_leaf=1, learning_rate=0.5
    ).fit(X, y)
    masks = LeafMasks([model.trees_], [model.baseline_], model.bins_)
    binned = np.column_stack([b.codes(X[:, j], model.missing_bin_) for j, b in enumerate(model.bins_)])
    np.testing.assert_array_equal(masks.scores(masks.row_codes(binned))[0], model.predict(X))


KINDS = ["a", "b", "c", None]


@SETTINGS
@given(
    teams=st.sampled_from([3, 80]),  # a few categories, or more than a CASE writer lists
    objective=st.sampled_from(["regression", "binary", "multiclass", "forest"]),
    leaves=st.sampled_from([2, 7, 31, MAX_LEAVES]),
    seed=st.integers(0, 2**16),
)
def test_the_macro_equals_predict_on_random_data(teams, objective, leaves, seed):
    con = ilargi_db.connect()
    con.execute(
        f"CREATE TABLE t AS SELECT range AS id, CASE WHEN hash(range + {seed}) % 13 = 0 THEN NULL "
        f"ELSE 'k' || (hash(range * 3 + {seed}) % {teams})::VARCHAR END AS team, "
        f"CASE WHEN range % 11 = 0 THEN NULL WHEN range % 17 = 0 THEN 'NaN'::DOUBLE "
        f"ELSE (hash(range * 7 + {seed}) % 1000) / 37.0 END AS x, (hash(range * 5 + {seed}) % 9)::INTEGER AS n "
        "FROM range(900)"
    )
    con.execute(
        "CREATE TABLE d AS SELECT *, coalesce(length(team), 0) + coalesce(x, 3) * 0.2 + n AS y, "
        "(coalesce(x, 5) > 13)::INTEGER + (n > 5)::INTEGER AS grade FROM t"
    )
    labels = "'g' || grade::VARCHAR"  # three classes, as text
    target = {"regression": "y", "binary": "grade > 0", "multiclass": labels, "forest": labels}[objective]
    algorithm = "random_forest" if objective == "forest" else "gradient_boosting"
    query = f"SELECT team, x, n, {target} AS label FROM d WHERE id < 700"
    model = ilargi_db.train(
        con, query, "label", algorithm, n_estimators=5, max_leaves=leaves, min_samples_leaf=3, random_state=seed
    )
    assert fits_leaf_masks(model.trees_)
    ilargi_db.save_model(con, "m", model)
    assert "tree_leaves" in macro_text(con, "m_predict")
    # Scored on rows training never saw, a category it never saw among them.
    con.execute("UPDATE d SET team = 'never seen' WHERE id = 899")
    scoring = "SELECT team, x, n FROM d WHERE id >= 700 ORDER BY id"
    in_sql = con.execute("SELECT m_predict(team, x, n) FROM d WHERE id >= 700 ORDER BY id").fetchall()
    if model.loss_.classifies:
        expected = ilargi_db.predict_proba(con, model, scoring)
        got = np.array([row[0] for row in in_sql], dtype=float)
        got = got.reshape(len(expected), -1) if got.ndim == 2 else got
        if expected.shape[1] == 2:
            expected = expected[:, 1]
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
        classes = con.execute("SELECT m_predict_class(team, x, n) FROM d WHERE id >= 700 ORDER BY id").fetchall()
        np.testing.assert_array_equal([row[0] for row in classes], ilargi_db.predict(con, model, scoring))
    else:
        got = np.array([row[0] for row in in_sql], dtype=float)
        np.testing.assert_allclose(got, ilargi_db.predict(con, model, scoring), rtol=0, atol=1e-12)


def test_trees_of_more_than_63_leaves_keep_a_case_per_split():
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE t AS SELECT range AS id, 'k' || (range % 90)::VARCHAR AS team, (range * 7 % 1000) / 10 AS x, "
        "(range % 90) * 0.1 + (range * 7 % 1000) * 0.01 AS y FROM range(4000)"
    )
    model = ilargi_db.train(
        con, "SELECT team, x, y FROM t", "y", "gradient_boosting", n_estimators=3, max_leaves=100, min_samples_leaf=2
    )
    assert not fits_leaf_masks(model.trees_)
    ilargi_db.save_model(con, "wide", model)
    assert "tree_leaves" not in macro_text(con, "wide_predict")
    assert con.execute("SELECT count(*) FROM ilargi.tree_leaves").fetchone()[0] == 0
    in_sql = [row[0] for row in con.execute("SELECT wide_predict(team, x) FROM t ORDER BY id").fetchall()]
    np.testing.assert_allclose(in_sql, ilargi_db.predict(con, model, "SELECT team, x FROM t ORDER BY id"), atol=1e-9)


def test_a_models_leaf_rows_are_written_per_version_and_dropped_with_it(tmp_path):
    path = str(tmp_path / "m.db")
    con = ilargi_db.connect(path)
    con.execute("CREATE TABLE t AS SELECT range % 10 AS x, (range % 10) * 2.5 + 0.1 AS y FROM range(200)")
    query = "SELECT x, y FROM t"
    ilargi_db.save_model(con, "first", ilargi_db.train(con, query, "y", "linear_regression"))
    con.execute("DROP TABLE ilargi.tree_leaves")  # a registry an earlier ilargi_db made
    for _ in range(2):
        ilargi_db.save_model(con, "trees", ilargi_db.train(con, query, "y", "gradient_boosting", n_estimators=3))
    assert con.execute("SELECT list(version ORDER BY version) FROM ilargi.tree_leaves").fetchone()[0] == [1, 2]
    con.close()
    plain = duckdb.connect(path)  # any client: the macro reads the model's own rows
    assert plain.execute("SELECT trees_predict(4)").fetchone()[0] == pytest.approx(
        plain.execute("SELECT trees_predict(x) FROM t WHERE x = 4 LIMIT 1").fetchone()[0]
    )
    plain.close()
    con = ilargi_db.connect(path)
    ilargi_db.drop_model(con, "trees")
    assert con.execute("SELECT count(*) FROM ilargi.tree_leaves").fetchone()[0] == 0


def test_a_macro_whose_row_is_gone_says_so_rather_than_scoring_null():
    con = ilargi_db.connect()
    con.execute("CREATE TABLE t AS SELECT range % 10 AS x, (range % 10) * 2.5 + 0.1 AS y FROM range(200)")
    ilargi_db.save_model(
        con, "gone", ilargi_db.train(con, "SELECT x, y FROM t", "y", "gradient_boosting", n_estimators=3)
    )
    con.execute("DELETE FROM ilargi.tree_leaves")
    with pytest.raises(duckdb.Error, match="model gone version 1 has no row in ilargi.tree_leaves"):
        con.execute("SELECT gone_predict(x) FROM t").fetchall()


def test_features_named_like_the_tables_columns_score_as_any_other():
    """The macro reads ``ilargi.tree_leaves`` qualified and renamed: a feature (a macro parameter) named like its
    columns is not substituted into that read."""
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE t AS SELECT range AS id, (range % 7) * 1.0 AS masks, ['a', 'b'][range % 2 + 1] AS model, "
        "(range % 5) AS version, (range % 3) * 1.0 AS w, (range % 7) + (range % 5) * 0.3 + (range % 3) AS y "
        "FROM range(600)"
    )
    query = "SELECT masks, model, version, w, y FROM t"
    model = ilargi_db.train(con, query, "y", "gradient_boosting", n_estimators=5)
    ilargi_db.save_model(con, "named", model)
    in_sql = [r[0] for r in con.execute("SELECT named_predict(masks, model, version, w) FROM t ORDER BY id").fetchall()]
    expected = ilargi_db.predict(con, model, "SELECT masks, model, version, w FROM t ORDER BY id")
    np.testing.assert_allclose(in_sql, expected, rtol=0, atol=1e-12)


def test_a_preview_that_limits_the_rows_first_scores_them_as_predict_does():
    """The README's preview: the macro's subquery is decorrelated over every row its FROM returns, so a preview
    limits the rows in a subquery first; those rows score as ``predict`` scores them."""
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE t AS SELECT range AS id, ['a', 'b', 'c'][range % 3 + 1] AS k, (range % 11) * 1.5 AS x, "
        "(range % 11) * 1.5 + (range % 3) AS y FROM range(2000)"
    )
    model = ilargi_db.train(con, "SELECT k, x, y FROM t", "y", "gradient_boosting", n_estimators=4)
    ilargi_db.save_model(con, "preview", model)
    limited = "SELECT * FROM t ORDER BY id DESC LIMIT 10"
    scored = con.execute(f"SELECT id, preview_predict(k, x) FROM ({limited}) ORDER BY id DESC").fetchall()
    assert [row[0] for row in scored] == list(range(1999, 1989, -1))
    expected = ilargi_db.predict(con, model, f"SELECT k, x FROM ({limited}) ORDER BY id DESC")
    np.testing.assert_allclose([row[1] for row in scored], expected, rtol=0, atol=1e-12)


def test_a_limited_query_is_limited_before_the_macro_and_keeps_its_order():
    """``prediction_sql`` of a query with a LIMIT calls the macro over the query's rows (the subquery of the FROM),
    so that DuckDB decorrelates the macro's subquery over the limited rows only, not every row of the tables; the
    rows come back in the query's order, though that decorrelation's join does not keep it (2 threads, 60,000 rows
    scored)."""
    con = ilargi_db.connect()
    con.execute("SET threads = 2")
    con.execute(
        "CREATE TABLE t AS SELECT range AS id, 'k' || (range % 90)::VARCHAR AS k, (range % 101) * 0.5 AS x, "
        "(range % 101) * 0.5 + (range % 90) * 0.1 AS y FROM range(100000)"
    )
    model = ilargi_db.train(con, "SELECT k, x, y FROM t", "y", "gradient_boosting", n_estimators=3, max_leaves=7)
    ilargi_db.save_model(con, "limited", model)
    query = "SELECT id, x, k FROM t ORDER BY id DESC LIMIT 60000"
    sql = ilargi_db.prediction_sql(con, ilargi_db.load_model(con, "limited"), query)
    outer = sqlglot.parse_one(sql, read="duckdb")
    assert outer.args.get("limit") is None  # the query's LIMIT is inside its FROM, under the macro
    assert any(select.args.get("limit") is not None for select in outer.find(exp.From).find_all(exp.Select))
    rows = con.execute(sql).fetchall()
    assert [row[0] for row in rows] == list(range(99999, 39999, -1))
    assert [len(row) for row in rows[:1]] == [4]  # id, x, k and the prediction: the position is not kept
    expected = ilargi_db.predict(con, model, "SELECT k, x FROM t ORDER BY id DESC LIMIT 60000")
    np.testing.assert_allclose([row[-1] for row in rows], expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("features", "query", "column"),
    [
        # DuckDB names an unaliased expression by its own text, not as the query's parser does
        ("CAST(x AS DOUBLE), k", "SELECT CAST(x AS DOUBLE), k FROM t ORDER BY id DESC LIMIT 5", "prediction"),
        # names with the reserved prefix: a kept column's, or the prediction's
        ("k, x", "SELECT id AS __ilargi_position, x, k FROM t ORDER BY id DESC LIMIT 5", "prediction"),
        ("k, x", "SELECT id, x, k FROM t ORDER BY id DESC LIMIT 5", "__ilargi_position"),
    ],
)
def test_a_limited_query_that_cannot_be_scored_after_its_limit_is_scored_as_written(features, query, column):
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE t AS SELECT range AS id, 'k' || (range % 9)::VARCHAR AS k, (range % 101) * 0.5 AS x, "
        "(range % 101) * 0.5 + (range % 9) * 0.1 AS y FROM range(2000)"
    )
    model = ilargi_db.train(con, f"SELECT {features}, y FROM t", "y", "gradient_boosting", n_estimators=3)
    ilargi_db.save_model(con, "written", model)
    found = con.execute(ilargi_db.prediction_sql(con, ilargi_db.load_model(con, "written"), query, column=column))
    names = [d[0] for d in found.description]
    rows = found.fetchall()
    assert len(names) == len(sqlglot.parse_one(query).expressions) + 1 and names[-1] == column
    expected = ilargi_db.predict(con, model, f"SELECT {features} FROM t ORDER BY id DESC LIMIT 5")
    np.testing.assert_allclose([row[-1] for row in rows], expected, rtol=0, atol=1e-12)
    if names[0] != "CAST(t.x AS DOUBLE)":  # the id first, in the query's order
        assert [row[0] for row in rows] == [1999, 1998, 1997, 1996, 1995]


# -- a model per group ---------------------------------------------------------------------------------------------


@SETTINGS
@given(
    rows=st.integers(60, 300),
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=4),  # each group's trees: some stop sooner
    leaves=st.integers(2, MAX_LEAVES),
    seed=st.integers(0, 2**16),
)
def test_the_masks_reference_gives_each_row_its_own_groups_leaves(rows, sizes, leaves, seed):
    """Ensembles on the same bins, of unlike sizes and cuts, laid out alike: each row scores as its group's ensemble
    predicts, to the bit."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, 3)) * np.array([1e-6, 1.0, 1e9])
    X[rng.random(X.shape) < 0.1] = np.nan
    models = [
        ilargi_db.GradientBoostingRegressor(
            n_estimators=n, max_leaves=leaves, min_samples_leaf=1, learning_rate=0.5, max_bins=32
        ).fit(X, np.nan_to_num(X[:, g % 3] / np.nanstd(X[:, g % 3])) * (g + 1) + rng.normal(size=rows))
        for g, n in enumerate(sizes)
    ]
    bins = models[0].bins_
    assert all(np.array_equal(m.bins_[j].edges, bins[j].edges) for m in models for j in range(3))  # the bins of X
    masks = LeafMasks([m.trees_ for m in models], [m.baseline_ for m in models], bins)
    binned = np.column_stack([b.codes(X[:, j], models[0].missing_bin_) for j, b in enumerate(bins)])
    groups = rng.integers(0, len(models), size=rows)
    expected = np.choose(groups, [m.predict(X) for m in models])
    np.testing.assert_array_equal(masks.scores(masks.row_codes(binned), groups)[0], expected)


@pytest.fixture(scope="module")
def leagues():
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE p AS SELECT range AS id, CASE WHEN range % 13 = 0 THEN NULL "
        "ELSE 'k' || (hash(range * 3) % 40)::VARCHAR END AS team, "
        "CASE WHEN range % 11 = 0 THEN NULL WHEN range % 17 = 0 THEN 'NaN'::DOUBLE "
        "ELSE (hash(range * 7) % 1000) / 37.0 END AS x, (hash(range * 5) % 9)::INTEGER AS n, "
        "['east', 'west', 'north', NULL][range % 4 + 1] AS league FROM range(2000)"
    )
    con.execute(  # each league its own shape: its trees cut x and n at other places
        "CREATE TABLE d AS SELECT *, CASE league WHEN 'east' THEN coalesce(nullif(x, 'NaN'), 3) * 0.2 + n "
        "WHEN 'west' THEN (coalesce(nullif(x, 'NaN'), 9) > 20)::INTEGER * 5 - n "
        "ELSE coalesce(length(team), 0) + n * n END AS y FROM p"
    )
    con.execute("UPDATE d SET league = 'south' WHERE id = 1999")  # a league no model was trained for
    yield con
    con.close()


@pytest.mark.parametrize("objective", ["regression", "binary", "multiclass", "forest"])
def test_a_model_per_group_scores_by_one_leaf_mask_lookup_equal_to_predict(leagues, objective):
    """One row of ``ilargi.tree_leaves`` holds every group's masks; the macro equals each group's model, and a row
    of a group no model was trained for (unseen, or NULL) scores NULL."""
    con = leagues
    binary, classes = "floor(abs(y)) % 2 = 0", "['lo', 'mid', 'hi'][(floor(abs(y)) % 3)::INTEGER + 1]"
    target = {"regression": "y", "binary": binary, "multiclass": classes, "forest": binary}[objective]
    algorithm = "random_forest" if objective == "forest" else "gradient_boosting"
    params = {"n_estimators": 6, "max_leaves": 15, "min_samples_leaf": 3, "random_state": 0}
    if algorithm == "gradient_boosting":  # y takes whole values in one group: auto would settle it per group
        params["objective"] = "squared_error" if objective == "regression" else "log_loss"
    if objective == "regression":  # groups that stop at unlike rounds
        params.update(n_estimators=40, early_stopping=True, n_iter_no_change=2, learning_rate=0.5)
    query = f"SELECT team, x, n, league, {target} AS label FROM d WHERE id < 1500"
    model = ilargi_db.train(con, query, "label", algorithm, group_by="league", **params)
    if objective == "regression":
        assert len({one.trees_.n_trees for one in model.models_.values()}) > 1
    ilargi_db.save_model(con, f"by_league_{objective}", model)
    macro = f"by_league_{objective}_predict"
    text = macro_text(con, macro)
    assert "tree_leaves" in text and "= 'east'" not in text  # no CASE on the group around each group's trees
    written = con.execute("SELECT count(*) FROM ilargi.tree_leaves WHERE model = ?", [f"by_league_{objective}"])
    assert written.fetchone()[0] == 1
    scoring = "SELECT team, x, n, league FROM d WHERE id >= 1500 ORDER BY id"
    got = [
        r[0] for r in con.execute(f"SELECT {macro}(team, x, n, league) FROM d WHERE id >= 1500 ORDER BY id").fetchall()
    ]
    leagues_of = [r[0] for r in con.execute("SELECT league FROM d WHERE id >= 1500 ORDER BY id").fetchall()]
    scored = [g in model.models_ for g in leagues_of]
    assert [v is None for v in got] == [not s for s in scored]  # NULL and 'south' score NULL
    if objective == "regression":
        expected = ilargi_db.predict(con, model, scoring)
    else:
        expected = ilargi_db.predict_proba(con, model, scoring)
        expected = expected[:, 1] if expected.shape[1] == 2 else expected
    kept = np.flatnonzero(scored)
    np.testing.assert_allclose(np.array([got[i] for i in kept], dtype=float), expected[kept], rtol=0, atol=1e-12)
    if objective != "regression":
        classes = [r[0] for r in con.execute(
            f"SELECT by_league_{objective}_predict_class(team, x, n, league) FROM d WHERE id >= 1500 ORDER BY id"
        ).fetchall()]  # fmt: skip
        predicted = ilargi_db.predict(con, model, scoring)
        assert [classes[i] for i in kept] == [predicted[i] for i in kept]


def test_groups_of_trees_of_more_than_63_leaves_keep_a_case_on_the_group(leagues):
    query = "SELECT team, x, n, league, y FROM d WHERE id < 1500"
    model = ilargi_db.train(
        leagues, query, "y", "gradient_boosting", group_by="league", objective="squared_error", n_estimators=2,
        max_leaves=80, min_samples_leaf=1,
    )  # fmt: skip
    assert not fits_leaf_masks(*(one.trees_ for one in model.models_.values()))
    ilargi_db.save_model(leagues, "wide_leagues", model)
    text = macro_text(leagues, "wide_leagues_predict")
    assert "tree_leaves" not in text and "= 'east'" in text
    got = leagues.execute("SELECT wide_leagues_predict(team, x, n, league) FROM d WHERE league = 'east' ORDER BY id")
    got = [r[0] for r in got.fetchall()]
    expected = ilargi_db.predict(leagues, model, "SELECT team, x, n, league FROM d WHERE league = 'east' ORDER BY id")
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)


def test_a_model_per_group_whose_row_is_gone_says_so(leagues):
    query = "SELECT x, n, league, y FROM d WHERE id < 1500"
    model = ilargi_db.train(leagues, query, "y", "gradient_boosting", group_by="league", objective="squared_error")
    ilargi_db.save_model(leagues, "gone_leagues", model)
    leagues.execute("DELETE FROM ilargi.tree_leaves WHERE model = 'gone_leagues'")
    with pytest.raises(duckdb.Error, match="model gone_leagues version 1 has no row in ilargi.tree_leaves"):
        leagues.execute("SELECT gone_leagues_predict(x, n, league) FROM d").fetchall()


@pytest.mark.parametrize(
    "groups",
    ["[INTERVAL '1 day', INTERVAL '24 hours']", "[0.0::DOUBLE, -0.0::DOUBLE]", "[[0.0::FLOAT], [-0.0::FLOAT]]"],
)
def test_groups_whose_type_equates_two_labels_keep_a_case_on_the_group(groups):
    """DuckDB decorrelates the leaf-mask macro's subquery over distinct group values by the type's equality:
    '1 day' = '24 hours' and -0.0 = 0.0 there, while training tells them apart as two groups."""
    con = ilargi_db.connect()
    con.execute(
        f"CREATE TABLE t AS SELECT range AS id, (range % 50)::DOUBLE AS x, {groups}[range // 50 % 2 + 1] AS g, "
        "(range % 50) * (range // 50 % 2 * 9 + 1)::DOUBLE AS y FROM range(2000)"
    )
    model = ilargi_db.train(con, "SELECT x, g, y FROM t", "y", "gradient_boosting", group_by="g", n_estimators=5)
    assert len(model.models_) == 2
    ilargi_db.save_model(con, "equated", model)
    assert "tree_leaves" not in macro_text(con, "equated_predict")
    got = [r[0] for r in con.execute("SELECT equated_predict(x, g) FROM t ORDER BY id").fetchall()]
    expected = ilargi_db.predict(con, model, "SELECT x, g FROM t ORDER BY id")
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)
