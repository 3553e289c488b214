"""Estimators that train on a normalized matrix (factorized) or on any array, scikit-learn style.

The estimators load on first use (they import scikit-learn); :mod:`ilargi_db.models.catalog`, the table
of the algorithms and their facts, is light.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "DivergenceError": "_base",
    "GaussianNMF": "_nmf",
    "GradientBoosting": "_boosting",
    "GradientBoostingClassifier": "_boosting",
    "GradientBoostingRegressor": "_boosting",
    "KMeans": "_kmeans",
    "LinearRegression": "_linear",
    "LinearSVC": "_svm",
    "LogisticRegression": "_linear",
    "NORMAL_MAX_COLUMNS": "_linear",
    "RandomForest": "_forest",
    "RandomForestClassifier": "_forest",
    "RandomForestRegressor": "_forest",
    "StandardScaler": "_scaler",
}

__all__ = [
    "MAX_GRAM_BYTES",
    "NORMAL_MAX_COLUMNS",
    "DivergenceError",
    "GaussianNMF",
    "GradientBoosting",
    "GradientBoostingClassifier",
    "GradientBoostingRegressor",
    "KMeans",
    "LinearRegression",
    "LinearSVC",
    "LogisticRegression",
    "RandomForest",
    "RandomForestClassifier",
    "RandomForestRegressor",
    "StandardScaler",
]

from ilargi_db.models.catalog import MAX_GRAM_BYTES  # noqa: E402


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"ilargi_db.models.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ilargi_db.models' has no attribute {name!r}")
