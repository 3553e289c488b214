"""Preprocessing between the metadata and the normalized matrix: feature kinds, encoding, imputation."""

from ilargi_db.preprocess.encoder import (
    ColumnSpec,
    FeatureEncoder,
    categorical_flags,
    is_categorical,
    is_numeric,
    mark_categorical_coalesce,
)

__all__ = [
    "ColumnSpec",
    "FeatureEncoder",
    "categorical_flags",
    "is_categorical",
    "is_numeric",
    "mark_categorical_coalesce",
]
