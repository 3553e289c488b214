"""Estimators that train on a normalized matrix (factorized) or on any array, scikit-learn style."""

from ilargi_db.models._base import DivergenceError
from ilargi_db.models._kmeans import KMeans
from ilargi_db.models._linear import MAX_GRAM_BYTES, LinearRegression, LogisticRegression
from ilargi_db.models._nmf import GaussianNMF

__all__ = ["MAX_GRAM_BYTES", "DivergenceError", "GaussianNMF", "KMeans", "LinearRegression", "LogisticRegression"]
