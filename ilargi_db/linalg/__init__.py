"""Linear algebra over the normalized matrix, without materializing the join."""

from ilargi_db.linalg.dense_solve import normal_equations_solver, solve_normal_equations
from ilargi_db.linalg.normalized_matrix import COLSUMS, CROSSPROD, MEMOIZED_SUMS, Block, NormalizedMatrix
from ilargi_db.linalg.operands import MatrixLike, as_matrix, is_normalized
from ilargi_db.linalg.partitioned_matrix import PartitionedMatrix
from ilargi_db.linalg.partitions import Partitions, PartitionSource, ResidentPartitions
from ilargi_db.linalg.scaled_matrix import ScaledMatrix

__all__ = [
    "COLSUMS",
    "CROSSPROD",
    "MEMOIZED_SUMS",
    "Block",
    "MatrixLike",
    "NormalizedMatrix",
    "PartitionSource",
    "PartitionedMatrix",
    "Partitions",
    "ResidentPartitions",
    "ScaledMatrix",
    "as_matrix",
    "is_normalized",
    "normal_equations_solver",
    "solve_normal_equations",
]
