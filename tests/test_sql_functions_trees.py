"""Gradient-boosted trees outside training: predict and evaluate on another query, the registry and files (the
stored ensemble checked when read back), and the SQL macros, equal to Python's predict."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pytest

import ilargi_db
from ilargi_db import DamagedModelError, IlargiError, TrainedModel
from ilargi_db.errors import PlanError
from ilargi_db.limits import MACRO_NODES
from ilargi_db.models.tree_ensemble import TreeEnsemble
from ilargi_db.sql_functions.tree_macros import LISTED_CATEGORIES

PARAMS = {"n_estimators": 12, "learning_rate": 0.3, "max_leaves": 6, "min_samples_leaf": 3, "backend": "numpy"}
FEATURES = "f.x, f.n, d.kind, d.w"
REGRESSION = f"SELECT {FEATURES}, f.y FROM f JOIN d USING (k) ORDER BY f.id"
CLASSIFICATION = f"SELECT {FEATURES}, f.label FROM f JOIN d USING (k) ORDER BY f.id"
NUMERIC = "SELECT f.x, f.n, d.w, f.y FROM f JOIN d USING (k) ORDER BY f.id"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """A star with NULL and NaN numbers, a NULL category, an INTEGER feature and a target in 7 and 9."""
    path = str(tmp_path_factory.mktemp("trees") / "trees.db")
    con = ilargi_db.connect(path)
    con.execute(
        "CREATE TABLE d AS SELECT range AS k, ['a', 'b', 'c', NULL][range % 4 + 1] AS kind, (range % 3) * 1.5 AS w "
        "FROM range(12)"
    )
    con.execute(
        "CREATE TABLE f AS SELECT range AS id, range % 12 AS k, "
        "CASE WHEN range % 9 = 0 THEN NULL WHEN range % 10 = 0 THEN 'NaN'::DOUBLE ELSE (range % 23) * 0.25 END AS x, "
        "(range % 5)::INTEGER AS n, (range % 23) * 0.5 + (range % 5) + (range % 12) * 0.1 AS y, "
        "CASE WHEN (range % 23) + (range % 5) > 12 THEN 9 ELSE 7 END AS label FROM range(600)"
    )
    con.close()
    return path


@pytest.fixture
def con(db):
    con = ilargi_db.connect(db)
    yield con
    con.close()


def column(con, sql):
    return np.array([row[0] for row in con.execute(sql).fetchall()], dtype=float)


@pytest.mark.parametrize("strategy", ["factorized", "materialized"])
def test_predict_and_evaluate_read_the_rows_binned_as_training_did(con, strategy):
    model = ilargi_db.train(con, REGRESSION, "y", "gradient_boosting", strategy=strategy, **PARAMS)
    predicted = ilargi_db.predict(con, model, REGRESSION)
    assert predicted.shape == (600,)
    y = column(con, "SELECT y FROM f ORDER BY id")
    assert model.training_metrics_["rmse"] == pytest.approx(np.sqrt(np.mean((predicted - y) ** 2)))
    metrics = ilargi_db.evaluate(con, model, REGRESSION)
    assert set(metrics) == {"r2", "rmse", "mae", "rows", "unlabelled_rows_left_out"} and metrics["r2"] > 0.5


def test_a_classifier_predicts_classes_and_evaluates_as_a_classifier(con):
    model = ilargi_db.train(con, CLASSIFICATION, "label", "gradient_boosting", **PARAMS)
    assert model.objective_ == "log_loss"
    assert set(ilargi_db.predict(con, model, CLASSIFICATION)) <= {7.0, 9.0}
    metrics = ilargi_db.evaluate(con, model, CLASSIFICATION)
    assert {"accuracy", "roc_auc", "log_loss"} <= set(metrics) and metrics["accuracy"] > 0.8


def test_scoring_refuses_text_for_a_numeric_feature(con):
    model = ilargi_db.train(con, REGRESSION, "y", "gradient_boosting", **PARAMS)
    with pytest.raises(PlanError, match="feature 'x' has type VARCHAR .* learned it as a number"):
        ilargi_db.predict(con, model, "SELECT 'one' AS x, f.n, d.kind, d.w FROM f JOIN d USING (k)")


@pytest.mark.parametrize("query, target", [(REGRESSION, "y"), (CLASSIFICATION, "label")])
def test_the_registry_and_a_file_give_back_the_same_trees(con, tmp_path, query, target):
    model = ilargi_db.train(con, query, target, "gradient_boosting", **PARAMS)
    ilargi_db.save_model(con, "trees", model)
    model.save(tmp_path / "trees.json")
    for loaded in (ilargi_db.load_model(con, "trees"), TrainedModel.load(tmp_path / "trees.json")):
        assert loaded.trees_ == model.trees_
        np.testing.assert_array_equal(loaded.feature_importances_, model.feature_importances_)
        np.testing.assert_array_equal(ilargi_db.predict(con, loaded, query), ilargi_db.predict(con, model, query))
    stored = json.loads(con.execute("SELECT model FROM ilargi.current_models WHERE name = 'trees'").fetchone()[0])
    assert len(stored["feature_importances_"]) == 4 and ("classes_" in stored) == (target == "label")


def test_a_loaded_model_predicts_arrays(con):
    model = ilargi_db.train(con, NUMERIC, "y", "gradient_boosting", **PARAMS)
    ilargi_db.save_model(con, "numeric", model)
    loaded = ilargi_db.load_model(con, "numeric")
    X = np.array(con.execute(NUMERIC.replace(", f.y", "")).fetchall(), dtype=float)
    np.testing.assert_array_equal(loaded.predict(X), ilargi_db.predict(con, model, NUMERIC))


def damaged(trees: dict) -> list[tuple[str, dict]]:
    """Ways a stored ensemble can be wrong, each with the words the error gives."""
    split = trees["feature"].index(next(f for f in trees["feature"] if f >= 0))
    categorical = next(i for i, c in enumerate(trees["category_bins"]) if c)

    def edit(key, node, value):
        copy = json.loads(json.dumps(trees))
        copy[key][node] = value
        return copy

    return [
        ("children outside its tree", edit("left", split, 10_000)),
        ("not after it", edit("right", split, split)),
        ("splits on feature 9", edit("feature", split, 9)),
        ("bins left that feature 'kind' does not have", edit("category_bins", categorical, [0, 200])),
        ("differ in length", {**trees, "value": trees["value"][:-1]}),
        ("not a list of integers", edit("left", split, "1")),
        ("keys", {k: v for k, v in trees.items() if k != "gain"}),
        ("has children", edit("left", trees["feature"].index(-1), 1)),
    ]


def test_a_damaged_ensemble_is_refused_when_read_back(con):
    model = ilargi_db.train(con, REGRESSION, "y", "gradient_boosting", **PARAMS)
    record = model.to_record()
    fitted = json.loads(record["model"])
    for why, trees in damaged(fitted["trees_"]):
        edited = {**record, "model": json.dumps({**fitted, "trees_": trees})}
        with pytest.raises(DamagedModelError, match=f"the stored model is damaged .*{why}"):
            TrainedModel.from_record(edited)
    bins = json.loads(record["preprocessing"])
    for why, state in [
        ("max_bins", {**bins, "max_bins": 900}),
        (
            "not increasing edges",
            {**bins, "binning": [{**bins["binning"][0], "edges": [2.0, 1.0]}, *bins["binning"][1:]]},
        ),
    ]:
        with pytest.raises(DamagedModelError, match=why):
            TrainedModel.from_record({**record, "preprocessing": json.dumps(state)})


@pytest.mark.parametrize("strategy", ["factorized", "materialized"])
def test_the_macros_equal_predict_from_plain_duckdb_after_a_reconnect(db, strategy):
    con = ilargi_db.connect(db)
    regression = ilargi_db.train(con, REGRESSION, "y", "gradient_boosting", strategy=strategy, **PARAMS)
    classifier = ilargi_db.train(con, CLASSIFICATION, "label", "gradient_boosting", strategy=strategy, **PARAMS)
    ilargi_db.save_model(con, "value", regression)
    ilargi_db.save_model(con, "grade", classifier)
    values = ilargi_db.predict(con, regression, REGRESSION)
    grades = ilargi_db.predict(con, classifier, CLASSIFICATION)
    con.close()
    plain = duckdb.connect(db)
    try:
        scored = plain.execute(
            f"SELECT value_predict({FEATURES}), grade_predict({FEATURES}), grade_predict_class({FEATURES}) "
            "FROM f JOIN d USING (k) ORDER BY f.id"
        ).fetchall()
        kind = plain.execute(f"SELECT typeof(grade_predict_class({FEATURES})) FROM f JOIN d USING (k) LIMIT 1")
        assert kind.fetchone()[0] == "INTEGER"  # typed like the target column
    finally:
        plain.close()
    np.testing.assert_allclose([r[0] for r in scored], values, rtol=0, atol=1e-9)
    np.testing.assert_array_equal([r[2] for r in scored], grades)
    con = ilargi_db.connect(db)
    probabilities = classifier.predict_proba(
        ilargi_db.pipeline.scoring.encoded_rows(con, classifier, CLASSIFICATION, "numpy", labelled_only=False).X
    )[:, 1]
    con.close()
    np.testing.assert_allclose([r[1] for r in scored], probabilities, rtol=0, atol=1e-12)


def test_an_ensemble_too_large_for_one_macro_is_refused_in_words(con):
    model = ilargi_db.train(con, NUMERIC, "y", "gradient_boosting", **PARAMS)
    trees = model.trees_.to_record()
    copies = MACRO_NODES.default // len(trees["feature"]) + 1
    grown = {
        key: [v for _ in range(copies) for v in values]
        for key, values in trees.items()
        if key not in ("tree_start", "trees_per_round")
    }
    sizes = np.tile(np.diff(trees["tree_start"]), copies)
    grown["tree_start"] = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    grown["trees_per_round"] = 1
    # A valid ensemble of many trees (each tree repeated), set as a user can.
    model.trees_ = TreeEnsemble.from_record(grown, model.bins_, model.missing_bin_)
    with pytest.raises(IlargiError, match=r"more than the 100,000 a SQL macro holds .*n_estimators"):
        ilargi_db.save_model(con, "huge", model)
    assert con.execute("SELECT count(*) FROM ilargi.models WHERE name = 'huge'").fetchone()[0] == 0


def test_the_macro_writes_infinite_edges_as_duckdb_infinities():
    """A feature holding -inf (ln(0), say) makes -inf an edge: the macro still equals predict."""
    con = ilargi_db.connect()
    con.sql(
        "CREATE TABLE inf_rows AS SELECT range AS id, CASE WHEN range % 4 = 0 THEN '-inf'::DOUBLE "
        "ELSE (range % 3)::DOUBLE END AS x, CASE WHEN range % 4 = 0 THEN 5.0 ELSE (range % 3) * 1.0 END AS y "
        "FROM range(400)"
    )
    model = ilargi_db.train(
        con, "SELECT x, y FROM inf_rows", "y", algorithm="gradient_boosting", objective="squared_error",
        n_estimators=5, min_samples_leaf=5,
    )  # fmt: skip
    assert np.isneginf(model.bins_[0].edges[0])
    ilargi_db.save_model(con, "inf_edges", model)
    in_sql = [row[0] for row in con.sql("SELECT inf_edges_predict(x) FROM inf_rows ORDER BY id").fetchall()]
    in_python = ilargi_db.predict(con, model, "SELECT x FROM inf_rows ORDER BY id")
    np.testing.assert_allclose(in_sql, in_python, rtol=0, atol=1e-9)


def test_stored_bins_beyond_max_bins_or_not_increasing_are_refused():
    """A tampered record cannot give a value a bin at or past the missing bin (the kernels index by bin)."""
    from ilargi_db.preprocess.binning import FeatureBinner

    wide = {"name": "x", "categorical": False, "edges": [float(e) for e in range(100)], "categories": []}
    with pytest.raises(ValueError, match="max_bins"):
        FeatureBinner.from_state({"binning": [wide], "max_bins": 2})
    for edges in ([float("nan"), 1.0], [2.0, 1.0]):
        with pytest.raises(ValueError, match="increasing"):
            FeatureBinner.from_state({"binning": [{**wide, "edges": edges}], "max_bins": 255})


@pytest.mark.parametrize("target", ["y", "label"])
def test_a_feature_of_many_categories_is_looked_up_once_and_the_macro_equals_predict(target):
    """A text column of more than LISTED_CATEGORIES values: each row's category looked up once, a split one bit
    of a mask, never a list of names. Scored on rows training never saw: NULL, a category it did not keep, and a
    category that differs only in case (all three in the missing bin). A numeric feature is named c0."""
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE players AS SELECT range AS id, 'team' || (range % 300)::VARCHAR AS team, "
        "(range % 7) * 1.0 AS c0, (range % 300) * 0.01 + (range % 7) * 0.3 AS y, "
        "((range % 300) + (range % 7) * 20 > 200)::INTEGER AS label "
        "FROM range(6000)"
    )
    model = ilargi_db.train(con, f"SELECT team, c0, {target} FROM players", target, "gradient_boosting", **PARAMS)
    assert len(model.bins_[0].categories) > LISTED_CATEGORIES
    assert any(model.bins_[f].categorical for f in model.trees_.feature if f >= 0)
    ilargi_db.save_model(con, "teams", model)
    body = con.execute("SELECT macro_definition FROM duckdb_functions() WHERE function_name = 'teams_predict'")
    assert body.fetchone()[0].count("'team12'") == 1  # once, in the lookup: no split lists names
    con.execute(
        "CREATE TABLE scored AS SELECT * FROM players WHERE id < 400 UNION ALL "
        "SELECT 6000, NULL, 2.0, 0, 0 UNION ALL SELECT 6001, 'no such team', 2.0, 0, 0 UNION ALL "
        "SELECT 6002, 'TEAM12', 2.0, 0, 0"
    )
    query = "SELECT team, c0 FROM scored ORDER BY id"
    macro = column(con, "SELECT teams_predict(team, c0) FROM scored ORDER BY id")
    python = ilargi_db.predict(con, model, query) if target == "y" else ilargi_db.predict_proba(con, model, query)[:, 1]
    np.testing.assert_allclose(macro, python, rtol=0, atol=1e-12)
    assert macro[-3] == macro[-2] == macro[-1]  # NULL and categories training never saw share the missing bin
    first = con.execute("SELECT teams_predict(team, c0) FROM scored ORDER BY id LIMIT 1").fetchall()[0][0]
    assert first == pytest.approx(macro[0], abs=1e-12)


# -- multi-class ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def classes_db(tmp_path_factory):
    """Three classes of an INTEGER target over a fact of 3,000 rows: a numeric feature with NULLs, a category of 4
    values (NULL one of them) and one of 300 (looked up once per row by the macro), a group column."""
    path = str(tmp_path_factory.mktemp("classes") / "classes.db")
    con = ilargi_db.connect(path)
    con.execute(
        "CREATE TABLE players AS SELECT range AS id, 'team' || (range % 300)::VARCHAR AS team, "
        "['a', 'b', 'c', NULL][range % 4 + 1] AS kind, "
        "CASE WHEN range % 11 = 0 THEN NULL ELSE (range % 17) * 1.0 END AS x, "
        "['east', 'west'][range % 2 + 1] AS league, "
        "(((range % 17) + (range % 300) // 30 + (range % 4) * 3) % 3)::INTEGER AS pos FROM range(3000)"
    )
    con.close()
    return path


CLASSES = "SELECT team, kind, x, pos FROM players ORDER BY id"


@pytest.mark.parametrize("features", ["kind, x", "team, kind, x"])
def test_a_multi_class_macro_lists_the_class_probabilities_as_predict_proba_does(classes_db, features):
    """``N_predict`` is the list of the classes' probabilities in class order, ``N_predict_class`` the class (typed
    like the target), both equal to Python's; through the registry and back the model predicts the same. With a
    300-category feature the class scores are computed in the lookup's subquery."""
    con = ilargi_db.connect(classes_db)
    query = f"SELECT {features}, pos FROM players ORDER BY id"
    model = ilargi_db.train(con, query, "pos", "gradient_boosting", objective="log_loss", **PARAMS)
    assert model.trees_.trees_per_round == 3 and list(model.classes_) == [0, 1, 2]
    ilargi_db.save_model(con, "positions", model)
    scored = f"SELECT {features} FROM players ORDER BY id"
    proba = ilargi_db.predict_proba(con, model, scored)
    rows = con.execute(f"SELECT positions_predict({features}), positions_predict_class({features}) FROM players "
                       "ORDER BY id").fetchall()  # fmt: skip
    np.testing.assert_allclose(np.array([r[0] for r in rows]), proba, rtol=0, atol=1e-12)
    assert [r[1] for r in rows] == ilargi_db.predict(con, model, scored).astype(int).tolist()
    kind = con.execute(f"SELECT typeof(positions_predict_class({features})) FROM players LIMIT 1").fetchone()[0]
    assert kind == "INTEGER"
    loaded = ilargi_db.load_model(con, "positions")
    np.testing.assert_array_equal(ilargi_db.predict_proba(con, loaded, scored), proba)
    assert loaded.trees_ == model.trees_
    con.close()


def test_multi_class_models_per_group_score_by_one_macro(classes_db):
    con = ilargi_db.connect(classes_db)
    query = "SELECT kind, x, league, pos FROM players ORDER BY id"
    model = ilargi_db.train(con, query, "pos", "gradient_boosting", objective="log_loss", group_by="league", **PARAMS)
    ilargi_db.save_model(con, "by_league", model)
    scored = "SELECT kind, x, league FROM players ORDER BY id"
    proba = ilargi_db.predict_proba(con, model, scored)
    macro = con.execute("SELECT by_league_predict(kind, x, league) FROM players ORDER BY id").fetchall()
    np.testing.assert_allclose(np.array([r[0] for r in macro]), proba, rtol=0, atol=1e-12)
    con.close()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m["trees_"].update(trees_per_round=5), "not rounds of trees_per_round=5"),
        (lambda m: m.update(baseline_=m["baseline_"][:2]), "is not 3 finite number"),
        (lambda m: m.update(classes_=m["classes_"][:2]), "classes_ are not the classes"),
    ],
)
def test_a_multi_class_record_that_does_not_add_up_is_refused_as_damaged(classes_db, change, message):
    con = ilargi_db.connect(classes_db)
    model = ilargi_db.train(con, CLASSES, "pos", "gradient_boosting", objective="log_loss", **PARAMS)
    record = model.to_record()
    fitted = json.loads(record["model"])
    change(fitted)
    record["model"] = json.dumps(fitted)
    with pytest.raises(DamagedModelError, match=message):
        TrainedModel.from_record(record)
    con.close()
