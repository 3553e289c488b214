"""scikit-learn's estimator checks, on plain arrays."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.pipeline import make_pipeline
from sklearn.utils import estimator_checks
from sklearn.utils.estimator_checks import parametrize_with_checks

from ilargi_db.models import GaussianNMF, KMeans, LinearRegression, LinearSVC, LogisticRegression, StandardScaler

# Checks we skip, with the reason (scikit-learn's expected_failed_checks protocol).
_MU = (
    "multiplicative updates converge slowly, so fit_transform's W and transform's W differ by more than the "
    "check's atol=0.01; scikit-learn's own NMF(solver='mu') differs by 0.75 on the same data"
)
EXPECTED_FAILED = {
    "GaussianNMF": {
        "check_transformer_data_not_an_array": _MU,
        "check_transformer_general": _MU,
        "check_transformer_general(readonly_memmap=True)": _MU,
    },
}


def _expected_failed(estimator):
    return EXPECTED_FAILED.get(type(estimator).__name__, {})


@parametrize_with_checks(
    [
        LinearRegression(),
        LinearRegression(alpha=1.0, solver="duhl"),
        LogisticRegression(),
        LogisticRegression(solver="duhl"),
        LinearSVC(),
        KMeans(n_clusters=3, random_state=0),
        GaussianNMF(random_state=0),
        StandardScaler(),
    ],
    expected_failed_checks=_expected_failed,
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


# scikit-learn's set_output and feature-name checks, public but outside parametrize_with_checks' list: a pipeline's
# set_output(transform="pandas") reaches every step, and a transformer without set_output refuses it.
OUTPUT_CHECKS = [
    estimator_checks.check_set_output_transform,
    estimator_checks.check_set_output_transform_pandas,
    estimator_checks.check_global_output_transform_pandas,
    estimator_checks.check_transformer_get_feature_names_out,
    estimator_checks.check_transformer_get_feature_names_out_pandas,
    estimator_checks.check_get_feature_names_out_error,
]


@pytest.mark.parametrize("check", OUTPUT_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("estimator", [KMeans(n_clusters=3, random_state=0), GaussianNMF(random_state=0),
                                       StandardScaler()], ids=lambda e: type(e).__name__)  # fmt: skip
def test_transformers_output_what_set_output_asks_for(estimator, check):
    check(type(estimator).__name__, estimator)


def test_a_pipelines_pandas_output_keeps_the_rows_index_and_names_the_columns():
    pd = pytest.importorskip("pandas")
    X = pd.DataFrame(np.abs(np.random.default_rng(0).normal(size=(40, 3))), columns=["a", "b", "c"], index=range(7, 47))
    out = make_pipeline(StandardScaler(), KMeans(n_clusters=2, random_state=0)).set_output(transform="pandas")
    frame = out.fit_transform(X)
    assert list(frame.columns) == ["kmeans0", "kmeans1"] and frame.index.tolist() == list(range(7, 47))
    np.testing.assert_allclose(frame.to_numpy(), out.set_output(transform="default").transform(X))
    with pytest.raises(ValueError, match="output config must be in"):
        KMeans().set_output(transform="arrow")


def test_a_view_of_the_join_stays_a_view_whatever_the_output_container():
    """A pipeline's or scikit-learn's global pandas output leaves a standardized normalized matrix as it is (a
    DataFrame of it would build the join), so scaling, clustering and ilargi_db's own standardized searches run."""
    import sklearn

    import ilargi_db

    con = ilargi_db.connect()
    con.execute("CREATE TABLE d AS SELECT range AS id, (range % 7)::DOUBLE AS v FROM range(10)")
    con.execute("CREATE TABLE f AS SELECT range % 10 AS d_id, (range % 3)::DOUBLE AS x, (range % 5)::DOUBLE AS y "
                "FROM range(60)")  # fmt: skip
    query = "SELECT f.x, d.v, f.y FROM f JOIN d ON f.d_id = d.id"
    X, _ = ilargi_db.normalize(con, query, target="y")
    expected = make_pipeline(StandardScaler(), KMeans(n_clusters=3, random_state=0)).fit_transform(X)
    with sklearn.config_context(transform_output="pandas"):
        scaled = StandardScaler().fit_transform(X)
        assert type(scaled).__module__.startswith("ilargi_db.")
        frame = make_pipeline(StandardScaler(), KMeans(n_clusters=3, random_state=0)).fit_transform(X)
        np.testing.assert_allclose(frame.to_numpy(), expected)
        assert len(ilargi_db.cross_validate(con, query, "y", "linear_regression", cv=3, standardize=True)) == 1
