"""ilargi_db.predict_proba: a classifier's probabilities for another query's rows, as scikit-learn gives them
(one column per class, in classes_ order) and as the model's SQL macro N_predict gives the second."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression as SkLogisticRegression

import ilargi_db
from ilargi_db import IlargiError

JOINED = "SELECT f.x, d.kind, f.label FROM f JOIN d USING (k) ORDER BY f.id"
NUMERIC = "SELECT f.x, f.z, f.label FROM f ORDER BY f.id"


@pytest.fixture(scope="module")
def con():
    con = ilargi_db.connect()
    con.execute("CREATE TABLE d AS SELECT range AS k, ['a', 'b', 'c'][range + 1] AS kind FROM range(3)")
    con.execute(
        "CREATE TABLE f AS SELECT range AS id, range % 3 AS k, (range % 17) / 4.0 AS x, (range * 7 % 11) / 3.0 AS z, "
        "CASE WHEN (range % 17) / 4.0 + (range % 3) + (range * 7 % 11) / 3.0 > 4 THEN 5 ELSE 2 END AS label "
        "FROM range(300)"
    )
    return con


@pytest.mark.parametrize("algorithm", ["logistic_regression", "gradient_boosting"])
def test_one_column_per_class_in_classes_order_agreeing_with_predict(con, algorithm):
    model = ilargi_db.train(con, JOINED, "label", algorithm, backend="numpy")
    proba = ilargi_db.predict_proba(con, model, JOINED)
    assert proba.shape == (300, 2)
    assert list(model.classes_) == [2, 5]  # sorted, as scikit-learn orders them
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(model.classes_[proba.argmax(axis=1)], ilargi_db.predict(con, model, JOINED))


@pytest.mark.parametrize("algorithm", ["logistic_regression", "gradient_boosting"])
def test_the_second_column_is_what_the_sql_macro_returns(con, algorithm):
    model = ilargi_db.train(con, JOINED, "label", algorithm, backend="numpy")
    ilargi_db.save_model(con, f"proba_{algorithm}", model)
    macro = con.execute(
        f"SELECT proba_{algorithm}_predict(f.x, d.kind) FROM f JOIN d USING (k) ORDER BY f.id"
    ).fetchnumpy()
    (sql,) = macro.values()
    np.testing.assert_allclose(ilargi_db.predict_proba(con, model, JOINED)[:, 1], sql, rtol=1e-9, atol=1e-12)


def test_logistic_probabilities_are_scikit_learns(con):
    model = ilargi_db.train(con, NUMERIC, "label", "logistic_regression", backend="numpy")
    frame = con.sql(NUMERIC).df()
    reference = SkLogisticRegression().fit(frame[["x", "z"]], frame["label"])
    assert list(reference.classes_) == list(model.classes_)
    np.testing.assert_allclose(
        ilargi_db.predict_proba(con, model, NUMERIC), reference.predict_proba(frame[["x", "z"]]), atol=1e-4
    )


def test_the_query_need_not_select_the_target(con):
    model = ilargi_db.train(con, JOINED, "label", "logistic_regression", backend="numpy")
    without = JOINED.replace(", f.label", "")
    np.testing.assert_array_equal(
        ilargi_db.predict_proba(con, model, without), ilargi_db.predict_proba(con, model, JOINED)
    )


@pytest.mark.parametrize("algorithm, target", [("linear_regression", "x"), ("kmeans", None)])
def test_a_model_without_probabilities_is_refused_naming_predict(con, algorithm, target):
    query = "SELECT f.z, f.x FROM f"
    model = ilargi_db.train(con, query, target, algorithm, backend="numpy", **({"n_clusters": 2} if not target else {}))
    with pytest.raises(IlargiError, match=rf"a {algorithm} model gives no class probabilities: use ilargi_db.predict"):
        ilargi_db.predict_proba(con, model, query)
