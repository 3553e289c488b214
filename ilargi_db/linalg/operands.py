"""What the algorithms accept as a matrix: a normalized matrix in any of its forms, or a plain array."""

from __future__ import annotations

from typing import Any

import numpy as np

from ilargi_db.backend import backend_of
from ilargi_db.linalg.normalized_matrix import Block, NormalizedMatrix
from ilargi_db.linalg.partitioned_matrix import PartitionedMatrix
from ilargi_db.linalg.scaled_matrix import ScaledMatrix

MatrixLike = NormalizedMatrix | PartitionedMatrix | ScaledMatrix


def is_normalized(X: Any) -> bool:
    """Whether ``X`` is one of this package's matrices (the operators and ``reduce_rows``), not an array."""
    return isinstance(X, (NormalizedMatrix, PartitionedMatrix, ScaledMatrix))


def as_matrix(X: Any) -> MatrixLike:
    """A normalized matrix as given, or a plain array/sparse matrix as a one-block normalized matrix.

    Every algorithm then runs one code path, factorized or not.
    """
    if is_normalized(X):
        return X
    n, d = X.shape
    return NormalizedMatrix([Block(X, columns=np.arange(d))], n_rows=n, backend=backend_of(X))


__all__ = ["MatrixLike", "as_matrix", "is_normalized"]
