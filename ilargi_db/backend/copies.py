"""An array copied into another inside a compiled kernel, as a loop.

Why: numba compiles an assignment of an array into a slice or a row (``dst[:] = src``, ``rows[i] = values``) with
the formatting of its shape-mismatch message (string concatenation, ``str`` of integers) inlined into the kernel:
about a second of a machine's first compile of the tree grower, and 1.6 s of k-means' nearest-centroid kernel. A
loop compiles to the same copy without it.
"""

from __future__ import annotations

import numba


# Not cached on its own: kernels of both kinds call it, and an install compiles the kinds in two processes at once
# (build_backend/ilargi_build.py), which would update its cache index together. Each caller's cache holds it.
@numba.njit(nogil=True)
def copy_into(dst, src):  # pragma: no cover - compiled
    """``dst[:] = src`` for 1-D arrays of one length."""
    for i in range(src.shape[0]):
        dst[i] = src[i]


__all__ = ["copy_into"]
