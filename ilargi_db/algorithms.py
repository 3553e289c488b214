"""The algorithms ilargi_db trains: their names (light, so the command line lists them without loading the
models), their estimator classes and checked estimators (the models load on first use)."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from ilargi_db.errors import CALLER, IlargiError

SUPERVISED = ("linear_regression", "logistic_regression")
UNSUPERVISED = ("kmeans", "gnmf")
NAMES = SUPERVISED + UNSUPERVISED
_CLASSES = {
    "linear_regression": "LinearRegression",
    "logistic_regression": "LogisticRegression",
    "kmeans": "KMeans",
    "gnmf": "GaussianNMF",
}


def check_algorithm(algorithm: Any) -> str:
    """``algorithm`` if ilargi_db knows it, else an error naming the choices."""
    if not isinstance(algorithm, str) or algorithm not in NAMES:
        raise IlargiError(f"unknown algorithm {algorithm!r}: choose one of {', '.join(NAMES)}.")
    return algorithm


def estimator_class(algorithm: str) -> type:
    """The scikit-learn-style estimator class of ``algorithm``."""
    return getattr(importlib.import_module("ilargi_db.models"), _CLASSES[check_algorithm(algorithm)])


TRAIN_SETTINGS = ("strategy", "backend", "standardize", "impute")  # what train() takes besides the parameters


def check_known_settings(algorithm: str, names: Any, extra: tuple[str, ...] = TRAIN_SETTINGS) -> None:
    """Refuse setting names ``algorithm``'s estimator and ``train`` do not know, listing those they do.

    Worded for the caller: keyword parameters in Python, options in SQL and on the command line.
    """
    params = list(inspect.signature(estimator_class(algorithm)).parameters)
    unknown = sorted(set(names) - set(params) - set(extra))
    if not unknown:
        return
    if CALLER.get() == "python":
        raise IlargiError(
            f"unknown parameter(s) {', '.join(unknown)} for {algorithm}: its parameters are {', '.join(params)}, "
            f"and train() also takes {', '.join(TRAIN_SETTINGS[:-1])} and {TRAIN_SETTINGS[-1]}."
        )
    raise IlargiError(
        f"unknown option(s) {', '.join(map(repr, unknown))} for {algorithm}: the options are "
        f"{', '.join(params + list(extra))}."
    )


def make_estimator(algorithm: str, params: dict) -> Any:
    """The estimator with ``params``, checked before any data is read (unknown names, JSON-ish types, values)."""
    from ilargi_db.parameters import check_python_types

    cls = estimator_class(algorithm)
    check_known_settings(algorithm, params, extra=())
    check_python_types(algorithm, cls, params)  # scikit-learn would read True as 1
    estimator = cls(**params)
    estimator._validate_params()  # bad values fail here, with scikit-learn's message
    return estimator
