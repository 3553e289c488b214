"""The double's array namespace (``cupy``'s place): NumPy's functions, run on device arrays.

Every function takes device arrays and Python or NumPy scalars, refuses host arrays with CuPy's error, and
returns device arrays. Host data enters only through :func:`asarray`/:func:`array` (a counted copy, as
``cupy.asarray`` of a NumPy array is) and leaves only through :func:`asnumpy` or ``.get()`` (counted).
Dtypes, ``iinfo``/``finfo`` and constants are NumPy's own, as CuPy's are.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from tests.device_double import cuda  # noqa: F401 - ``cupy.cuda``'s place: streams, events, pinned memory
from tests.device_double.arrays import IMPLICIT, DeviceArray, call, to_device, unsupported

ndarray = DeviceArray


def asarray(a: Any, dtype: Any = None, order: Any = None) -> DeviceArray:
    """``a`` on the device: no copy for a device array, a counted copy for host data."""
    if isinstance(a, DeviceArray):
        return a if dtype is None or np.dtype(dtype) == a.dtype else a.astype(dtype)
    if _all_device(a):
        return call(np.asarray, a, dtype=dtype, order=order)
    _refuse_sparse(a)
    return to_device(a, dtype=dtype, order=order)


def array(a: Any, dtype: Any = None, copy: bool = True, order: Any = None, ndmin: int = 0) -> DeviceArray:
    if isinstance(a, DeviceArray) or _all_device(a):
        return call(np.array, a, dtype=dtype, copy=copy, order="K" if order is None else order, ndmin=ndmin)
    _refuse_sparse(a)
    out = to_device(a, dtype=dtype, order=order)
    return out if out.ndim >= ndmin else DeviceArray(np.array(out._host, ndmin=ndmin))


def asnumpy(a: Any, stream: Any = None, order: str = "C", out: np.ndarray | None = None) -> np.ndarray:
    """A host copy of a device array (counted); host data as it is (``cupy.asnumpy`` takes both)."""
    if isinstance(a, DeviceArray):
        return a.get(order=order, out=out)
    return np.asarray(a, order=order)


def _refuse_sparse(a: Any) -> None:
    import scipy.sparse

    if scipy.sparse.issparse(a):
        raise unsupported(a)
    if isinstance(a, (list, tuple)) and any(isinstance(v, DeviceArray) for v in a):
        raise TypeError(IMPLICIT)  # device arrays mixed with host values: CuPy builds it on the host, and refuses


def _all_device(a: Any) -> bool:
    """A non-empty list of device arrays only (CuPy stacks those on the device)."""
    return isinstance(a, (list, tuple)) and len(a) > 0 and all(isinstance(v, DeviceArray) for v in a)


class _Namespace(types.ModuleType):
    """A NumPy submodule's functions on the device (``xp.linalg``)."""

    def __init__(self, name: str, host: types.ModuleType):
        super().__init__(name)
        self._host_module = host

    def __getattr__(self, name: str) -> Any:
        return _device(getattr(self._host_module, name))


class _Ufunc:
    """A NumPy ufunc on the device; its methods (``reduce``, ``at``) too."""

    def __init__(self, ufunc: np.ufunc):
        self._ufunc = ufunc
        self.__name__ = ufunc.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return call(self._ufunc, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._ufunc, name)
        return (lambda *a, **k: call(attr, *a, **k)) if callable(attr) else attr


def _device(attr: Any) -> Any:
    if isinstance(attr, np.ufunc):
        return _Ufunc(attr)
    if isinstance(attr, type) or not callable(attr):
        return attr  # dtypes, iinfo/finfo, constants
    return lambda *args, **kwargs: call(attr, *args, **kwargs)


linalg = _Namespace("xp.linalg", np.linalg)


def __getattr__(name: str) -> Any:
    if name == "RawKernel":  # CuPy's custom kernels, emulated on the host where a C++ compiler is found
        from tests.device_double import emulator

        if not emulator.available():
            raise AttributeError("the device double's xp has no RawKernel here: no C++ compiler to emulate it")
        return emulator.RawKernel
    if name.startswith("__") or name in ("random", "ctypeslib", "lib", "testing"):
        raise AttributeError(f"the device double's xp has no {name!r}")
    return _device(getattr(np, name))
