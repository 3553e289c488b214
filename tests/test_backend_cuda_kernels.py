"""Each CUDA kernel (ilargi_db.backend.cuda_kernels) equals its reference (ilargi_db.backend.kernels).

On a GPU they run on CuPy; everywhere else their CUDA C runs on the strict device double through the host
emulator (tests/device_double/emulator.py), which needs a C++ compiler: without one these tests skip,
saying so. The emulator runs threads one after another, so these show each kernel's arithmetic and
indexing, not its speed nor its freedom from races (see the emulator's docstring).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import scipy.sparse

import ilargi_db
from ilargi_db.backend import get_backend
from ilargi_db.backend.cuda_kernels import CudaKernels
from ilargi_db.backend.cuda_sources import KERNEL_NAMES, source
from ilargi_db.backend.cuda_tree_kernels import CudaTreeKernels
from ilargi_db.backend.kernels import ReferenceKernels
from ilargi_db.backend.tree_reference import ReferenceTreeKernels
from ilargi_db.linalg.binned_matrix import BinnedBlock, BinnedMatrix, FlatBins
from ilargi_db.linalg.feature_bins import FeatureBins, bin_dtype
from tests.conftest import DEVICE_BACKENDS
from tests.device_double import cuda, emulator

REFERENCE, TREE_REFERENCE = ReferenceKernels(np), ReferenceTreeKernels(np)


@pytest.fixture(params=DEVICE_BACKENDS)
def device(request):
    if request.param == "device_double" and not emulator.available():
        pytest.skip("no C++ compiler (g++, clang++ or CXX) to emulate the CUDA kernels on the device double")
    backend = get_backend(request.param)
    return backend, CudaKernels(backend.xp)


def close(got, want, backend, atol=1e-9):
    assert (got is None) == (want is None)
    if want is not None:
        np.testing.assert_allclose(backend.to_host(got), want, atol=atol)


def layout(rng, n, a, t, rows, positions):
    dense = np.asfortranarray(rng.normal(size=(n, a))) if a else None
    if a % 2:
        dense = np.ascontiguousarray(dense)  # the matrix keeps Fortran order; both reach the kernels
    index = np.asfortranarray(rng.integers(0, rows, (n, t)), dtype=positions) if t else None
    return dense, index


def up(backend, a):
    return None if a is None else backend.to_device(a)


SHAPES = [(0, 2, 1), (1, 0, 1), (17, 3, 2), (1000, 0, 3), (1000, 4, 0), (3000, 2, 3)]  # (n, a, t)


@pytest.mark.parametrize("positions", [np.int32, np.int64])
@pytest.mark.parametrize("n,a,t", SHAPES)
def test_linear_kernels_match_reference(device, n, a, t, positions):
    backend, cuda = device
    rng = np.random.default_rng(n + a + t)
    rows, m = 37, 3
    dense, index = layout(rng, n, a, t, rows, positions)
    tables2, tables3 = rng.normal(size=(t, rows)), rng.normal(size=(t, rows, m))
    w, W = (rng.normal(size=a), rng.normal(size=(a, m))) if a else (None, None)
    d_dense, d_index = up(backend, dense), up(backend, index)
    for operand, tables in ((w, tables2), (W, tables3)):
        got = cuda.gather_sum(d_dense, up(backend, operand), d_index, up(backend, tables) if t else None)
        close(got, REFERENCE.gather_sum(dense, operand, index, tables if t else None), backend)
    for v in (rng.normal(size=n), rng.normal(size=(n, m))):
        got = cuda.segment_sums(d_dense, d_index, rows, up(backend, v))
        for g, want in zip(got, REFERENCE.segment_sums(dense, index, rows, v)):
            close(g, want, backend, atol=1e-8)
    if t:
        weights = rng.random(n)
        for d in (None, weights):
            got = cuda.gram_pass(d_dense, d_index, rows, up(backend, d))
            for g, want in zip(got, REFERENCE.gram_pass(dense, index, rows, d)):
                close(g, want, backend, atol=1e-8)


@pytest.mark.parametrize("positions", [np.int32, np.int64])
@pytest.mark.parametrize("n", [0, 1, 500, 4000])
def test_pair_kernels_match_reference(device, n, positions):
    backend, cuda = device
    rng = np.random.default_rng(n)
    rows, m = 29, 4
    index = rng.integers(0, rows, (n, 2)).astype(positions)
    scatter, gather, weights, table = index[:, 0], index[:, 1], rng.random(n), rng.normal(size=(rows, m))
    d_scatter, d_gather, d_table = up(backend, scatter), up(backend, gather), up(backend, table)
    for g, d in ((gather, None), (gather, weights)):
        got = cuda.scatter_gathered(d_scatter, up(backend, g), d_table, rows, up(backend, d))
        close(got, REFERENCE.scatter_gathered(scatter, g, table, rows, d), backend, atol=1e-8)
    own = rng.normal(size=(n, m))  # no gather: row i takes its own row of the table
    got = cuda.scatter_gathered(d_scatter, None, up(backend, own), rows, up(backend, weights))
    close(got, REFERENCE.scatter_gathered(scatter, None, own, rows, weights), backend, atol=1e-8)
    data_a = rng.normal(size=(rows, 3))
    by_key = REFERENCE.rows_by_key(scatter, rows)
    d_by_key = tuple(up(backend, x) for x in by_key)
    for d in (None, weights):
        got = cuda.pair_gram(d_by_key, d_gather, up(backend, data_a), d_table, up(backend, d))
        close(got, REFERENCE.pair_gram(by_key, gather, data_a, table, d), backend, atol=1e-8)
    one_hot_a = scipy.sparse.random(rows, 4, density=0.3, random_state=rng, format="csr")
    one_hot_b = scipy.sparse.random(rows, 5, density=0.4, random_state=rng, format="csr")
    sparse_a, sparse_b = backend.to_device(one_hot_a), backend.to_device(one_hot_b)
    for d in (None, weights):
        got = cuda.sparse_pair_gram(d_scatter, d_gather, sparse_a, sparse_b, up(backend, d))
        close(got, REFERENCE.sparse_pair_gram(scatter, gather, one_hot_a, one_hot_b, d), backend, atol=1e-8)


@pytest.mark.parametrize("positions", [np.int32, np.int64])
@pytest.mark.parametrize("n,a,t", SHAPES)
def test_kmeans_kernels_match_reference(device, n, a, t, positions):
    backend, cuda = device
    rng = np.random.default_rng(7 * n + a + t)
    rows, k = 23, 4
    dense, index = layout(rng, n, a, t, rows, positions)
    W = rng.normal(size=(a, k)) if a else None
    tables, offsets = (rng.normal(size=(t, rows, k)) if t else None), rng.normal(size=k)
    labels, best = cuda.nearest(
        up(backend, dense), up(backend, W), up(backend, index), up(backend, tables), up(backend, offsets)
    )
    want_labels, want_best = REFERENCE.nearest(dense, W, index, tables, offsets)
    np.testing.assert_array_equal(backend.to_host(labels), want_labels)
    close(best, want_best, backend)
    got = cuda.label_sums(up(backend, dense), up(backend, index), rows, labels, k)
    for g, want in zip(got, REFERENCE.label_sums(dense, index, rows, want_labels, k)):
        close(g, want, backend, atol=1e-8)


@pytest.mark.parametrize("n", [0, 1, 1000])
def test_elementwise_kernels_match_reference(device, n):
    backend, cuda = device
    rng = np.random.default_rng(n)
    z, y = rng.normal(scale=30, size=n), (rng.random(n) < 0.5).astype(float)  # large |z|: no overflow
    loss, residual = cuda.logistic_loss_residual(up(backend, z), up(backend, y))
    want_loss, want_residual = REFERENCE.logistic_loss_residual(z.copy(), y)
    assert loss == pytest.approx(want_loss, rel=1e-12, abs=1e-9)
    close(residual, want_residual, backend)
    W, numerator, gram = rng.random((n, 3)), rng.random((n, 3)), rng.random((3, 3))
    W[:1] = 0.0  # a zero denominator takes epsilon
    got = cuda.multiplicative_update(up(backend, W), up(backend, numerator), up(backend, gram), 1e-10)
    close(got, REFERENCE.multiplicative_update(W, numerator, gram, 1e-10), backend)


def test_every_source_compiles_for_both_position_types():
    if not emulator.available():
        pytest.skip("no C++ compiler (g++, clang++ or CXX) to compile the CUDA sources on the host")
    for name in KERNEL_NAMES:
        for positions in ("int32", "int64"):
            emulator.RawKernel(source(name, positions), name).compile()


WHERE_AM_I = """
extern "C" __global__ void where_am_i(long long* __restrict__ place, double* __restrict__ threads) {
    const long long x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    const long long z = blockIdx.z * blockDim.z + threadIdx.z;
    const long long width = gridDim.x * blockDim.x, height = gridDim.y * blockDim.y;
    place[(z * height + y) * width + x] = (z * height + y) * width + x;
    atomicAdd(threads, 1.0);
}
"""


def test_the_emulator_runs_every_thread_of_a_3d_grid_once():
    if not emulator.available():
        pytest.skip("no C++ compiler (g++, clang++ or CXX) to emulate kernels")
    backend = get_backend("device_double")
    place, threads = backend.xp.full(2 * 4 * 3 * 2 * 1 * 2, -1, dtype=np.int64), backend.xp.zeros(1)
    emulator.RawKernel(WHERE_AM_I, "where_am_i")((2, 3, 1), (4, 2, 2), (place, threads))
    np.testing.assert_array_equal(place.get(), np.arange(place.size))
    assert float(threads[0]) == place.size


def test_a_launch_on_a_stream_is_ordered_like_the_streams_other_work():
    if not emulator.available():
        pytest.skip("no C++ compiler (g++, clang++ or CXX) to emulate kernels")
    xp = get_backend("device_double").xp
    place, threads = xp.zeros(16, dtype=np.int64), xp.zeros(1)
    stream = xp.cuda.Stream(non_blocking=True)
    with stream:
        emulator.RawKernel(WHERE_AM_I, "where_am_i")((2,), (8,), (place, threads))
    with pytest.raises(cuda.UnorderedRead):
        place.get()  # on the null stream, before anything orders it after the launch
    stream.synchronize()
    np.testing.assert_array_equal(place.get(), np.arange(16))


ONE_TOO_FAR = """
extern "C" __global__ void one_too_far(const double* __restrict__ x, double* __restrict__ out, long long n) {
    const long long item = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (item <= n) out[item] = x[item];  // <= : the thread past the end reads and writes one cell too far
}
"""


def test_the_emulator_refuses_a_write_out_of_bounds():
    if not emulator.available():
        pytest.skip("no C++ compiler (g++, clang++ or CXX) to emulate kernels")
    xp = get_backend("device_double").xp
    x, out = xp.arange(5, dtype=np.float64), xp.zeros(5)
    with pytest.raises(emulator.OutOfBounds, match="one_too_far wrote outside a float64 array of shape \\(5,\\)"):
        emulator.RawKernel(ONE_TOO_FAR, "one_too_far")((1,), (8,), (x, out, np.int64(5)))


def test_a_source_that_does_not_compile_is_refused_with_the_compilers_message():
    if not emulator.available():
        pytest.skip("no C++ compiler (g++, clang++ or CXX) to emulate kernels")
    broken = 'extern "C" __global__ void broken(double* out, long long total) { out[0] = undeclared; }'
    with pytest.raises(RuntimeError, match="(?s)broken does not compile.*undeclared"):
        emulator.RawKernel(broken, "broken").compile()


def test_threads_write_only_their_own_cells_except_through_atomics():
    """What the serial emulator cannot show, checked on the source: a plain store (``=``, ``+=``) into an
    output goes to the thread's own work item (``item``, or a name bound to it); every other write to an
    output, where two threads may meet, is an ``atomicAdd``. (Outputs are written through their parameters:
    no pointer is made in a kernel's body.)"""
    for name in KERNEL_NAMES:
        code = source(name)
        params = re.search(r"__global__\s+void\s+\w+\s*\(([^)]*)\)", code).group(1).split(",")
        outputs = [re.findall(r"\w+", p)[-1] for p in params if "*" in p and "const" not in p]
        own = {"item", *re.findall(r"const long long (\w+) = item;", code)}
        body = code[code.index("{") :]
        assert not re.search(r"\*\s*\w+\s*=", body), f"{name}: a pointer made in the body (write through the outputs)"
        for output in outputs:
            for at in re.findall(rf"\b{output}\[([^\]]*)\]\s*[-+*/]?=(?!=)", code):
                assert at.strip() in own, f"{name}: a plain store into {output}[{at}], a cell other threads may write"
            stores = len(re.findall(rf"\b{output}\[[^\]]*\]\s*[-+*/]?=(?!=)", code))
            assert stores or f"atomicAdd(&{output}[" in code or f"atomicAdd({output}," in code, (
                f"{name} never writes {output}"
            )


def test_the_device_backends_use_the_cuda_kernels():
    if not emulator.available():
        pytest.skip("no C++ compiler: the device double keeps the reference kernels")
    assert isinstance(get_backend("device_double").kernels, CudaKernels)


def flat_bins(rng, n, missing_bin, positions):
    """A fact's own block and two dimensions read through their index (-1: a row an outer join left empty)."""
    width, dtype = missing_bin + 1, bin_dtype(missing_bin)
    blocks, first = [], 0
    for c, n_source in ((2, n), (3, 40), (1, 7)):
        index = None if not blocks else rng.integers(-1, n_source, n)  # the fact's own block first
        codes = rng.integers(0, width, (n_source, c)).astype(dtype)
        fill = rng.integers(0, width, c).astype(dtype)
        blocks.append(BinnedBlock(codes, index, np.arange(first, first + c), fill))
        first += c
    bins = [FeatureBins(f"x{j}", False, np.arange(width - 2, dtype=float)) for j in range(first)]
    flat = FlatBins.of(BinnedMatrix(blocks, n, bins, missing_bin), gather_width=0)
    return dataclasses.replace(flat, index=flat.index.astype(positions))


def on_device(backend, flat):
    arrays = {
        f.name: backend.to_device(v)
        for f in dataclasses.fields(flat)
        if isinstance(v := getattr(flat, f.name), np.ndarray)
    }
    return dataclasses.replace(flat, **arrays)


@pytest.mark.parametrize("positions", [np.int32, np.int64])
@pytest.mark.parametrize("missing_bin", [16, 1024])  # 1024: two-byte bins
@pytest.mark.parametrize("n", [0, 1, 2000])
def test_node_histogram_matches_reference(device, n, missing_bin, positions):
    backend, _ = device
    cuda = CudaTreeKernels(backend.xp)
    rng = np.random.default_rng(n + missing_bin)
    flat = flat_bins(rng, n, missing_bin, positions)
    rows = rng.permutation(n)[: n // 2 + 1 if n else 0].astype(np.int64)  # a node's rows, in partition order
    g, h = rng.normal(size=n), rng.random(n)
    segment = np.zeros(len(flat.widths), dtype=np.bool_)
    for unit in (False, True):
        hess = np.ones(n) if unit else h
        args = (up(backend, rows), up(backend, g), up(backend, hess), up(backend, segment), unit)
        got = cuda.node_histogram(on_device(backend, flat), *args)
        close(got, TREE_REFERENCE.node_histogram(flat, rows, g, hess, segment, unit), backend, atol=1e-9)


# -- the training path runs them ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def star():
    if not emulator.available():
        pytest.skip("no C++ compiler: the device double keeps the reference kernels")
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE fact AS SELECT range AS id, range % 40 AS k, sin(range) AS x1, cos(range * 0.7) AS x2, "
        "['u', 'v', NULL][range % 3 + 1] AS kind, 3 * sin(range) + cos(range * 0.7) + (range % 5) * 0.2 AS y, "
        "(range % 7) * 0.1 AS p, range % 30 AS k2 FROM range(3000)"
    )
    con.execute("CREATE TABLE dim2 AS SELECT range AS k2, ['r', 's', 't', 'u'][range % 4 + 1] AS color FROM range(30)")
    con.execute(
        "CREATE TABLE dim AS SELECT range AS k, range * 0.05 AS z, ['a', 'b', 'c'][range % 3 + 1] AS grp FROM range(40)"
    )
    return con


STAR = "SELECT f.x1, f.x2, f.kind, d.z, d.grp, f.y FROM fact f JOIN dim d ON f.k = d.k"
LABELLED = STAR.replace("f.y FROM", "f.y > 0.5 AS late FROM")
JOBS = {  # algorithm: (query, target, parameters, the CUDA kernels its training launches at least)
    "linear_regression": (STAR, "y", {"alpha": 0.5}, {"gram_add", "scatter_add", "gather_add", "segment_add"}),
    "snowflake": (  # two dimensions' one-hot blocks: their pair of the Gram in one sparse pass
        STAR.replace("f.y FROM", "e.color, f.y FROM") + " JOIN dim2 e ON f.k2 = e.k2",
        "y",
        {"alpha": 0.5},
        {"sparse_pair_add"},
    ),
    "logistic_regression": (LABELLED, "late", {"C": 2.0}, {"gather_add", "segment_add", "logistic_rows"}),
    "linear_svc": (LABELLED, "late", {}, {"gather_add"}),
    "kmeans": (
        STAR.replace(", f.y FROM", " FROM"),
        None,
        {"n_clusters": 3, "random_state": 0},
        {"nearest_rows", "label_add"},
    ),
    "gnmf": (
        "SELECT f.p, d.z, d.grp FROM fact f JOIN dim d ON f.k = d.k",
        None,
        {"n_components": 2, "random_state": 0},
        {"multiplicative_rows", "gather_add", "segment_add"},
    ),
}
FITTED = ("coef_", "intercept_", "cluster_centers_", "components_")


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("job", list(JOBS))
def test_training_on_the_device_runs_the_cuda_kernels_and_gives_numpys_model(star, job, streamed):
    query, target, params, kernels = JOBS[job]
    algorithm = "linear_regression" if job == "snowflake" else job
    run = dict(strategy="factorized", reuse=False, **params, **({"memory_budget": "60KB"} if streamed else {}))
    emulator.LAUNCHES.clear()
    on_device = ilargi_db.train(star, query, target, algorithm, backend="device_double", **run)
    launched = set(emulator.LAUNCHES)
    on_host = ilargi_db.train(star, query, target, algorithm, backend="numpy", **run)
    assert kernels <= launched, f"launched {sorted(launched)}"
    if streamed:
        assert on_device.streamed_["partitions"] > 2
    for name in FITTED:
        if hasattr(on_host.estimator_, name):
            np.testing.assert_allclose(getattr(on_device, name), getattr(on_host, name), rtol=1e-6, atol=1e-9)


# -- trees on the device ---------------------------------------------------------------------------------------

TREE_JOBS = {  # name: (query, target, algorithm, parameters)
    "regression": (STAR, "y", "gradient_boosting", {"n_estimators": 4, "max_leaves": 8}),
    "binary": (LABELLED, "late", "gradient_boosting", {"n_estimators": 4, "max_leaves": 8}),
    "multi-class": (
        STAR.replace("f.y FROM", "CAST(f.k % 3 AS INTEGER) AS band FROM"),
        "band",
        "gradient_boosting",
        {"n_estimators": 3, "max_leaves": 6, "objective": "log_loss"},
    ),
    "forest": (LABELLED, "late", "random_forest", {"n_estimators": 4, "max_leaves": 8, "random_state": 1}),
    "early stopping": (
        STAR,
        "y",
        "gradient_boosting",
        {"n_estimators": 6, "max_leaves": 6, "early_stopping": True, "n_iter_no_change": 2, "random_state": 0},
    ),
}


@pytest.mark.parametrize("strategy", ["factorized", "materialized"])
@pytest.mark.parametrize("job", list(TREE_JOBS))
def test_trees_grown_on_the_device_are_numpys(star, job, strategy):
    """backend="device_double": the rows, gradients and histograms on the device (its CUDA histogram kernel run by the
    emulator), each node's histogram on the host for its split: the very trees NumPy's kernels grow."""
    query, target, algorithm, params = TREE_JOBS[job]
    run = dict(strategy=strategy, reuse=False, **params)
    emulator.LAUNCHES.clear()
    on_device = ilargi_db.train(star, query, target, algorithm, backend="device_double", **run)
    assert "node_histogram" in emulator.LAUNCHES
    on_host = ilargi_db.train(star, query, target, algorithm, backend="numpy", **run)
    a, b = on_device.trees_.to_record(), on_host.trees_.to_record()
    for key in ("tree_start", "feature", "left", "right", "threshold", "missing_left", "category_bins", "count"):
        assert a[key] == b[key], key
    np.testing.assert_allclose(a["value"], b["value"], rtol=1e-9, atol=1e-12)
    for name, value in on_host.training_metrics_.items():
        assert on_device.training_metrics_[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name


def test_a_tree_on_the_device_copies_per_node_never_per_row(star):
    """Host<->device copies while the trees grow: per node, a histogram down and a split's mask up (and the
    partition's count); an n-row copy only for the rows, the target and the scores once per training."""
    from tests.device_double import COPIES

    n_estimators, max_leaves = 3, 8
    COPIES.reset()
    ilargi_db.train(
        star, STAR, "y", "gradient_boosting", backend="device_double", strategy="materialized", reuse=False,
        n_estimators=n_estimators, max_leaves=max_leaves,
    )  # fmt: skip
    nodes = n_estimators * (2 * max_leaves - 1)
    rows = 3000
    whole_rows = [c for c in COPIES.log if c.shape and c.shape[-1] >= rows]
    assert len(whole_rows) <= 12, [(c.direction, c.shape, c.site) for c in whole_rows]
    assert COPIES.to_host + COPIES.to_device <= 12 * nodes + 40
