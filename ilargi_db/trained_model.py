"""What ``train`` returns: one object with the fitted estimator, its encoder and where it came from.

``predict``, ``evaluate``, the registry (``save_model`` / ``load_model``) and the SQL macros all read a
:class:`TrainedModel`. Its provenance keeps the attribute names users know (``strategy_``,
``decision_``, ``timings_``, ``plan_``, ...), and anything else (``coef_``, ``n_iter_``, ``predict``,
``get_params``) is the fitted scikit-learn-style estimator's, so the estimator is never dressed up with
provenance of ours.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ilargi_db.errors import DamagedModelError, IlargiError
from ilargi_db.linalg.feature_bins import MAX_BINS
from ilargi_db.metadata.di_metadata import group_order
from ilargi_db.metadata.target_labels import target_labels
from ilargi_db.models.catalog import Rows, algorithm_facts, estimator_class
from ilargi_db.models.losses import LOSSES
from ilargi_db.models.tree_ensemble import TreeEnsemble
from ilargi_db.plan import ScoringQuery, split_kept_columns
from ilargi_db.preprocess import FeatureEncoder
from ilargi_db.preprocess.binning import FeatureBinner

# A file TrainedModel.save writes: {"format": FILE_FORMAT, "version": FILE_VERSION, "record": <to_record()>}.
FILE_FORMAT = "ilargi_db model"
FILE_VERSION = 1
# The record's columns that hold JSON text (ilargi.models in sql_functions/registry.sql).
JSON_COLUMNS = ("features", "preprocessing", "parameters", "model", "metrics", "timings")
# What a record is refused for when it is read back (a row edited by hand, a file from elsewhere).
DAMAGE = (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError)


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
    encoder_ : FeatureEncoder or FeatureBinner
        Turns the query's columns into the model's columns (one-hot, imputation), as in training; for trees
        (``gradient_boosting``) each feature's bins.
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
    stored_ : list of str
        What this training stored beside its database for later processes (how many artifacts, bytes, where).
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
    # A text target's labels, in the order its rows' positions are read (target_labels.target_sql): those the
    # query held, which the estimator's classes_ may lack (a class only in held-out rows, or in another group).
    target_classes_: list[str] | None = None
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
    stored_: list[str] = field(default_factory=list)  # what it stored beside its database file, in words
    streamed_: dict | None = None  # how the data was streamed (budget, partitions), None when held in memory
    validation_metrics_: dict = field(default_factory=dict)  # train(validation=...): evaluate's on held-out rows
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
        if name in type(self).__dataclass_fields__ or "estimator_" not in self.__dict__:
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

    def scoring_query(self, query: str) -> ScoringQuery:
        """``query`` cut to this model's columns (its features by name, and its target and a per-group model's group
        column where selected), and the other columns it selects (kept aside: ``predict(..., keep=True)``)."""
        group_by = getattr(self, "group_by_", None)  # a GroupedModel's
        others = [name for name in (self.target_, group_by) if name is not None]
        return split_kept_columns(query, [spec.name for spec in self.encoder_.specs_], others)

    def target_labels(self, y: Any) -> Any:
        """The labels of rows whose target was read as ``y`` (numbers; a text target as its positions among the
        classes this model was trained on, as :func:`~ilargi_db.metadata.target_labels.target_sql` reads it)."""
        read = self.target_classes_ if self.target_classes_ is not None else getattr(self.estimator_, "classes_", None)
        return target_labels(y, self.target_type_, read)

    def to_record(self) -> dict[str, Any]:
        """The model as the registry stores it: one value per column of ``ilargi.models``, JSON columns as text.

        The registry adds the name, version and macros. Only JSON: a record outlives library versions, and
        reading one back runs nothing it holds.
        """
        types = self.feature_types_ or [None] * len(self.encoder_.specs_)
        kept = {key: getattr(self, attr) for attr, key, _, _ in _IN_MODEL}
        record = {column: getattr(self, attr) for attr, column, _ in _COLUMNS}
        record.update(
            features=[{"name": s.name, "type": t, "kind": s.kind} for s, t in zip(self.encoder_.specs_, types)],
            preprocessing={
                **self.encoder_.to_state(),
                "standardize": bool(self.standardize_),
                "target_type": self.target_type_,
                "target_classes": self.target_classes_,
            },
            parameters=self.estimator_.get_params(),
            model={**self.fitted_state(), "feature_names_out": list(self.estimator_.feature_names_in_), **kept},
        )
        return {column: _json(value) if column in JSON_COLUMNS else value for column, value in record.items()}

    def fitted_state(self) -> dict[str, Any]:
        """What the estimator learned, by attribute (the ``model`` column's values but the provenance's)."""
        facts = algorithm_facts(self.algorithm_)
        # An attribute only some fits learn (a regression ensemble has no classes_) is left out.
        return {attr: getattr(self.estimator_, attr) for attr in facts.fitted if hasattr(self.estimator_, attr)}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> TrainedModel:
        """The model :meth:`to_record` stored, ready for predict and evaluate (not refitted).

        Nothing in ``record`` is trusted: JSON only, each value checked for its type, and the columns the
        estimator learned must be those the encoder makes. A record that does not read back raises
        :class:`~ilargi_db.errors.DamagedModelError`.
        """
        try:
            return cls._from_record(record)
        except DAMAGE as err:
            why = f"{type(err).__name__}: {str(err)[:200]}"
            raise DamagedModelError(f"the stored model is damaged ({why}): train it again.", why) from None

    @classmethod
    def _from_record(cls, record: Mapping[str, Any]) -> TrainedModel:
        algorithm = _text(record["algorithm"])
        estimator = estimator_class(algorithm)()
        known = estimator.get_params()
        parameters = _json_object(record["parameters"], "parameters")
        estimator.set_params(**{k: v for k, v in parameters.items() if k in known})  # for display: not refitted
        fitted = _json_object(record["model"], "model")
        if "groups" in fitted:  # one model per group (train(..., group_by=...))
            return GroupedModel._grouped_from_record(record, fitted)
        names = _strings(fitted["feature_names_out"])
        estimator.n_features_in_ = len(names)
        estimator.feature_names_in_ = np.asarray(names, dtype=object)
        preprocessing = _json_object(record["preprocessing"], "preprocessing")
        facts = algorithm_facts(algorithm)
        read_encoder, restore = RESTORES[facts.reads]
        encoder = read_encoder(preprocessing)
        if list(encoder.feature_names_out_) != names:
            raise ValueError(f"the model learned {len(names)} columns its preprocessing does not make")
        restore(estimator, facts, fitted, encoder, len(names))  # the fitted state, each value checked
        features = json.loads(record["features"])
        if not isinstance(features, list) or len(features) != len(encoder.specs_):
            raise TypeError("features is not a list of the preprocessed columns")
        return cls(
            estimator,
            encoder,
            target_type_=_optional(_text)(preprocessing.get("target_type")),  # absent in records before it was kept
            target_classes_=_optional(_strings)(preprocessing.get("target_classes")),
            feature_types_=[_optional(_text)(f["type"]) for f in features],
            standardize_=_flag(preprocessing["standardize"]),
            **{attr: check(record[column]) for attr, column, check in _COLUMNS},
            **{attr: check(fitted.get(key, absent)) for attr, key, check, absent in _IN_MODEL},
        )

    def save(self, path: str | os.PathLike) -> None:
        """Write the model to the file ``path`` as JSON, the record the registry stores (no pickles).

        :meth:`TrainedModel.load` reads it back; the name and version of a stored model stay in its registry.
        """
        saved = {"format": FILE_FORMAT, "version": FILE_VERSION, "record": self.to_record()}
        Path(path).write_text(json.dumps(saved, allow_nan=True))

    @classmethod
    def load(cls, path: str | os.PathLike) -> TrainedModel:
        """The model :meth:`save` wrote to ``path``, checked as the registry checks its rows.

        A file that is not one, or is damaged, raises :class:`~ilargi_db.errors.DamagedModelError`.
        """
        try:
            saved = json.loads(Path(path).read_bytes())
        except (ValueError, RecursionError) as err:  # not UTF-8 JSON (UnicodeDecodeError is a ValueError)
            saved = f"{type(err).__name__}: {str(err)[:200]}"
        if not isinstance(saved, dict) or saved.get("format") != FILE_FORMAT:
            why = saved if isinstance(saved, str) else "no ilargi_db model format in it"
            raise DamagedModelError(f"{os.fspath(path)} is not a model saved by TrainedModel.save ({why}).", why)
        if saved.get("version") != FILE_VERSION or not isinstance(saved.get("record"), dict):
            why = f"format version {saved.get('version')!r}, this ilargi_db reads {FILE_VERSION}"
            raise DamagedModelError(f"{os.fspath(path)} holds a model this ilargi_db cannot read ({why}).", why)
        try:
            return cls.from_record(saved["record"])
        except DamagedModelError as err:
            raise DamagedModelError(
                f"the model in {os.fspath(path)} is damaged ({err.why}): save it again, or train it again.", err.why
            ) from None

    def __repr__(self) -> str:
        stored = f" {self.name_} v{self.version_}," if self.name_ else ""
        metrics = ", ".join(f"{k} {v:.4g}" for k, v in self.training_metrics_.items())
        return (
            f"<TrainedModel{stored} {self.algorithm_}, {self.strategy_}, {self.n_rows_:,} rows, "
            f"{len(self.encoder_.feature_names_out_):,} columns{': ' + metrics if metrics else ''}>"
        )


def _json(value: Any) -> str:
    """``value`` as the registry's JSON text: arrays as lists, NaN as NaN (undefined metrics).

    An array of more than a row's worth of numbers is written a row at a time and pasted in: the text is
    what ``json.dumps(array.tolist())`` gives, without a Python float per number of the whole array at once.
    """
    token = uuid.uuid4().hex
    large: list[np.ndarray] = []

    def default(o: Any) -> Any:
        if isinstance(o, np.ndarray) and o.ndim > 1:
            large.append(o)
            return f"{token}{len(large) - 1}"
        if hasattr(o, "tolist"):
            return o.tolist()
        if isinstance(o, TreeEnsemble):
            return o.to_record()
        return repr(o)

    text = json.dumps(value, default=default, allow_nan=True)
    for i, array in enumerate(large):
        text = text.replace(f'"{token}{i}"', _array_json(array), 1)
    return text


def _array_json(array: np.ndarray) -> str:
    """``json.dumps(array.tolist(), allow_nan=True)``, one row (of the last axis) at a time."""
    if array.ndim <= 1:
        return json.dumps(array.tolist(), allow_nan=True)
    return "[" + ", ".join(_array_json(row) for row in array) + "]"


def _json_object(text: Any, column: str) -> dict:
    """A JSON column that must hold an object (a deep nesting raises RecursionError)."""
    value = json.loads(_text(text))
    if not isinstance(value, dict):
        raise TypeError(f"{column} is not a JSON object")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r:.60} is not a string")
    return value


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError(f"{value!r:.60} is not a count")
    return value


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{value!r:.60} is not true or false")
    return value


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise TypeError(f"{value!r:.60} is not a list")
    return [_text(v) for v in value]


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else check(value)


def _object(value: Any) -> dict:
    if not isinstance(value, dict):
        raise TypeError(f"{value!r:.60} is not a JSON object")
    return value


def _numbers(estimator: Any, attr: str, shape: tuple[int | None, ...]) -> np.ndarray:
    """The fitted ``attr`` as finite numbers of ``shape`` (None: any length), or a ValueError saying how it is not."""
    value = getattr(estimator, attr)
    if isinstance(value, bool) or not isinstance(value, (int, float, np.ndarray)):
        raise TypeError(f"{attr} {value!r:.60} is not numbers")
    array = np.asarray(value, dtype=float)
    if array.ndim != len(shape) or any(n is not None and n != m for n, m in zip(shape, array.shape)):
        wanted = " x ".join("k" if n is None else str(n) for n in shape) or "one number"
        found = " x ".join(str(m) for m in array.shape) or "one number"
        raise ValueError(f"{attr} holds {found}, where this model has {wanted}")
    if not np.isfinite(array).all():
        raise ValueError(f"{attr} holds a number that is not finite")
    return array


def _classes(value: Any) -> np.ndarray:
    """A classifier's classes read back: distinct labels, all numbers, all true/false, or all text (a text or
    BOOLEAN target's, kept as the labels themselves)."""
    if not isinstance(value, list) or len(value) < 2:
        raise TypeError(f"classes_ {value!r:.60} is not a list of two classes or more")
    if all(isinstance(v, str) for v in value):
        classes = np.asarray(value, dtype=object)
    elif all(isinstance(v, bool) for v in value):
        classes = np.asarray(value, dtype=bool)
    elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        classes = np.asarray(value, dtype=float)
        if not np.isfinite(classes).all():
            raise ValueError("classes_ holds a number that is not finite")
    else:
        raise TypeError(f"classes_ {value!r:.60} mixes kinds of labels")
    if len(set(classes.tolist())) != len(classes) or list(classes) != sorted(classes):
        raise ValueError("classes_ are not distinct and sorted")
    return classes


def _restore_fitted(estimator: Any, facts: Any, fitted: dict, encoder: FeatureEncoder, n_columns: int) -> None:
    """The fitted arrays of a linear model, k-means or NMF (``facts.fitted``) set on ``estimator``, each checked."""
    for attr in facts.fitted:
        if attr in facts.optional_fitted and attr not in fitted:
            continue  # a fit that did not learn it (k-means trained on the columns as they are)
        value = fitted[attr]
        if attr == "classes_":
            value = _classes(value)
        setattr(estimator, attr, np.asarray(value, dtype=float) if isinstance(value, list) else value)
    _check_fitted(estimator, n_columns)


def _check_fitted(estimator: Any, n_columns: int) -> None:
    """The fitted arrays of a linear model, k-means or NMF read back: their shapes those of ``n_columns`` preprocessed
    columns, and a classifier's classes one per row of its coefficients (two for a binary one)."""
    if hasattr(estimator, "coef_"):
        coef = np.asarray(estimator.coef_)
        if coef.ndim == 2 and hasattr(estimator, "classes_"):  # multinomial: a row and an intercept per class
            k = len(estimator.classes_)  # (checked as labels when read: _classes)
            if k < 3:
                raise ValueError(f"classes_ holds {k} classes, where a row of coef_ per class needs at least 3")
            _numbers(estimator, "coef_", (k, n_columns))
            _numbers(estimator, "intercept_", (k,))
        else:
            _numbers(estimator, "coef_", (n_columns,))
            _numbers(estimator, "intercept_", ())
            if hasattr(estimator, "classes_") and len(estimator.classes_) != 2:
                raise ValueError(f"classes_ holds {len(estimator.classes_)} classes, where one row of coef_ has 2")
    if hasattr(estimator, "cluster_centers_"):
        _numbers(estimator, "cluster_centers_", (None, n_columns))
        if getattr(estimator, "feature_scale_", None) is not None:
            _numbers(estimator, "feature_scale_", (n_columns,))
    if hasattr(estimator, "components_"):
        _numbers(estimator, "components_", (None, n_columns))


def _binner(preprocessing: dict) -> FeatureBinner:
    """A tree model's bins, read back (FeatureBinner's own checks raise IlargiError for a bad max_bins)."""
    max_bins = preprocessing["max_bins"]
    if not isinstance(max_bins, int) or isinstance(max_bins, bool) or not 2 <= max_bins <= MAX_BINS:
        raise ValueError(f"max_bins {max_bins!r:.60} is not between 2 and {MAX_BINS}")
    if not isinstance(preprocessing["binning"], list) or not all(isinstance(b, dict) for b in preprocessing["binning"]):
        raise TypeError("binning is not a list of objects")
    return FeatureBinner.from_state(preprocessing)


def _restore_trees(estimator: Any, facts: Any, fitted: dict, binner: FeatureBinner, n_features: int) -> None:
    """A tree ensemble's fitted state, each value checked, and the bins it predicts arrays with."""
    if len(binner.bins_) != n_features:
        raise ValueError(f"the model learned {n_features} features its bins do not cover")
    estimator.bins_, estimator.missing_bin_ = list(binner.bins_), binner.missing_bin_
    estimator.trees_ = TreeEnsemble.from_record(fitted["trees_"], binner.bins_, binner.missing_bin_)
    per_round = estimator.trees_.trees_per_round
    value = fitted["baseline_"]  # a number, or one per tree of a round (a multi-class model's, per class)
    values = value if isinstance(value, list) and per_round > 1 else [value]
    if len(values) != per_round or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) for v in values
    ):
        raise TypeError(f"baseline_ {value!r:.60} is not {per_round} finite number(s)")
    estimator.baseline_ = float(values[0]) if per_round == 1 else np.array(values, dtype=float)
    estimator.objective_ = _text(fitted["objective_"])
    if estimator.objective_ not in LOSSES:
        raise ValueError(f"objective_ {estimator.objective_!r:.60} is not one of {', '.join(LOSSES)}")
    if LOSSES[estimator.objective_].classifies:
        classes = _classes(fitted["classes_"])
        k = len(classes)
        if (per_round if k > 2 else 1) != per_round:
            raise ValueError(f"classes_ are not the classes of a classifier of {per_round} tree(s) a round")
        estimator.classes_ = classes
    elif per_round != 1:
        raise ValueError(f"a {estimator.objective_} ensemble grows one tree a round, not {per_round}")
    importances = np.asarray(fitted["feature_importances_"], dtype=float)
    if importances.shape != (n_features,):
        raise ValueError("feature_importances_ is not one number per feature")
    estimator.feature_importances_ = importances
    estimator.n_iter_ = _count(fitted["n_iter_"])
    if "oob_score_" in fitted:  # a forest trained with oob_score=True (NaN where no row was left out)
        oob = fitted["oob_score_"]
        if not isinstance(oob, (int, float)) or isinstance(oob, bool):
            raise TypeError(f"oob_score_ {oob!r:.60} is not a number")
        estimator.oob_score_ = float(oob)
    if estimator.n_iter_ * per_round != estimator.trees_.n_trees:
        raise ValueError("n_iter_ is not the number of rounds of trees")


# How a record's preprocessing and fitted state read back, by what the algorithm reads (its catalog ``reads``).
RESTORES: dict[Rows, tuple[Callable[[dict], Any], Callable[..., None]]] = {
    Rows.MATRIX: (FeatureEncoder.from_state, _restore_fitted),
    Rows.BINS: (_binner, _restore_trees),
}


# The provenance a record stores in a column of its own: (attribute, column, check of the value read back).
_COLUMNS: tuple[tuple[str, str, Callable[[Any], Any]], ...] = (
    ("algorithm_", "algorithm", _text),
    ("query_", "training_query", _text),
    ("target_", "target", _optional(_text)),
    ("strategy_", "strategy", _text),
    ("decision_", "decision", _text),
    ("n_rows_", "n_rows", _count),
    ("training_metrics_", "metrics", lambda text: _json_object(text, "metrics")),
    ("timings_", "timings", lambda text: _json_object(text, "timings")),
)
# The provenance kept in the "model" column's object: (attribute, key, check, what a record stored before
# the key was kept reads as).
_IN_MODEL: tuple[tuple[str, str, Callable[[Any], Any], Any], ...] = (
    ("plan_", "plan", _optional(_object), None),
    ("unlabelled_rows_", "unlabelled_rows", _count, 0),
    ("warnings_", "warnings", _strings, []),
    ("reused_", "reused", _strings, []),
    ("stored_", "artifacts_stored", _strings, []),
    ("streamed_", "streamed", _optional(_object), None),
    ("validation_metrics_", "validation_metrics", _object, {}),
)


@dataclass(repr=False, eq=False)
class GroupedModel(TrainedModel):
    """One model per value of a ``group_by`` column, trained from one read (``train(..., group_by=...)``).

    ``models_`` maps each group (its value as DuckDB casts it to VARCHAR) to that group's
    :class:`TrainedModel`; all share the encoder. The SQL macro ``N_predict`` takes the features and then
    the group column, and dispatches on the group; a row of a group no model was trained for (unseen, or
    NULL) is scored NULL, as :meth:`predict` gives it NaN. ``estimator_`` is the estimator as configured
    (unfitted): each group's fitted one is ``models_[group].estimator_``.

    Attributes
    ----------
    group_by_ : str
        The group column's name in the training query.
    group_type_ : str or None
        Its DuckDB type.
    models_ : dict of str to TrainedModel
        Each group's model, in sorted order of the groups.
    training_metrics_ : dict
        Each training metric's mean over the groups, weighted by their rows (each group's own is in
        ``models_[group].training_metrics_``).
    ungrouped_rows_ : int
        Rows left out of every group's training because their group is NULL.
    """

    group_by_: str = ""
    group_type_: str | None = None
    models_: dict[str, TrainedModel] = field(default_factory=dict)
    ungrouped_rows_: int = 0

    @property
    def groups_(self) -> list[str]:
        return list(self.models_)

    def __getattr__(self, name: str) -> Any:
        # Not the estimator's: a fitted attribute (coef_, classes_, ...) is each group's own.
        raise AttributeError(f"{name!r}: a model per group has one per group, models_[group].{name}")

    def group_codes(self, groups: Any) -> np.ndarray:
        """Per row, the index of its group in ``groups_`` (-1: no model for it): from labels (values compared as
        DuckDB's text of them: ``True`` is ``'true'``; None for NULL) or from a reader's ``GroupCodes``."""
        labels = getattr(groups, "labels", None)
        position = {label: i for i, label in enumerate(self.models_)}
        if labels is not None:  # GroupCodes: each code's label looked up once
            lookup = np.array([position.get(label, -1) for label in labels] + [-1], dtype=np.int64)
            return lookup[groups.codes]
        text = [None if g is None else str(g).lower() if isinstance(g, (bool, np.bool_)) else str(g) for g in groups]
        return np.array([-1 if g is None else position.get(g, -1) for g in text], dtype=np.int64)

    def rows_of_each(self, codes: np.ndarray) -> Iterator[tuple[TrainedModel, np.ndarray]]:
        """Each group's model and its rows among ``codes`` (from :meth:`group_codes`), one sort of them in all."""
        order = group_order(codes, len(self.models_))
        bounds = np.searchsorted(codes[order], np.arange(len(self.models_) + 1))
        for g, model in enumerate(self.models_.values()):
            if bounds[g + 1] > bounds[g]:
                yield model, order[bounds[g] : bounds[g + 1]]

    def _by_group(self, X: Any, groups: Any, score: Callable[[TrainedModel, Any], np.ndarray]) -> np.ndarray:
        from ilargi_db.backend import to_host

        codes = self.group_codes(groups)
        if len(codes) != X.shape[0]:
            raise IlargiError(f"groups has {len(codes)} values for {X.shape[0]} rows: give one group per row.")
        out, covered, kind = np.full(len(codes), np.nan), 0, np.dtype(float)
        for model, rows in self.rows_of_each(codes):
            found = np.asarray(to_host(score(model, X[rows])))
            if not covered:  # the first group's answer says its shape (one column per class) and kind (labels)
                kind = found.dtype
                numbers = kind.kind in "iuf"
                shape = (len(codes), *found.shape[1:])
                out = np.full(shape, np.nan) if numbers else np.full(shape, None, dtype=object)
            out[rows] = found
            covered += len(rows)
        if kind.kind == "b" and covered == len(codes):  # a BOOLEAN target's classes, every row scored
            return out.astype(bool)
        return out

    def predict(self, X: Any, groups: Any) -> np.ndarray:
        """Each row predicted by its group's model; NaN (None for labels) for a row whose group has no model."""
        return self._by_group(X, groups, lambda model, rows: model.predict(rows))

    def predict_proba(self, X: Any, groups: Any) -> np.ndarray:
        """Each row's class probabilities from its group's model (every group has the same ``classes_``)."""
        return self._by_group(X, groups, lambda model, rows: model.predict_proba(rows))

    def decision_function(self, X: Any, groups: Any) -> np.ndarray:
        """Each row's score from its group's model (a linear SVM's or logistic regression's)."""
        return self._by_group(X, groups, lambda model, rows: model.decision_function(rows))

    @staticmethod
    def check_groups_agree(models: Mapping[str, TrainedModel], column: str) -> None:
        """Refuse groups whose models predict different things (one macro serves them all): classes, or a boosting
        objective that ``"auto"`` settled differently on their rows."""
        for attr, fix in (
            ("objective_", "pass objective='log_loss' or 'squared_error'"),
            ("classes_", "select rows of the classes every group has, or train the odd groups alone"),
        ):
            kinds: dict[str, list[str]] = {}
            for label, model in models.items():
                value = getattr(model.estimator_, attr, None)
                kinds.setdefault(repr(value.tolist() if hasattr(value, "tolist") else value), []).append(label)
            if len(kinds) > 1:
                found = "; ".join(
                    f"{', '.join(map(repr, labels[:3]))}{' ...' if len(labels) > 3 else ''}: {kind}"
                    for kind, labels in kinds.items()
                )
                raise IlargiError(
                    f"the groups of {column} learned different {attr.rstrip('_')} ({found}), and one model per "
                    f"group answers one kind of question: {fix}."
                )

    def to_record(self) -> dict[str, Any]:
        """The record of :meth:`TrainedModel.to_record`, its ``model`` object holding each group's fitted state
        (the provenance and the column names once, for all)."""
        first = next(iter(self.models_.values()))
        record = first.to_record()
        kept = {key: getattr(self, attr) for attr, key, _, _ in _IN_MODEL}
        groups = {
            label: {**model.fitted_state(), "n_rows": model.n_rows_, "metrics": model.training_metrics_}
            for label, model in self.models_.items()
        }
        grouping = {"group_by": self.group_by_, "group_type": self.group_type_, "ungrouped_rows": self.ungrouped_rows_}
        names = list(first.estimator_.feature_names_in_)
        record.update(
            {
                column: _json(getattr(self, attr)) if column in JSON_COLUMNS else getattr(self, attr)
                for attr, column, _ in _COLUMNS
            },
            parameters=_json(self.estimator_.get_params()),
            model=_json({**kept, **grouping, "feature_names_out": names, "groups": groups}),
        )
        return record

    @classmethod
    def _grouped_from_record(cls, record: Mapping[str, Any], fitted: dict) -> GroupedModel:
        groups = _object(fitted["groups"])
        if not groups:
            raise ValueError("a grouped model without groups")
        names = _strings(fitted["feature_names_out"])
        models = {}
        for label, state in groups.items():
            state = _object(state)
            if "groups" in state:
                raise ValueError("a group's model holds groups of its own")
            one = {
                **record,
                "model": json.dumps({**state, "feature_names_out": names}),
                "n_rows": _count(state["n_rows"]),
            }
            one["metrics"] = json.dumps(_object(state["metrics"]))
            models[_text(label)] = TrainedModel._from_record(one)
        first = next(iter(models.values()))
        group_by = _text(fitted["group_by"])
        if not group_by or group_by.lower() in {s.name.lower() for s in first.encoder_.specs_}:
            raise ValueError(f"group_by {group_by!r:.60} is empty or names a feature")
        cls.check_groups_agree(models, group_by)
        estimator = estimator_class(first.algorithm_)()
        known = estimator.get_params()
        estimator.set_params(**{k: v for k, v in first.estimator_.get_params().items() if k in known})
        return cls(
            estimator,
            first.encoder_,
            target_type_=first.target_type_,
            target_classes_=first.target_classes_,
            feature_types_=first.feature_types_,
            standardize_=first.standardize_,
            **{attr: check(record[column]) for attr, column, check in _COLUMNS},
            **{attr: check(fitted.get(key, absent)) for attr, key, check, absent in _IN_MODEL},
            group_by_=group_by,
            group_type_=_optional(_text)(fitted.get("group_type")),
            models_=dict(sorted(models.items())),
            ungrouped_rows_=_count(fitted.get("ungrouped_rows", 0)),
        )

    def __repr__(self) -> str:
        stored = f" {self.name_} v{self.version_}," if self.name_ else ""
        return (
            f"<GroupedModel{stored} {self.algorithm_} per {self.group_by_}, {len(self.models_):,} groups, "
            f"{self.n_rows_:,} rows, {len(self.encoder_.feature_names_out_):,} columns>"
        )
