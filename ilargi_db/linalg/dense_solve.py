"""The normal equations' dense solve, as the linear model runs it and the calibration times it."""

from __future__ import annotations

import numpy as np
import scipy.linalg


def solve_normal_equations(gram: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``gram^-1 rhs`` by Cholesky; the minimum-norm least-squares solution (an SVD, about ten times the work)
    when ``gram`` is singular or ill-conditioned, as a full one-hot encoding beside an intercept makes it.

    The cost model prices both paths (``solve_terms``); the calibration times this function.
    """
    try:
        factor = scipy.linalg.cho_factor(gram, check_finite=False)
        diagonal = np.abs(np.diag(factor[0]))
        # cond(gram) ~ (max/min diagonal of its Cholesky factor)^2, without an SVD.
        if diagonal.min() <= 1e-6 * diagonal.max():
            raise np.linalg.LinAlgError("ill-conditioned")
        return scipy.linalg.cho_solve(factor, rhs, check_finite=False)
    except (np.linalg.LinAlgError, scipy.linalg.LinAlgError):
        return scipy.linalg.lstsq(gram, rhs, cond=None, lapack_driver="gelsd")[0]  # minimum-norm


__all__ = ["solve_normal_equations"]
