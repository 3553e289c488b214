"""Array backends: one code path over NumPy/SciPy (CPU) or CuPy/cupyx (GPU).

Algorithms receive a :class:`Backend` and write ``backend.xp.<op>``; they never
branch on the device. CuPy is imported only when a CuPy backend is requested.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import scipy.sparse

from ilargi_db.backend import BACKENDS
from ilargi_db.errors import BackendUnavailableError, spell


@dataclass(frozen=True)
class Backend:
    """An array namespace (``xp``) and its sparse-matrix module."""

    name: str
    xp: ModuleType
    sparse: ModuleType

    def __reduce__(self) -> tuple:
        # Pickled by name (modules do not pickle): a matrix sent to another process (joblib's workers in a
        # scikit-learn search with n_jobs) finds the same backend there.
        return (get_backend, (self.name,))

    def asarray(self, a: Any, dtype: Any = None) -> Any:
        """``a`` as a dense array of this backend (copies to the device once on GPU)."""
        if self.is_sparse(a):
            a = a.toarray()
        return self.xp.asarray(a, dtype=dtype)

    def is_sparse(self, a: Any) -> bool:
        return scipy.sparse.issparse(a) or (self.sparse is not scipy.sparse and self.sparse.issparse(a))

    def to_device(self, a: Any) -> Any:
        """A block (dense or sparse) on this backend's device: a host one uploaded through pinned memory on
        the current stream (no copy on NumPy), one already there as it is."""
        if scipy.sparse.issparse(a) or isinstance(a, np.ndarray):
            return self.transfers.upload(a)
        if self.is_sparse(a):
            return a.tocsr()
        return self.xp.asarray(a)

    @property
    def transfers(self) -> Any:
        """How host blocks reach the device: pinned staging, copy streams (:mod:`ilargi_db.backend.transfer`)."""
        return _transfers(self.name)

    @property
    def kernels(self) -> Any:
        """The fused hot loops (see :mod:`ilargi_db.backend.kernels`): numba on the CPU, CUDA kernels on CuPy."""
        return _kernels(self.name)

    @property
    def tree_kernels(self) -> Any:
        """The histogram-boosting hot loops (see :mod:`ilargi_db.backend.tree_kernels`): numba on the CPU, a CUDA
        histogram on CuPy."""
        return _tree_kernels(self.name)

    def hot_loop(self) -> contextlib.AbstractContextManager:
        """A context for fused kernels and the small products around them: on the CPU, BLAS runs one thread.

        OpenBLAS's idle worker threads keep spinning for a while after each call and take the cores
        from numba's threads (measured here: an 8x slower conjugate-gradient fit on 2 cores), and a
        two-thread gemv of a 50,000 x 20 dimension block took 4-12 ms against 0.3 ms on one thread.
        The products left to BLAS there are small, so one thread loses nothing. Setting the limit costs
        about 0.3 ms, so only the outermost entry sets it: an operator inside a fit (every partition of a
        streamed matrix) enters for a counter's increment.
        """
        if self.xp is not np:
            return contextlib.nullcontext()
        return _one_blas_thread()

    def to_host(self, a: Any) -> Any:
        """A NumPy array (or scipy.sparse matrix) of ``a``."""
        if self.xp is np:
            return a
        if self.is_sparse(a):
            return a.get()
        return self.xp.asnumpy(a)


NUMPY = Backend("numpy", np, scipy.sparse)


_blas_limit: dict[str, Any] = {"depth": 0, "limiter": None}  # BLAS's thread count is the process's
_blas_lock = threading.Lock()


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """BLAS on one thread until the last of the nested (or concurrent) entries leaves."""
    with _blas_lock:
        if _blas_limit["depth"] == 0:
            _blas_limit["limiter"] = _blas_controller().limit(limits=1, user_api="blas")  # may raise: nothing held
        _blas_limit["depth"] += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_limit["depth"] -= 1
            if _blas_limit["depth"] == 0:
                _blas_limit.pop("limiter").restore_original_limits()
                _blas_limit["limiter"] = None


@functools.cache
def _blas_controller() -> Any:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@functools.cache
def _kernels(name: str) -> Any:
    # Imported on first use: numba takes a while to import, and `import ilargi_db` must stay light.
    if name == "numpy":
        from ilargi_db.backend.numba_kernels import NumbaKernels

        return NumbaKernels()
    xp = get_backend(name).xp
    if hasattr(xp, "RawKernel"):  # CuPy's custom kernels: the fused CUDA ones
        from ilargi_db.backend.cuda_kernels import CudaKernels

        return CudaKernels(xp)
    from ilargi_db.backend.kernels import ReferenceKernels

    return ReferenceKernels(xp)


@functools.cache
def _transfers(name: str) -> Any:
    from ilargi_db.backend.transfer import DeviceTransfers, HostTransfers

    if name == "numpy":
        return HostTransfers()
    backend = get_backend(name)
    return DeviceTransfers(backend.xp, backend.sparse)


@functools.cache
def _tree_kernels(name: str) -> Any:
    if name == "numpy":
        from ilargi_db.backend.tree_kernels import NumbaTreeKernels

        return NumbaTreeKernels()
    xp = get_backend(name).xp
    if hasattr(xp, "RawKernel"):
        from ilargi_db.backend.cuda_tree_kernels import CudaTreeKernels

        return CudaTreeKernels(xp)
    from ilargi_db.backend.tree_reference import ReferenceTreeKernels

    return ReferenceTreeKernels(xp)


@functools.cache
def _cupy_backend() -> Backend:
    try:
        import cupy
        import cupyx.scipy.sparse
    except Exception as err:  # ImportError, or a CUDA library failing to load
        raise BackendUnavailableError(
            f"{spell('backend', 'cupy')} needs CuPy, which cannot be imported here ({type(err).__name__}: {err}). "
            "Install it with `pip install 'ilargi_db[gpu]'` on a machine with an NVIDIA GPU, "
            f"or use {spell('backend', 'numpy')} (or 'auto', which falls back to NumPy)."
        ) from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
        if count < 1:
            raise RuntimeError("no CUDA device found")
        cupy.zeros(1).sum().item()
    except Exception as err:
        raise BackendUnavailableError(
            f"{spell('backend', 'cupy')} needs a usable CUDA GPU, but CuPy cannot use one "
            f"({type(err).__name__}: {err}). "
            f"Run on a machine with an NVIDIA GPU and driver, or use {spell('backend', 'numpy')} (or 'auto')."
        ) from None
    return Backend("cupy", cupy, cupyx.scipy.sparse)


_REGISTERED: dict[str, tuple[Backend, tuple[type, ...]]] = {}  # name -> (backend, the types of its arrays)


def register_backend(backend: Backend, array_types: tuple[type, ...]) -> None:
    """Make ``backend`` available by its name, like ``"cupy"``: the extension point for another array library.

    ``backend.xp`` must follow CuPy's namespace (``asarray``, ``asnumpy``, ufuncs, ``linalg``, and ``cuda``'s
    ``Stream``, ``Event``, ``get_current_stream`` and ``alloc_pinned_memory`` for uploads) and
    ``backend.sparse`` cupyx.scipy.sparse's (``csr_matrix``, ``coo_matrix``, ``vstack``, ``hstack``,
    ``issparse``; matrices with ``.get()``); ``array_types`` are the classes of its dense and sparse arrays,
    by which :func:`backend_of` knows them. Its kernels are :class:`~ilargi_db.backend.cuda_kernels.CudaKernels`
    where its ``xp`` has CuPy's ``RawKernel``, as CuPy's are, else the array operations of
    :class:`~ilargi_db.backend.kernels.ReferenceKernels`. A test suite registers its strict device double this way.
    """
    if backend.name in BACKENDS:
        raise ValueError(f"{backend.name!r} is a built-in backend; register another array library under a new name.")
    _REGISTERED[backend.name] = (backend, tuple(array_types))
    _transfers.cache_clear()  # a name registered anew uploads through its own library


def get_backend(backend: str | Backend = "auto") -> Backend:
    """Resolve ``"numpy"``, ``"cupy"`` or ``"auto"`` (CuPy when a GPU is usable), or a registered backend's name.

    >>> get_backend("numpy").name
    'numpy'
    """
    if isinstance(backend, Backend):
        return backend
    if backend in _REGISTERED:
        return _REGISTERED[backend][0]
    if backend not in BACKENDS:
        names = ", ".join(map(repr, (*BACKENDS, *_REGISTERED)))
        raise ValueError(f"backend must be one of {names}, got {backend!r}.")
    if backend == "numpy":
        return NUMPY
    if backend == "cupy":
        return _cupy_backend()
    try:
        return _cupy_backend()
    except BackendUnavailableError:
        return NUMPY


def backend_of(a: Any) -> Backend:
    """The backend an array or sparse matrix lives on."""
    for backend, array_types in _REGISTERED.values():
        if isinstance(a, array_types):
            return backend
    module = type(a).__module__
    if module.startswith("cupy"):
        return _cupy_backend()
    return NUMPY


def to_host(a: Any) -> np.ndarray:
    """A NumPy array of a backend array or scalar (no copy on NumPy)."""
    return np.asarray(backend_of(a).to_host(a))
