"""ilargi_db: train machine-learning models directly over joined DuckDB tables.

>>> import ilargi_db
>>> con = ilargi_db.connect()
"""

from ilargi_db.errors import BackendUnavailableError, IlargiError, NotFactorizableError, PlanError
from ilargi_db.estimator import explain
from ilargi_db.interruption import TrainingInterrupted, interrupt_training
from ilargi_db.linalg import Block, NormalizedMatrix
from ilargi_db.models import GaussianNMF, KMeans, LinearRegression, LogisticRegression
from ilargi_db.normalization import normalize
from ilargi_db.plan import build_join_graph
from ilargi_db.sql_functions import (
    ModelNotFoundError,
    connect,
    drop_model,
    install,
    load_model,
    prediction_sql,
    save_model,
)
from ilargi_db.training import evaluate, predict, train

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
    "GaussianNMF",
    "KMeans",
    "LinearRegression",
    "LogisticRegression",
    "evaluate",
    "explain",
    "predict",
    "train",
    "Block",
    "IlargiError",
    "NormalizedMatrix",
    "NotFactorizableError",
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
    "TrainingInterrupted",
]
