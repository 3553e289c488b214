"""ilargi_db: train machine-learning models directly over joined DuckDB tables.

>>> import ilargi_db
>>> con = ilargi_db.connect()
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from ilargi_db.lazy_names import lazy_names


def _public_names() -> dict[str, str]:
    """Each public name and the module it is loaded from, as ``__init__.pyi`` imports them (the one list)."""
    stub = ast.parse(Path(__file__).with_suffix(".pyi").read_text())
    return {
        alias.asname or alias.name: node.module
        for node in stub.body
        if isinstance(node, ast.ImportFrom) and node.module is not None
        for alias in node.names
    }


# The public API, loaded on first use: `import ilargi_db` (and `ilargi --help`) must not pay for
# scikit-learn, sqlglot, SciPy and numba before anything asks for them. The exceptions load now (light).
_PUBLIC = _public_names()
_EAGER = "ilargi_db.errors"
globals().update({name: getattr(importlib.import_module(_EAGER), name) for name, m in _PUBLIC.items() if m == _EAGER})
_LAZY = {name: module for name, module in _PUBLIC.items() if module != _EAGER}


__getattr__ = lazy_names(globals(), _LAZY)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = list(_PUBLIC)
