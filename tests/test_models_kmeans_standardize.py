"""k-means with train(..., standardize=True): scikit-learn's KMeans on StandardScaler'd columns, its centers
given back in the columns' own units; trained on columns of scales far apart without it, a warning saying so."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from sklearn.cluster import KMeans as SkKMeans
from sklearn.preprocessing import StandardScaler

import ilargi_db
from ilargi_db import TrainedModel

QUERY = "SELECT f.income, f.visits, d.age FROM f JOIN d USING (k) ORDER BY f.id"
COLUMNS = ["income", "visits", "age"]
# Initial centers in standardized units (the units k-means trains in): the same start for both.
INIT = np.array([[-1.0, -1.0, 0.0], [1.0, 0.5, -0.5], [0.0, 1.0, 1.0]])


@pytest.fixture(scope="module")
def con():
    con = ilargi_db.connect()
    con.execute("CREATE TABLE d AS SELECT range AS k, 20 + (range * 13) % 50 AS age FROM range(40)")
    con.execute(
        "CREATE TABLE f AS SELECT range AS id, range % 40 AS k, 20000.0 + (range * 7919) % 90000 AS income, "
        "((range * 31) % 23) / 2.0 AS visits FROM range(2000)"
    )
    return con


@pytest.fixture(scope="module")
def scaled_reference(con):
    frame = con.sql(QUERY).df()[COLUMNS].to_numpy(dtype=float)
    scaler = StandardScaler().fit(frame)
    reference = SkKMeans(n_clusters=3, init=INIT, n_init=1, tol=1e-4).fit(scaler.transform(frame))
    return scaler, reference


def test_standardized_kmeans_is_scikit_learns_on_standard_scaled_columns(con, scaled_reference):
    scaler, reference = scaled_reference
    model = ilargi_db.train(con, QUERY, None, "kmeans", n_clusters=3, init=INIT, standardize=True, backend="numpy")
    assert list(model.feature_names_in_) == COLUMNS
    np.testing.assert_array_equal(model.labels_, reference.labels_)
    np.testing.assert_allclose(model.inertia_, reference.inertia_, rtol=1e-8)  # in standardized units
    # The centers come back in the columns' own units (dollars, visits, years).
    np.testing.assert_allclose(model.cluster_centers_, scaler.inverse_transform(reference.cluster_centers_), rtol=1e-8)
    np.testing.assert_allclose(model.feature_scale_, scaler.scale_, rtol=1e-10)
    np.testing.assert_array_equal(ilargi_db.predict(con, model, QUERY), reference.labels_)


def test_the_macro_and_a_saved_copy_predict_as_trained(con, tmp_path, scaled_reference):
    _, reference = scaled_reference
    model = ilargi_db.train(con, QUERY, None, "kmeans", n_clusters=3, init=INIT, standardize=True, backend="numpy")
    ilargi_db.save_model(con, "segments", model)
    macro = con.execute("SELECT segments_predict(f.income, f.visits, d.age) FROM f JOIN d USING (k) ORDER BY f.id")
    np.testing.assert_array_equal(np.array([row[0] for row in macro.fetchall()]), reference.labels_)
    model.save(tmp_path / "segments.json")
    loaded = TrainedModel.load(tmp_path / "segments.json")
    np.testing.assert_array_equal(loaded.feature_scale_, model.feature_scale_)
    np.testing.assert_array_equal(ilargi_db.predict(con, loaded, QUERY), reference.labels_)
    np.testing.assert_allclose(ilargi_db.evaluate(con, loaded, QUERY)["inertia"], reference.inertia_, rtol=1e-8)


def test_columns_of_scales_far_apart_warn_naming_them_and_the_fix(con):
    with pytest.warns(UserWarning, match=r"kmeans: the columns' scales differ .*'income'.*standardize=True") as said:
        model = ilargi_db.train(con, QUERY, None, "kmeans", n_clusters=3, random_state=0, backend="numpy")
    assert str(said[0].message) in model.warnings_
    assert not hasattr(model, "feature_scale_")  # trained on the columns as they are


def test_standardized_or_similar_scales_train_without_a_warning(con):
    similar = "SELECT f.visits, d.age FROM f JOIN d USING (k)"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ilargi_db.train(con, QUERY, None, "kmeans", n_clusters=3, random_state=0, standardize=True, backend="numpy")
        ilargi_db.train(con, similar, None, "kmeans", n_clusters=3, random_state=0, backend="numpy")


def test_one_hot_columns_count_at_an_indicators_scale(con):
    # A category of 1 row in 2,000 has a standard deviation of 0.02: no reason to scale x (std 2.9) up to it.
    con.execute(
        "CREATE TABLE rare AS SELECT range % 10 * 1.0 AS x, range * 1000.0 AS wide, "
        "CASE WHEN range = 0 THEN 'once' ELSE 'usual' END AS kind FROM range(2000)"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ilargi_db.train(con, "SELECT x, kind FROM rare", None, "kmeans", n_clusters=2, random_state=0, backend="numpy")
    # A column in thousands drowns the one-hot columns: said so.
    with pytest.warns(UserWarning, match=r"deviation .* for 'wide', at most 0.5 for one-hot columns\), so the widest"):
        ilargi_db.train(
            con, "SELECT wide, kind FROM rare", None, "kmeans", n_clusters=2, random_state=0, backend="numpy"
        )


def test_sql_training_summarizes_the_warning(con):
    ilargi_db.install(con)
    summary = con.execute(
        f"SELECT ilargi_train('wide', 'kmeans', '{QUERY}', NULL, '{{\"n_clusters\": 2}}')"
    ).fetchone()[0]
    (said,) = json.loads(summary)["warnings"]
    assert "scales differ" in said and """train with options := '{"standardize": true}'""" in said
