"""ilargi_db inside DuckDB: the SQL functions, the model registry and models as SQL macros.

``connect`` and ``install`` need DuckDB only and load now (the function ``install`` bound over its module's
name); the registry's and the macro writer's names load on first use, as the package's own do: they bring the
training stack.
"""

from __future__ import annotations

import importlib
from typing import Any

from ilargi_db.sql_functions.install import connect, install

_LAZY = {
    "prediction_sql": "ilargi_db.sql_functions.macros",
    "ModelNotFoundError": "ilargi_db.sql_functions.registry",
    "drop_model": "ilargi_db.sql_functions.registry",
    "load_model": "ilargi_db.sql_functions.registry",
    "save_model": "ilargi_db.sql_functions.registry",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        try:  # a submodule, as `ilargi_db.sql_functions.registry` reads after a plain import of the package
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise  # the module exists but a dependency of it is missing: say so
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["connect", "install", *_LAZY]
