"""Warm starts, store side: the models fitted on a job's rows, kept in process, and the best start for a
new fit among them.

Which fits may take a start is the training's policy; this module only remembers fits and finds one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ilargi_db.reuse.fingerprint import digest
from ilargi_db.reuse.store import MEMORY, Artifact, nbytes_of

FITS_KEPT = 8  # per algorithm and rows: the last fits, the starts a later job may take


def fits_key(rows_key: str, algorithm: str, scaled: bool) -> str:
    """The key of the fits of ``algorithm`` (on standardized columns or not) on the rows of ``rows_key``."""
    return digest("fits", rows_key, algorithm, scaled)


def record_fit(
    key: str, database: str, algorithm: str, names: list[str], coef: Any, intercept: float, loss: float
) -> None:
    """Remember a fitted model under ``key`` (a job of ``database`` made it) for later warm starts."""
    held = MEMORY.items.get(key)
    fits = list(held.value["fits"]) if held is not None else []
    fits = [
        *fits,
        {"names": list(names), "coef": np.asarray(coef, dtype=float).copy(), "intercept": intercept, "loss": loss},
    ][-FITS_KEPT:]
    value = {"fits": fits}
    MEMORY.put(
        Artifact(key, "model", f"earlier {algorithm} models", value, nbytes_of([f["coef"] for f in fits]), 0.0),
        database,
    )


def warm_start(key: str, algorithm: str, names: list[str]) -> tuple[np.ndarray, float, str] | None:
    """The best fit under ``key`` whose columns a model of columns ``names`` has too.

    Best: the most columns in common, then the lowest training loss. Its coefficients go to the
    columns of the same name, zeros elsewhere. Returns (coefficients, intercept, what in words).
    """
    found = MEMORY.items.get(key)
    if found is None:
        return None
    position = {name: j for j, name in enumerate(names)}
    usable = [f for f in found.value["fits"] if set(f["names"]) <= position.keys()]
    if not usable:
        return None
    best = max(usable, key=lambda f: (len(f["names"]), -f["loss"]))
    coef = np.zeros(len(names))
    coef[[position[name] for name in best["names"]]] = best["coef"]
    same = "the same" if len(best["names"]) == len(names) else f"{len(best['names'])} of these {len(names)}"
    what = f"a warm start from an earlier {algorithm} on the same rows ({same} columns)"
    return coef, float(best["intercept"]), what


__all__ = ["FITS_KEPT", "fits_key", "record_fit", "warm_start"]
