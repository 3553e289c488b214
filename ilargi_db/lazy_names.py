"""A package's names loaded on first use (PEP 562): what keeps ``import ilargi_db`` and ``ilargi_db.connect()``
from importing scikit-learn, SciPy, pandas and numba before a training asks for them.

>>> import types
>>> package = types.ModuleType("demo")
>>> package.__getattr__ = lazy_names(package.__dict__, {"sqrt": "math"})
>>> package.sqrt(4.0)
2.0
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(namespace: dict[str, Any], names: dict[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of the package whose globals are ``namespace``: each of ``names`` (name -> the module
    defining it) imported on its first use and kept; any other name a submodule of the package, imported then."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            try:  # a submodule, as `ilargi_db.pipeline` reads after a plain `import ilargi_db`
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as err:
                if err.name != f"{package}.{name}":
                    raise  # the module exists but a dependency of it is missing: say so
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups skip this function
        return value

    return __getattr__


__all__ = ["lazy_names"]
