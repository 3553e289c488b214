"""Standardization as a pipeline step: a normalized matrix comes out as a standardized view, never built."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse

from ilargi_db.linalg import ScaledMatrix
from ilargi_db.models._base import IlargiError, SparseInputMixin, as_matrix, check_input, is_normalized, to_host
from ilargi_db.models.estimator import Estimator, OneToOneFeatureMixin, TransformerMixin, check_fitted


def _refuse_a_standardized(X: Any) -> None:
    if isinstance(X, ScaledMatrix):
        raise IlargiError("this matrix is standardized already: standardize the matrix it views (its .base).")


class StandardScaler(OneToOneFeatureMixin, TransformerMixin, SparseInputMixin, Estimator):
    """z = (x - mean) / std per column, as scikit-learn's ``StandardScaler``, factorized.

    On a normalized matrix, ``transform`` returns a :class:`~ilargi_db.linalg.ScaledMatrix` over it: the join
    stays factorized (centering a sparse or one-hot block would fill it), so a ``Pipeline`` of this scaler
    and an ilargi_db estimator searches over a join without building it. On an array it returns an array.
    A constant column keeps scale 1, as in scikit-learn.

    Parameters
    ----------
    with_mean : bool, default=True
        Subtract each column's mean.
    with_std : bool, default=True
        Divide each column by its standard deviation (the population one, as scikit-learn).

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,)
        What is subtracted (zeros with ``with_mean=False``).
    scale_ : ndarray of shape (n_features,)
        What is divided by (ones with ``with_std=False``).

    Examples
    --------
    >>> import numpy as np
    >>> StandardScaler().fit_transform(np.array([[0.0, 5.0], [2.0, 5.0]]))
    array([[-1.,  0.],
           [ 1.,  0.]])
    """

    _parameter_constraints: dict = {"with_mean": ["boolean"], "with_std": ["boolean"]}

    def __init__(self, with_mean: bool = True, with_std: bool = True):
        self.with_mean = with_mean
        self.with_std = with_std

    def fit(self, X: Any, y: Any = None) -> StandardScaler:
        """Learn each column's mean and standard deviation, factorized on a normalized matrix."""
        self._validate_params()
        (X,) = check_input(self, X, reset=True)
        _refuse_a_standardized(X)
        if X.shape[0] == 0:
            raise IlargiError("cannot standardize a matrix of 0 rows: select some rows first.")
        Z = ScaledMatrix.standardize(as_matrix(X))
        d = X.shape[1]
        self.mean_ = to_host(Z.mean) if self.with_mean else np.zeros(d)
        self.scale_ = to_host(Z.scale) if self.with_std else np.ones(d)
        return self

    def transform(self, X: Any) -> Any:
        """The standardized view of a normalized matrix, or the standardized array."""
        check_fitted(self)
        (X,) = check_input(self, X, reset=False)
        _refuse_a_standardized(X)
        if not is_normalized(X):
            if scipy.sparse.issparse(X) and not self.with_mean:  # wide one-hot rows stay sparse: scaled only
                return scipy.sparse.csr_matrix(X @ scipy.sparse.diags(1.0 / self.scale_))
            dense = X.toarray() if hasattr(X, "toarray") else X
            return (dense - self.mean_) / self.scale_
        M = as_matrix(X)
        return ScaledMatrix(M, M.backend.asarray(self.mean_), M.backend.asarray(self.scale_))
