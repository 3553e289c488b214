"""Gaussian NMF by multiplicative updates (as in Morpheus), through factorized LMM and T^T V."""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np

from ilargi_db._terminal import progress
from ilargi_db.models._base import SparseInputMixin, as_matrix, check_finite, check_input, to_host
from ilargi_db.models.algorithm import FixedMetrics, Metrics
from ilargi_db.models.estimator import (
    ClassNamePrefixFeaturesOutMixin,
    Estimator,
    Interval,
    StrOptions,
    TransformerMixin,
    check_fitted,
)
from ilargi_db.models.estimator import random_state as check_random_state

EPSILON = np.finfo(np.float64).eps


def squared_residual(norm_x: float, wt_x: Any, wt_w: Any, H: Any) -> float:
    """||X - W H||_F^2 from ||X||^2, W^T X and W^T W: no n x d product is formed."""
    cross = float(to_host((H * wt_x).sum()))
    quad = float(to_host((wt_w * (H @ H.T)).sum()))
    return max(norm_x - 2 * cross + quad, 0.0)


class GaussianNMF(FixedMetrics, SparseInputMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin, Estimator):
    """Non-negative matrix factorization X ~ W H (Frobenius loss), multiplicative updates.

    Each iteration needs ``X @ H^T`` (an LMM) and ``X^T W`` (a transposed LMM)
    and small r x r products, never the join. The updates and the ``"random"``
    initialization follow scikit-learn's ``NMF(solver="mu")``.

    Parameters
    ----------
    n_components : int, default=2
        The rank of W H (columns of W, rows of H).
    init : {"random"} or tuple (W, H), default="random"
        Random non-negative factors scaled to the data's mean (scikit-learn's), or these.
    max_iter : int, default=200
        Multiplicative updates at most.
    tol : float, default=1e-4
        Stop when the relative decrease of the loss falls below it.
    random_state : int, RandomState or None
        The seed of the random factors.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        H.
    reconstruction_err_ : float
        ||X - W H||_F.
    n_iter_ : int
    loss_curve_ : list of float
        0.5 ||X - W H||_F^2 after each iteration.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0, 0.5], [2.0, 1.0], [0.0, 3.0]])
    >>> nmf = GaussianNMF(n_components=2, random_state=0, max_iter=500).fit(X)
    >>> bool(nmf.reconstruction_err_ < 0.05)
    True
    """

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "init": [StrOptions({"random"}), tuple],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_components: int = 2,
        init: Any = "random",
        max_iter: int = 200,
        tol: float = 1e-4,
        random_state: Any = None,
    ):
        self.n_components = n_components
        self.init = init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    def _check_non_negative(self, M: Any) -> None:
        # A standardized (centered) matrix has negative entries by construction.
        if not hasattr(M, "min") or M.min() < 0:
            raise ValueError(
                "Negative values in data passed to GaussianNMF: it factorizes non-negative data. Shift or clip "
                "those columns in the query (e.g. GREATEST(x, 0)), or leave them out."
            )

    def fit_transform(self, X: Any, y: Any = None) -> np.ndarray:
        """Learn H and return W for the training rows."""
        self._validate_params()
        (X,) = check_input(self, X, reset=True)
        M = as_matrix(X)
        self._check_non_negative(M)
        xp = M.backend.xp
        n, d = M.shape
        r = self.n_components
        if isinstance(self.init, tuple):
            W, H = (M.backend.asarray(np.array(a, dtype=float)) for a in self.init)
            if W.shape != (n, r) or H.shape != (r, d):
                raise ValueError(f"init must be (W, H) of shapes ({n}, {r}) and ({r}, {d}).")
        else:
            rng = check_random_state(self.random_state)
            avg = np.sqrt(float(to_host(M.colsums().sum())) / (n * d) / r)
            H = M.backend.asarray(np.abs(avg * rng.standard_normal(size=(r, d))))
            W = M.backend.asarray(np.abs(avg * rng.standard_normal(size=(n, r))))
        norm_x = float(to_host(M.row_norms_squared().sum()))
        kernels = M.backend.kernels
        losses: list[float] = []
        with M.backend.hot_loop(), progress(self.max_iter, "gaussian NMF") as bar:
            for _ in range(self.max_iter):
                # W <- W * (X H^T) / (W H H^T), then H <- H * (W^T X) / (W^T W H)
                W = kernels.multiplicative_update(W, M @ H.T, H @ H.T, EPSILON)  # one fused pass over W
                numerator = (M.T @ W).T
                gram = W.T @ W
                denominator = gram @ H
                H = H * numerator / xp.where(denominator == 0, EPSILON, denominator)
                losses.append(0.5 * squared_residual(norm_x, numerator, gram, H))  # products already at hand
                check_finite(losses[-1], "the reconstruction loss")
                bar.update()
                if len(losses) > 1 and (losses[-2] - losses[-1]) <= self.tol * max(losses[0], EPSILON):
                    break
        self.components_ = to_host(H)
        self.n_components_ = r
        self.reconstruction_err_ = float(np.sqrt(2 * losses[-1]))
        self.n_iter_, self.loss_curve_ = len(losses), losses
        return to_host(W)

    def reconstruction_error(self, X: Any) -> float:
        """||X - W H||_F with W = transform(X): on other rows what ``reconstruction_err_`` is on the training rows."""
        M = as_matrix(X)
        W = M.backend.asarray(self._rows_w(X))
        H = M.backend.asarray(self.components_)
        norm_x = float(to_host(M.row_norms_squared().sum()))
        return float(np.sqrt(squared_residual(norm_x, (M.T @ W).T, W.T @ W, H)))

    metrics = Metrics.FACTORIZATION  # what the pipeline asks (models/algorithm.py)

    def training_metrics(self, X: Any, y: Any) -> dict[str, float]:
        return {"reconstruction_error": float(self.reconstruction_err_)}

    def fit(self, X: Any, y: Any = None) -> GaussianNMF:
        self.fit_transform(X)
        return self

    @property
    def _n_features_out(self) -> int:
        """The columns ``transform`` gives: one per component."""
        return self.components_.shape[0]

    def transform(self, X: Any) -> np.ndarray:
        """W for new rows, with H fixed (multiplicative updates on W alone)."""
        return self._rows_w(X)

    def _rows_w(self, X: Any) -> np.ndarray:
        """:meth:`transform` as arrays, whatever ``set_output`` chose (what the model itself reads)."""
        check_fitted(self)
        (X,) = check_input(self, X, reset=False)
        M = as_matrix(X)
        self._check_non_negative(M)
        xp = M.backend.xp
        H = M.backend.asarray(self.components_)
        n = M.shape[0]
        W = xp.full((n, self.n_components_), np.sqrt(max(float(to_host(M.colsums().sum())), 0) / (n * M.shape[1])))
        gram = H @ H.T
        numerator = M @ H.T  # the only product with X: every iteration below is n x r
        for _ in range(max(10 * self.max_iter, 1000)):
            denominator = W @ gram
            new = W * numerator / xp.where(denominator == 0, EPSILON, denominator)
            change = float(to_host(xp.abs(new - W).max()))
            W = new
            if change <= 1e-10 * max(float(to_host(xp.abs(W).max())), EPSILON):
                break
        return to_host(W)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        return tags
