"""Targets as people write them: a text (or ENUM) target trains every classifier, a BOOLEAN one's classes are
``False`` and ``True``; the classes keep their values and types in Python, in the SQL macros and in the registry.

The oracle: the same model trained on the labels' positions in sorted order (0, 1, 2, ...), whose predictions,
with each position read as its label, must be the text model's.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

import ilargi_db
from ilargi_db.errors import IlargiError

POSITIONS = ["center", "forward", "guard"]  # sorted: the classes_ of a text target
LABELS = "['guard', 'forward', 'center'][(range * 37 % 101) // 34 + 1]"  # three classes, decided by x alone
FROM = "FROM players p JOIN teams t USING (team)"
TEXT = f"SELECT p.x, t.budget, p.pos {FROM}"
CODED = f"SELECT p.x, t.budget, list_position({POSITIONS}, p.pos) - 1 AS pos {FROM}"
TWO = f"SELECT p.x, t.budget, p.side {FROM}"
TWO_CODED = f"SELECT p.x, t.budget, CAST(p.side = 'right' AS INTEGER) AS side {FROM}"
BOOLEAN = f"SELECT p.x, t.budget, p.tall {FROM}"
FEATURES = f"SELECT p.x, t.budget {FROM} ORDER BY p.id"

CLASSIFIERS = [
    ("logistic_regression", {}),
    ("gradient_boosting", {"n_estimators": 8, "objective": "log_loss"}),
    ("random_forest", {"n_estimators": 8, "random_state": 0, "objective": "gini"}),
]


@pytest.fixture(scope="module")
def con():
    con = duckdb.connect()
    con.execute(f"""
        CREATE TABLE teams AS SELECT range AS team, range * 1.5 AS budget FROM range(7);
        CREATE TABLE players AS SELECT range AS id, range % 7 AS team, (range * 37 % 101) / 10.0 AS x,
            {LABELS} AS pos, CASE WHEN (range * 37 % 101) > 40 THEN 'right' ELSE 'left' END AS side,
            (range * 37 % 101) > 60 AS tall
        FROM range(2000);
    """)
    return con


@pytest.mark.parametrize(
    "algorithm, params, text, coded",
    [(*c, TEXT, CODED) for c in CLASSIFIERS] + [(*c, TWO, TWO_CODED) for c in [*CLASSIFIERS, ("linear_svc", {})]],
)
def test_a_text_target_trains_the_model_of_its_positions_with_the_labels_as_classes(
    con, algorithm, params, text, coded
):
    target = "pos" if text == TEXT else "side"
    model = ilargi_db.train(con, text, target, algorithm, **params)
    oracle = ilargi_db.train(con, coded, target, algorithm, **params)
    labels = POSITIONS if text == TEXT else ["left", "right"]
    assert list(model.classes_) == labels
    positions = ilargi_db.predict(con, oracle, FEATURES).astype(int)
    assert list(ilargi_db.predict(con, model, FEATURES)) == [labels[i] for i in positions]
    if hasattr(oracle, "predict_proba"):
        np.testing.assert_array_equal(
            ilargi_db.predict_proba(con, model, FEATURES), ilargi_db.predict_proba(con, oracle, FEATURES)
        )
    assert model.training_metrics_ == oracle.training_metrics_
    assert ilargi_db.evaluate(con, model, text) == ilargi_db.evaluate(con, oracle, coded)


@pytest.mark.parametrize("algorithm, params", CLASSIFIERS)
def test_the_macros_and_the_registry_give_back_the_labels(con, algorithm, params):
    model = ilargi_db.train(con, TEXT, "pos", algorithm, **params)
    ilargi_db.save_model(con, "positions", model)
    back = ilargi_db.load_model(con, "positions")
    assert list(back.classes_) == POSITIONS
    in_sql = con.execute(f"SELECT positions_predict_class(p.x, t.budget) {FROM} ORDER BY p.id").fetchall()
    assert [row[0] for row in in_sql] == list(ilargi_db.predict(con, model, FEATURES))
    assert con.execute(f"SELECT typeof(positions_predict_class(p.x, t.budget)) {FROM} LIMIT 1").fetchone() == (
        "VARCHAR",
    )
    assert ilargi_db.evaluate(con, back, TEXT) == ilargi_db.evaluate(con, model, TEXT)


@pytest.mark.parametrize("algorithm, params", CLASSIFIERS + [("linear_svc", {})])
def test_a_boolean_targets_classes_are_false_and_true(con, algorithm, params):
    model = ilargi_db.train(con, BOOLEAN, "tall", algorithm, **params)
    assert model.classes_.dtype == bool and list(model.classes_) == [False, True]
    predicted = ilargi_db.predict(con, model, FEATURES)
    assert predicted.dtype == bool
    ilargi_db.save_model(con, "tall", model)
    assert ilargi_db.load_model(con, "tall").classes_.dtype == bool
    macro = "tall_predict_class" if algorithm != "linear_svc" else "tall_predict"
    in_sql = con.execute(f"SELECT {macro}(p.x, t.budget) {FROM} ORDER BY p.id").fetchall()
    assert [row[0] for row in in_sql] == predicted.tolist()


def test_a_model_that_predicts_a_number_refuses_a_text_target_naming_the_classifiers(con):
    with pytest.raises(IlargiError, match=r"target 'pos' holds text .* linear_regression predicts a number: train a "):
        ilargi_db.train(con, TEXT, "pos", "linear_regression")
    with pytest.raises(IlargiError, match="gradient_boosting predicts a number"):
        ilargi_db.train(con, TEXT, "pos", "gradient_boosting", objective="squared_error")


def test_auto_classifies_a_text_target_of_many_classes(con):
    model = ilargi_db.train(con, TEXT, "pos", "gradient_boosting", n_estimators=3)
    assert model.objective_ == "log_loss" and list(model.classes_) == POSITIONS


def test_a_label_the_model_never_saw_is_refused_when_evaluating(con):
    model = ilargi_db.train(con, TEXT, "pos", "logistic_regression")
    unseen = TEXT.replace("p.pos", "CASE WHEN p.id = 3 THEN 'coach' ELSE p.pos END AS pos")
    with pytest.raises(IlargiError, match="1 row\\(s\\) hold a target label the model never saw"):
        ilargi_db.evaluate(con, model, unseen)


def test_rows_without_a_label_are_left_out(con):
    query = TEXT.replace("p.pos", "CASE WHEN p.id % 10 = 0 THEN NULL ELSE p.pos END AS pos")
    model = ilargi_db.train(con, query, "pos", "logistic_regression")
    assert model.unlabelled_rows_ == 200 and model.n_rows_ == 1800 and list(model.classes_) == POSITIONS


def test_text_of_too_many_values_is_not_a_set_of_classes(con):
    with pytest.raises(IlargiError, match="more than 1000 distinct values: those are not classes"):
        ilargi_db.train(con, f"SELECT p.x, CAST(p.id AS VARCHAR) AS name {FROM}", "name", "logistic_regression")


def test_a_model_per_group_and_cross_validation_take_text_labels(con):
    query = f"SELECT p.x, t.budget, p.pos, p.team % 2 AS half {FROM}"
    grouped = ilargi_db.train(con, query, "pos", "logistic_regression", group_by="half")
    by_group = ilargi_db.predict(con, grouped, f"SELECT p.x, t.budget, p.team % 2 AS half {FROM} ORDER BY p.id")
    even = ilargi_db.train(con, f"{TEXT} WHERE p.team % 2 = 0", "pos", "logistic_regression")
    even_rows = f"SELECT p.x, t.budget {FROM} WHERE p.team % 2 = 0 ORDER BY p.id"
    in_even = [row[0] for row in con.execute(f"SELECT p.team % 2 = 0 {FROM} ORDER BY p.id").fetchall()]
    assert list(by_group[np.array(in_even)]) == list(ilargi_db.predict(con, even, even_rows))
    text = ilargi_db.cross_validate(con, TEXT, "pos", "logistic_regression", param_grid={"C": [1.0]})
    coded = ilargi_db.cross_validate(con, CODED, "pos", "logistic_regression", param_grid={"C": [1.0]})
    assert text[0]["fold_scores"] == coded[0]["fold_scores"]


def test_normalize_gives_a_text_targets_labels(con):
    _, y = ilargi_db.normalize(con, TEXT + " ORDER BY p.id", target="pos", backend="numpy")
    expected = [row[0] for row in con.execute(f"SELECT p.pos {FROM} ORDER BY p.id").fetchall()]
    assert list(y) == expected


def test_groups_whose_classes_differ_are_refused_in_words(con):
    """A group without one of the labels: the positions are read among every label of the query, so the group's
    fit and its metrics never mistake one label for another, and the groups' classes are refused as differing."""
    query = f"SELECT p.x, t.budget, p.pos, p.x > 5 AS high {FROM}"  # guards and forwards; forwards and centers
    with pytest.raises(IlargiError, match="the groups of high learned different classes .*select rows of the classes"):
        ilargi_db.train(con, query, "pos", "logistic_regression", group_by="high")


def test_a_limited_training_reads_the_labels_of_its_rows(con):
    limited = f"{TEXT} ORDER BY p.x, p.id LIMIT 800"  # the 800 smallest x: guards and forwards, no center
    model = ilargi_db.train(con, limited, "pos", "logistic_regression")
    assert list(model.classes_) == ["forward", "guard"] and model.n_rows_ == 800


def test_an_enum_target_is_a_text_target(con):
    con.execute("CREATE TYPE IF NOT EXISTS player_position AS ENUM ('guard', 'forward', 'center')")
    query = f"SELECT p.x, t.budget, CAST(p.pos AS player_position) AS pos {FROM}"
    model = ilargi_db.train(con, query, "pos", "logistic_regression")
    assert list(model.classes_) == POSITIONS  # the labels' text order, not the ENUM's
    assert list(ilargi_db.predict(con, model, FEATURES)) == list(
        ilargi_db.predict(con, ilargi_db.train(con, TEXT, "pos", "logistic_regression"), FEATURES)
    )


def test_scoring_a_text_model_on_a_numeric_target_is_refused_naming_the_cast(con):
    model = ilargi_db.train(con, TEXT, "pos", "logistic_regression")
    with pytest.raises(IlargiError, match="type BIGINT in this query, but the model was trained on VARCHAR: cast"):
        ilargi_db.evaluate(con, model, f"SELECT p.x, t.budget, p.team AS pos {FROM}")


def test_a_streamed_training_reads_the_labels_as_the_in_memory_one(con):
    held = ilargi_db.train(con, TEXT, "pos", "logistic_regression", reuse=False)
    streamed = ilargi_db.train(con, TEXT, "pos", "logistic_regression", memory_budget="24KB", reuse=False)
    assert streamed.streamed_ is not None and list(streamed.classes_) == POSITIONS
    assert list(ilargi_db.predict(con, streamed, FEATURES)) == list(ilargi_db.predict(con, held, FEATURES))
