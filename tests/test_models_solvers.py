"""Solvers chosen by shape: conjugate gradients for wide one-hot designs, scikit-learn's logistic objective."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn.linear_model
from hypothesis import given, settings
from hypothesis import strategies as st

from ilargi_db import ConvergenceWarning
from ilargi_db.linalg import Block, NormalizedMatrix, ScaledMatrix
from ilargi_db.models import LinearRegression, LogisticRegression


def one_hot_design(n: int = 3000, seed: int = 0):
    """Two one-hot features (one of them a 400-category key) and three numbers: rank deficient."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 400, n), rng.integers(0, 50, n)
    rows = np.arange(n)
    X = sp.hstack(
        [
            sp.csr_matrix((np.ones(n), (rows, a)), shape=(n, 400)),
            sp.csr_matrix((np.ones(n), (rows, b)), shape=(n, 50)),
            sp.csr_matrix(rng.normal(size=(n, 3))),
        ]
    ).tocsr()
    y = rng.normal(size=400)[a] + rng.normal(size=50)[b] + X[:, -3:] @ np.array([1.0, 2.0, 3.0])
    return X, y + 0.1 * rng.normal(size=n)


def test_auto_picks_cg_above_the_column_bound_and_says_why():
    model = LinearRegression()
    assert model.choose_solver(1024)[0] == "normal"
    solver, why = model.choose_solver(1025)
    assert solver == "cg" and "conjugate gradients" in why
    assert LinearRegression(max_gram_bytes=8 * 99 * 99).choose_solver(100)[0] == "cg"


@pytest.mark.parametrize("alpha", [0.0, 3.0])
def test_cg_predicts_as_scikit_learn_on_a_rank_deficient_one_hot_design(alpha):
    X, y = one_hot_design()
    ours = LinearRegression(solver="cg", alpha=alpha).fit(X, y)
    reference = sklearn.linear_model.Ridge(alpha=alpha, tol=1e-10) if alpha else sklearn.linear_model.LinearRegression()
    reference.fit(X, y)
    assert ours.solver_ == "cg" and ours.n_iter_ < 100
    np.testing.assert_allclose(ours.predict(X), reference.predict(X), atol=1e-3 * np.abs(y).max())
    assert abs(ours.score(X, y) - reference.score(X, y)) < 1e-6
    # The loss curve comes from the CG recurrence; its last value is the loss of the returned model.
    np.testing.assert_allclose(
        ours.loss_curve_[-1], np.mean((ours.predict(X) - y) ** 2) + alpha * ours.coef_ @ ours.coef_ / len(y), rtol=1e-6
    )


def test_cg_on_a_standardized_factorized_matrix_equals_the_normal_equations():
    rng = np.random.default_rng(1)
    n = 2000
    fact = Block(rng.normal(size=(n, 2)) * [1.0, 100.0] + 5.0, columns=[0, 1])
    dim = Block(rng.normal(size=(40, 3)), columns=[2, 3, 4], index=rng.integers(0, 40, n))
    X = NormalizedMatrix([fact, dim], n_rows=n, backend="numpy")
    Z = ScaledMatrix.standardize(X)
    y = X.materialize() @ rng.normal(size=5) + rng.normal(size=n)
    normal = LinearRegression(solver="normal").fit(Z, y)
    cg = LinearRegression(solver="cg", tol=1e-10).fit(Z, y)
    np.testing.assert_allclose(cg.coef_, normal.coef_, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(Z.column_norms_squared(), (Z.materialize() ** 2).sum(axis=0), rtol=1e-9)


def test_iterative_solvers_warn_at_max_iter():
    X, y = one_hot_design(500)
    with pytest.warns(ConvergenceWarning, match=r"linear regression \(cg\) stopped at max_iter=2"):
        LinearRegression(solver="cg", max_iter=2).fit(X, y)
    with pytest.warns(ConvergenceWarning, match=r"logistic regression \(lbfgs\) stopped at max_iter=1"):
        LogisticRegression(max_iter=1).fit(X, y > np.median(y))


def test_a_dense_solve_above_max_gram_bytes_is_refused():
    X, y = one_hot_design(200)
    with pytest.raises(ValueError, match=r"solver=\"normal\" forms a dense 453 x 453 matrix"):
        LinearRegression(solver="normal", max_gram_bytes=10_000).fit(X, y)
    with pytest.raises(ValueError, match=r"solver=\"newton\" forms a dense"):
        LogisticRegression(solver="newton", max_gram_bytes=10_000).fit(X, y > 0)


def test_logistic_regression_stops_where_scikit_learn_does():
    X, y = one_hot_design(2000)
    label = y > np.median(y)
    ours = LogisticRegression(C=0.5).fit(X, label)
    reference = sklearn.linear_model.LogisticRegression(C=0.5).fit(X, label)
    assert ours.n_iter_ == reference.n_iter_[0]
    np.testing.assert_allclose(ours.coef_, reference.coef_.ravel(), atol=1e-8)


def ridge_objective(X, y, coef, intercept, alpha):
    r = y - X @ coef - intercept
    return float(r @ r + alpha * coef @ coef)


def exact_ridge(X, y, alpha):
    """Ridge's optimum by QR on the explicitly centered rows (the reference: no normal equations formed)."""
    mu = X.mean(axis=0)
    A = np.vstack([X - mu, np.sqrt(alpha) * np.eye(X.shape[1])])
    coef = np.linalg.lstsq(A, np.concatenate([y - y.mean(), np.zeros(X.shape[1])]), rcond=None)[0]
    return coef, y.mean() - mu @ coef


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.lists(st.sampled_from([1e-6, 1e-3, 1.0, 1e3, 1e6, 1e9]), min_size=2, max_size=5),
    st.sampled_from([1e-3, 1.0, 100.0]),
)
def test_the_normal_equations_reach_ridges_optimum_whatever_the_columns_scales(seed, scales, alpha):
    """Columns of 1e-6 to 1e9, some far from 0 beside their spread (centering the Gram matrix then cancels
    digits): the normal equations' fit is ridge's optimum to 1e-9 of its objective, as scikit-learn's is."""
    rng = np.random.default_rng(seed)
    n, scales = 500, np.array(scales)
    offsets = scales * 1e3 * (rng.random(len(scales)) < 0.5)  # half the columns sit 1,000 spreads from 0
    X = offsets + scales * rng.normal(size=(n, len(scales)))
    y = (X - offsets) @ (rng.normal(size=len(scales)) / scales) + rng.normal(size=n)
    best = ridge_objective(X, y, *exact_ridge(X, y, alpha), alpha)
    ours = LinearRegression(alpha=alpha, solver="normal").fit(X, y)
    assert ridge_objective(X, y, ours.coef_, ours.intercept_, alpha) <= best * (1 + 1e-9)


def test_on_a_factorized_matrix_too_ridge_reaches_its_optimum_with_a_column_far_from_zero():
    """A dimension's column near 1e9 varying by 1e3, read through the fact's keys: the same optimum as the
    materialized rows' (the refinement's passes are the matrix's own products)."""
    rng = np.random.default_rng(2)
    n = 3000
    fact = Block(rng.normal(size=(n, 2)) * [1e-6, 1.0], columns=[0, 1])
    dim = Block(np.column_stack([1e9 + 1e3 * rng.normal(size=60), rng.normal(size=60)]), [2, 3], rng.integers(0, 60, n))
    X = NormalizedMatrix([fact, dim], n_rows=n, backend="numpy")
    T = X.materialize()
    y = (T - T.mean(axis=0)) @ np.array([1e5, 1.0, 1e-3, 2.0]) + rng.normal(size=n)
    best = ridge_objective(T, y, *exact_ridge(T, y, 1e-3), 1e-3)
    ours = LinearRegression(alpha=1e-3, solver="normal").fit(X, y)
    assert ridge_objective(T, y, ours.coef_, ours.intercept_, 1e-3) <= best * (1 + 1e-9)
