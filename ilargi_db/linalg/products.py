"""``X @ W`` and ``W @ X`` from a matrix's two products, for the views built on normalized matrices."""

from __future__ import annotations

from typing import Any


class ProductOperators:
    """``@`` in both directions from ``_lmm`` (X W), ``_tmm`` (X^T V) and a ``_transposed`` flag.

    A class that computes those two products (row partitions, a standardized view) gets the operators
    the models use, on itself and on its ``.T``; ``W @ X`` is (X^T W^T)^T.
    """

    __array_ufunc__ = None  # NumPy defers to these operators

    def __matmul__(self, w: Any) -> Any:
        """``X @ W``, or ``X.T @ V`` on a transposed view."""
        return self._tmm(w) if self._transposed else self._lmm(w)

    def __rmatmul__(self, w: Any) -> Any:
        """``W @ X`` = (X^T W^T)^T."""
        w = self.backend.asarray(w, dtype=self.dtype)
        if self._transposed:
            return self._lmm(w) if w.ndim == 1 else self._lmm(w.T).T
        return self._tmm(w) if w.ndim == 1 else self._tmm(w.T).T


__all__ = ["ProductOperators"]
