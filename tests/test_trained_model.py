"""A trained model saves and loads itself: the record the registry stores, in a file, checked when read back."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ilargi_db
from ilargi_db import DamagedModelError, TrainedModel

QUERY = "SELECT f.x, d.kind, f.y FROM f JOIN d USING (k)"
MODELS = [
    ("linear_regression", "y", {"alpha": 1.0, "standardize": True}),
    ("logistic_regression", "y", {}),
    ("kmeans", None, {"n_clusters": 2, "random_state": 0}),
    ("gnmf", None, {"n_components": 2, "random_state": 0}),
]


@pytest.fixture(scope="module")
def con():
    con = ilargi_db.connect()
    con.execute("CREATE TABLE d AS SELECT range AS k, ['a', 'b', NULL][range + 1] AS kind FROM range(3)")
    con.execute("CREATE TABLE f AS SELECT range % 3 AS k, (range % 17) * 1.0 AS x, range % 2 = 0 AS y FROM range(90)")
    return con


def trained(con, algorithm, target, params):
    query = QUERY if target else QUERY.replace(", f.y", "")
    if algorithm == "linear_regression":
        query = query.replace("f.y", "f.y::DOUBLE AS y")
    return query, ilargi_db.train(con, query, target, algorithm, backend="numpy", **params)


@pytest.mark.parametrize("algorithm, target, params", MODELS)
def test_a_saved_model_loads_back_predicting_the_same(con, tmp_path, algorithm, target, params):
    query, model = trained(con, algorithm, target, params)
    model.save(tmp_path / "model.json")
    loaded = TrainedModel.load(tmp_path / "model.json")
    assert loaded.to_record() == model.to_record()
    assert (loaded.algorithm_, loaded.target_, loaded.strategy_) == (model.algorithm_, model.target_, model.strategy_)
    if algorithm == "gnmf":  # no predict: its transform, on the encoded columns
        X = np.random.default_rng(0).random((5, model.n_features_in_))
        np.testing.assert_array_equal(loaded.transform(X), model.transform(X))
    else:
        np.testing.assert_array_equal(ilargi_db.predict(con, loaded, query), ilargi_db.predict(con, model, query))


def test_the_record_is_what_the_registry_stores(con):
    _, model = trained(con, "logistic_regression", "y", {})
    ilargi_db.save_model(con, "recorded", model)
    row = con.execute("SELECT * EXCLUDE (name, version, macros, created_at) FROM ilargi.models").fetchdf()
    assert row.iloc[0].to_dict() == model.to_record()
    assert TrainedModel.from_record(model.to_record()).to_record() == model.to_record()


@pytest.mark.parametrize("algorithm, attribute", [("kmeans", "cluster_centers_"), ("gnmf", "components_")])
def test_the_record_holds_every_number_of_a_two_axis_array_exactly(con, algorithm, attribute):
    _, model = trained(con, algorithm, None, _params(algorithm))
    stored = json.loads(model.to_record()["model"])[attribute]
    assert stored == getattr(model, attribute).tolist()  # nested lists, each float read back as the same double


def _params(algorithm: str) -> dict:
    return next(params for name, _, params in MODELS if name == algorithm)


def damaged(record: dict, column: str, change) -> dict:
    value = json.loads(record[column])
    change(value)
    return {**record, column: json.dumps(value)}


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda r: damaged(r, "model", lambda m: m.pop("coef_")), "KeyError: 'coef_'"),
        (lambda r: damaged(r, "model", lambda m: m["feature_names_out"].pop()), "columns its preprocessing"),
        (lambda r: damaged(r, "preprocessing", lambda p: p.update(standardize="yes")), "'yes' is not true or false"),
        (lambda r: {**r, "algorithm": "svm"}, "unknown algorithm 'svm'"),
        (lambda r: {**r, "n_rows": -1}, "-1 is not a count"),
        (lambda r: {**r, "metrics": "[1, 2]"}, "metrics is not a JSON object"),
        (lambda r: {**r, "parameters": "[" * 100_000}, "RecursionError|JSONDecodeError"),
    ],
)
def test_a_damaged_record_is_refused_saying_what_did_not_read_back(con, tmp_path, damage, why):
    _, model = trained(con, "linear_regression", "y", {})
    record = damage(model.to_record())
    with pytest.raises(DamagedModelError, match=f"the stored model is damaged .*({why})"):
        TrainedModel.from_record(record)
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps({"format": "ilargi_db model", "version": 1, "record": record}))
    with pytest.raises(DamagedModelError, match=f"the model in {path} is damaged .*({why}).*save it again"):
        TrainedModel.load(path)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x80\x04\x95 a pickle", "is not a model saved by TrainedModel.save .*UnicodeDecodeError"),
        (b"{not json", "is not a model saved by TrainedModel.save .*JSONDecodeError"),
        (b'{"coef_": [1.0]}', "is not a model saved by TrainedModel.save .*no ilargi_db model format"),
        (b'{"format": "ilargi_db model", "version": 99, "record": {}}', "cannot read .*format version 99"),
    ],
)
def test_a_file_that_is_not_a_saved_model_is_refused_never_unpickled(tmp_path, content, message):
    path = tmp_path / "model.json"
    path.write_bytes(content)
    with pytest.raises(DamagedModelError, match=message):
        TrainedModel.load(path)
