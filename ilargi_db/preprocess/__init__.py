"""Preprocessing between the metadata and the normalized matrix: encoding and imputation.

Feature types are the planner's (:mod:`ilargi_db.plan.feature_types`).
"""

from ilargi_db.preprocess.encoder import ColumnSpec, FeatureEncoder
from ilargi_db.preprocess.fact_partition import PartitionBuilder

__all__ = ["ColumnSpec", "FeatureEncoder", "PartitionBuilder"]
