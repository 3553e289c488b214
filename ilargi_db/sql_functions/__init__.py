"""ilargi_db inside DuckDB: the SQL functions, the model registry and models as SQL macros.

``connect`` and ``install`` need DuckDB only and load now (the function ``install`` bound over its module's
name); the registry's and the macro writer's names load on first use, as the package's own do: they bring the
training stack.
"""

from __future__ import annotations

from ilargi_db.lazy_names import lazy_names
from ilargi_db.sql_functions.install import connect, install

_LAZY = {
    "prediction_sql": "ilargi_db.sql_functions.macros",
    "ModelNotFoundError": "ilargi_db.sql_functions.registry",
    "drop_model": "ilargi_db.sql_functions.registry",
    "load_model": "ilargi_db.sql_functions.registry",
    "save_model": "ilargi_db.sql_functions.registry",
}


__getattr__ = lazy_names(globals(), _LAZY)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["connect", "install", *_LAZY]
