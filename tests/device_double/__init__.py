"""A strict device double for tests: an array backend over NumPy that keeps to the device as CuPy does.

Registered with :func:`ilargi_db.backend.register_backend` under :data:`NAME`, it is what ``backend="cupy"``
would be to the product code: its arrays refuse implicit conversion to NumPy with CuPy's error
(``np.asarray``, ``np.array``, scikit-learn's checks), host arrays mixed into device operations are refused
with CuPy's ``Unsupported type``, reductions give 0-d device arrays, its sparse module is cupyx.scipy.sparse's
subset, and ``xp.RawKernel`` runs CuPy's custom kernels' CUDA C on the host (:mod:`tests.device_double.emulator`,
where a C++ compiler is found), so the kernels are :class:`~ilargi_db.backend.cuda_kernels.CudaKernels`, as
CuPy's are (without a compiler, the reference's array operations). Every host<->device copy is counted in
:data:`COPIES` (``COPIES.reset()`` before the part a test bounds).

Streams, events and pinned host memory (``xp.cuda``) are modelled as :mod:`tests.device_double.cuda` says:
a read of work on another stream that nothing orders after it raises ``UnorderedRead``, and an asynchronous
upload reads its pinned source when it lands, not when it is enqueued.

What it does not model: the null stream's asynchrony (work on it is complete at return), memory pools and
device memory limits, the parallelism of kernel launches (the emulator runs threads one by one), several
devices, dtype coverage (it has NumPy's, CuPy lacks float128 and object arrays), NumPy functions CuPy lacks
(a function NumPy has is found here even where ``cupy`` has none), Python lists passed to functions (CuPy
refuses many; NumPy takes them here), and out-of-bounds integer indices (NumPy raises, CuPy wraps around).
"""

from __future__ import annotations

from ilargi_db.backend import Backend, register_backend
from tests.device_double import cuda, sparse, xp
from tests.device_double.arrays import IMPLICIT, DeviceArray
from tests.device_double.copies import COPIES, Copies

NAME = "device_double"

DEVICE_DOUBLE = Backend(NAME, xp, sparse)


def register() -> Backend:
    """Make ``backend="device_double"`` resolve to the double in this process (idempotent)."""
    register_backend(DEVICE_DOUBLE, (DeviceArray, sparse.spmatrix))
    return DEVICE_DOUBLE


__all__ = ["COPIES", "DEVICE_DOUBLE", "IMPLICIT", "NAME", "Copies", "DeviceArray", "cuda", "register", "sparse", "xp"]
