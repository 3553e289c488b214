"""The double's sparse module (``cupyx.scipy.sparse``'s place): scipy.sparse matrices kept on the device.

A matrix is built from a scipy.sparse matrix (a counted copy, as cupyx's constructors copy one), from
device arrays (``(data, indices, indptr)``, ``(data, (row, col))``) or from a dense device array; host
(NumPy) arrays are refused, as cupyx refuses them. Products with device arrays give device arrays, sums
give 2-D device arrays (cupyx has no ``np.matrix``), ``.get()`` gives the scipy.sparse matrix (counted).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse

from tests.device_double import cuda
from tests.device_double.arrays import IMPLICIT, DeviceArray, to_device, unsupported
from tests.device_double.copies import COPIES


class spmatrix:  # noqa: N801 - cupyx's name
    """A sparse matrix on the device."""

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, host: Any):
        object.__setattr__(self, "_data", host)
        object.__setattr__(self, "_mark", cuda.mark_new())  # as a device array's (see .cuda): the whole matrix

    @property
    def _host(self) -> Any:
        cuda.require(self._mark, "a sparse matrix")
        return self._data

    shape = property(lambda self: self._data.shape)
    dtype = property(lambda self: self._data.dtype)
    nnz = property(lambda self: self._data.nnz)
    ndim = property(lambda self: 2)
    format = property(lambda self: self._data.format)
    T = property(lambda self: spmatrix(self._host.T))

    def get(self, stream: Any = None) -> Any:
        """The scipy.sparse matrix (a counted copy of its arrays)."""
        host = self._host.copy()
        COPIES.count("to_host", (_stored(host),), _nbytes(host))
        return host

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise TypeError(IMPLICIT)

    def __bool__(self) -> bool:
        raise ValueError("The truth value of an array with more than one element is ambiguous.")

    def __len__(self) -> int:
        raise TypeError("sparse matrix length is ambiguous; use getnnz() or shape[0]")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _ARRAYS:  # cupyx's matrices take new device arrays (``m.data = f(m.data)``)
            if not isinstance(value, DeviceArray):
                raise unsupported(value)
            setattr(self._host, name, value._host)
            mark = cuda.mark_new()
            if mark is not None:
                object.__setattr__(self, "_mark", mark)
        else:
            raise AttributeError(f"the device double's sparse matrix takes no attribute {name!r}")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        attr = getattr(self._host, name)
        if callable(attr):
            return lambda *args, **kwargs: _call(attr, *args, **kwargs)
        return _wrap(attr)

    def __getitem__(self, key: Any) -> Any:
        return _wrap(self._host[_unwrap_index(key)])


def _binary(name: str) -> Any:
    def method(self: spmatrix, other: Any) -> Any:
        if not isinstance(other, (spmatrix, DeviceArray, np.generic, bool, int, float, complex)):
            if isinstance(other, np.ndarray) or scipy.sparse.issparse(other):
                raise unsupported(other)
            return NotImplemented
        return _wrap(getattr(self._host, name)(_unwrap(other)))

    return method


for _name in ("add", "sub", "mul", "truediv", "matmul", "pow", "lt", "le", "gt", "ge", "ne", "eq"):
    setattr(spmatrix, f"__{_name}__", _binary(f"__{_name}__"))
    if _name in ("add", "sub", "mul", "matmul"):
        setattr(spmatrix, f"__r{_name}__", _binary(f"__r{_name}__"))
spmatrix.__neg__ = lambda self: spmatrix(-self._host)  # type: ignore[attr-defined]


_ARRAYS = ("data", "indices", "indptr", "row", "col")


def _stored(host: Any) -> int:
    return sum(getattr(host, a).size for a in _ARRAYS if hasattr(host, a))


def _nbytes(host: Any) -> int:
    return sum(getattr(host, a).nbytes for a in _ARRAYS if hasattr(host, a))


def _unwrap(value: Any) -> Any:
    if isinstance(value, spmatrix):
        return value._host
    if isinstance(value, DeviceArray):
        return value._host
    if isinstance(value, np.ndarray) or scipy.sparse.issparse(value):
        raise unsupported(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v) for v in value)
    return value


def _unwrap_index(key: Any) -> Any:
    if isinstance(key, tuple):
        return tuple(_unwrap_index(k) for k in key)
    if isinstance(key, DeviceArray):
        return key._host
    if isinstance(key, (np.ndarray, list)):
        return to_device(key)._host  # cupyx copies a host index to the device, as CuPy does
    return key


def _wrap(value: Any) -> Any:
    if scipy.sparse.issparse(value):
        return spmatrix(value)
    if isinstance(value, (np.ndarray, np.generic)):
        return DeviceArray(np.asarray(value))
    if isinstance(value, tuple):
        return tuple(_wrap(v) for v in value)
    return value


def _call(func: Any, *args: Any, **kwargs: Any) -> Any:
    return _wrap(func(*_unwrap(args), **_unwrap(kwargs)))


def _construct(kind: Any, arg: Any, shape: Any = None, dtype: Any = None, copy: bool = False) -> spmatrix:
    if isinstance(arg, spmatrix):
        return spmatrix(kind(arg._host, shape=shape, dtype=dtype, copy=copy))
    if scipy.sparse.issparse(arg):  # cupyx copies a scipy.sparse matrix to the device
        host = kind(arg, shape=shape, dtype=dtype, copy=True)
        COPIES.count("to_device", (_stored(host),), _nbytes(host))
        return spmatrix(host)
    if isinstance(arg, tuple):
        return spmatrix(kind(_unwrap(arg), shape=shape, dtype=dtype, copy=copy))
    if isinstance(arg, DeviceArray):
        return spmatrix(kind(arg._host, shape=shape, dtype=dtype))
    raise ValueError("Unsupported initializer format")  # cupyx's words for a host (NumPy) array


def csr_matrix(arg: Any, shape: Any = None, dtype: Any = None, copy: bool = False) -> spmatrix:
    return _construct(scipy.sparse.csr_matrix, arg, shape, dtype, copy)


def csc_matrix(arg: Any, shape: Any = None, dtype: Any = None, copy: bool = False) -> spmatrix:
    return _construct(scipy.sparse.csc_matrix, arg, shape, dtype, copy)


def coo_matrix(arg: Any, shape: Any = None, dtype: Any = None, copy: bool = False) -> spmatrix:
    return _construct(scipy.sparse.coo_matrix, arg, shape, dtype, copy)


def _stack(how: Any, blocks: Any, format: Any = None, dtype: Any = None) -> spmatrix:
    if not all(isinstance(b, spmatrix) for b in blocks):
        raise unsupported(next(b for b in blocks if not isinstance(b, spmatrix)))
    return spmatrix(how([b._host for b in blocks], format=format, dtype=dtype))


def vstack(blocks: Any, format: Any = None, dtype: Any = None) -> spmatrix:
    return _stack(scipy.sparse.vstack, blocks, format, dtype)


def hstack(blocks: Any, format: Any = None, dtype: Any = None) -> spmatrix:
    return _stack(scipy.sparse.hstack, blocks, format, dtype)


def issparse(x: Any) -> bool:
    return isinstance(x, spmatrix)


isspmatrix = issparse


def isspmatrix_csr(x: Any) -> bool:
    return isinstance(x, spmatrix) and x.format == "csr"
