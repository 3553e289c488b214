"""Hardware facts the cost model needs: cores, measured memory bandwidth and FLOP rate, the GPU.

Measured once per process (about 50 ms) and kept on disk in the cache
directory, so that a later process reads them instead of measuring again.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass

import numpy as np

from ilargi_db.user_cache import cache_dir

_CACHED: dict[str, Hardware] = {}


@dataclass(frozen=True)
class Hardware:
    """What one machine does per second, as the cost model sees it."""

    cores: int
    memory_bandwidth_gbs: float  # streaming copy, GB/s (read + write)
    gflops: float  # dense float64 matrix product, all cores
    gpu_name: str = ""
    gpu_memory_gb: float = 0.0
    gpu_bandwidth_gbs: float = 0.0
    gpu_gflops: float = 0.0

    def as_features(self) -> dict[str, float | int | str]:
        return {
            "cores": self.cores,
            "memory_bandwidth_gbs": round(self.memory_bandwidth_gbs, 2),
            "gflops": round(self.gflops, 2),
            "gpu_name": self.gpu_name,
            "gpu_memory_gb": round(self.gpu_memory_gb, 2),
            "gpu_bandwidth_gbs": round(self.gpu_bandwidth_gbs, 2),
        }


def _measure_bandwidth() -> float:
    a = np.ones(4_000_000)  # 32 MB: larger than the caches of a laptop or a server core
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(6):
        start = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - start)
    return 2 * a.nbytes / best / 1e9


def _measure_gflops() -> float:
    rng = np.random.default_rng(0)
    a = rng.random((768, 768))  # about 1 GFLOP: long enough that scheduler noise does not decide the rate
    a @ a  # warm the BLAS threads
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - start)
    return 2 * 768**3 / best / 1e9


def _gpu() -> tuple[str, float, float, float]:
    """Name, memory (GB), measured copy bandwidth (GB/s) and FLOP rate of the first GPU, if CuPy sees one."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "", 0.0, 0.0, 0.0
        props = cupy.cuda.runtime.getDeviceProperties(0)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        a = cupy.ones(32_000_000)
        b = cupy.empty_like(a)
        m = cupy.ones((2048, 2048))
        timings = []
        for op, work in ((lambda: cupy.copyto(b, a), 2 * a.nbytes), (lambda: m @ m, 2 * 2048**3)):
            op()
            cupy.cuda.Device().synchronize()
            start = time.perf_counter()
            for _ in range(5):
                op()
            cupy.cuda.Device().synchronize()
            timings.append(work * 5 / (time.perf_counter() - start) / 1e9)
        return name, props["totalGlobalMem"] / 1e9, timings[0], timings[1]
    except Exception:  # no CuPy, no driver, no device: a CPU machine
        return "", 0.0, 0.0, 0.0


MEASURE_VERSION = 2  # bump when the measurements change: older cached figures are measured again


def _valid(hw: Hardware) -> Hardware:
    """``hw`` as read from the cache, if every field has its type and every rate is positive; else ValueError."""
    numbers = (hw.memory_bandwidth_gbs, hw.gflops, hw.gpu_memory_gb, hw.gpu_bandwidth_gbs, hw.gpu_gflops)
    if not (
        type(hw.cores) is int
        and hw.cores >= 1
        and isinstance(hw.gpu_name, str)
        and all(type(x) in (int, float) and math.isfinite(x) and x >= 0 for x in numbers)
        and hw.memory_bandwidth_gbs > 0
        and hw.gflops > 0
    ):
        raise ValueError(f"a damaged hardware cache entry: {hw}")
    return hw


def _key() -> str:
    return f"v{MEASURE_VERSION}-{platform.node()}-{platform.machine()}-{os.cpu_count()}"


def detect_hardware(cache: str | os.PathLike | None = None, refresh: bool = False) -> Hardware:
    """This machine's :class:`Hardware`, measured once and cached (in memory and in ``cache``/hardware.json).

    >>> detect_hardware().cores >= 1
    True
    """
    key = _key()
    if not refresh and key in _CACHED:
        return _CACHED[key]
    path = cache_dir(cache) / "hardware.json"
    hw = None
    if not refresh:
        try:
            hw = _valid(Hardware(**json.loads(path.read_text())[key]))
        except (OSError, ValueError, KeyError, TypeError, IndexError, RecursionError):
            hw = None  # no cache, or a damaged one: measure again
    if hw is None:
        name, memory, gpu_bandwidth, gpu_gflops = _gpu()
        hw = Hardware(
            os.cpu_count() or 1, _measure_bandwidth(), _measure_gflops(), name, memory, gpu_bandwidth, gpu_gflops
        )
        try:
            try:
                stored = json.loads(path.read_text()) if path.exists() else {}
            except (ValueError, RecursionError):
                stored = None
            if not isinstance(stored, dict):  # damaged: replaced by this machine's measurement
                stored = {}
            stored[key] = asdict(hw)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(stored, indent=1))
        except OSError:
            pass  # a read-only home: measure again next process
    _CACHED[key] = hw
    return hw
