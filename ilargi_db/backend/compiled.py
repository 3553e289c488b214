"""Compiled kernels with explicit signatures: each compiled once per machine, and only what a job calls.

Each :class:`Kernel` is a numba function compiled for the signatures it declares and no other (numba's
compilation is disabled but for them), with ``cache=True``: the first call on a machine that takes a signature
compiles it into numba's cache, every later process loads it (about 10 ms each). A call with other types is a
``TypeError`` rather than a compile of seconds: the wrappers in :mod:`~ilargi_db.backend.numba_kernels` and
:mod:`~ilargi_db.backend.tree_kernels` cast their arrays to one type per role first (float64 values, int32 or
int64 positions, C order; a column-major block is passed transposed, which is C order whatever its width).

:func:`warm_up` compiles every signature ahead, so that no training compiles: an editable install runs it (the
project's build backend, ``build_backend/ilargi_build.py``), ``ilargi warmup`` after any other install. Loading
them on a background thread while a training plans and reads was tried and measured slower (a fresh process's
first training 0.7 s above its second without it, 1.4 s with it, on 2 busy cores): numba's loading holds the GIL,
as planning does, and it loaded kernels the job never called.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

KERNEL_MODULES = {  # the modules that define kernels, by what a training reads (the catalog's Algorithm.reads)
    "matrix": ("ilargi_db.backend.numba_kernels", "ilargi_db.backend.duhl_kernels"),
    "bins": ("ilargi_db.backend.tree_kernels", "ilargi_db.backend.tree_grower", "ilargi_db.backend.gradient_kernels"),
}

_KERNELS: dict[str, list[Kernel]] = {}  # module name -> its kernels, in definition order


class Kernel:
    """A numba function (``nogil``, cached) compiled for ``signatures`` only: on a call, the declared signature its
    arguments take is compiled (or loaded) and no other; :attr:`dispatcher` compiles them all (:func:`warm_up`).

    A job compiles what it calls: a tree's kernels are declared for one-byte and two-byte bins, a product's for
    int32 and int64 positions, and a first training after installing compiled both (measured: a second each).
    """

    def __init__(self, function: Callable[..., Any], signatures: list[Any]):
        self.function, self.signatures = function, list(signatures)
        self.__name__ = function.__name__
        self._numba: Any = None  # the numba dispatcher, once a signature is compiled: it compiles no other type
        self._compiled: set[int] = set()  # positions in ``signatures`` compiled or loaded
        self._lock = threading.Lock()
        _KERNELS.setdefault(function.__module__, []).append(self)

    def _compile(self, positions: Iterable[int]) -> None:
        """Compile (or load from numba's cache) the declared signatures at ``positions``, once each.

        A new dispatcher of every signature so far replaces the last (those it had load from the cache): numba
        disables compiling after the signatures it is given, so no dispatcher ever compiles in a call; a thread
        that called the old one with the new types retries on the new one (:meth:`__call__`)."""
        import numba

        with self._lock:  # a warm-up thread and the job may ask at once: compile once
            wanted = self._compiled | set(positions)
            if wanted != self._compiled:
                chosen = [self.signatures[k] for k in sorted(wanted)]
                self._numba = numba.njit(chosen, cache=True, nogil=True)(self.function)
                self._compiled = wanted

    def _declared_for(self, args: tuple) -> int | None:
        """The declared signature ``args`` convert to best (exact first, then a writable array to a read-only one,
        a promotion...; the first of equals), as numba itself picks among compiled ones; None where none takes them."""
        from numba import typeof
        from numba.core.registry import cpu_target
        from numba.core.typeconv import Conversion

        found = [typeof(a) for a in args]
        typing = cpu_target.typing_context
        best, best_rank = None, None
        for k, signature in enumerate(self.signatures):
            declared = _argument_types(signature)
            if len(declared) != len(found):
                continue
            conversions = [typing.can_convert(a, d) for a, d in zip(found, declared)]
            if any(c is None or c == Conversion.nil for c in conversions):
                continue
            rank = max((int(c) for c in conversions), default=0)
            if best_rank is None or rank < best_rank:
                best, best_rank = k, rank
        return best

    @property
    def dispatcher(self) -> Any:
        """The numba dispatcher with every declared signature compiled or loaded from the cache."""
        self._compile(range(len(self.signatures)))
        return self._numba

    @property
    def loaded(self) -> bool:
        """Whether every declared signature is compiled or loaded (by calls, or by :func:`warm_up`)."""
        return len(self._compiled) == len(self.signatures)

    def __call__(self, *args: Any) -> Any:
        called = self._numba
        if called is not None:
            try:
                return called(*args)
            except TypeError:
                k = self._declared_for(args)
                # Types no signature declares, or a signature the dispatcher called had: not a missing compile.
                if k is None or (k in self._compiled and called is self._numba):
                    raise
        else:
            k = self._declared_for(args)
            if k is None:
                raise TypeError(f"No matching definition for argument type(s) of {self!r}: {[type(a) for a in args]}")
        self._compile([k])  # (nothing to do where another thread compiled it meanwhile)
        return self._numba(*args)

    def __repr__(self) -> str:
        return f"Kernel({self.__name__}, {len(self.signatures)} signatures)"


def _argument_types(signature: Any) -> tuple:
    """A declared signature's argument types (a numba signature, or a tuple of types)."""
    return tuple(signature.args) if hasattr(signature, "args") else tuple(signature)


def read_only(array_type: Any) -> Any:
    """The numba array type for an argument a kernel only reads: it takes writable arrays and read-only ones
    (DuckDB's and Arrow's buffers, passed without a copy) alike."""
    return array_type.copy(readonly=True)


def float64_values(a: Any) -> Any:
    """Values as the kernels take them: float64, C order (the array itself where it is already)."""
    return np.ascontiguousarray(a, dtype=np.float64)


def int64_values(a: Any) -> Any:
    """Integers (labels, orders, row lists) as the kernels take them: int64, C order."""
    return np.ascontiguousarray(a, dtype=np.int64)


def position_type(*indices: Any) -> type:
    """int32 where every index is int32 (or narrower), else int64: one of the kernels' two position types."""
    narrow = all(np.dtype(i.dtype).itemsize <= 4 and np.dtype(i.dtype).kind in "iu" for i in indices)
    return np.int32 if narrow and all(np.dtype(i.dtype) != np.uint32 for i in indices) else np.int64


def positions(index: Any) -> Any:
    """Positions as the kernels take them: int32 or int64 (:func:`position_type`), C order."""
    return np.ascontiguousarray(index, dtype=position_type(index))


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
        k.dispatcher  # noqa: B018 - compiles or loads every declared signature
        seconds[f"{k.function.__module__.rsplit('.', 1)[-1]}.{k.__name__}"] = time.perf_counter() - began
    return seconds


__all__ = [
    "KERNEL_MODULES",
    "Kernel",
    "float64_values",
    "int64_values",
    "kernel",
    "kernels",
    "position_type",
    "positions",
    "read_only",
    "warm_up",
]
