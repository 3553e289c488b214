"""The double's device array: a NumPy array that keeps to the device the way ``cupy.ndarray`` does.

What CuPy refuses, this refuses with CuPy's error (its ``cupy/_core/core.pyx``): ``__array__`` raises
(so ``np.asarray``, ``np.array`` and every library that calls them refuse a device array), a NumPy array
mixed into a device operation raises ``TypeError: Unsupported type <class 'numpy.ndarray'>`` (operators,
ufuncs, functions, item assignment), iterating a 0-d array raises. What CuPy allows with a copy, this
allows and counts in :data:`~tests.device_double.copies.COPIES`: ``.get()``, ``float()``/``int()``/``bool()``
of a one-element array, ``.item()``/``.tolist()``/``.tobytes()``, ``repr``/``format``, pickling, and a
host index (a list or NumPy array of positions), which CuPy copies to the device. Reductions give 0-d
device arrays, never host scalars. NumPy's functions called on a device array dispatch to the device
(CuPy's ``__array_function__`` and ``__array_ufunc__``), so ``np.exp(a)`` stays on the device and
``np.asarray(a)`` does not. No ``__index__``: ``range(a)`` needs ``int(a)``, a counted copy.
"""

from __future__ import annotations

import ctypes
import operator
from typing import Any

import numpy as np

from tests.device_double import cuda
from tests.device_double.copies import COPIES

IMPLICIT = (
    "Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a NumPy array explicitly."
)


def unsupported(value: Any) -> TypeError:
    """CuPy's error for a host array (or other non-device operand) in a device operation."""
    return TypeError(f"Unsupported type {type(value)}")


class DeviceArray:
    """A device array (see the module's docstring); made by the double's ``xp``, never by hand."""

    __slots__ = ("_data", "_mark", "__weakref__")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, data: np.ndarray, mark: Any = False):
        self._data = data  # the "device memory": never handed out without a counted copy
        # Where the work writing it was enqueued (see .cuda): a result of work on a created stream is read
        # elsewhere only once ordered after it.
        self._mark = cuda.mark_new() if mark is False else mark

    @property
    def _host(self) -> np.ndarray:
        """The device memory, for work that reads it: refused where nothing orders the read after its writer."""
        cuda.require(self._mark)
        return self._data

    # What a device array says about itself without a copy (nor a wait for its writer).
    shape = property(lambda self: self._data.shape)
    dtype = property(lambda self: self._data.dtype)
    ndim = property(lambda self: self._data.ndim)
    size = property(lambda self: self._data.size)
    nbytes = property(lambda self: self._data.nbytes)
    itemsize = property(lambda self: self._data.itemsize)
    strides = property(lambda self: self._data.strides)
    flags = property(lambda self: self._data.flags)
    T = property(lambda self: DeviceArray(self._data.T, self._mark))

    @shape.setter
    def shape(self, value: tuple[int, ...]) -> None:
        self._data.shape = value

    @property
    def data(self) -> MemoryPointer:
        """The device memory's pointer (CuPy's ``ndarray.data``): what low-level copies write through."""
        if not (self._data.flags.c_contiguous or self._data.flags.f_contiguous):
            raise RuntimeError("the device double gives pointers of contiguous arrays only")
        return MemoryPointer(self)

    def set(self, arr: np.ndarray, stream: Any = None) -> None:
        """Copy host ``arr`` in (counted), as ``cupy.ndarray.set``: asynchronous on ``stream`` from pinned memory."""
        if not isinstance(arr, np.ndarray):
            raise TypeError("Only numpy.ndarray can be set to cupy.ndarray")
        if self.dtype != arr.dtype:
            raise TypeError(f"{arr.dtype} array cannot be set to {self.dtype} array")
        if self.shape != arr.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self.shape}, new shape: {arr.shape}")
        if not (self.flags.c_contiguous or self.flags.f_contiguous):
            raise RuntimeError("Cannot set to non-contiguous array")
        pinned = cuda.is_pinned(arr) and arr.flags.c_contiguous == self.flags.c_contiguous
        COPIES.count("to_device", arr.shape, arr.nbytes, pinned=pinned)
        if stream is None or stream.null or not pinned:  # synchronous (a pageable source is staged at the call)
            self._data[...] = arr
            self._mark = None if stream is None or stream.null else (stream, stream.enqueue())
            return
        self._mark = (stream, stream.enqueue())
        cuda.later_upload(self._data, arr, self._mark)

    def get(self, stream: Any = None, order: str = "C", out: np.ndarray | None = None) -> np.ndarray:
        """A host copy (counted); the reading stream is synchronized, as CuPy's blocking ``get`` does."""
        host = np.array(self._host, order=order)
        cuda.get_current_stream().synchronize()
        COPIES.count("to_host", host.shape, host.nbytes)
        if out is not None:
            out[...] = host
            return out
        return host

    # Refused: the implicit conversions CuPy refuses.
    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise TypeError(IMPLICIT)

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    # Allowed with a copy (CuPy's __int__/__float__/__bool__ call .get()).
    def __float__(self) -> float:
        return float(self.get())

    def __int__(self) -> int:
        return int(self.get())

    def __complex__(self) -> complex:
        return complex(self.get())

    def __bool__(self) -> bool:
        if self.size == 0:
            return False
        if self.size > 1:
            raise ValueError(
                "The truth value of an array with more than one element is ambiguous. Use a.any() or a.all()"
            )
        return bool(self.get())

    def __repr__(self) -> str:
        return repr(self.get())

    def __str__(self) -> str:
        return str(self.get())

    def __format__(self, spec: str) -> str:
        return format(self.get(), spec)

    def __reduce__(self) -> tuple:
        return (_unpickle, (self.get(),))

    def item(self, *args: Any) -> Any:
        return self.get().item(*args)

    def tolist(self) -> Any:
        return self.get().tolist()

    def tobytes(self, order: str = "C") -> bytes:
        return self.get().tobytes(order)

    # NumPy's protocols: stay on the device, refuse host arrays.
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if method != "__call__":
            return NotImplemented  # CuPy dispatches only plain ufunc calls
        if any(not _operand(x) for x in inputs):
            return NotImplemented
        return call(ufunc, *inputs, **kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if any(t not in (DeviceArray, np.ndarray) for t in types):
            return NotImplemented
        return call(func, *args, **kwargs)

    # Indexing: a host index is copied to the device (as CuPy does); a host value is refused.
    def __getitem__(self, key: Any) -> Any:
        return wrap(self._host[_index(key)])

    def __setitem__(self, key: Any, value: Any) -> None:
        self._host[_index(key)] = _value(value)
        self._mark = _written(self._mark)

    # Everything else an ndarray has: arguments unwrapped (host arrays refused), results on the device.
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in _HOST_ATTRIBUTES:
            raise AttributeError(f"the device double's array has no attribute {name!r}")
        attr = getattr(self._host, name)
        if callable(attr):
            return lambda *args, **kwargs: call(attr, *args, **kwargs)
        return wrap(attr)


# NumPy's views of host memory: a device array has none (CuPy's ``data`` is a device pointer).
_HOST_ATTRIBUTES = frozenset({"ctypes", "tofile", "dump", "dumps"})


class MemoryPointer:
    """``cupy.cuda.MemoryPointer``'s subset: a device array's memory at a byte offset, copied into from the host."""

    def __init__(self, owner: DeviceArray, offset: int = 0):
        self.owner, self.offset = owner, int(offset)

    def __add__(self, offset: int) -> MemoryPointer:
        return MemoryPointer(self.owner, self.offset + int(offset))

    def copy_from_host_async(self, mem: Any, size: int, stream: Any = None) -> None:
        """Copy ``size`` bytes at host address ``mem`` (a ``ctypes.c_void_p``) here, on ``stream`` (the current one
        if None): counted; from pinned memory it lands late (see .cuda), from pageable memory at the call."""
        owner, size = self.owner, int(size)
        raw = owner._data.ravel(order="K").view(np.uint8)  # a contiguous array's bytes, in memory order
        if self.offset + size > raw.size:
            raise ValueError(f"a copy of {size} bytes at offset {self.offset} overruns the {raw.size} bytes here")
        stream = cuda.get_current_stream() if stream is None else stream
        source = cuda.pinned_bytes(mem.value, size)
        COPIES.count("to_device", (size,), size, pinned=source is not None, into=owner.shape)
        if source is None or stream.null:  # pageable memory is staged before the call returns
            host = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(mem.value)) if size else raw[:0]
            raw[self.offset : self.offset + size] = host
            owner._mark = _written(owner._mark)
            return
        owner._mark = (stream, stream.enqueue())
        cuda.later_upload(raw[self.offset : self.offset + size], source, owner._mark)


def _written(before: Any) -> Any:
    """The mark of an array just written: the current stream's new work, or what it had on the null stream."""
    after = cuda.mark_new()
    return before if after is None else after


def _unpickle(host: np.ndarray) -> DeviceArray:
    return to_device(host)


def _operand(x: Any) -> bool:
    """Whether CuPy's ufuncs take ``x`` (a NumPy array is taken, and then refused with CuPy's error)."""
    return isinstance(x, (DeviceArray, np.ndarray, np.generic, bool, int, float, complex))


def to_device(host: Any, dtype: Any = None, order: Any = None) -> DeviceArray:
    """A counted host->device copy of ``host`` (an array, a list, a scalar)."""
    data = np.array(host, dtype=dtype, order="K" if order is None else order)
    COPIES.count("to_device", data.shape, data.nbytes, pinned=isinstance(host, np.ndarray) and cuda.is_pinned(host))
    return DeviceArray(data)


def unwrap(value: Any) -> Any:
    """An argument of a device operation, as NumPy takes it: host arrays refused like CuPy refuses them."""
    if isinstance(value, DeviceArray):
        return value._host
    if isinstance(value, np.ndarray):
        raise unsupported(value)
    if isinstance(value, (list, tuple)):
        return type(value)(unwrap(v) for v in value)
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    if _is_sparse(value):
        raise unsupported(value)
    return value


def wrap(value: Any) -> Any:
    """A result of a device operation, on the device: arrays and NumPy scalars (CuPy gives 0-d arrays)."""
    if isinstance(value, np.ndarray):
        return DeviceArray(np.asarray(value))  # np.matrix (scipy.sparse's sums) as a plain 2-D array
    if isinstance(value, np.generic):
        return DeviceArray(np.asarray(value))
    if isinstance(value, tuple):
        return tuple(wrap(v) for v in value)
    if isinstance(value, list):
        return [wrap(v) for v in value]
    return value


def call(func: Any, *args: Any, **kwargs: Any) -> Any:
    """``func`` (a NumPy function or method) on the device."""
    return wrap(func(*unwrap(args), **unwrap(kwargs)))


def _index(key: Any) -> Any:
    if isinstance(key, tuple):
        return tuple(_index(k) for k in key)
    if isinstance(key, DeviceArray):
        return key._host
    if isinstance(key, (np.ndarray, list)):
        return to_device(key)._host  # CuPy copies a host index to the device
    return key


def _value(value: Any) -> Any:
    if isinstance(value, DeviceArray):
        return value._host
    if isinstance(value, (bool, int, float, complex, np.generic)):
        return value
    raise unsupported(value)


def _is_sparse(value: Any) -> bool:
    import scipy.sparse

    return scipy.sparse.issparse(value)


def _binary(op: Any, reflected: bool = False) -> Any:
    def method(self: DeviceArray, other: Any) -> Any:
        if not isinstance(other, (DeviceArray, np.ndarray, np.generic, bool, int, float, complex)):
            return NotImplemented  # a device sparse matrix answers with its reflected operator
        a, b = (other, self) if reflected else (self, other)
        return call(op, a, b)

    return method


def _inplace(op: Any) -> Any:
    def method(self: DeviceArray, other: Any) -> DeviceArray:
        if not isinstance(other, (DeviceArray, np.generic, bool, int, float, complex)):
            raise unsupported(other)
        op(self._host, unwrap(other), out=self._host)
        self._mark = _written(self._mark)
        return self

    return method


for _name, _op in {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "truediv": np.true_divide,
    "floordiv": np.floor_divide,
    "mod": np.remainder,
    "pow": np.power,
    "matmul": np.matmul,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
    "lshift": np.left_shift,
    "rshift": np.right_shift,
}.items():
    setattr(DeviceArray, f"__{_name}__", _binary(_op))
    setattr(DeviceArray, f"__r{_name}__", _binary(_op, reflected=True))
    if _name != "matmul":
        setattr(DeviceArray, f"__i{_name}__", _inplace(_op))
for _name, _op in {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}.items():
    setattr(DeviceArray, f"__{_name}__", _binary(_op))
DeviceArray.__eq__ = _binary(np.equal)  # type: ignore[assignment]
DeviceArray.__ne__ = _binary(np.not_equal)  # type: ignore[assignment]
for _name, _op in {"neg": operator.neg, "pos": operator.pos, "abs": operator.abs, "invert": operator.invert}.items():
    setattr(DeviceArray, f"__{_name}__", lambda self, _op=_op: DeviceArray(np.asarray(_op(self._host))))
