"""A standardized view (X - 1 mu^T) diag(1/sigma) of a normalized matrix, never built."""

from __future__ import annotations

from typing import Any

from ilargi_db.errors import IlargiError
from ilargi_db.linalg.normalized_matrix import NormalizedMatrix
from ilargi_db.linalg.products import ProductOperators
from ilargi_db.linalg.row_selection import ROWS_OF_A_TRANSPOSE, row_positions


def _on_scaled(X: Any, rows: tuple, packed: tuple) -> tuple:
    """``fn`` on a part of the base, standardized as the whole is (module-level: a cluster ships it)."""
    fn, mean, scale, args = packed
    return fn(ScaledMatrix(X, mean, scale), rows, args)


class ScaledMatrix(ProductOperators):
    """Z = (X - 1 mu^T) diag(1/sigma): the operators models need, rewritten onto X.

    Z w = X (w/sigma) - 1 (mu . w/sigma); Z^T v = (X^T v - mu sum(v)) / sigma.
    Centering would make every sparse or empty cell non-zero; this view keeps
    X factorized and sparse.
    """

    def __init__(self, base: NormalizedMatrix, mean: Any, scale: Any):
        self.base = base
        xp = base.backend.xp
        self.mean = xp.asarray(mean, dtype=base.dtype)
        self.scale = xp.asarray(scale, dtype=base.dtype)
        self._transposed = False

    @classmethod
    def standardize(cls, X: NormalizedMatrix, center: bool = True) -> ScaledMatrix:
        """Scale every column to mean 0 and variance 1; without ``center``, to mean square 1.

        E[x^2] - E[x]^2 loses about sqrt(eps) * |mean| to rounding, so a column whose
        spread is below that is treated as constant (scale 1), not blown up.
        """
        xp = X.backend.xp
        n = X.shape[0]
        mean = X.colsums() / n
        second = (X**2).colsums() / n
        spread = xp.sqrt(xp.maximum(second - mean**2, 0)) if center else xp.sqrt(second)
        floor = 1e-7 * xp.maximum(xp.abs(mean), 1)
        scale = xp.where(spread > floor, spread, 1.0)
        return cls(X, mean if center else xp.zeros_like(mean), scale)

    @property
    def backend(self):
        return self.base.backend

    @property
    def dtype(self):
        return self.base.dtype

    @property
    def feature_names(self) -> list[str]:
        return self.base.feature_names

    @property
    def shape(self) -> tuple[int, int]:
        n, d = self.base.shape
        return (d, n) if self._transposed else (n, d)

    @property
    def T(self) -> ScaledMatrix:
        new = ScaledMatrix(self.base, self.mean, self.scale)
        new._transposed = not self._transposed
        return new

    def _lmm(self, w: Any) -> Any:
        w = self.backend.asarray(w, dtype=self.dtype)
        ws = w / (self.scale if w.ndim == 1 else self.scale[:, None])
        return self.base @ ws - (self.mean @ ws)

    def _tmm(self, v: Any) -> Any:
        v = self.backend.asarray(v, dtype=self.dtype)
        raw = self.base.T @ v
        if v.ndim == 1:
            return (raw - self.mean * v.sum()) / self.scale
        return (raw - self.mean[:, None] * v.sum(axis=0)[None, :]) / self.scale[:, None]

    def crossprod(self, weights: Any = None) -> Any:
        """Z^T D Z from X^T D X, X^T d and sum(d)."""
        xp = self.backend.xp
        n = self.base.shape[0]
        d = xp.ones(n, dtype=self.dtype) if weights is None else self.backend.asarray(weights, dtype=self.dtype)
        g = self.base.crossprod(weights)
        s = self.base.T @ d
        g = g - xp.outer(s, self.mean) - xp.outer(self.mean, s) + d.sum() * xp.outer(self.mean, self.mean)
        return g / xp.outer(self.scale, self.scale)

    def colsums(self) -> Any:
        return self._tmm(self.backend.xp.ones(self.base.shape[0], dtype=self.dtype))

    def rowsums(self) -> Any:
        return self._lmm(self.backend.xp.ones(self.base.shape[1], dtype=self.dtype))

    def group_sums(self, labels: Any, n_groups: int) -> Any:
        """Z^T L = (X^T L - mu counts^T) / sigma."""
        xp = self.backend.xp
        counts = xp.bincount(xp.asarray(labels), minlength=n_groups).astype(self.dtype)
        return (self.base.group_sums(labels, n_groups) - xp.outer(self.mean, counts)) / self.scale[:, None]

    def nearest(self, W: Any, offsets: Any) -> tuple[Any, Any]:
        """Row-wise argmin and min of Z W + offsets: X (W / sigma) + (offsets - mu . W / sigma)."""
        W = self.backend.asarray(W, dtype=self.dtype)
        scaled = W / self.scale[:, None]
        return self.base.nearest(scaled, self.backend.asarray(offsets, dtype=self.dtype) - self.mean @ scaled)

    def keep_rows(self, v: Any) -> Any:
        return self.base.keep_rows(v)

    def reduce_rows(self, fn: Any, rows: Any = (), args: Any = ()) -> tuple:
        """The base's :meth:`~NormalizedMatrix.reduce_rows`, ``fn`` seeing each part standardized the same way."""
        return self.base.reduce_rows(_on_scaled, rows, (fn, self.mean, self.scale, tuple(args)))

    def rows(self, indices: Any) -> Any:
        return (self.base.rows(indices) - self.mean) / self.scale

    def take_rows(self, indices: Any) -> ScaledMatrix:
        """The selected rows, standardized as the whole matrix is (the same mean and scale)."""
        if self._transposed:
            raise IlargiError(ROWS_OF_A_TRANSPOSE)
        return ScaledMatrix(self.base.take_rows(indices), self.mean, self.scale)

    def __getitem__(self, rows: Any) -> Any:
        """``X[rows]`` as on the base (see :meth:`NormalizedMatrix.__getitem__`), standardized the same way."""
        if self._transposed:
            raise IlargiError(ROWS_OF_A_TRANSPOSE)
        position = row_positions(rows, self.shape[0])
        return self.rows([position])[0] if isinstance(position, int) else self.take_rows(position)

    def column_norms_squared(self) -> Any:
        """||z_j||^2 = (sum_i x_ij^2 - 2 mu_j sum_i x_ij + n mu_j^2) / sigma_j^2: the diagonal of Z^T Z."""
        n = self.base.shape[0]
        raw = self.base.column_norms_squared() - 2 * self.mean * self.base.colsums() + n * self.mean**2
        return raw / self.scale**2

    def row_norms_squared(self) -> Any:
        """||z_i||^2 = sum_j (x_ij^2 - 2 x_ij mu_j + mu_j^2) / sigma_j^2."""
        inv2 = 1.0 / self.scale**2
        return (self.base**2) @ inv2 - 2 * (self.base @ (self.mean * inv2)) + float((self.mean**2 * inv2).sum())

    def materialize(self) -> Any:
        out = (self.base.materialize() - self.mean) / self.scale
        return out.T if self._transposed else out
