"""Compiled kernels with explicit signatures: compiled once per machine, never in the middle of a job.

Each :class:`Kernel` is a numba function compiled for the signatures it declares and no other (numba's
compilation is disabled after them), with ``cache=True``: the first use on a machine compiles them into numba's
cache, every later process loads them (about 10 ms each). A call with other types is a ``TypeError`` rather
than a compile of seconds: the wrappers in :mod:`~ilargi_db.backend.numba_kernels` and
:mod:`~ilargi_db.backend.tree_kernels` cast their arrays to one type per role first (float64 values, int32 or
int64 positions, C order; a column-major block is passed transposed, which is C order whatever its width).

A kernel is compiled (or loaded) on its first call, or ahead of it by :func:`warm_up` (``ilargi warmup``: once
after installing, so that no training compiles). Loading them on a background thread while a training plans and
reads was tried and measured slower (a fresh process's first training 0.7 s above its second without it, 1.4 s with
it, on 2 busy cores): numba's loading holds the GIL, as planning does, and it loaded kernels the job never called.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

KERNEL_MODULES = {  # the modules that define kernels, by what a training reads (the catalog's Algorithm.reads)
    "matrix": ("ilargi_db.backend.numba_kernels",),
    "bins": ("ilargi_db.backend.tree_kernels", "ilargi_db.backend.tree_grower", "ilargi_db.backend.gradient_kernels"),
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
        for module in KERNEL_MODULES[kind]:
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


__all__ = ["KERNEL_MODULES", "Kernel", "kernel", "kernels", "read_only", "warm_up"]
