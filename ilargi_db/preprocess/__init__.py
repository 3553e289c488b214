"""Preprocessing between the metadata and the normalized matrix: encoding, imputation."""

from ilargi_db.preprocess.encoder import ColumnSpec, FeatureEncoder, is_categorical

__all__ = ["ColumnSpec", "FeatureEncoder", "is_categorical"]
