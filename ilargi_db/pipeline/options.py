"""The options phase: what the caller asked for, checked once before anything is read.

:class:`TrainOptions` holds the settings ``train`` takes besides the model (one dataclass, the same for
``train``, ``train_batch``, the SQL functions and the command line); :func:`model_specs` and
:func:`make_estimators` turn the models asked for into estimators, refusing unknown algorithms,
parameters and values with the estimator's own words.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ilargi_db.byte_sizes import size_in_bytes
from ilargi_db.errors import IlargiError, spell
from ilargi_db.limits import MACRO_NODES, SMALLER_TREES, NodeBounded
from ilargi_db.models.catalog import (
    AUTO,
    CATALOG,
    STRATEGY_CHOICES,
    SUPERVISED,
    TRAIN_SETTINGS,
    check_algorithm,
    make_estimator,
)


class ModelSpec(NamedTuple):
    """One model of a job as the caller names it."""

    algorithm: str
    params: dict[str, Any]
    # Written as a SQL macro once trained (the SQL functions, the command line): its size is bounded by what a macro
    # holds (ilargi_db.limits.MACRO_NODES) from its options, and as its groups grow. A model trained in Python is
    # bounded only when saved (save_model), as LightGBM bounds no n_estimators.
    as_macro: bool = False

    @property
    def supervised(self) -> bool:
        return self.algorithm in SUPERVISED


@dataclass(frozen=True)
class TrainOptions:
    """The settings of a training besides its models: how to read, where to run, what to keep.

    One field per record of ``models.catalog.TRAIN_SETTINGS`` (a test holds the names and defaults equal);
    see :func:`ilargi_db.train` for each one's meaning. :meth:`check` refuses values of the wrong kind.
    """

    strategy: str = AUTO
    backend: str = AUTO
    standardize: bool = False
    impute: bool = True
    reuse: bool | str = True  # or REUSE_IN_MEMORY
    memory_budget: int | str | None = None
    cluster: Any = None  # a dask.distributed.Client or a scheduler address (SQL: a registered cluster's name)
    group_by: str | None = None  # a SELECT column: one model per value (see pipeline/groups.py)
    validation: float | str | None = None  # a share of the rows held out, or a query to score (pipeline/validation.py)

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> TrainOptions:
        """The settings among a call's ``arguments`` (``train``'s ``locals()``), by the settings' table."""
        return cls(**{setting.name: arguments[setting.name] for setting in TRAIN_SETTINGS})

    @property
    def validation_share(self) -> float | None:
        """The share of the rows to hold out (None: none, or a query to score instead)."""
        return float(self.validation) if is_share(self.validation) else None

    def check(self, specs: Sequence[ModelSpec]) -> None:
        """Refuse values of the wrong kind (as the settings' table says), an unknown strategy, a memory budget
        that is not a size, and standardizing where no model is a linear one: before anything is read."""
        for setting in TRAIN_SETTINGS:
            value = getattr(self, setting.name)
            if setting.python_types == (bool,) and not isinstance(value, (bool, np.bool_)):
                raise IlargiError(f"{setting.name} must be True or False, got {value!r}.")
            if setting.python_types == (bool, str) and not (
                isinstance(value, (bool, np.bool_)) or (isinstance(value, str) and value in setting.choices)
            ):
                named = " or ".join(map(repr, setting.choices))
                raise IlargiError(f"{setting.name} must be True, False or {named}, got {value!r}.")
        if self.strategy not in STRATEGY_CHOICES:
            raise IlargiError(f"strategy must be one of {', '.join(STRATEGY_CHOICES)}, got {self.strategy!r}.")
        if self.memory_budget is not None:
            size_in_bytes(self.memory_budget, "memory_budget")
        check_validation(self.validation)
        if self.standardize and not any(CATALOG[check_algorithm(s.algorithm)].standardizes for s in specs):
            raise IlargiError(
                f"{spell('standardize', True)} is for linear and logistic regression, the linear SVM and k-means "
                "(NMF needs its columns non-negative, trees split on bins); scale columns in the query."
            )


def is_share(validation: Any) -> bool:
    """Whether ``validation`` is a number (a share of the rows to hold out), not a query."""
    return isinstance(validation, numbers.Real) and not isinstance(validation, (bool, np.bool_))


def check_validation(validation: Any) -> None:
    """Refuse a validation that is neither a share of the rows in (0, 1) nor text (a query, planned with the job),
    before anything is read; a number written as text is refused too."""
    if isinstance(validation, str) and validation.strip():
        try:
            float(validation)
        except ValueError:
            return  # a query: planned (and refused if it is none) with the training query
        raise IlargiError(f"validation={validation!r} is a number written as text: pass {float(validation):g}.")
    if validation is not None and (not is_share(validation) or not 0.0 < float(validation) < 1.0):
        raise IlargiError(
            f"validation must be the share of rows to hold out, between 0 and 1 (e.g. 0.2), or a SELECT of the rows "
            f"to score; got {validation!r}."
        )


def model_specs(models: Any) -> list[ModelSpec]:
    """``models`` (names, ``(algorithm, {parameters})`` pairs or dicts) as specs, refusing what is not a model."""
    if isinstance(models, (str, dict)) or not isinstance(models, Sequence) or not len(models):
        raise IlargiError(
            "models must be a non-empty list of models, each an algorithm name, an (algorithm, {parameters}) pair "
            f"or a dict with an 'algorithm' key; got {models!r}."
        )
    specs = []
    for i, m in enumerate(models, start=1):
        if isinstance(m, str):
            specs.append(ModelSpec(m, {}))
        elif isinstance(m, dict) and "algorithm" in m:
            specs.append(ModelSpec(m["algorithm"], {k: v for k, v in m.items() if k != "algorithm"}))
        elif isinstance(m, (tuple, list)) and len(m) == 2 and isinstance(m[1], dict):
            specs.append(ModelSpec(m[0], dict(m[1])))
        else:
            raise IlargiError(
                f"model {i} of the batch is {m!r}: give an algorithm name, (algorithm, {{...}}) or a dict."
            )
    return specs


def make_estimators(specs: Sequence[ModelSpec], target: str | None) -> list[Any]:
    """Each spec's estimator, its parameters checked; a supervised model without a target is refused."""
    estimators = []
    for i, spec in enumerate(specs, start=1):
        try:
            estimators.append(make_estimator(spec.algorithm, spec.params))
            if spec.as_macro:
                check_model_size(spec.algorithm, estimators[-1])
        except ValueError as err:  # ours, or scikit-learn's parameter validation
            if len(specs) == 1:
                raise
            raise IlargiError(f"model {i} of the batch: {err}") from None
        if spec.supervised and target is None:
            raise IlargiError(f"{spec.algorithm} needs a target: pass {spell('target', '<label column>')}.")
    return estimators


def check_model_size(algorithm: str, estimator: Any) -> None:
    """Refuse, before anything is read or allocated, a model whose macro may grow more nodes than a SQL macro
    holds (ilargi_db.limits.MACRO_NODES): counted from its options (a tree ensemble's). A model per group is
    counted as it grows (:func:`check_grouped_size`)."""
    if not isinstance(estimator, NodeBounded):
        return
    MACRO_NODES.check(
        estimator.max_nodes(),
        f"{algorithm} with {estimator.size_options()} may grow {{count}} nodes",
        SMALLER_TREES,
    )


def check_grouped_size(algorithm: str, nodes: int, fitted: int, groups: int) -> None:
    """Refuse, as soon as it is known, a model per group whose groups fitted so far (``fitted`` of ``groups``)
    already grew more nodes than the one SQL macro holding them all can (ilargi_db.limits.MACRO_NODES): the
    rest of the groups are not fitted. An upper bound from the options would refuse most models per group,
    whose trees rarely reach max_leaves."""
    MACRO_NODES.check(
        nodes,
        f"{algorithm}'s first {fitted:,} of {groups:,} groups (group_by) grew {{count}} tree nodes",
        f"{SMALLER_TREES}, or fewer groups (group_by)",
    )


def check_target(algorithm: str, target: str | None) -> None:
    """Refuse a target for an unsupervised algorithm trained alone (in a batch, the supervised models' label)."""
    check_algorithm(algorithm)
    if algorithm not in SUPERVISED and target is not None:
        raise IlargiError(
            f"{algorithm} is unsupervised and learns from every selected column: pass {spell('target', None)}, "
            f"and leave {target!r} out of the SELECT list unless it should be a feature."
        )
