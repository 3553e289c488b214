"""Quantized gradients (LightGBM's ``use_quantized_grad``), the rule shared by every implementation.

Each row's gradient is rounded at random, without bias, to a multiple of a power of two (its hessian too, unless
every hessian is 1): ``floor(g / scale + u)``, ``u`` uniform in [0, 1) drawn by splitmix64 from (seed, the row's
key): a key of its values (:func:`~ilargi_db.linalg.row_identity.row_keys`), not its position, so that a row gets
the same draw whatever order the rows came in (either strategy), on any thread and in any implementation. A
histogram's sums of rounded values are then exact: the same in any order (whichever chunks or threads summed
them) and the same as a float histogram of the rounded values. The fused kernels sum them as integers, two packed
to an int64: the gradient's levels in the high 32 bits, the hessian's (or 1, the row) in the low 32; the levels
are as many as keep a histogram of every training row within those bits.
"""

from __future__ import annotations

import math

import numpy as np

LOW_BITS = (1 << 32) - 1  # the low half of a packed sum: the hessian's levels, or the rows
MAX_GRADIENT_LEVELS = 1 << 15  # at most: more levels than any sum needs to rank splits as exact gradients do
MAX_HESSIAN_LEVELS = 1 << 16
GOLDEN, MIX_1, MIX_2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # splitmix64's constants
SEED_MASK = (1 << 63) - 1
SMALLEST_EXPONENT = -1074  # 2**-1074, the smallest float64 above 0
CLIP = float(1 << 30)  # a row outside the training rows (held out) may be beyond the levels: kept within int64


def levels(n_rows: int) -> tuple[int, int]:
    """The most |gradient| and hessian levels for histograms of ``n_rows`` rows (their packed sums fit 32 bits)."""
    n = max(1, int(n_rows))
    if n > (1 << 31) - 1:
        raise ValueError(
            f"quantized gradients sum {n:,} rows in 32 bits: at most 2,147,483,647 training rows; train without "
            "quantized_gradients."
        )
    return min(MAX_GRADIENT_LEVELS, ((1 << 31) - 1) // n), min(MAX_HESSIAN_LEVELS, LOW_BITS // n)


def scale(largest: float, n_levels: int) -> float:
    """The smallest power of two that maps ``largest`` to at most ``n_levels`` (1.0 for 0)."""
    if not largest > 0:
        return 1.0
    # Exact in powers of two (a log2 may round a value just above 2**k down to k; a tiny one underflows).
    k = math.frexp(largest)[1] - math.frexp(n_levels)[1]
    while math.ldexp(largest, -k) > n_levels:
        k += 1
    while math.ldexp(largest, 1 - k) <= n_levels:
        k -= 1
    return math.ldexp(1.0, max(k, SMALLEST_EXPONENT))  # a subnormal gradient: the smallest step there is


def scales(g: np.ndarray, h: np.ndarray, unit_hessian: bool, rows: np.ndarray) -> np.ndarray:
    """(gradient scale, hessian scale) for the training ``rows`` (the hessian's 1.0 when every hessian is 1)."""
    g_levels, h_levels = levels(len(rows))
    if len(rows) < len(g):  # rows held out: the training rows' alone (else every row, read in place)
        g, h = g[rows], h[rows]
    out = np.array([scale(float(np.max(np.abs(g), initial=0.0)), g_levels), 1.0])
    if not unit_hessian:
        out[1] = scale(float(h.max(initial=0.0)), h_levels)
    return out


def uniform(seed: int, draws: np.ndarray) -> np.ndarray:
    """splitmix64's numbers in [0, 1) for (seed, draw): the reference of the fused kernels' draw."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed & SEED_MASK) + draws * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX_1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX_2)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def quantize(g: np.ndarray, h: np.ndarray, unit_hessian: bool, rows: np.ndarray, keys: np.ndarray, seed: int):
    """The rule with NumPy: (g rounded, h rounded, the levels packed, the scales); ``keys``: each row's (uint64)."""
    s = scales(g, h, unit_hessian, rows)
    with np.errstate(over="ignore"):
        draws = keys.astype(np.uint64) * np.uint64(2)
    gq = np.floor(np.clip(g / s[0], -CLIP, CLIP) + uniform(seed, draws)).astype(np.int64)
    hq = np.floor(np.minimum(h / s[1], CLIP) + uniform(seed, draws + np.uint64(1))).astype(np.int64)
    if unit_hessian:
        hq = np.ones(len(g), np.int64)
    h_out = np.ones(len(g)) if unit_hessian else hq * s[1]
    return gq * s[0], h_out, (gq << 32) + hq, s


__all__ = ["LOW_BITS", "levels", "quantize", "scale", "scales", "uniform"]
