"""Memory a training phase freed, given back to the system before the next phase allocates elsewhere.

Each library in the process keeps what it frees for its own next allocation: C's ``malloc`` (NumPy's
arrays, numba's, Python's large objects), Arrow's memory pool, DuckDB's allocator. When one phase frees
into one of them and the next phase allocates from another, the process holds both at once: the read's
Arrow buffers and the fit's NumPy temporaries stay resident while DuckDB stores the model. Giving the
freed memory back between phases keeps the peak at the largest phase instead of their sum. It costs a
walk over the allocators' free lists (a millisecond or so), and the pages the next phase touches anew.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

import pyarrow as pa


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (returns free heap pages to the system), or None where the C library has none."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own C library
    except (OSError, AttributeError):  # not glibc (macOS, musl, Windows)
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def give_back_freed_memory() -> None:
    """Return the memory Arrow's pool and C's ``malloc`` hold free to the system (what is in use stays)."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
