"""The gradients and hessians of the boosting losses, each one fused pass over the rows (on the free cores).

A loss's gradients are computed once per tree over every row: as NumPy expressions that is several passes and
temporaries (log loss: 7.6 ms per 1M rows, against 1 ms fused, measured). Each kernel has its reference beside it
(``*_reference``, array operations of the arrays' own namespace), the oracle of
tests/test_backend_gradient_kernels.py and what arrays on a GPU run (a few elementwise passes there); rows are
independent, so the result does not depend on the thread count.
"""

from __future__ import annotations

import numpy as np
from numba import types as nt
from scipy.special import expit

from ilargi_db.backend.compiled import kernel, read_only
from ilargi_db.backend.namespace import backend_of
from ilargi_db.backend.parallel import run

ROWS_PER_THREAD = 1 << 16  # a thread pays off from this many rows
IN_F64, F64 = read_only(nt.float64[::1]), nt.float64[::1]
IN_F64_2D, F64_2D = read_only(nt.float64[:, ::1]), nt.float64[:, ::1]


@kernel([nt.void(IN_F64, IN_F64, F64, F64, nt.int64, nt.int64)])
def _logistic(raw, y, g, h, first, last):  # pragma: no cover - compiled
    for i in range(first, last):
        x = raw[i]
        if x >= 0.0:
            p = 1.0 / (1.0 + np.exp(-x))
        else:
            e = np.exp(x)
            p = e / (1.0 + e)
        g[i] = p - y[i]
        h[i] = p * (1.0 - p)


@kernel([nt.void(IN_F64, IN_F64, nt.float64, F64, F64, nt.int64, nt.int64)])
def _poisson(raw, y, delta, g, h, first, last):  # pragma: no cover - compiled
    scale = np.exp(delta)
    for i in range(first, last):
        mean = np.exp(raw[i])
        g[i] = mean - y[i]
        h[i] = mean * scale


@kernel([nt.void(IN_F64_2D, IN_F64, nt.float64, F64_2D, F64_2D, nt.int64, nt.int64)])
def _softmax(raw, y, factor, g, h, first, last):  # pragma: no cover - compiled
    k = raw.shape[0]
    for i in range(first, last):
        top = raw[0, i]
        for c in range(1, k):
            top = max(top, raw[c, i])
        total = 0.0
        for c in range(k):
            total += np.exp(raw[c, i] - top)
        truth = np.int64(y[i])
        for c in range(k):
            p = np.exp(raw[c, i] - top) / total
            g[c, i] = p - (1.0 if c == truth else 0.0)
            h[c, i] = factor * p * (1.0 - p)


def _on_host(array) -> bool:
    """Whether ``array`` is NumPy's (the fused kernels read it), not a device's (the references run there)."""
    return backend_of(array).xp is np


def logistic_gradients(raw: np.ndarray, y: np.ndarray, g: np.ndarray, h: np.ndarray) -> None:
    """Log loss on log-odds ``raw`` for 0/1 ``y``: ``g = p - y``, ``h = p (1 - p)``, ``p`` the logistic of ``raw``."""
    if not _on_host(raw):
        return logistic_gradients_reference(raw, y, g, h)
    run(_logistic, len(raw), raw, y, g, h, min_tasks=ROWS_PER_THREAD)


def logistic_gradients_reference(raw: np.ndarray, y: np.ndarray, g: np.ndarray, h: np.ndarray) -> None:
    xp = backend_of(raw).xp
    p = expit(raw) if xp is np else 0.5 * (1.0 + xp.tanh(0.5 * raw))  # the logistic, without overflow
    g[...] = p - y
    h[...] = p * (1.0 - p)


def softmax_gradients(raw: np.ndarray, y: np.ndarray, factor: float, g: np.ndarray, h: np.ndarray) -> None:
    """Multi-class log loss on the (classes, rows) scores ``raw`` for class indices ``y`` (0 to classes - 1, as
    float64): ``g[c] = p_c - [y == c]``, ``h[c] = factor p_c (1 - p_c)``, ``p`` the softmax of each row's scores."""
    if not _on_host(raw):
        return softmax_gradients_reference(raw, y, factor, g, h)
    run(_softmax, raw.shape[1], raw, y, float(factor), g, h, min_tasks=ROWS_PER_THREAD)


def softmax_gradients_reference(raw: np.ndarray, y: np.ndarray, factor: float, g: np.ndarray, h: np.ndarray) -> None:
    xp = backend_of(raw).xp
    p = xp.exp(raw - raw.max(axis=0))
    p /= p.sum(axis=0)
    g[...] = p - (xp.arange(raw.shape[0])[:, None] == y.astype(xp.int64))
    h[...] = factor * p * (1.0 - p)


def poisson_gradients(raw: np.ndarray, y: np.ndarray, delta: float, g: np.ndarray, h: np.ndarray) -> None:
    """Poisson deviance on log counts ``raw``: ``g = exp(raw) - y``, ``h = exp(raw + delta)`` (LightGBM's
    ``poisson_max_delta_step``)."""
    if not _on_host(raw):
        return poisson_gradients_reference(raw, y, delta, g, h)
    run(_poisson, len(raw), raw, y, float(delta), g, h, min_tasks=ROWS_PER_THREAD)


def poisson_gradients_reference(raw: np.ndarray, y: np.ndarray, delta: float, g: np.ndarray, h: np.ndarray) -> None:
    mean = backend_of(raw).xp.exp(raw)
    g[...] = mean - y
    h[...] = mean * float(np.exp(delta))


__all__ = [
    "logistic_gradients",
    "logistic_gradients_reference",
    "poisson_gradients",
    "poisson_gradients_reference",
    "softmax_gradients",
    "softmax_gradients_reference",
]
