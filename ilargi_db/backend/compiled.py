"""Compiled kernels with explicit signatures: compiled once per machine, never in the middle of a job.

Each :class:`Kernel` is a numba function compiled for the signatures it declares and no other (numba's
compilation is disabled after them), with ``cache=True``: the first use on a machine compiles them into numba's
cache, every later process loads them (about 10 ms each). A call with other types is a ``TypeError`` rather
than a compile of seconds: the wrappers in :mod:`~ilargi_db.backend.numba_kernels` and
:mod:`~ilargi_db.backend.tree_kernels` cast their arrays to one type per role first (float64 values, int32 or
int64 positions, C order; a column-major block is passed transposed, which is C order whatever its width).

A kernel is compiled (or loaded) on its first call, or ahead of it by :func:`warm_up` (``ilargi warmup``, and a
background thread a training starts while DuckDB reads, :func:`warm_up_in_background`).
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

KERNEL_MODULES = {  # the modules that define kernels, by what a training reads (the catalog's Algorithm.reads)
    "matrix": "ilargi_db.backend.numba_kernels",
    "bins": "ilargi_db.backend.tree_kernels",
}

_KERNELS: dict[str, list[Kernel]] = {}  # module name -> its kernels, in definition order


class Kernel:
    """A numba function (``nogil``, cached) compiled for ``signatures`` only, on first use."""

    def __init__(self, function: Callable[..., Any], signatures: list[Any]):
        self.function, self.signatures = function, list(signatures)
        self.__name__ = function.__name__
        self._dispatcher: Any = None
        self._lock = threading.Lock()
        _KERNELS.setdefault(function.__module__, []).append(self)

    @property
    def dispatcher(self) -> Any:
        """The numba dispatcher, compiled or loaded from the cache for every signature the first time."""
        if self._dispatcher is None:
            with self._lock:  # a warm-up thread and the job may ask at once: compile once
                if self._dispatcher is None:
                    import numba

                    self._dispatcher = numba.njit(self.signatures, cache=True, nogil=True)(self.function)
        return self._dispatcher

    @property
    def loaded(self) -> bool:
        """Whether its signatures are compiled or loaded (by a call, or by :func:`warm_up`)."""
        return self._dispatcher is not None

    def __call__(self, *args: Any) -> Any:
        return self.dispatcher(*args)

    def __repr__(self) -> str:
        return f"Kernel({self.__name__}, {len(self.signatures)} signatures)"


def read_only(array_type: Any) -> Any:
    """The numba array type for an argument a kernel only reads: it takes writable arrays and read-only ones
    (DuckDB's and Arrow's buffers, passed without a copy) alike."""
    return array_type.copy(readonly=True)


def kernel(signatures: list[Any]) -> Callable[[Callable[..., Any]], Kernel]:
    """Decorator: the function as a :class:`Kernel` of these signatures."""

    def wrap(function: Callable[..., Any]) -> Kernel:
        return Kernel(function, signatures)

    return wrap


def kernels(kinds: Iterable[str] = tuple(KERNEL_MODULES)) -> list[Kernel]:
    """Every kernel of these kinds (``"matrix"``, ``"bins"``), their modules imported."""
    out = []
    for kind in kinds:
        module = KERNEL_MODULES[kind]
        importlib.import_module(module)
        out.extend(_KERNELS.get(module, []))
    return out


def warm_up(kinds: Iterable[str] = tuple(KERNEL_MODULES)) -> dict[str, float]:
    """Compile every kernel of these kinds into numba's cache (or load it from there); seconds per kernel."""
    seconds = {}
    for k in kernels(kinds):
        began = time.perf_counter()
        k.dispatcher  # noqa: B018 - compiles or loads every signature
        seconds[f"{k.function.__module__.rsplit('.', 1)[-1]}.{k.__name__}"] = time.perf_counter() - began
    return seconds


def warm_up_in_background(kinds: Iterable[str] = tuple(KERNEL_MODULES)) -> threading.Thread | None:
    """:func:`warm_up` on a daemon thread (started and returned; None when every kind was started before in this
    process): a job's kernels load while it plans and reads.

    A kernel the job calls before the thread reached it is loaded by the job itself (each once, under a lock).
    """
    with _STARTED_LOCK:
        kinds = tuple(k for k in kinds if k not in _STARTED)
        _STARTED.update(kinds)
    if not kinds:
        return None
    thread = threading.Thread(target=warm_up, args=(kinds,), name="ilargi-warm-up", daemon=True)
    thread.start()
    return thread


_STARTED: set[str] = set()  # the kinds a background warm-up took on in this process
_STARTED_LOCK = threading.Lock()


def _after_fork() -> None:
    """In a forked child, no lock is held by a thread that is not there (a warm-up's), and nothing is started."""
    global _STARTED_LOCK
    _STARTED_LOCK = threading.Lock()
    _STARTED.clear()
    for module in _KERNELS.values():
        for k in module:
            k._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


__all__ = ["KERNEL_MODULES", "Kernel", "kernel", "kernels", "read_only", "warm_up", "warm_up_in_background"]
