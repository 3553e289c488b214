"""solver="duhl" and LinearSVC: scikit-learn's models, to the tolerance their duality gap certifies.

DuHL minimizes P(w) = 1/n sum_i loss_i + lambda/2 ||w||^2; ``duality_gap_`` bounds P(w) - P(w*). Each
estimator's own objective is a multiple of P: ridge's ||y - Xw - b||^2 + alpha ||w||^2 is 2n P with
lambda = alpha / n; scikit-learn's 1/2 ||w||^2 + C sum loss is C n P with lambda = 1 / (C n).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.linear_model import Ridge
from sklearn.svm import LinearSVC as SkLinearSVC

import ilargi_db
from ilargi_db.errors import IlargiError
from ilargi_db.models import LinearRegression, LinearSVC, LogisticRegression

ROWS = 6_000
STAR = "SELECT f.x1, f.x2, f.x3, d.z1, d.z2, f.y FROM fact f JOIN dim d ON f.k = d.k"  # a base-table star
LABELLED = STAR.replace("f.y FROM", "f.y > 1.5 AS late FROM")
RUN = dict(strategy="factorized", backend="numpy", reuse=False)


@pytest.fixture(scope="module")
def con():
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE fact AS SELECT range AS id, range % 200 AS k, sin(range) + 1.0 AS x1, cos(range * 0.7) AS x2, "
        "(range % 13) * 0.1 AS x3, 3 * sin(range) + cos(range * 0.7) + (range % 7) * 0.1 + 0.3 * sin(range * 0.31) "
        f"AS y FROM range({ROWS})"
    )
    con.execute("CREATE TABLE dim AS SELECT range AS k, range * 0.01 AS z1, sqrt(range) * 0.1 AS z2 FROM range(200)")
    return con


def joined(con, query, target):
    """The materialized join, as scikit-learn sees it: the features in the query's order, and the target."""
    table = con.sql(query).df()
    return table.drop(columns=target).to_numpy(dtype=float), table[target].to_numpy()


def ridge_objective(X, y, coef, intercept, alpha):
    r = y - X @ coef - intercept
    return float(r @ r + alpha * coef @ coef)


def liblinear_objective(X, signs, coef, intercept, C, loss, scaling=1.0):
    """scikit-learn's liblinear objective: the intercept is the weight (times ``scaling``) of a penalized column."""
    z = signs * (X @ coef + intercept)
    losses = np.logaddexp(0, -z) if loss == "logistic" else np.maximum(0, 1 - z)
    return float(0.5 * (coef @ coef + (intercept / scaling) ** 2) + C * losses.sum())


def test_ridge_equals_scikit_learns_within_its_certificate(con):
    X, y = joined(con, STAR, "y")
    alpha = 5.0
    model = LinearRegression(alpha=alpha, solver="duhl", tol=1e-10).fit(X, y)
    reference = Ridge(alpha=alpha, solver="cholesky").fit(X, y)
    gap = model.duality_gap_
    assert 0 < gap <= 1e-10 * 0.5 * np.mean((y - y.mean()) ** 2)  # tol: relative to the gap at the start
    excess = ridge_objective(X, y, model.coef_, model.intercept_, alpha) - ridge_objective(
        X, y, reference.coef_, reference.intercept_, alpha
    )
    assert excess <= 2 * len(y) * gap + 1e-9  # the intercept exact (centering): only w carries the gap
    # lambda-strong convexity: lambda/2 ||w - w*||^2 <= gap, lambda = alpha / n
    assert 0.5 * alpha / len(y) * np.sum((model.coef_ - reference.coef_) ** 2) <= gap * (1 + 1e-6)
    assert model.n_iter_ >= 1 and model.solver_ == "duhl"


def test_ridge_needs_a_penalty(con):
    X, y = joined(con, STAR, "y")
    with pytest.raises(
        IlargiError, match=r"solver='duhl' solves the dual.*set alpha above 0 \(ridge, e\.g\. alpha=1\.0\)"
    ):
        LinearRegression(solver="duhl").fit(X, y)
    with pytest.raises(IlargiError, match=r"set penalty='l2'"):
        LogisticRegression(solver="duhl", penalty=None).fit(X, y > 1.5)


def test_logistic_regression_is_liblinears_within_its_certificate(con):
    X, late = joined(con, LABELLED, "late")
    signs = np.where(late, 1.0, -1.0)
    C = 0.5
    model = LogisticRegression(C=C, solver="duhl", tol=1e-9).fit(X, late)
    reference = SkLogisticRegression(C=C, solver="liblinear", intercept_scaling=1.0, tol=1e-12, max_iter=10_000)
    reference.fit(X, late)
    ours = liblinear_objective(X, signs, model.coef_, model.intercept_, C, "logistic")
    theirs = liblinear_objective(X, signs, reference.coef_.ravel(), reference.intercept_[0], C, "logistic")
    certified = C * len(late) * model.duality_gap_
    assert ours - theirs <= certified + 1e-9  # never worse than the optimum by more than the certificate
    assert theirs - ours <= 1e-6 * abs(theirs)  # and liblinear, converged, not better by more than its tol
    np.testing.assert_array_equal(model.classes_, [False, True])
    assert np.mean(model.predict(X) == reference.predict(X)) > 0.999


def test_linear_svc_is_scikit_learns_hinge_svm_within_its_certificate(con):
    X, late = joined(con, LABELLED, "late")
    signs = np.where(late, 1.0, -1.0)
    for fit_intercept, scaling in ((True, 1.0), (True, 10.0), (False, 1.0)):
        model = LinearSVC(C=0.5, fit_intercept=fit_intercept, intercept_scaling=scaling, tol=1e-6, max_iter=50_000)
        model.fit(X, late)
        with warnings.catch_warnings():  # liblinear stops short of tol=1e-12: its objective is an upper bound
            warnings.simplefilter("ignore")
            reference = SkLinearSVC(
                C=0.5,
                loss="hinge",
                dual=True,
                fit_intercept=fit_intercept,
                intercept_scaling=scaling,
                tol=1e-12,
                max_iter=100_000,
            ).fit(X, late)
        ours = liblinear_objective(X, signs, model.coef_, model.intercept_, 0.5, "hinge", scaling)
        b = float(np.ravel(reference.intercept_)[0])
        theirs = liblinear_objective(X, signs, reference.coef_.ravel(), b, 0.5, "hinge", scaling)
        assert ours <= theirs + 0.5 * len(late) * model.duality_gap_ + 1e-9, (fit_intercept, scaling)
        assert model.duality_gap_ <= 1e-6  # tol relative to the hinge at w = 0 (1)
        assert np.mean(model.predict(X) == reference.predict(X)) > 0.99
        if not fit_intercept:
            assert model.intercept_ == 0.0
    np.testing.assert_allclose(model.decision_function(X), X @ model.coef_)


def test_linear_svc_refuses_a_continuous_target_and_more_than_two_classes(con):
    X, y = joined(con, STAR, "y")
    with pytest.raises(IlargiError, match="a linear SVM needs two classes"):
        LinearSVC().fit(X, y)
    with pytest.raises(IlargiError, match="Only binary classification is supported"):
        LinearSVC().fit(X, np.arange(len(y)) % 3)


@pytest.mark.parametrize("standardize", [False, True], ids=["as they are", "standardized"])
@pytest.mark.parametrize("memory_budget", [None, "64KB"], ids=["in memory", "streamed"])
def test_train_fits_ridge_by_duhl_in_memory_and_streamed(con, memory_budget, standardize):
    both = dict(alpha=5.0, standardize=standardize, **RUN)
    exact = ilargi_db.train(con, STAR, "y", solver="normal", **both)
    model = ilargi_db.train(con, STAR, "y", solver="duhl", tol=1e-7, memory_budget=memory_budget, **both)
    assert (model.streamed_ is not None) == (memory_budget is not None)
    if memory_budget is not None:
        assert model.streamed_["partitions"] > 3 and "Streamed:" in model.decision_
    estimator = model.estimator_
    assert estimator.solver_ == "duhl" and estimator.duality_gap_ > 0
    # lambda/2 ||w - w*||^2 <= gap with lambda = alpha / n (on the columns it trained on); the intercept
    # follows w by centering.
    X = joined(con, STAR, "y")[0]
    trained_on = (model.coef_ - exact.coef_) * (X.std(axis=0) if standardize else 1.0)
    assert 0.5 * 5.0 / ROWS * np.sum(trained_on**2) <= estimator.duality_gap_ * (1 + 1e-6)
    # Both intercepts are mean(y) - mean(X) . w: they differ by what the coefficients do.
    assert model.intercept_ - exact.intercept_ == pytest.approx(-X.mean(axis=0) @ (model.coef_ - exact.coef_))
    assert model.training_metrics_["r2"] == pytest.approx(exact.training_metrics_["r2"], abs=1e-6)


@pytest.mark.parametrize("memory_budget", [None, "64KB"], ids=["in memory", "streamed"])
def test_train_fits_a_linear_svm_and_logistic_regression_by_duhl(con, memory_budget):
    svm = ilargi_db.train(con, LABELLED, "late", "linear_svc", C=0.5, memory_budget=memory_budget, **RUN)
    assert (svm.streamed_ is not None) == (memory_budget is not None)
    assert set(svm.training_metrics_) == {"accuracy", "hinge_loss"} and svm.training_metrics_["accuracy"] > 0.9
    assert svm.estimator_.duality_gap_ <= 1e-4 and svm.plan_["solver"] == "duhl"
    logistic = ilargi_db.train(
        con, LABELLED, "late", "logistic_regression", solver="duhl", max_iter=1000, memory_budget=memory_budget, **RUN
    )
    assert not logistic.warnings_  # converged: the gap below tol times the gap at the start
    assert logistic.estimator_.duality_gap_ <= 1e-4 * np.log(2)
    X, late = joined(con, LABELLED, "late")
    signs = np.where(late, 1.0, -1.0)
    reference = SkLogisticRegression(C=1.0, solver="liblinear", tol=1e-10, max_iter=10_000).fit(X, late)
    ours = liblinear_objective(X, signs, logistic.coef_, logistic.intercept_, 1.0, "logistic")
    theirs = liblinear_objective(X, signs, reference.coef_.ravel(), reference.intercept_[0], 1.0, "logistic")
    assert ours - theirs <= len(late) * logistic.estimator_.duality_gap_ + 1e-9


def test_a_linear_svm_scores_in_sql_as_in_python(con):
    summary = con.execute(f"SELECT ilargi_train('svm', 'linear_svc', $${LABELLED}$$, 'late', '{{\"C\": 0.5}}')")
    assert '"macros": ["svm_predict", "svm_decision"]' in summary.fetchall()[0][0]
    model = ilargi_db.load_model(con, "svm")
    python = ilargi_db.predict(con, model, LABELLED)
    features = "f.x1, f.x2, f.x3, d.z1, d.z2"
    scored = LABELLED.replace("SELECT", f"SELECT svm_predict({features}) AS cls, svm_decision({features}) AS score,", 1)
    table = con.sql(scored).df()
    assert table["cls"].dtype == bool  # typed like the target column
    np.testing.assert_array_equal(np.sort(table["cls"].to_numpy()), np.sort(python))
    assert ((table["score"] > 0) == table["cls"]).all()
    evaluated = ilargi_db.evaluate(con, model, LABELLED)
    assert {"accuracy", "f1", "roc_auc", "hinge_loss"} <= set(evaluated) and "log_loss" not in evaluated


def test_a_working_set_too_wide_to_hold_dense_is_refused_before_anything_is_built():
    from ilargi_db.linalg import Block, NormalizedMatrix

    n, d = 2_000_000, 200_000  # a dimension of 10 dense rows, each taken by 200,000 rows: 3.2 TB held dense
    dimension = np.random.default_rng(0).normal(size=(10, d))
    X = NormalizedMatrix([Block(dimension, columns=np.arange(d), index=np.arange(n) % 10)], n_rows=n, backend="numpy")
    with pytest.raises(IlargiError, match="holds its working set in memory: .* Give a memory_budget"):
        LinearSVC().fit(X, np.arange(n) % 2)


def test_one_hot_rows_too_wide_to_hold_dense_are_held_as_their_entries():
    """A one-hot encoding of a million categories, standardized or not, is a million dense columns; DuHL holds
    each row's one entry instead, and trains (a few rounds here)."""
    import scipy.sparse

    n = d = 200_000
    rows = np.arange(n)
    X = scipy.sparse.csr_matrix((np.ones(n), (rows, rows % d)), shape=(n, d))
    with pytest.warns(ilargi_db.ConvergenceWarning):
        model = LinearSVC(max_iter=2).fit(X, rows % 2)
    assert model.coef_.shape == (d,) and model.n_iter_ == 2
