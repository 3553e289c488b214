"""Array backends (NumPy/SciPy on CPU, CuPy/cupyx on GPU) behind one namespace.

The backends' names are light to import (the models' catalog lists them as the choices of ``backend``);
the namespace, which imports NumPy and SciPy, loads on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

BACKENDS = ("auto", "numpy", "cupy")  # what a caller may ask for: "auto" takes CuPy where a GPU is usable

_LAZY = ("NUMPY", "Backend", "backend_of", "get_backend", "register_backend", "to_host")

__all__ = ["BACKENDS", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module("ilargi_db.backend.namespace"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ilargi_db.backend' has no attribute {name!r}")
