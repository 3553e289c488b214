"""``X @ W`` and ``W @ X`` from a matrix's two products, for the views built on normalized matrices."""

from __future__ import annotations

from typing import Any

from ilargi_db.errors import IlargiError

IMPLICIT_DENSE = (
    "this step needs a dense array, and a normalized matrix does not turn into one implicitly (that would build "
    "the join): give the matrix to an ilargi_db estimator or ilargi_db.models.StandardScaler, or build the "
    "dense join deliberately with X.materialize()."
)


def refuse_array(matrix: Any, dtype: Any = None, copy: Any = None) -> Any:
    """``np.asarray(X)`` of a normalized matrix: refused with the way out (NumPy would make a 0-d object array,
    and scikit-learn's checks would then speak of a "scalar array")."""
    raise IlargiError(IMPLICIT_DENSE)


class ProductOperators:
    """``@`` in both directions from ``_lmm`` (X W), ``_tmm`` (X^T V) and a ``_transposed`` flag.

    A class that computes those two products (row partitions, a standardized view) gets the operators
    the models use, on itself and on its ``.T``; ``W @ X`` is (X^T W^T)^T.
    """

    __array_ufunc__ = None  # NumPy defers to these operators
    __array__ = refuse_array

    def __matmul__(self, w: Any) -> Any:
        """``X @ W``, or ``X.T @ V`` on a transposed view."""
        return self._tmm(w) if self._transposed else self._lmm(w)

    def __rmatmul__(self, w: Any) -> Any:
        """``W @ X`` = (X^T W^T)^T."""
        w = self.backend.asarray(w, dtype=self.dtype)
        if self._transposed:
            return self._lmm(w) if w.ndim == 1 else self._lmm(w.T).T
        return self._tmm(w) if w.ndim == 1 else self._tmm(w.T).T


__all__ = ["IMPLICIT_DENSE", "ProductOperators", "refuse_array"]
