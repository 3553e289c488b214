"""DuHL: primal-dual coordinate descent on row partitions, the largest duality gaps in fast memory."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from ilargi_db.backend.duhl_kernels import LOSSES, duality_gaps, duality_gaps_reference
from ilargi_db.errors import IlargiError
from ilargi_db.linalg import Block, PartitionedMatrix
from ilargi_db.models.duhl import DenseRows, RowPartitions, SparseRows, duhl_fit, duhl_ridge


def skewed(n: int = 12_000, d: int = 12, parts: int = 24, seed: int = 0):
    """Rows of a tenth of the partitions scaled up 8x: the duality gap concentrates there."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(n, d))
    rows[: n // 10] *= 8.0
    y = rows @ rng.normal(size=d) + 0.1 * rng.normal(size=n)
    X = PartitionedMatrix.from_blocks([Block(rows, columns=np.arange(d))], n, n // parts, backend="numpy")
    return X, y, rows


def test_the_certificate_holds_and_the_solution_is_ridges():
    X, y, rows = skewed()
    lam = 0.1
    fit = duhl_ridge(X, y, lam, working_set=3, tol=1e-9)
    exact = np.linalg.solve(rows.T @ rows + lam * len(y) * np.eye(rows.shape[1]), rows.T @ y)
    assert fit.gap_ <= 1e-9
    # The gap bounds the primal suboptimality: lambda/2 ||w - w*||^2 <= gap.
    assert 0.5 * lam * float((fit.coef_ - exact) @ (fit.coef_ - exact)) <= fit.gap_ + 1e-15
    assert fit.history_[-1][2] == pytest.approx(fit.gap_) and len(fit.history_) >= 1


def test_the_largest_gaps_first_need_fewer_partition_reads_than_sequential_or_random():
    X, y, _ = skewed()
    fits = {
        s: duhl_ridge(X, y, 0.1, working_set=3, tol=1e-6, selection=s, max_rounds=400)
        for s in ("gap", "sequential", "random")
    }
    assert fits["gap"].gap_ <= 1e-6
    # To the same gap, or not there at all within the rounds allowed:
    assert fits["gap"].loads_ < fits["random"].loads_ and fits["gap"].loads_ < fits["sequential"].loads_


def labelled(n: int = 6_000, d: int = 8, parts: int = 12, seed: int = 1):
    """Labels -1/1 from a noisy linear rule; the rows of a tenth of the partitions scaled up."""
    X, _, rows = skewed(n, d, parts, seed)
    rng = np.random.default_rng(seed)
    y = np.where(rows @ rng.normal(size=d) + rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y, rows


@pytest.mark.parametrize("loss", ["logistic", "hinge"])
def test_logistic_regression_and_a_linear_svm_reach_scikit_learns_optimum_within_the_certificate(loss):
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    X, y, rows = labelled()
    n, lam = len(y), 1e-3
    fit = duhl_fit(X, y, lam, working_set=3, tol=1e-8, loss=loss, max_rounds=8000)  # the hinge: sublinear
    assert fit.gap_ <= 1e-8
    C = 1.0 / (lam * n)  # scikit-learn's 1/2 ||w||^2 + C sum loss is ours times 1 / (lambda n)
    if loss == "logistic":
        reference = LogisticRegression(C=C, fit_intercept=False, tol=1e-12, max_iter=10_000).fit(rows, y)
        optimum = reference.coef_.ravel()
        # The primal is lambda-strongly convex: lambda/2 ||w - w*||^2 <= primal gap <= duality gap.
        assert 0.5 * lam * float((fit.coef_ - optimum) @ (fit.coef_ - optimum)) <= fit.gap_ + 1e-9
        return
    with warnings.catch_warnings():  # liblinear stops short of tol=1e-12: its objective is an upper bound
        warnings.simplefilter("ignore")
        reference = LinearSVC(C=C, loss="hinge", fit_intercept=False, tol=1e-12, max_iter=100_000).fit(rows, y)

    def primal(w):
        return float(np.maximum(0, 1 - y * (rows @ w)).mean() + 0.5 * lam * w @ w)

    # Within the certificate of the optimum, so never worse than liblinear's point by more than the gap.
    assert primal(fit.coef_) <= primal(reference.coef_.ravel()) + fit.gap_


def test_a_hinge_epoch_skips_the_rows_with_nothing_to_give_and_reaches_the_same_certificate():
    """Shrinking: rows past the margin, or at their bound inside it, have a zero gap and a step that would not
    move them; the SVM's epochs visit far fewer rows than the data hold, and still certify the same gap."""
    X, y, _ = labelled()
    fit = duhl_fit(X, y, 1e-3, working_set=3, tol=1e-6, loss="hinge", max_rounds=4000)
    assert fit.gap_ <= 1e-6
    rows_per_epoch = len(y) / RowPartitions(X).n_partitions
    assert fit.steps_ < 0.5 * fit.epochs_ * rows_per_epoch
    logistic = duhl_fit(X, y, 1e-3, working_set=3, tol=1e-4, loss="logistic", max_rounds=400)
    assert logistic.steps_ == pytest.approx(logistic.epochs_ * rows_per_epoch, rel=0.01)  # every row, every epoch


def test_the_largest_gaps_first_need_fewer_reads_for_logistic_regression_too():
    X, y, _ = labelled()
    fits = {
        s: duhl_fit(X, y, 1e-3, working_set=3, tol=1e-5, loss="logistic", selection=s, max_rounds=400)
        for s in ("gap", "sequential", "random")
    }
    assert fits["gap"].gap_ <= 1e-5
    assert fits["gap"].loads_ < fits["random"].loads_ and fits["gap"].loads_ < fits["sequential"].loads_


def test_bad_settings_are_refused():
    X, y, _ = skewed(n=600, parts=6)
    with pytest.raises(ValueError, match="selection must be 'gap', 'sequential' or 'random'"):
        duhl_ridge(X, y, 0.1, working_set=2, selection="largest")
    with pytest.raises(ValueError, match="working_set must hold at least one partition"):
        duhl_ridge(X, y, 0.1, working_set=0)
    with pytest.raises(ValueError, match="loss must be one of"):
        duhl_fit(X, y, 0.1, working_set=2, loss="huber")
    with pytest.raises(ValueError, match="needs labels -1 and 1"):
        duhl_fit(X, y, 0.1, working_set=2, loss="hinge")
    with pytest.raises(ValueError, match="lam must be positive"):
        duhl_fit(X, y, 0.0, working_set=2)


@pytest.mark.parametrize("selection", ["gap", "sequential", "random"])
def test_a_fit_stopped_by_max_rounds_reports_a_gap_that_still_bounds_the_suboptimality(selection):
    rng = np.random.default_rng(0)
    n, d, lam = 2_000, 5, 1e-3
    rows = rng.normal(size=(n, d))
    y = rows @ rng.normal(size=d) + 0.1 * rng.normal(size=n)
    X = PartitionedMatrix.from_blocks([Block(rows, columns=np.arange(d))], n, 250, backend="numpy")
    exact = np.linalg.solve(rows.T @ rows + lam * n * np.eye(d), rows.T @ y)

    def primal(w):
        return 0.5 * np.mean((rows @ w - y) ** 2) + 0.5 * lam * w @ w

    for max_rounds in range(1, 16):
        fit = duhl_ridge(X, y, lam, working_set=1, tol=1e-14, selection=selection, max_rounds=max_rounds)
        assert primal(fit.coef_) - primal(exact) <= fit.gap_ * (1 + 1e-9), max_rounds
        assert fit.history_[-1][2] == fit.gap_  # the last certificate is the one reported


def test_nan_in_the_data_is_refused_not_spread_into_the_coefficients():
    X, y, rows = skewed(n=2_400, parts=8)
    with pytest.raises(IlargiError, match=r"y holds 1 NaN or infinite value\(s\)"):
        duhl_ridge(X, np.where(np.arange(len(y)) == 5, np.nan, y), 0.1, working_set=2)
    rows[700, 3] = np.nan
    bad = PartitionedMatrix.from_blocks([Block(rows, columns=np.arange(rows.shape[1]))], len(y), 300, backend="numpy")
    with pytest.raises(IlargiError, match=r"partition 2 of X holds 1 NaN"):
        duhl_ridge(bad, y, 0.1, working_set=2)


def test_a_plain_matrix_of_several_chunks_held_whole_reads_every_chunk():
    """A matrix not in row partitions is cut into dense chunks; a working set that holds them all reads them as
    one block, every chunk once (it read past the chunks' bounds: an IndexError on realistic data)."""
    from ilargi_db.models.duhl import CHUNK_BYTES

    d = 8
    n = 2 * CHUNK_BYTES // (8 * d) + 100  # three chunks
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(n, d))
    y = rows @ rng.normal(size=d) + 0.1 * rng.normal(size=n)
    fit = duhl_ridge(rows, y, 0.1, working_set=3, tol=1e-8)
    exact = np.linalg.solve(rows.T @ rows + 0.1 * n * np.eye(d), rows.T @ y)
    np.testing.assert_allclose(fit.coef_, exact, rtol=1e-3)


def _labels_and_duals(loss: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Targets and feasible dual variables: any for the squared loss, alpha y in [0, 1] for the others."""
    if loss == "squared":
        return rng.normal(size=n), rng.normal(size=n)
    y = rng.choice([-1.0, 1.0], size=n)
    beta = rng.uniform(size=n)
    beta[: n // 4], beta[n // 4 : n // 2] = 0.0, 1.0  # the bounds, where the hinge's gaps may be exactly 0
    return y, beta * y


@pytest.mark.parametrize("loss", LOSSES)
def test_the_fused_gaps_equal_their_numpy_reference(loss):
    rng = np.random.default_rng(3)
    y, alpha = _labels_and_duals(loss, 400, rng)
    z = rng.normal(scale=3.0, size=400)
    z[:50] = y[:50] * 2.0  # past the margin
    fused = duality_gaps(z, y, alpha, loss)
    np.testing.assert_allclose(fused, duality_gaps_reference(z, y, alpha, loss), rtol=1e-12, atol=1e-12)
    if loss == "hinge":  # shrinking skips the rows whose gap is exactly 0: both say the same rows
        np.testing.assert_array_equal(fused == 0, duality_gaps_reference(z, y, alpha, loss) == 0)


def _one_hot_rows(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raw rows: two one-hot encodings (12 and 3 values) and two numbers far from 0, their means and scales."""
    import scipy.sparse

    team, pos = rng.integers(0, 12, size=n), rng.integers(0, 3, size=n)
    raw = np.zeros((n, 17))
    raw[np.arange(n), team] = 1.0
    raw[np.arange(n), 12 + pos] = 1.0
    raw[:, 15] = rng.normal(3e6, 1e6, size=n)
    raw[:, 16] = rng.normal(size=n)
    return scipy.sparse.csr_matrix(raw), raw.mean(axis=0), raw.std(axis=0)


@pytest.mark.parametrize("loss", LOSSES)
def test_an_epoch_over_stored_entries_equals_one_over_the_dense_rows(loss):
    """Standardized, centered one-hot columns are dense: the sparse epoch keeps them as entries and an offset,
    and takes the same steps as the dense epoch over the rows the model sees, a number far from 0 beside its
    spread (1e8 +- 100) included."""
    from ilargi_db.linalg import ScaledMatrix, as_matrix

    rng = np.random.default_rng(5)
    raw, _, _ = _one_hot_rows(300, rng)
    raw = raw.tolil()
    raw[:, 16] = rng.normal(1e8, 100.0, size=(300, 1))
    X = ScaledMatrix.standardize(as_matrix(raw.tocsr()), center=True)
    center = rng.normal(scale=0.1, size=17)
    held = RowPartitions(X, center=center, intercept_scaling=1.0)
    sparse = held.block(0)
    materialized = np.asarray(X.materialize()) - center
    dense = DenseRows(np.hstack([materialized, np.ones((300, 1))]))
    assert isinstance(sparse, SparseRows)
    y, alpha = _labels_and_duals(loss, 300, rng)
    alpha *= 0.5 if loss == "squared" else 1.0
    w = rng.normal(scale=0.01, size=18)
    np.testing.assert_allclose(sparse.margins(w), dense.margins(w), rtol=1e-9, atol=1e-9)
    order = rng.permutation(300)
    runs = [(alpha.copy(), w.copy()) for _ in range(2)]
    for rows, (a, v) in zip((dense, sparse), runs):
        for _ in range(3):
            rows.epoch(y, a, v, 1.0 / (0.01 * 300), loss, order)
    (dense_alpha, dense_w), (sparse_alpha, sparse_w) = runs
    np.testing.assert_allclose(sparse_alpha, dense_alpha, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(sparse_w, dense_w, rtol=1e-8, atol=1e-9)


def test_ridge_on_one_hot_rows_beside_a_number_far_from_zero_fits_as_on_the_dense_rows():
    """Centered ridge (the intercept exact) on sparse rows with a column of 1e8 +- 100: the number's digits are
    kept (centered in its entries, not through the shared offset), so DuHL on the entries takes the steps it
    takes on the dense rows (on the offset it ended at coefficients of 1e25, or NaN)."""
    import scipy.sparse

    from ilargi_db.models import LinearRegression

    rng = np.random.default_rng(1)
    raw, _, _ = _one_hot_rows(2_000, rng)
    raw = raw.tolil()
    raw[:, 16] = rng.normal(1e8, 100.0, size=(2_000, 1))
    X = scipy.sparse.csr_matrix(raw)
    y = X[:, :12] @ rng.normal(size=12) + 0.01 * (X[:, 16].toarray().ravel() - 1e8) + rng.normal(size=2_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the raw scales converge slowly: the same steps either way is the point
        on_entries = LinearRegression(alpha=1.0, solver="duhl", max_iter=50).fit(X, y)
        on_dense = LinearRegression(alpha=1.0, solver="duhl", max_iter=50).fit(X.toarray(), y)
    assert np.isfinite(on_entries.coef_).all()
    np.testing.assert_allclose(on_entries.coef_, on_dense.coef_, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(on_entries.intercept_, on_dense.intercept_, rtol=1e-6)


def test_one_hot_rows_are_read_as_entries_and_dense_numbers_as_dense_rows():
    import scipy.sparse

    rng = np.random.default_rng(0)
    raw, mean, scale = _one_hot_rows(200, rng)
    one_hot = scipy.sparse.csr_matrix(raw[:, :15])
    numbers = rng.normal(size=(200, 4))
    assert isinstance(RowPartitions(one_hot, center=np.full(15, 0.1)).block(0), SparseRows)
    assert isinstance(RowPartitions(numbers).block(0), DenseRows)
