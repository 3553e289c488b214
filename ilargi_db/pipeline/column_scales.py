"""Columns on scales far apart: what k-means is told when it trains on them as they are."""

from __future__ import annotations

from typing import Any

import numpy as np

from ilargi_db.backend import to_host
from ilargi_db.errors import spell

# Standard deviations this many times apart: the widest columns decide every distance.
SCALE_RATIO_WARNING = 1e3


def column_spreads(X: Any) -> np.ndarray:
    """Each column's standard deviation, from factorized column sums (one pass, the join never built)."""
    n = max(X.shape[0], 1)
    mean = to_host(X.colsums()) / n
    second = to_host((X**2).colsums()) / n
    return np.sqrt(np.maximum(second - mean**2, 0.0))


def scale_warning(X: Any, what: str) -> str | None:
    """A warning naming the widest and narrowest columns when their spreads differ by more than
    :data:`SCALE_RATIO_WARNING` (constant columns left out), None otherwise. ``what`` names the model."""
    spreads = column_spreads(X)
    varying = np.flatnonzero(spreads > 0)
    if len(varying) < 2:
        return None
    wide, narrow = varying[np.argmax(spreads[varying])], varying[np.argmin(spreads[varying])]
    ratio = spreads[wide] / spreads[narrow]
    if ratio <= SCALE_RATIO_WARNING:
        return None
    names = X.feature_names
    return (
        f"{what}: the columns' scales differ {ratio:.3g}-fold (standard deviation {spreads[wide]:.3g} for "
        f"{names[wide]!r}, {spreads[narrow]:.3g} for {names[narrow]!r}), so the widest columns decide the "
        f"distances: train with {spell('standardize', True)}, or scale the columns in the query."
    )
