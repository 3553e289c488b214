"""ilargi_db: train machine-learning models directly over joined DuckDB tables.

>>> import ilargi_db
>>> con = ilargi_db.connect()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ilargi_db.errors import (
    BackendUnavailableError,
    DamagedModelError,
    DivergenceError,
    ForeignRegistryError,
    IlargiError,
    ModelNotFoundError,
    NotFactorizableError,
    NotStreamable,
    PlanError,
    TrainingInterrupted,
)

# The public API, loaded on first use: `import ilargi_db` (and `ilargi --help`) must not pay for
# scikit-learn, sqlglot, SciPy and numba before anything asks for them.
_LAZY = {
    "explain": "ilargi_db.pipeline",
    "artifacts": "ilargi_db.reuse",
    "clear_artifacts": "ilargi_db.reuse",
    "set_artifact_budget": "ilargi_db.reuse",
    "register_cluster": "ilargi_db.cluster",
    "registered_clusters": "ilargi_db.cluster",
    "unregister_cluster": "ilargi_db.cluster",
    "interrupt_training": "ilargi_db.interruption",
    "Block": "ilargi_db.linalg",
    "NormalizedMatrix": "ilargi_db.linalg",
    "GaussianNMF": "ilargi_db.models",
    "KMeans": "ilargi_db.models",
    "LinearRegression": "ilargi_db.models",
    "LogisticRegression": "ilargi_db.models",
    "normalize": "ilargi_db.normalization",
    "build_join_graph": "ilargi_db.plan",
    "connect": "ilargi_db.sql_functions",
    "drop_model": "ilargi_db.sql_functions",
    "install": "ilargi_db.sql_functions",
    "load_model": "ilargi_db.sql_functions",
    "prediction_sql": "ilargi_db.sql_functions",
    "save_model": "ilargi_db.sql_functions",
    "TrainedModel": "ilargi_db.trained_model",
    "evaluate": "ilargi_db.pipeline",
    "predict": "ilargi_db.pipeline",
    "train": "ilargi_db.pipeline",
    "train_batch": "ilargi_db.pipeline",
}

if TYPE_CHECKING:  # what type checkers and IDEs see
    from ilargi_db.cluster import register_cluster, registered_clusters, unregister_cluster
    from ilargi_db.interruption import interrupt_training
    from ilargi_db.linalg import Block, NormalizedMatrix
    from ilargi_db.models import GaussianNMF, KMeans, LinearRegression, LogisticRegression
    from ilargi_db.normalization import normalize
    from ilargi_db.pipeline import evaluate, explain, predict, train, train_batch
    from ilargi_db.plan import build_join_graph
    from ilargi_db.reuse import artifacts, clear_artifacts, set_artifact_budget
    from ilargi_db.sql_functions import (
        connect,
        drop_model,
        install,
        load_model,
        prediction_sql,
        save_model,
    )
    from ilargi_db.trained_model import TrainedModel


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        try:  # a subpackage or module, as `ilargi_db.pipeline` reads after a plain `import ilargi_db`
            return importlib.import_module(f"ilargi_db.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"ilargi_db.{name}":
                raise  # the module exists but a dependency of it is missing: say so
            raise AttributeError(f"module 'ilargi_db' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
    "artifacts",
    "clear_artifacts",
    "set_artifact_budget",
    "register_cluster",
    "registered_clusters",
    "unregister_cluster",
    "GaussianNMF",
    "KMeans",
    "LinearRegression",
    "LogisticRegression",
    "evaluate",
    "explain",
    "predict",
    "train",
    "train_batch",
    "Block",
    "IlargiError",
    "NormalizedMatrix",
    "NotFactorizableError",
    "NotStreamable",
    "DamagedModelError",
    "DivergenceError",
    "ForeignRegistryError",
    "PlanError",
    "build_join_graph",
    "connect",
    "drop_model",
    "load_model",
    "ModelNotFoundError",
    "prediction_sql",
    "save_model",
    "install",
    "interrupt_training",
    "normalize",
    "TrainedModel",
    "TrainingInterrupted",
]
