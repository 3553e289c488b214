"""Linear algebra over the normalized matrix, without materializing the join."""

from ilargi_db.linalg.normalized_matrix import Block, NormalizedMatrix

__all__ = ["Block", "NormalizedMatrix"]
