"""Host blocks reach the device through a few reused pinned buffers, a streamed partition's copies run on a
copy stream its consumer waits for, and a stream's dimensions are uploaded once per job: checked on the
strict device double, whose streams refuse a read nothing orders after its writer (as a GPU would race)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import scipy.sparse

import ilargi_db
from ilargi_db.backend import NUMPY
from ilargi_db.backend.transfer import NO_FENCE, PINNED_BUFFERS, DeviceTransfers
from ilargi_db.linalg import Block, NormalizedMatrix, PartitionSource
from tests.device_double import COPIES, DEVICE_DOUBLE, NAME, DeviceArray, cuda, sparse, xp


@pytest.fixture(autouse=True)
def fresh_counts():
    COPIES.reset()
    cuda.PINNED.reset()


def _pinned(values: np.ndarray) -> np.ndarray:
    return np.ndarray(values.shape, values.dtype, buffer=cuda.alloc_pinned_memory(values.nbytes))


# -- the double keeps CUDA's ordering --------------------------------------------------------------------


def test_an_upload_on_a_copy_stream_is_read_elsewhere_only_once_ordered_after_it():
    source = _pinned(np.arange(4.0))
    source[...] = np.arange(4.0)
    copying = cuda.Stream(non_blocking=True)
    device = xp.empty(4)
    device.set(source, stream=copying)
    assert COPIES.log[-1].pinned
    with pytest.raises(cuda.UnorderedRead, match="wait_event"):
        device.sum()  # the null stream never waited for the copy
    with copying:
        assert float(device.sum()) == 6.0  # its own stream is ordered after it
    late = xp.empty(4)
    late.set(source, stream=copying)
    cuda.get_current_stream().wait_event(copying.record())  # ordered on the device: the host goes on
    np.testing.assert_array_equal(late.get(), np.arange(4.0))


def test_an_async_copy_reads_its_pinned_source_when_it_lands_not_when_it_is_enqueued():
    source = _pinned(np.zeros(3))
    copying = cuda.Stream(non_blocking=True)
    device = xp.empty(3)
    source[...] = 1.0
    device.set(source, stream=copying)
    copied = copying.record()
    source[...] = 2.0  # the staging buffer reused before the copy was synchronized: a race on a GPU
    copied.synchronize()
    np.testing.assert_array_equal(device.get(), [2.0, 2.0, 2.0])
    with pytest.raises(TypeError, match="float32 array cannot be set to float64"):
        device.set(np.zeros(3, dtype=np.float32))
    with pytest.raises(ValueError, match="Shape mismatch"):
        device.set(np.zeros(4))


# -- uploads through the pinned buffers ------------------------------------------------------------------


def test_uploads_reuse_a_bounded_set_of_pinned_buffers_and_keep_every_copy_intact():
    chunk = 4096  # small buffers: a block goes in several pieces, and the buffers are reused many times over
    transfers = DeviceTransfers(xp, sparse, chunk=chunk)
    copying = cuda.Stream(non_blocking=True)
    rng = np.random.default_rng(0)
    blocks = [rng.normal(size=(int(rng.integers(1, 3000)), 3)) for _ in range(40)]
    blocks += [np.asfortranarray(blocks[0]), rng.normal(size=(50, 8))[::2, 1::3]]  # column-major; neither
    with copying:  # every copy stays in flight until its buffer is needed again (the double lands copies late)
        uploaded = [transfers.upload(b) for b in blocks]
        csr = scipy.sparse.random(50, 4, density=0.3, format="csr", random_state=0)
        on_device = transfers.upload(csr)
    assert len(transfers.buffers.slots) == cuda.PINNED.count == PINNED_BUFFERS  # pinned once, not per block
    assert transfers.buffers.nbytes == PINNED_BUFFERS * chunk
    assert all(c.pinned for c in COPIES.log) and max(c.nbytes for c in COPIES.log) == chunk
    assert sum(c.nbytes for c in COPIES.log) == sum(b.nbytes for b in blocks) + sum(
        a.nbytes for a in (csr.data, csr.indices, csr.indptr)
    )
    copying.synchronize()
    for block, device in zip(blocks, uploaded):
        np.testing.assert_array_equal(device.get(), block)  # no buffer was reused while its copy was in flight
    assert uploaded[-2].flags.f_contiguous
    np.testing.assert_array_equal(on_device.get().toarray(), csr.toarray())


def test_numpy_moves_nothing():
    dense, fortran = np.ones((3, 2)), np.asfortranarray(np.ones((3, 2)))
    csr = scipy.sparse.eye(3, format="csr")
    assert NUMPY.to_device(dense) is dense and NUMPY.to_device(fortran) is fortran and NUMPY.to_device(csr) is csr
    with NUMPY.transfers.staging() as fences:
        pass
    assert fences == [NO_FENCE]


def test_a_prefetched_partition_is_staged_on_a_copy_stream_its_consumer_waits_for():
    n = 6

    def make(k: int) -> NormalizedMatrix:
        return NormalizedMatrix([Block(np.full((n, 1), float(k)), [0])], n_rows=n, backend=NAME)

    source = PartitionSource(make, 4, prefetch=True, backend=NAME)
    cuda.WAITS.clear()
    sums = source.each(lambda part: float((part @ xp.ones(1)).sum()))
    assert sums == [0.0, 6.0, 12.0, 18.0]
    # Computing waits for each partition's copies; the copies of partition k+1 wait for the work on k-1
    # (whose device memory CuPy's pool may hand them), so they overlap partition k's kernels.
    computing = cuda.get_current_stream()
    assert sum(waiting is computing for waiting, _, _ in cuda.WAITS) == 4
    assert sum(waited is computing for _, waited, _ in cuda.WAITS) == 3
    # Built on the prefetching thread's copy stream, a partition is unusable here without its fence.
    with DEVICE_DOUBLE.transfers.staging() as fences:
        part = make(7)
    with pytest.raises(cuda.UnorderedRead):
        part @ xp.ones(1)
    fences[0].wait()
    assert float((part @ xp.ones(1)).sum()) == 42.0


# -- a streamed training ---------------------------------------------------------------------------------

N_FACT, N_DIM = 2000, 40


@pytest.fixture(scope="module")
def star():
    con = ilargi_db.connect()
    con.execute(
        f"CREATE TABLE fact AS SELECT range AS id, range % {N_DIM} AS k, sin(range) AS x1, cos(range * 0.7) AS x2, "
        "['u', 'v', NULL][range % 3 + 1] AS kind, 3 * sin(range) + (range % 5) * 0.2 AS y FROM range(2000)"
    )
    con.execute(
        f"CREATE TABLE dim AS SELECT range AS k, range * 0.05 AS z, ['a', 'b', 'c'][range % 3 + 1] AS grp "
        f"FROM range({N_DIM})"
    )
    return con


STAR = "SELECT f.x1, f.x2, f.kind, d.z, d.grp, f.y FROM fact f JOIN dim d ON f.k = d.k"
STREAMED = dict(memory_budget="60KB", strategy="factorized", reuse=False, alpha=0.5)


def test_a_streamed_training_uploads_dimensions_once_and_each_partition_once_per_pass(star):
    model = ilargi_db.train(star, STAR, "y", "linear_regression", backend=NAME, **STREAMED)
    reference = ilargi_db.train(star, STAR, "y", "linear_regression", backend="numpy", **STREAMED)
    np.testing.assert_allclose(model.coef_, reference.coef_, rtol=1e-6, atol=1e-9)
    partitions = model.streamed_["partitions"]
    assert partitions > 2
    # Every block in one piece (each under a pinned buffer's size), logged with the device array it fills.
    blocks = [c.into for c in COPIES.log if c.direction == "to_device" and c.pinned]
    # The dimension (z and grp's 3 one-hot columns, plus its fill and zero rows) and the fact's category
    # identity (3 categories: u, v, NULL; plus 2 rows: a CSR of 3 values, 3 indices, 6 row pointers): once each.
    assert [shape for shape in blocks if N_DIM <= shape[0] <= N_DIM + 2] == [(N_DIM + 2, 4)]
    assert sorted(shape for shape in blocks if shape[0] < N_DIM) == [(3,), (3,), (6,)]
    # Each partition, once per pass: its two fact columns, and its rows' category codes and dimension rows.
    facts = collections.Counter(shape[0] for shape in blocks if len(shape) == 2 and shape[1] == 2)
    indices = collections.Counter(shape[0] for shape in blocks if len(shape) == 1 and N_DIM <= shape[0] < N_FACT)
    full, last = max(facts), min(facts)
    passes = facts[last]
    assert passes >= 2 and full * (partitions - 1) + last == N_FACT
    assert facts == {full: (partitions - 1) * passes, last: passes}
    assert indices == {rows: 2 * count for rows, count in facts.items()}
    # Every other upload is parameter-sized, but the target's (n numbers, once for the fit and once for its metrics).
    large = [c for c in COPIES.log if c.direction == "to_device" and not c.pinned and np.prod(c.shape) >= N_DIM]
    assert {c.shape for c in large} <= {(N_FACT,)}


def test_a_streamed_training_on_numpy_copies_and_pins_nothing(star):
    ilargi_db.train(star, STAR, "y", "linear_regression", backend="numpy", **STREAMED)
    assert (COPIES.to_device, COPIES.to_host, cuda.PINNED.count) == (0, 0, 0)


def test_device_arrays_made_on_a_stream_keep_its_mark_through_views_and_results():
    copying = cuda.Stream(non_blocking=True)
    with copying:
        a = xp.asarray(np.arange(6.0).reshape(2, 3))
        b = a.T * 2.0
    assert isinstance(b, DeviceArray)
    for read in (lambda: b.sum(), lambda: a.T.sum(), lambda: b.get()):
        with pytest.raises(cuda.UnorderedRead):
            read()
    copying.synchronize()
    np.testing.assert_array_equal(b.get(), 2 * np.arange(6.0).reshape(2, 3).T)
