# The public API as type checkers and IDEs see it. ilargi_db/__init__.py reads the lazily loaded names and
# their modules from these imports (the one list of them): add a public name here, nowhere else
# (`name as name`: the re-export type checkers read).
# ruff: noqa: I001  (grouped per module: isort would give every `as` re-export an import line of its own)
from ilargi_db.backend.compiled import warm_up as warm_up
from ilargi_db.cluster import (
    register_cluster as register_cluster,
    registered_clusters as registered_clusters,
    unregister_cluster as unregister_cluster,
)
from ilargi_db.errors import (
    BackendUnavailableError as BackendUnavailableError,
    ConvergenceWarning as ConvergenceWarning,
    InvalidParameterError as InvalidParameterError,
    NotFittedError as NotFittedError,
    DamagedModelError as DamagedModelError,
    DivergenceError as DivergenceError,
    ForeignRegistryError as ForeignRegistryError,
    IlargiError as IlargiError,
    ModelNotFoundError as ModelNotFoundError,
    NotFactorizableError as NotFactorizableError,
    NotStreamable as NotStreamable,
    PlanError as PlanError,
    TrainingInterrupted as TrainingInterrupted,
)
from ilargi_db.interruption import interrupt_training as interrupt_training
from ilargi_db.linalg import Block as Block, NormalizedMatrix as NormalizedMatrix
from ilargi_db.models import (
    GaussianNMF as GaussianNMF,
    GradientBoostingClassifier as GradientBoostingClassifier,
    GradientBoostingRegressor as GradientBoostingRegressor,
    KMeans as KMeans,
    LinearRegression as LinearRegression,
    LinearSVC as LinearSVC,
    LogisticRegression as LogisticRegression,
    RandomForestClassifier as RandomForestClassifier,
    RandomForestRegressor as RandomForestRegressor,
)
from ilargi_db.models.options_reference import options as options
from ilargi_db.model_selection import cross_validate as cross_validate
from ilargi_db.normalization import normalize as normalize
from ilargi_db.pipeline import (
    evaluate as evaluate,
    explain as explain,
    predict as predict,
    predict_proba as predict_proba,
    train as train,
    train_batch as train_batch,
)
from ilargi_db.plan import build_join_graph as build_join_graph
from ilargi_db.reuse import (
    artifacts as artifacts,
    clear_artifacts as clear_artifacts,
    set_artifact_budget as set_artifact_budget,
)
from ilargi_db.sql_functions import (
    connect as connect,
    drop_model as drop_model,
    install as install,
    load_model as load_model,
    prediction_sql as prediction_sql,
    save_model as save_model,
)
from ilargi_db.trained_model import GroupedModel as GroupedModel
from ilargi_db.trained_model import TrainedModel as TrainedModel

__version__: str
