"""The strict device double (tests/device_double) keeps to the device as CuPy does, and the whole training
path runs on it: every algorithm, both strategies, streamed, reused and from SQL, moving only parameters
between host and device once the data is there."""

from __future__ import annotations

import json
import re

import duckdb
import numpy as np
import pytest
import scipy.sparse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.utils import check_array

import ilargi_db
from ilargi_db import models
from ilargi_db.backend import Backend, backend_of, get_backend, register_backend
from ilargi_db.backend.kernels import ReferenceKernels
from tests.device_double import COPIES, DEVICE_DOUBLE, IMPLICIT, NAME, DeviceArray, sparse, xp
from tests.oracle import assert_close
from tests.strategies import schemas

DEVICE = dict(backend=NAME, reuse=False)


@pytest.fixture(autouse=True)
def fresh_counts():
    COPIES.reset()


# -- the double behaves like CuPy -------------------------------------------------------------------------


def test_implicit_conversion_to_numpy_is_refused_with_cupys_error():
    a = xp.asarray(np.arange(6.0).reshape(3, 2))
    for convert in (np.asarray, np.array, check_array, lambda v: np.array(list(v))):
        with pytest.raises(TypeError, match=re.escape(IMPLICIT)):
            convert(a)
    with pytest.raises(TypeError, match="Implicit conversion"):
        xp.asarray([a[0], np.float64(1.0)])  # device and host values mixed: CuPy builds it on the host
    assert isinstance(xp.asarray([a[0], a[1]]), DeviceArray) and COPIES.to_device == 1  # device arrays only
    with pytest.raises(ValueError, match="truth value of an array with more than one element"):
        bool(a > 1)
    with pytest.raises(TypeError):
        float(a)
    with pytest.raises(TypeError, match="iteration over a 0-d array"):
        iter(a.sum())


def test_host_arrays_in_device_operations_are_refused_as_cupy_refuses_them():
    a, host = xp.ones(3), np.ones(3)
    refused = [
        lambda: a + host,
        lambda: host + a,
        lambda: a * host[0:1],
        lambda: xp.concatenate([a, host]),
        lambda: xp.dot(a, host),
        lambda: np.maximum(a, host),
        lambda: a.__setitem__(slice(None), host),
        lambda: sparse.csr_matrix(scipy.sparse.eye(3, format="csr")) @ host,
    ]
    for operation in refused:
        with pytest.raises(TypeError, match="Unsupported type <class 'numpy.ndarray'>"):
            operation()
    a += 1.0  # scalars, Python's or NumPy's, are not arrays
    assert float(a.sum() * np.float64(2.0)) == 12.0


def test_results_stay_on_the_device_and_every_copy_is_counted():
    host = np.arange(4.0)
    a = xp.asarray(host)
    assert (COPIES.to_device, COPIES.to_device_bytes) == (1, 32)
    for result in (a.sum(), np.exp(a), np.concatenate([a, a]), a[0], a @ a, xp.linalg.norm(a), a.max() > 1):
        assert isinstance(result, DeviceArray)  # reductions too: 0-d device arrays, as CuPy's
    assert COPIES.to_host == 0
    assert float(a.sum()) == 6.0 and int(a[1]) == 1 and bool(a[3] > 2)
    np.testing.assert_array_equal(xp.asnumpy(a), host)
    np.testing.assert_array_equal(a.get(), host)
    assert (COPIES.to_host, COPIES.to_host_bytes) == (5, 8 + 8 + 1 + 2 * 32)
    a[[0, 2]]  # a host index goes to the device, as CuPy's does
    assert COPIES.to_device == 2 and COPIES.log[-1].shape == (2,)
    COPIES.reset()
    assert (COPIES.to_device, COPIES.to_host, COPIES.log) == (0, 0, [])


def test_the_sparse_module_keeps_matrices_on_the_device():
    host = scipy.sparse.random(6, 4, density=0.5, format="csr", random_state=0)
    S = sparse.csr_matrix(host)
    assert sparse.issparse(S) and not scipy.sparse.issparse(S) and COPIES.to_device == 1
    v = xp.asarray(np.arange(4.0))
    assert isinstance(S @ v, DeviceArray) and isinstance(S.T @ (S @ v), DeviceArray)
    np.testing.assert_allclose((S @ v).get(), host @ np.arange(4.0))
    np.testing.assert_allclose(S.sum(axis=0).get(), np.asarray(host.sum(axis=0)))
    stacked = sparse.vstack([S, sparse.csr_matrix((xp.ones(2), (xp.asarray([0, 1]), xp.asarray([0, 3]))), (2, 4))])
    assert stacked.shape == (8, 4)
    np.testing.assert_array_equal(stacked.get().toarray()[6:], [[1, 0, 0, 0], [0, 0, 0, 1]])
    doubled = S.copy()
    doubled.data = doubled.data * 2  # a matrix takes new device arrays, as cupyx's do
    np.testing.assert_allclose(doubled.get().toarray(), 2 * host.toarray())
    with pytest.raises(TypeError, match="Unsupported type"):
        doubled.data = host.data
    with pytest.raises(ValueError, match="Unsupported initializer"):
        sparse.csr_matrix(np.eye(3))  # a host dense array: cupyx refuses it too
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(S)


def test_the_double_is_a_backend_by_name_through_the_public_hook():
    assert get_backend(NAME) is DEVICE_DOUBLE
    assert backend_of(xp.zeros(2)) is DEVICE_DOUBLE
    assert backend_of(sparse.csr_matrix(scipy.sparse.eye(2, format="csr"))) is DEVICE_DOUBLE
    assert backend_of(np.zeros(2)).name == "numpy"
    assert isinstance(DEVICE_DOUBLE.kernels, ReferenceKernels) and DEVICE_DOUBLE.kernels.xp is xp
    with pytest.raises(ValueError, match="built-in backend"):
        register_backend(Backend("cupy", xp, sparse), (DeviceArray,))
    with pytest.raises(ValueError, match=f"'{NAME}'"):
        get_backend("tpu")


def test_the_reference_kernels_run_on_the_device_and_give_numpys_results():
    rng = np.random.default_rng(0)
    n, rows = 500, 7
    dense, index = np.asfortranarray(rng.normal(size=(n, 2))), np.asfortranarray(rng.integers(0, rows, (n, 2)))
    tables, w, v, labels = (
        rng.normal(size=(2, rows, 3)),
        rng.normal(size=(2, 3)),
        rng.normal(size=n),
        rng.integers(0, 3, n),
    )
    on_host, on_device = ReferenceKernels(np), ReferenceKernels(xp)  # the CUDA ones: test_backend_cuda_kernels
    d = DEVICE_DOUBLE.to_device
    calls = {
        "gather_sum": lambda k, c: k.gather_sum(c(dense), c(w), c(index), c(tables)),
        "segment_sums": lambda k, c: k.segment_sums(c(dense), c(index), rows, c(v)),
        "gram_pass": lambda k, c: k.gram_pass(c(dense), c(index), rows, c(np.abs(v))),
        "rows_by_key": lambda k, c: k.rows_by_key(c(index[:, 0]), rows),
        "scatter_gathered": lambda k, c: k.scatter_gathered(c(index[:, 0]), c(index[:, 1]), c(tables[0]), rows),
        "nearest": lambda k, c: k.nearest(c(dense), c(w), c(index), c(tables), c(np.ones(3))),
        "label_sums": lambda k, c: k.label_sums(c(dense), c(index), rows, c(labels), 3),
        "multiplicative_update": lambda k, c: k.multiplicative_update(
            c(np.abs(tables[0])), c(tables[1]), c(w.T @ w), 1e-12
        ),
    }
    for name, run in calls.items():
        want, got = run(on_host, lambda a: a), run(on_device, d)
        for g, e in zip(*(r if isinstance(r, tuple) else (r,) for r in (got, want))):
            assert isinstance(g, DeviceArray), name
            np.testing.assert_allclose(g.get(), e, atol=1e-10, err_msg=name)
    loss, residual = on_device.logistic_loss_residual(d(v), d((v > 0).astype(float)))
    np.testing.assert_allclose(loss, on_host.logistic_loss_residual(v, (v > 0).astype(float))[0])
    assert isinstance(residual, DeviceArray)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas(), seed=st.integers(0, 2**16))
def test_the_normalized_matrix_operators_on_the_device_equal_numpys(schema, seed):
    con = duckdb.connect()
    schema.load(con)
    X, y = ilargi_db.normalize(con, schema.query, target=schema.target, backend=NAME, sparse=schema.sparse)
    H, y_host = ilargi_db.normalize(con, schema.query, target=schema.target, backend="numpy", sparse=schema.sparse)
    rng = np.random.default_rng(seed)
    n, d = H.shape
    w, V = rng.normal(size=d), rng.normal(size=(n, 2))
    picked = rng.integers(0, max(n, 1), 3 if n else 0)
    labels = rng.integers(0, 3, n)
    pairs = [
        (y, y_host),
        (X.materialize(), H.materialize()),
        (X @ xp.asarray(w), H @ w),
        (X.T @ xp.asarray(V), H.T @ V),
        (X.crossprod(), H.crossprod()),
        (X.crossprod(xp.asarray(np.abs(V[:, 0]))), H.crossprod(np.abs(V[:, 0]))),
        (X.colsums(), H.colsums()),
        (X.rowsums(), H.rowsums()),
        (X.group_sums(xp.asarray(labels), 3), H.group_sums(labels, 3)),
        (X.rows(xp.asarray(picked)), H.rows(picked)),
        (X.take_rows(xp.asarray(picked)) @ xp.asarray(w), H.take_rows(picked) @ w),
        (X.row_norms_squared(), H.row_norms_squared()),
        ((X * 2.0 + 1.0).exp().colsums(), (H * 2.0 + 1.0).exp().colsums()),
    ]
    for got, want in pairs:
        assert isinstance(got, DeviceArray)
        assert_close(got.get(), want)


# -- the whole training path on the double -----------------------------------------------------------------

N_FACT = 2000


@pytest.fixture(scope="module")
def star():
    con = ilargi_db.connect()
    con.execute(
        f"CREATE TABLE fact AS SELECT range AS id, range % 40 AS k, sin(range) AS x1, cos(range * 0.7) AS x2, "
        "['u', 'v', NULL][range % 3 + 1] AS kind, 3 * sin(range) + cos(range * 0.7) + (range % 5) * 0.2 AS y, "
        f"(range % 7) * 0.1 AS p FROM range({N_FACT})"
    )
    con.execute(
        "CREATE TABLE dim AS SELECT range AS k, range * 0.05 AS z, ['a', 'b', 'c'][range % 3 + 1] AS grp FROM range(40)"
    )
    return con


STAR = "SELECT f.x1, f.x2, f.kind, d.z, d.grp, f.y FROM fact f JOIN dim d ON f.k = d.k"
JOBS = {
    "linear_regression": (STAR, "y", {"alpha": 0.5}),
    "logistic_regression": (STAR.replace("f.y FROM", "f.y > 0.5 AS late FROM"), "late", {"C": 2.0}),
    "linear_svc": (STAR.replace("f.y FROM", "f.y > 0.5 AS late FROM"), "late", {}),
    "kmeans": (STAR.replace(", f.y FROM", " FROM"), None, {"n_clusters": 3, "random_state": 0}),
    "gnmf": (
        "SELECT f.p, d.z, d.grp FROM fact f JOIN dim d ON f.k = d.k",
        None,
        {"n_components": 2, "random_state": 0},
    ),
    "gradient_boosting": (STAR, "y", {"n_estimators": 4}),
}
FITTED = ("coef_", "intercept_", "cluster_centers_", "components_")


def assert_same_model(got, want, rtol=1e-6):
    for name in FITTED:
        if hasattr(want.estimator_, name):
            value = getattr(got, name)
            assert type(value) is not DeviceArray, f"{name} is left on the device"
            np.testing.assert_allclose(value, getattr(want, name), rtol=rtol, atol=1e-9, err_msg=name)


@pytest.mark.parametrize("strategy", ["factorized", "materialized"])
@pytest.mark.parametrize("algorithm", list(JOBS))
def test_every_algorithm_trains_on_the_device_as_on_numpy(star, algorithm, strategy):
    query, target, params = JOBS[algorithm]
    on_device = ilargi_db.train(star, query, target, algorithm, strategy=strategy, **DEVICE, **params)
    on_host = ilargi_db.train(star, query, target, algorithm, strategy=strategy, backend="numpy", reuse=False, **params)
    assert on_device.strategy_ == strategy
    assert_same_model(on_device, on_host)
    if hasattr(on_host.estimator_, "predict"):
        predicted = ilargi_db.predict(star, on_device, query, backend=NAME)
        assert type(predicted) is np.ndarray
        np.testing.assert_allclose(predicted, ilargi_db.predict(star, on_host, query), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("algorithm", ["linear_regression", "logistic_regression", "kmeans", "gnmf", "linear_svc"])
def test_a_streamed_job_trains_on_the_device_as_on_numpy(star, algorithm):
    query, target, params = JOBS[algorithm]
    run = dict(memory_budget="60KB", strategy="factorized", reuse=False, **params)
    on_device = ilargi_db.train(star, query, target, algorithm, backend=NAME, **run)
    on_host = ilargi_db.train(star, query, target, algorithm, backend="numpy", **run)
    assert on_device.streamed_["partitions"] > 2
    assert_same_model(on_device, on_host)


def test_a_reused_job_on_the_device_gives_the_cold_jobs_model(star):
    query, target, params = JOBS["logistic_regression"]
    run = dict(algorithm="logistic_regression", backend=NAME, strategy="factorized", reuse="memory", **params)
    ilargi_db.train(star, query, target, **run)
    warm = ilargi_db.train(star, query, target, **run)
    cold = ilargi_db.train(star, query, target, **{**run, "reuse": False})
    assert any("the encoded matrix" in line for line in warm.reused_), warm.reused_
    assert_same_model(warm, cold, rtol=1e-12)


def test_the_sql_function_trains_on_the_device(star):
    options = json.dumps({"backend": NAME, "strategy": "factorized"})
    summary = json.loads(
        star.execute(
            f"SELECT ilargi_train('on_device', 'linear_regression', 'SELECT x1, x2, y FROM fact', 'y', '{options}')"
        ).fetchall()[0][0]
    )
    reference = ilargi_db.train(star, "SELECT x1, x2, y FROM fact", "y", backend="numpy", reuse=False)
    assert summary["strategy"] == "factorized"
    (column,) = star.sql("SELECT on_device_predict(x1, x2) FROM fact ORDER BY id").fetchnumpy().values()
    np.testing.assert_allclose(column, ilargi_db.predict(star, reference, "SELECT x1, x2 FROM fact ORDER BY id"))


@pytest.mark.parametrize(
    "model, label",
    [
        (ilargi_db.models.LinearRegression(), "f.y"),
        (ilargi_db.models.LogisticRegression(), "f.y > 0.5"),
        (ilargi_db.models.LogisticRegression(), "f.k % 3"),  # multinomial: one intercept per class
        (ilargi_db.models.LinearSVC(), "f.y > 0.5"),
    ],
    ids=["linear", "logistic", "multinomial", "svm"],
)
def test_an_estimator_fits_predicts_and_scores_device_data(star, model, label):
    query = STAR.replace("f.y FROM", f"{label} AS label FROM")
    X, y = ilargi_db.normalize(star, query, target="label", backend=NAME)
    H, y_host = ilargi_db.normalize(star, query, target="label", backend="numpy")
    on_device, on_host = clone(model).fit(X, y), clone(model).fit(H, y_host)
    for method in ("predict", "decision_function"):
        if hasattr(on_host, method):
            got = getattr(on_device, method)(X)
            assert type(got) is np.ndarray
            np.testing.assert_allclose(got, getattr(on_host, method)(H), rtol=1e-6, atol=1e-9)
    assert on_device.score(X, y) == pytest.approx(on_host.score(H, y_host))


# -- only parameters cross between host and device per iteration -------------------------------------------


def _copies_of_a_fit(estimator, X, y):
    COPIES.reset()
    estimator.fit(X, y) if y is not None else estimator.fit(X)
    return list(COPIES.log), estimator.n_iter_


LATE = STAR.replace("f.y FROM", "f.y > 0.5 AS late FROM")
FEATURES = STAR.replace(", f.y FROM", " FROM")
NONNEGATIVE = JOBS["gnmf"][0]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # stopped at max_iter on purpose
@pytest.mark.parametrize(
    "make, query, target, n_sized",
    [
        # The target to the host (its classes checked by scikit-learn), back as 0/1.
        (lambda it: models.LogisticRegression(max_iter=it, tol=1e-12, C=100.0), LATE, "late", ["to_host", "to_device"]),
        # The target to the host (checked finite) and back.
        (lambda it: models.LinearRegression(solver="cg", max_iter=it, tol=1e-14), STAR, "y", ["to_host", "to_device"]),
        # The labels to the host (k-means++ keeps the n distances on the device).
        (lambda it: models.KMeans(n_clusters=4, max_iter=it, tol=0.0, random_state=0), FEATURES, None, ["to_host"]),
        # W drawn on the host (NumPy's generator) and given back by fit_transform.
        (
            lambda it: models.GaussianNMF(n_components=2, max_iter=it, tol=0.0),
            NONNEGATIVE,
            None,
            ["to_device", "to_host"],
        ),
    ],
    ids=["logistic regression (L-BFGS)", "linear regression (CG)", "k-means (k-means++, Lloyd)", "NMF (MU)"],
)
def test_an_iteration_moves_parameters_between_host_and_device_never_an_n_vector(star, make, query, target, n_sized):
    X, y = ilargi_db.normalize(star, query, target=target, backend=NAME)
    n, d = X.shape
    short, short_iterations = _copies_of_a_fit(make(2), X, y)
    long, long_iterations = _copies_of_a_fit(make(8), X, y)
    extra = long_iterations - short_iterations
    assert extra >= 3, (short_iterations, long_iterations)
    # The copies of n or more numbers in a whole fit: once each, however many iterations.
    assert [c.direction for c in long if np.prod(c.shape) >= n] == n_sized
    assert [c for c in short if np.prod(c.shape) >= n] == [c for c in long if np.prod(c.shape) >= n]
    # Every other copy is parameter-sized (k x d at most), and the extra iterations made a handful each.
    assert max(np.prod(c.shape) for c in long if np.prod(c.shape) < n) <= 4 * (d + 1)
    moved = sum(c.nbytes for c in long) - sum(c.nbytes for c in short)
    assert moved <= extra * 12 * 4 * (d + 1) * 8, (moved, extra, d)


def test_k_means_refills_an_empty_cluster_without_bringing_the_distances_to_the_host(star):
    X, _ = ilargi_db.normalize(star, "SELECT d.z FROM fact f JOIN dim d ON f.k = d.k", backend=NAME)  # 40 points
    model = ilargi_db.models.KMeans(n_clusters=45, n_init=1, random_state=0)
    COPIES.reset()
    model.fit(X)
    assert [(c.direction, c.shape) for c in COPIES.at_least(X.shape[0])] == [("to_host", (X.shape[0],))]
