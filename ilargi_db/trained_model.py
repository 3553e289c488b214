"""What ``train`` returns: one object with the fitted estimator, its encoder and where it came from.

``predict``, ``evaluate``, the registry (``save_model`` / ``load_model``) and the SQL macros all read a
:class:`TrainedModel`. Its provenance keeps the attribute names users know (``strategy_``,
``decision_``, ``timings_``, ``plan_``, ...), and anything else (``coef_``, ``n_iter_``, ``predict``,
``get_params``) is the fitted scikit-learn-style estimator's, so the estimator is never dressed up with
provenance of ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ilargi_db.errors import IlargiError


@dataclass(repr=False, eq=False)
class TrainedModel:
    """A model trained by ilargi_db: the estimator, the encoder, and the job that made it.

    Setting an attribute the estimator has (``model.coef_ = ...``) sets it on the estimator, so ``predict``
    and ``save_model`` see the same values; ``fit`` is refused (train again instead).

    Attributes
    ----------
    estimator_ : estimator
        The fitted estimator (``ilargi_db.LinearRegression``, ...); its attributes and methods are also
        reachable on this object (``model.coef_``, ``model.predict(X)``).
    encoder_ : FeatureEncoder
        Turns the query's columns into the model's columns (one-hot, imputation), as in training.
    algorithm_, query_, target_ : str
        What was trained, on which query, for which label column (None when unsupervised).
    strategy_, decision_, plan_, explanation_
        How it trained (factorized or materialized), why, the physical plan that ran (a dict), and the
        cost model's explanation (None when the caller chose the strategy, or after ``load_model``).
    timings_, training_metrics_, n_rows_, unlabelled_rows_
        Seconds per stage, the cheap metrics on the training rows, rows trained on, rows left out
        because their target was NULL.
    reused_ : list of str
        The artifacts of earlier jobs this training used (see :mod:`ilargi_db.reuse`), in words.
    streamed_ : dict or None
        How the training data was streamed (memory budget, bytes needed, partitions), None when it was held.
    name_, version_, macros_
        Set once the model is stored in the registry.
    """

    estimator_: Any
    encoder_: Any
    algorithm_: str
    query_: str
    target_: str | None
    target_type_: str | None = None  # the target's DuckDB type: classes come back typed like it
    feature_types_: list[str] = field(default_factory=list)
    standardize_: bool = False
    strategy_: str = ""
    decision_: str = ""
    plan_: dict | None = None
    explanation_: Any = None
    timings_: dict = field(default_factory=dict)
    training_metrics_: dict = field(default_factory=dict)
    n_rows_: int = 0
    unlabelled_rows_: int = 0
    warnings_: list[str] = field(default_factory=list)  # what the training warned of (convergence, the store)
    reused_: list[str] = field(default_factory=list)  # artifacts of earlier jobs this training used
    streamed_: dict | None = None  # how the data was streamed (budget, partitions), None when held in memory
    name_: str | None = None
    version_: int | None = None
    macros_: list[str] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        # Only called for names this object does not have: the estimator's (coef_, predict, ...).
        if name.startswith("__") or name == "estimator_":
            raise AttributeError(name)
        return getattr(self.estimator_, name)

    def __setattr__(self, name: str, value: Any) -> None:
        # A name of the estimator's (model.coef_ = ...) is set on the estimator, which predicts and is stored.
        if name in _FIELDS or "estimator_" not in self.__dict__:
            object.__setattr__(self, name, value)
        else:
            setattr(self.estimator_, name, value)

    def fit(self, *args: Any, **kwargs: Any) -> None:
        raise IlargiError(
            "a trained model is not refitted in place (its encoder, plan and metrics describe its training): "
            "train again with ilargi_db.train(...), or fit model.estimator_ on arrays."
        )

    partial_fit = fit_transform = set_params = fit

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(self.estimator_)))

    def __repr__(self) -> str:
        stored = f" {self.name_} v{self.version_}," if self.name_ else ""
        metrics = ", ".join(f"{k} {v:.4g}" for k, v in self.training_metrics_.items())
        return (
            f"<TrainedModel{stored} {self.algorithm_}, {self.strategy_}, {self.n_rows_:,} rows, "
            f"{len(self.encoder_.feature_names_out_):,} columns{': ' + metrics if metrics else ''}>"
        )


_FIELDS = frozenset(f.name for f in fields(TrainedModel))
