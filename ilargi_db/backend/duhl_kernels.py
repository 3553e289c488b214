"""DuHL's kernels (:mod:`ilargi_db.models.duhl`): SDCA's epochs over dense rows and over stored entries, and each
row's duality gap, each a :class:`~ilargi_db.backend.compiled.Kernel` of explicit signatures (float64 values,
int32 or int64 positions, C order), so that an install or ``ilargi warmup`` compiles them with the others.

An epoch is sequential (each step reads the w the last one wrote), so it runs on one thread; the gaps are one
pass. :func:`duality_gaps_reference` is the gaps' NumPy reference; the epochs' oracle is the exact solution the
solver's tests compare with (tests/test_models_duhl.py).
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.special
from numba import types as nt

from ilargi_db.backend.compiled import float64_values, int64_values, kernel, position_type
from ilargi_db.backend.numba_kernels import CSR, F64, I64, IN_1, IN_2, LABELS, POSITIONS

LOSSES = ("squared", "logistic", "hinge")  # the kernels' loss codes: a loss's position here
_EDGE = 1e-12  # a logistic dual variable stays this far inside (0, 1), where its entropy is smooth


@numba.njit(nogil=True)
def _logistic_step(beta0: float, margin: float, q: float) -> float:
    """argmax over beta in (0, 1) of -(beta log beta + (1 - beta) log(1 - beta)) - margin (beta - beta0)
    - q/2 (beta - beta0)^2: Newton's method on the derivative, kept inside the interval by bisection."""
    low, high = _EDGE, 1.0 - _EDGE
    beta = min(max(beta0, 1e-3), 1.0 - 1e-3)
    for _ in range(50):
        slope = -np.log(beta / (1.0 - beta)) - margin - q * (beta - beta0)  # decreasing in beta
        if slope > 0:
            low = beta
        else:
            high = beta
        step = slope / (1.0 / (beta * (1.0 - beta)) + q)
        if abs(step) < 1e-13:
            break  # converged: a step this small could land on a bracket's end
        guess = beta + step
        beta = guess if low < guess < high else 0.5 * (low + high)
    return beta


@numba.njit(nogil=True)
def _dual_step(margin: float, norm: float, y: float, alpha: float, scale: float, loss: int) -> float:
    """The change of one row's dual variable that maximizes the dual along it: ``margin`` = x . w, ``norm`` =
    ||x||^2 (the row as the model sees it: standardized, centered, with the constant column)."""
    if loss == 0:  # squared
        return (y - margin - alpha) / (1.0 + norm * scale)
    if loss == 1:  # logistic, in beta = alpha y
        return _logistic_step(alpha * y, margin * y, norm * scale) * y - alpha
    beta = alpha * y  # hinge: beta = alpha y in [0, 1]
    if norm > 0:
        beta = min(max(beta + (1.0 - y * margin) / (norm * scale), 0.0), 1.0)
    return beta * y - alpha


@kernel([nt.void(IN_2, IN_1, F64[::1], F64[::1], F64, I64, LABELS)])
def _sdca_epoch(
    rows: np.ndarray, y: np.ndarray, alpha: np.ndarray, w: np.ndarray, scale: float, loss: int, order: np.ndarray
) -> None:
    """One pass of SDCA over the rows of a dense block in ``order``, in place (``scale`` = 1 / (lambda n)).

    A fresh random order each epoch, as SDCA's analysis has it: a fixed cyclic order measured stalling at a
    gap of 1e-3 where a shuffled one reached 1e-17 (correlated rows, columns with a common mean)."""
    for t in range(order.shape[0]):
        i = order[t]
        x = rows[i]
        margin = 0.0
        norm = 0.0
        for j in range(x.shape[0]):
            margin += x[j] * w[j]
            norm += x[j] * x[j]
        delta = _dual_step(margin, norm, y[i], alpha[i], scale, loss)
        alpha[i] += delta
        for j in range(x.shape[0]):
            w[j] += delta * scale * x[j]


@kernel([nt.void(*CSR[p], IN_1, IN_1, IN_1, IN_1, F64[::1], F64[::1], F64, I64, LABELS) for p in POSITIONS])
def _sparse_sdca_epoch(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    offset_products: np.ndarray,
    norms: np.ndarray,
    offset: np.ndarray,
    y: np.ndarray,
    alpha: np.ndarray,
    w: np.ndarray,
    scale: float,
    loss: int,
    order: np.ndarray,
) -> None:
    """:func:`sdca_epoch` on rows x_i - o kept as their stored entries x_i (CSR) and the shared offset o, each step
    O(the row's entries): w = u - a o, so x . w = x_i . u - a (x_i . o) - o . u + a ||o||^2, and a step's
    w += d (x_i - o) is u += d x_i, a += d, with o . u kept up to date by d (x_i . o). ``offset_products``: each
    row's x_i . o; ``norms``: ||x_i - o||^2. w = u - a o again at the end (a starts at 0 each epoch, so what
    cancels between u and a o is one epoch's steps)."""
    u = w  # a starts at 0, so u is w: updated in place, and w = u - a o is one pass at the end
    a = 0.0
    q = 0.0  # o . u
    oo = 0.0  # o . o
    for j in range(offset.shape[0]):
        q += offset[j] * u[j]
        oo += offset[j] * offset[j]
    for t in range(order.shape[0]):
        i = order[t]
        dot = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            dot += data[k] * u[indices[k]]
        margin = dot - a * offset_products[i] - q + a * oo
        delta = _dual_step(margin, norms[i], y[i], alpha[i], scale, loss)
        alpha[i] += delta
        step = delta * scale
        for k in range(indptr[i], indptr[i + 1]):
            u[indices[k]] += step * data[k]
        a += step
        q += step * offset_products[i]
    for j in range(w.shape[0]):
        w[j] -= a * offset[j]


@kernel([F64[::1](IN_1, IN_1, IN_1, I64)])
def _duality_gaps(z: np.ndarray, y: np.ndarray, alpha: np.ndarray, loss: int) -> np.ndarray:
    """Each row's duality gap phi(z) + phi*(-alpha) + alpha z from its margin z = x . w, in one pass
    (:func:`duality_gaps_reference` is its NumPy reference; ``loss`` a code, ``LOSSES.index(name)``)."""
    out = np.empty(z.shape[0])
    for i in range(z.shape[0]):
        if loss == 0:  # squared
            out[i] = 0.5 * (z[i] - y[i]) ** 2 + 0.5 * alpha[i] ** 2 - alpha[i] * y[i] + alpha[i] * z[i]
            continue
        beta = alpha[i] * y[i]
        if loss == 1:  # logistic: log(1 + exp(-y z)) + beta log beta + (1 - beta) log(1 - beta)
            t = -y[i] * z[i]
            entropy = 0.0
            if beta > 0:
                entropy += beta * np.log(beta)
            if beta < 1:
                entropy += (1.0 - beta) * np.log(1.0 - beta)
            out[i] = max(t, 0.0) + np.log1p(np.exp(-abs(t))) + entropy + alpha[i] * z[i]
        else:  # hinge
            out[i] = max(0.0, 1.0 - y[i] * z[i]) - beta + alpha[i] * z[i]
    return out


def duality_gaps_reference(z: np.ndarray, y: np.ndarray, alpha: np.ndarray, loss: str) -> np.ndarray:
    """Each row's duality gap phi(z) + phi*(-alpha) + alpha z, from its margin z = x . w at the current w: the
    NumPy reference of :func:`duality_gaps`, read by the loss's code as the kernel reads it."""
    code = LOSSES.index(loss)
    if code == 0:  # squared
        return 0.5 * (z - y) ** 2 + 0.5 * alpha**2 - alpha * y + alpha * z
    beta = alpha * y
    if code == 1:  # logistic
        entropy = scipy.special.xlogy(beta, beta) + scipy.special.xlogy(1 - beta, 1 - beta)
        return np.logaddexp(0, -y * z) + entropy + alpha * z
    return np.maximum(0.0, 1 - y * z) - beta + alpha * z


def sdca_epoch(
    rows: np.ndarray, y: np.ndarray, alpha: np.ndarray, w: np.ndarray, scale: float, loss: str, order: np.ndarray
) -> None:
    """One SDCA pass over dense ``rows`` in ``order``, updating ``alpha`` (the rows') and ``w`` in place."""
    rows, y, order = float64_values(rows), float64_values(y), int64_values(order)
    _sdca_epoch(rows, y, alpha, w, float(scale), LOSSES.index(loss), order)


def sparse_sdca_epoch(
    entries, offset_products, norms, offset, y, alpha, w, scale: float, loss: str, order: np.ndarray
) -> None:  # fmt: skip
    """One SDCA pass over rows x_i - o given as ``entries`` (a CSR matrix) and the ``offset`` o, in place."""
    structure = position_type(entries.indptr, entries.indices)
    _sparse_sdca_epoch(
        np.ascontiguousarray(entries.indptr, dtype=structure),
        np.ascontiguousarray(entries.indices, dtype=structure),
        float64_values(entries.data),
        *map(float64_values, (offset_products, norms, offset, y)),
        alpha,
        w,
        float(scale),
        LOSSES.index(loss),
        int64_values(order),
    )


def duality_gaps(z: np.ndarray, y: np.ndarray, alpha: np.ndarray, loss: str) -> np.ndarray:
    """Each row's duality gap from its margin ``z`` = x . w (:func:`duality_gaps_reference`, fused)."""
    return _duality_gaps(float64_values(z), float64_values(y), float64_values(alpha), LOSSES.index(loss))
