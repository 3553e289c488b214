"""The normal equations' dense solve, as the linear model runs it and the calibration times it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.linalg


def normal_equations_solver(gram: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """``rhs -> gram^-1 rhs``, ``gram`` factored once: by Cholesky; the minimum-norm least-squares solution (an
    SVD, about ten times the work) when ``gram`` is singular or ill-conditioned, as a full one-hot encoding beside
    an intercept makes it.

    Cholesky runs on ``gram`` scaled to a unit diagonal (Jacobi equilibration, the solution scaled back): columns
    of 1e-6 and of 1e9 then cost no digits, and only a Gram matrix ill-conditioned whatever the columns' scales
    takes the least-squares path (on ``gram`` as given: its minimum norm is in the columns' own units).
    The cost model prices both paths (``solve_terms``); the calibration times :func:`solve_normal_equations`.
    """
    diagonal = np.sqrt(np.abs(np.diag(gram)))
    scale = np.where((diagonal > 0) & np.isfinite(diagonal), diagonal, 1.0)
    try:
        factor = scipy.linalg.cho_factor(gram / np.outer(scale, scale), check_finite=False)
        pivots = np.abs(np.diag(factor[0]))
        # cond(gram) ~ (max/min diagonal of its Cholesky factor)^2, without an SVD.
        if pivots.min() <= 1e-6 * pivots.max():
            raise np.linalg.LinAlgError("ill-conditioned")
    except (np.linalg.LinAlgError, scipy.linalg.LinAlgError):
        return lambda rhs: scipy.linalg.lstsq(gram, rhs, cond=None, lapack_driver="gelsd")[0]  # minimum-norm

    def solve(rhs: np.ndarray) -> np.ndarray:
        scale_rhs = scale if rhs.ndim == 1 else scale[:, None]
        return scipy.linalg.cho_solve(factor, rhs / scale_rhs, check_finite=False) / scale_rhs

    return solve


def solve_normal_equations(gram: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``gram^-1 rhs`` (:func:`normal_equations_solver`)."""
    return normal_equations_solver(gram)(rhs)


__all__ = ["normal_equations_solver", "solve_normal_equations"]
