"""Gradient-boosted trees: the estimators' conventions, parameters refused in words, missing values, both
strategies growing identical trees over random joins, and held-out quality against LightGBM and
scikit-learn's HistGradientBoosting on the materialized join."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.utils.estimator_checks import parametrize_with_checks

import ilargi_db
from ilargi_db import GradientBoostingClassifier, GradientBoostingRegressor, IlargiError

# -- scikit-learn's conventions ---------------------------------------------------------------------------


@parametrize_with_checks([GradientBoostingRegressor(n_estimators=10), GradientBoostingClassifier(n_estimators=10)])
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
