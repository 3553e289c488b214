"""Backends: NumPy always, CuPy when a GPU is usable, one code path for both."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import numpy as np
import pytest

import ilargi_db
from ilargi_db.backend import backend_of, get_backend
from ilargi_db.backend.host_memory import give_back_freed_memory
from ilargi_db.errors import BackendUnavailableError
from tests.conftest import DEVICE_BACKENDS
from tests.oracle import assert_close, materialized


def test_import_does_not_import_cupy():
    code = "import sys, ilargi_db; ilargi_db.normalize; print('cupy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_auto_falls_back_to_numpy_without_a_gpu():
    try:
        get_backend("cupy")
    except BackendUnavailableError:
        assert get_backend("auto").name == "numpy"
    else:
        assert get_backend("auto").name == "cupy"


def test_cupy_without_a_gpu_is_a_clear_error(con):
    try:
        get_backend("cupy")
        pytest.skip("a GPU is usable here")
    except BackendUnavailableError:
        pass
    with pytest.raises(BackendUnavailableError, match="backend='numpy'"):
        ilargi_db.normalize(con, "SELECT dep_delay FROM flights", backend="cupy")


@pytest.mark.parametrize("backend", DEVICE_BACKENDS)
@pytest.mark.parametrize("sparse", [False, True])
def test_a_device_backend_matches_numpy(con, backend, sparse):
    query = (
        "SELECT f.dep_delay, o.lat, d.lat AS dlat, f.arr_delay FROM flights f JOIN airports o ON f.origin = o.faa "
        "LEFT JOIN airports d ON f.dest = d.faa ORDER BY ALL"
    )
    X, y = ilargi_db.normalize(con, query, target="arr_delay", backend=backend, sparse=sparse)
    T, y_expected = materialized(con, query, "arr_delay")
    device = X.backend
    assert device.name == backend and backend_of(y) is device
    w = np.array([0.5, -1.0, 2.0])
    for got, expected in [
        (X.materialize(), T),
        (X @ w, T @ w),
        (X.T @ y_expected, T.T @ y_expected),
        (X.crossprod(), T.T @ T),
        ((X + 1).exp().colsums(), np.exp(T + 1).sum(axis=0)),
    ]:
        assert backend_of(got) is device
        assert_close(device.to_host(got), expected)


def test_numpy_backend_round_trip():
    backend = get_backend("numpy")
    a = np.arange(3.0)
    assert backend.to_host(backend.asarray(a)) is a


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc keeps freed heap pages until trimmed")
def test_memory_freed_by_a_phase_is_given_back_to_the_system():
    def resident() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    arrays = [np.ones(512) for _ in range(100_000)]  # 4 KiB each: malloc's heap, not a mapping of their own
    arrays = arrays[-1:]  # all but the last freed: the heap's top stays in use, so malloc keeps the pages
    before = resident()
    give_back_freed_memory()
    assert resident() < before - 200 * 2**20  # most of the ~400 MB freed is the system's again
    assert arrays[0].sum() == 512
