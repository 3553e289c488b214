"""Columns on scales far apart: what k-means is told when it trains on them as they are."""

from __future__ import annotations

from typing import Any

import numpy as np

from ilargi_db.backend import to_host
from ilargi_db.errors import spell

# Standard deviations this many times apart: the widest columns decide every distance.
SCALE_RATIO_WARNING = 1e3
# The scale a one-hot column is compared at: an indicator's largest standard deviation. Its own would flag a
# rare category (p = 1e-6 has 1e-3) as a column to scale up, where standardizing it would make its rows outliers.
INDICATOR_SPREAD = 0.5


def column_spreads(X: Any) -> np.ndarray:
    """Each column's standard deviation, from factorized column sums (one pass, the join never built)."""
    n = max(X.shape[0], 1)
    mean = to_host(X.colsums()) / n
    second = to_host((X**2).colsums()) / n
    return np.sqrt(np.maximum(second - mean**2, 0.0))


def scale_warning(X: Any, numeric: np.ndarray, what: str) -> str | None:
    """A warning naming the widest and narrowest columns when their spreads differ by more than
    :data:`SCALE_RATIO_WARNING`, None otherwise. ``numeric`` marks the numeric columns (the others are one-hot:
    compared at :data:`INDICATOR_SPREAD`); constant columns are left out. ``what`` names the model."""
    spreads = np.where(numeric, column_spreads(X), INDICATOR_SPREAD)
    varying = np.flatnonzero(spreads > 0)
    if len(varying) < 2:
        return None
    wide, narrow = varying[np.argmax(spreads[varying])], varying[np.argmin(spreads[varying])]
    ratio = spreads[wide] / spreads[narrow]
    if ratio <= SCALE_RATIO_WARNING:
        return None
    names = X.feature_names
    narrowest = (
        f"{spreads[narrow]:.3g} for {names[narrow]!r}"
        if numeric[narrow]
        else f"at most {INDICATOR_SPREAD} for one-hot columns"
    )
    return (
        f"{what}: the columns' scales differ {ratio:.3g}-fold (standard deviation {spreads[wide]:.3g} for "
        f"{names[wide]!r}, {narrowest}), so the widest columns decide the distances: train with "
        f"{spell('standardize', True)}, or scale the columns in the query."
    )


def numeric_columns(encoder: Any, n_columns: int) -> np.ndarray:
    """Which of the encoded columns hold a numeric feature (the rest are one-hot indicators)."""
    numeric = np.zeros(n_columns, dtype=bool)
    for j, spec in enumerate(encoder.specs_):
        if spec.kind == "numeric":
            numeric[int(encoder.offsets_[j])] = True
    return numeric
