"""A CPU emulator of CuPy's ``RawKernel`` for tests: the kernel's CUDA C compiled by a host C++ compiler and run
serially, block by block and thread by thread, on the device double's arrays.

A prelude makes CUDA C into C++: ``__global__``/``__device__``/``__forceinline__`` defined away, ``dim3`` and
the thread's ``blockIdx``/``threadIdx``/``blockDim``/``gridDim`` as thread-local globals, ``atomicAdd`` on
doubles as a plain add. A generated ``launch_<name>`` loops over every block and thread of the grid, sets the
indices and calls the kernel. The library is built once per source into a cache directory keyed by the
source's hash (``ILARGI_CUDA_EMULATOR_DIR``, else the temp directory) and loaded with ctypes.

What it shows: the very CUDA source a GPU would run compiles (its syntax and types, with ``-Wall -Werror``)
and computes the kernel's result. Every array a launch gets sits between guard bytes (:class:`_Guarded`): a
write past either end raises :class:`OutOfBounds`, a read of a double past one gives NaN.

What it cannot show: speed; races between threads (they run one after another, so an ``atomicAdd`` forgotten
in favour of ``+=`` would pass here: ``tests/test_backend_cuda_kernels.py`` checks the sources for that);
warp divergence and memory coalescing; ``__shared__`` memory and ``__syncthreads`` (which the kernels do not
use, so that they can be run this way); CUDA's math library's last-bit differences from the host's.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from tests.device_double import cuda

PRELUDE = r"""
#include <math.h>
struct dim3 { unsigned int x, y, z; };
static thread_local dim3 blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __device__ static inline
#define __forceinline__
static inline double atomicAdd(double* address, double value) { double old = *address; *address += value; return old; }
static inline float atomicAdd(float* address, float value) { float old = *address; *address += value; return old; }
"""

LAUNCHER = r"""
extern "C" void launch_{name}(unsigned grid_x_, unsigned grid_y_, unsigned grid_z_, unsigned block_x_,
                              unsigned block_y_, unsigned block_z_, {params}) {{
    gridDim = dim3{{grid_x_, grid_y_, grid_z_}};
    blockDim = dim3{{block_x_, block_y_, block_z_}};
    for (unsigned bz_ = 0; bz_ < grid_z_; ++bz_) for (unsigned by_ = 0; by_ < grid_y_; ++by_)
    for (unsigned bx_ = 0; bx_ < grid_x_; ++bx_) {{
        blockIdx = dim3{{bx_, by_, bz_}};
        for (unsigned tz_ = 0; tz_ < block_z_; ++tz_) for (unsigned ty_ = 0; ty_ < block_y_; ++ty_)
        for (unsigned tx_ = 0; tx_ < block_x_; ++tx_) {{
            threadIdx = dim3{{tx_, ty_, tz_}};
            {name}({names});
        }}
    }}
}}
"""

GUARD_BYTES = 256  # around every array a launch gets (see _Guarded)
GUARD_NAN = 0x7FF8_0DD0_0000_0000  # a quiet NaN; the k-th array's guard adds k to its payload
FLAGS = ("-std=c++14", "-O2", "-shared", "-fPIC", "-Wall", "-Werror")

_SCALARS = {
    np.dtype(np.int32): ctypes.c_int32,
    np.dtype(np.int64): ctypes.c_int64,
    np.dtype(np.uint32): ctypes.c_uint32,
    np.dtype(np.uint64): ctypes.c_uint64,
    np.dtype(np.float64): ctypes.c_double,
    np.dtype(np.float32): ctypes.c_float,
}


LAUNCHES: collections.Counter = collections.Counter()  # kernel name -> launches: clear it before what a test counts


class CompilerMissing(RuntimeError):
    """No host C++ compiler: the CUDA sources cannot be emulated here (a test skips, saying so)."""


def compiler() -> str | None:
    """The host C++ compiler the emulator uses (``CXX``, else g++ or clang++ on the PATH), or None."""
    for candidate in (os.environ.get("CXX"), "g++", "clang++"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


def _signature(code: str, name: str) -> tuple[str, list[str]]:
    """The kernel's parameter list as written, and its parameters' names."""
    found = re.search(rf"__global__\s+void\s+{re.escape(name)}\s*\(([^)]*)\)", code)
    if found is None:
        raise ValueError(f"no `__global__ void {name}(...)` in the kernel's source")
    params = " ".join(found.group(1).split())
    names = [re.findall(r"\w+", p)[-1] for p in params.split(",")]
    return params, names


@functools.cache
def _library(code: str, name: str) -> ctypes.CDLL:
    cxx = compiler()
    if cxx is None:
        raise CompilerMissing("no C++ compiler (g++ or clang++, or CXX) found to emulate the CUDA kernels")
    params, names = _signature(code, name)
    text = PRELUDE + code + LAUNCHER.format(name=name, params=params, names=", ".join(names))
    digest = hashlib.sha256("\0".join((cxx, *FLAGS, text)).encode()).hexdigest()[:24]
    where = Path(os.environ.get("ILARGI_CUDA_EMULATOR_DIR") or Path(tempfile.gettempdir()) / "ilargi_cuda_emulator")
    where.mkdir(parents=True, exist_ok=True)
    built = where / f"{name}-{digest}.so"
    if not built.exists():
        source = where / f"{name}-{digest}.{os.getpid()}.cpp"
        source.write_text(text)
        partial = built.with_suffix(f".{os.getpid()}.tmp")
        run = subprocess.run(
            [cxx, *FLAGS, "-x", "c++", str(source), "-o", str(partial)], capture_output=True, text=True
        )
        source.unlink()
        if run.returncode != 0:
            raise RuntimeError(f"the CUDA source of {name} does not compile as C++:\n{run.stderr}")
        os.replace(partial, built)  # atomic: a concurrent test process never loads half a library
    return ctypes.CDLL(str(built))


class OutOfBounds(AssertionError):
    """A kernel wrote outside an array it was given (into the guard bytes around it)."""


class _Guarded:
    """Every array a launch gets, copied between guard bytes, checked and copied back after the launch: a write out of
    bounds is caught, a read of a double makes NaN results. An array the kernel wrote is marked as work on the current
    stream (read elsewhere only once ordered after it, as :mod:`tests.device_double.cuda` says). Each array's guard is a
    NaN of its own payload, so a value read past one array's end and written past another's is caught too. An array
    passed twice is one copy (the kernel may alias it)."""

    def __init__(self, name: str):
        self.name, self.staged = name, {}

    def argument(self, value: Any) -> Any:
        from tests.device_double import DeviceArray

        if isinstance(value, DeviceArray):
            host = value._host  # the device memory, as a GPU kernel gets it
            if not (host.flags.c_contiguous or host.flags.f_contiguous):
                raise ValueError("a kernel takes contiguous arrays only (CuPy passes a pointer to the first element)")
            key = (host.ctypes.data, host.nbytes)
            if key not in self.staged:
                padded = np.empty(host.nbytes + 2 * GUARD_BYTES, dtype=np.uint8)
                guard = np.full(GUARD_BYTES // 8, GUARD_NAN + len(self.staged), dtype=np.uint64).view(np.uint8)
                padded[:GUARD_BYTES] = padded[len(padded) - GUARD_BYTES :] = guard
                ctypes.memmove(padded.ctypes.data + GUARD_BYTES, host.ctypes.data, host.nbytes)
                self.staged[key] = (host, padded, guard, [])
            self.staged[key][3].append(value)
            return ctypes.c_void_p(self.staged[key][1].ctypes.data + GUARD_BYTES)
        if isinstance(value, np.generic) and value.dtype in _SCALARS:
            return _SCALARS[value.dtype](value.item())
        raise TypeError(
            f"a kernel argument must be a device array or a NumPy scalar of a fixed width, got {type(value).__name__}"
        )

    def land(self) -> None:
        mark = cuda.mark_new()  # the launch's place on the current stream: where its writes are ordered
        for host, padded, guard, arrays in self.staged.values():
            if (padded[:GUARD_BYTES] != guard).any() or (padded[len(padded) - GUARD_BYTES :] != guard).any():
                raise OutOfBounds(f"kernel {self.name} wrote outside a {host.dtype} array of shape {host.shape}")
            inside = padded[GUARD_BYTES : len(padded) - GUARD_BYTES]
            if host.nbytes and (inside != np.frombuffer(_bytes_of(host), dtype=np.uint8)).any():
                ctypes.memmove(host.ctypes.data, inside.ctypes.data, host.nbytes)  # what the kernel wrote
                for array in arrays:
                    array._mark = mark


def _bytes_of(host: np.ndarray) -> Any:
    return (ctypes.c_char * host.nbytes).from_address(host.ctypes.data)


def _dims(dims: Any) -> tuple[int, int, int]:
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    return (*map(int, dims), *(1,) * (3 - len(dims)))


class RawKernel:
    """``cupy.RawKernel(code, name)``, emulated: ``kernel(grid, block, args)`` runs the source on the host."""

    def __init__(self, code: str, name: str, options: tuple = (), backend: str = "nvrtc", **kwargs: Any):
        self.code, self.name = code, name

    def compile(self, log_stream: Any = None) -> None:
        """Build the host library now (CuPy's ``compile``): a source that does not compile raises."""
        _library(self.code, self.name)

    def __call__(self, grid: Any, block: Any, args: tuple, **kwargs: Any) -> None:
        launch = getattr(_library(self.code, self.name), f"launch_{self.name}")
        LAUNCHES[self.name] += 1
        guarded = _Guarded(self.name)
        launch(*map(ctypes.c_uint, (*_dims(grid), *_dims(block))), *map(guarded.argument, args))
        guarded.land()


def available() -> bool:
    """Whether kernels can be emulated here (a host C++ compiler is found)."""
    return compiler() is not None


__all__ = [
    "FLAGS",
    "GUARD_BYTES",
    "LAUNCHES",
    "PRELUDE",
    "CompilerMissing",
    "OutOfBounds",
    "RawKernel",
    "available",
    "compiler",
]
