"""What makes an ilargi_db estimator a scikit-learn estimator, without importing scikit-learn.

Every estimator follows scikit-learn's conventions (parameters set in ``__init__`` and read back by
``get_params``, learned state ending in ``_``, ``clone``-able, its estimator checks passed: the tests run them)
but derives from :class:`Estimator` here, not from ``sklearn.base.BaseEstimator``: importing scikit-learn costs
a new process about 0.9 s (it imports SciPy's statistics and pandas), more than a small training itself, and a
training from SQL, the command line or ``ilargi_db.train`` needs none of it. scikit-learn is imported where only
it can answer: validating plain arrays (``validate_data``, as before), a scorer's metrics, and its tags when its
own tools ask for them (:meth:`Estimator.__sklearn_tags__`).

Parameters are declared once per estimator (``_parameter_constraints``, in the constraint types below, which word
their errors as scikit-learn's do) and checked once, when the estimator is made for a training
(``catalog.make_estimator``) or when ``fit`` is called on it directly.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import numbers
import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ilargi_db.errors import InvalidParameterError, NotFittedError
from ilargi_db.models.transform_output import TransformOutput

BOOLEAN = "boolean"  # True or False (NumPy's too)
RANDOM_STATE = "random_state"  # an int seed in [0, 2**32 - 1], a RandomState, or None
ARRAY_LIKE = "array-like"  # a list, tuple or array (not a string or a scalar)


@functools.cache
def _also_scikit_learns(ours: type, module: str, name: str) -> type:
    """``ours`` made a subclass of scikit-learn's class of the same meaning too (``except`` clauses and warning
    filters of either catch it)."""
    # Pickled (sent between processes) as ours alone: the class made here cannot be found by name.
    return type(
        name, (ours, getattr(sys.modules[module], name)), {"__module__": ours.__module__, "__reduce__": _as_ours(ours)}
    )


def _as_ours(ours: type) -> Callable[[BaseException], tuple]:
    def reduce(self: BaseException) -> tuple:
        return ours, self.args

    return reduce


def scikit_learns_too(ours: type, module: str = "sklearn.exceptions") -> type:
    """The class to raise (or warn with) for ``ours``: ours, and scikit-learn's too once scikit-learn is loaded
    (its estimator checks expect its own classes; a user who catches them has imported it). Never imports it."""
    if module not in sys.modules or not hasattr(sys.modules[module], ours.__name__):
        return ours
    return _also_scikit_learns(ours, module, ours.__name__)


class Interval:
    """The numbers of ``kind`` (``numbers.Integral`` or ``numbers.Real``) between ``left`` and ``right`` (None:
    unbounded); ``closed`` says which ends belong: "left", "right", "both" or "neither"."""

    def __init__(self, kind: type, left: float | None, right: float | None, *, closed: str):
        if kind not in (numbers.Integral, numbers.Real) or closed not in ("left", "right", "both", "neither"):
            raise ValueError(f"Interval({kind}, closed={closed!r}): not a kind or ends an Interval takes")
        self.kind, self.left, self.right, self.closed = kind, left, right, closed

    def accepts(self, value: Any) -> bool:
        if not isinstance(value, self.kind):  # True is an int, as in scikit-learn (train refuses it: parameter_kinds)
            return False
        if not isinstance(value, numbers.Integral) and np.isnan(value):
            return False
        below = operator.lt if self.closed in ("left", "both") else operator.le
        above = operator.gt if self.closed in ("right", "both") else operator.ge
        left = -np.inf if self.left is None else self.left
        right = np.inf if self.right is None else self.right
        return not (below(value, left) or above(value, right))

    def __str__(self) -> str:
        integral = self.kind is numbers.Integral
        left = "-inf" if self.left is None else (self.left if integral else float(self.left))
        right = "inf" if self.right is None else (self.right if integral else float(self.right))
        opened = "[" if self.closed in ("left", "both") else "("
        shut = "]" if self.closed in ("right", "both") else ")"
        return f"{'an int' if integral else 'a float'} in the range {opened}{left}, {right}{shut}"

    def in_options(self) -> str:
        """In an options JSON's words (``ilargi options``, docs/options.md)."""
        return str(self)

    def json_kinds(self) -> frozenset[str]:
        """The JSON values that give it (an integer is a real number too)."""
        return frozenset({"integer"} if self.kind is numbers.Integral else {"integer", "number"})


class StrOptions:
    """One of a fixed set of strings."""

    def __init__(self, options: set[str]):
        self.options = options

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.options

    def __str__(self) -> str:
        return f"a str among {{{', '.join(repr(o) for o in self.options)}}}"

    def in_options(self) -> str:
        """In an options JSON's words, sorted (a set's order changes from one process to the next)."""
        return "one of " + ", ".join(json.dumps(o) for o in sorted(self.options))

    def json_kinds(self) -> frozenset[str]:
        return frozenset({"string"})


@dataclass(frozen=True)
class NamedConstraint:
    """A constraint scikit-learn names (a string, or None): what it accepts, and how each reader words it."""

    accepts: Callable[[Any], bool]
    described: str  # in scikit-learn's words, for its errors
    in_options: str  # in an options JSON's words (ilargi options, docs/options.md)
    json_kinds: frozenset[str]  # the JSON values that give it (parameter_kinds)


def _seed(value: Any) -> bool:
    seeds = Interval(numbers.Integral, 0, 2**32 - 1, closed="both")
    return value is None or isinstance(value, np.random.RandomState) or seeds.accepts(value)


NAMED_CONSTRAINTS: dict[str | None, NamedConstraint] = {
    None: NamedConstraint(lambda value: value is None, "None", "null", frozenset({"null"})),
    BOOLEAN: NamedConstraint(
        lambda value: isinstance(value, (bool, np.bool_)),
        "an instance of 'bool' or an instance of 'numpy.bool'",
        "true or false",
        frozenset({"boolean"}),
    ),
    RANDOM_STATE: NamedConstraint(
        _seed,
        "an int in the range [0, 4294967295], an instance of 'numpy.random.mtrand.RandomState' or None",
        "an integer seed in [0, 4294967295] or null",
        frozenset({"integer", "null"}),
    ),
    ARRAY_LIKE: NamedConstraint(
        lambda value: not isinstance(value, str) and (hasattr(value, "__len__") or hasattr(value, "shape")),
        "an array-like",
        "an array",
        frozenset({"array"}),
    ),
}


def named_constraint(constraint: Any) -> NamedConstraint | None:
    """The facts of a constraint scikit-learn names by a string (or None); None for a type, an :class:`Interval`
    or :class:`StrOptions` (and a name ilargi_db does not declare)."""
    if constraint is None or isinstance(constraint, str):
        return NAMED_CONSTRAINTS.get(constraint)
    return None


def _accepts(constraint: Any, value: Any) -> bool:
    if (named := named_constraint(constraint)) is not None:
        return named.accepts(value)
    if isinstance(constraint, type):
        return isinstance(value, constraint)
    return constraint.accepts(value)


def _described(constraint: Any) -> str:
    if (named := named_constraint(constraint)) is not None:
        return named.described
    if isinstance(constraint, type):
        return f"an instance of {constraint.__qualname__!r}"
    return str(constraint)


def check_parameters(constraints: dict[str, list], params: dict[str, Any], caller: str) -> None:
    """Raise :class:`InvalidParameterError` for the first parameter no constraint of its list accepts, worded as
    scikit-learn words it ("The 'alpha' parameter of LinearRegression must be a float in the range [0.0, inf).
    Got -1.0 instead.")."""
    for name, value in params.items():
        allowed = constraints.get(name)
        if allowed is None or any(_accepts(c, value) for c in allowed):
            continue
        words = [_described(c) for c in allowed]
        listed = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
        raised = scikit_learns_too(InvalidParameterError, "sklearn.utils._param_validation")
        raise raised(f"The {name!r} parameter of {caller} must be {listed}. Got {value!r} instead.")


def check_fitted(estimator: Any, attribute: str | None = None) -> None:
    """Raise :class:`NotFittedError` unless ``estimator`` has ``attribute`` (or any learned ``name_``)."""
    if attribute is not None:
        fitted = hasattr(estimator, attribute)
    else:
        fitted = any(k.endswith("_") and not k.startswith("__") for k in vars(estimator))
    if not fitted:
        raise scikit_learns_too(NotFittedError)(
            f"This {type(estimator).__name__} instance is not fitted yet. Call 'fit' with appropriate arguments "
            "before using this estimator."
        )


def clone(estimator: Any) -> Any:
    """A new, unfitted estimator with ``estimator``'s parameters (copies of them) and output container
    (``set_output``), as ``sklearn.base.clone``."""
    params = {k: copy.deepcopy(v) for k, v in estimator.get_params(deep=False).items()}
    fresh = type(estimator)(**params)
    if hasattr(estimator, "_sklearn_output_config"):
        fresh._sklearn_output_config = copy.deepcopy(estimator._sklearn_output_config)
    return fresh


def random_state(seed: Any) -> np.random.RandomState:
    """``seed`` as a RandomState: None for NumPy's global one, an int for a new one, a RandomState as it is."""
    if seed is None or seed is np.random:
        return np.random.mtrand._rand
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        return np.random.RandomState(seed)
    if isinstance(seed, np.random.RandomState):
        return seed
    raise ValueError(f"{seed!r} cannot be used to seed a numpy.random.RandomState instance")


class available_if:  # noqa: N801 - a decorator, named as scikit-learn's
    """A method that exists only when ``check(estimator)`` is true (``hasattr`` answers False otherwise)."""

    def __init__(self, check: Callable[[Any], bool]):
        self.check = check

    def __call__(self, method: Callable) -> _Conditional:
        return _Conditional(method, self.check)


class _Conditional:
    def __init__(self, method: Callable, check: Callable[[Any], bool]):
        self.method, self.check = method, check
        self.__doc__ = method.__doc__

    def __get__(self, obj: Any, owner: type | None = None) -> Callable:
        if obj is None:
            return self.method
        if not self.check(obj):
            raise AttributeError(f"This {type(obj).__name__!r} has no attribute {self.method.__name__!r}")
        return self.method.__get__(obj, owner)


def validate_data(estimator: Any, *args: Any, **kwargs: Any) -> Any:
    """scikit-learn's ``validate_data`` for plain arrays (imported only where an estimator is given them)."""
    from sklearn.utils.validation import validate_data as sklearn_validate_data

    return sklearn_validate_data(estimator, *args, **kwargs)


def target_type(y: Any) -> str:
    """scikit-learn's ``type_of_target``: "binary", "multiclass" or "continuous" for a flat array of finite numbers
    or of text (computed here), anything else by scikit-learn."""
    array = y.get() if hasattr(y, "__cuda_array_interface__") else np.asarray(y)  # a CuPy array comes to the host
    if array.ndim == 1 and array.size and array.dtype.kind in "biuf" and np.isfinite(array).all():
        if array.dtype.kind == "f" and np.any(array != np.floor(array)):
            return "continuous"
        return "binary" if len(np.unique(array)) <= 2 else "multiclass"
    if array.ndim == 1 and array.size and array.dtype.kind in "OU" and all(isinstance(v, str) for v in array):
        return "binary" if len(np.unique(array)) <= 2 else "multiclass"
    from sklearn.utils.multiclass import type_of_target

    return type_of_target(y)


def check_classification_targets(y: Any) -> None:
    """Refuse a target that holds no classes (continuous numbers, say), in scikit-learn's words."""
    kind = target_type(y)
    if kind not in ("binary", "multiclass", "multiclass-multioutput", "multilabel-indicator", "multilabel-sequences"):
        raise ValueError(
            f"Unknown label type: {kind}. Maybe you are trying to fit a classifier, which expects discrete classes "
            "on a regression target with continuous values."
        )


class Estimator:
    """scikit-learn's estimator protocol: parameters are ``__init__``'s arguments, stored as given."""

    _parameter_constraints: dict[str, list] = {}

    @classmethod
    def _get_param_names(cls) -> list[str]:
        init = cls.__init__
        if init is object.__init__:
            return []
        parameters = inspect.signature(init).parameters.values()
        return sorted(p.name for p in parameters if p.name != "self" and p.kind != p.VAR_KEYWORD)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self._get_param_names():
            value = getattr(self, name)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                out.update((f"{name}__{k}", v) for k, v in value.get_params().items())
            out[name] = value
        return out

    def set_params(self, **params: Any) -> Estimator:
        valid = self.get_params(deep=True)
        nested: dict[str, dict[str, Any]] = {}
        for key, value in params.items():
            name, _, sub = key.partition("__")
            if name not in valid:
                raise ValueError(
                    f"Invalid parameter {name!r} for estimator {self}. Valid parameters are: "
                    f"{self._get_param_names()!r}."
                )
            if sub:
                nested.setdefault(name, {})[sub] = value
            else:
                setattr(self, name, value)
                valid[name] = value
        for name, sub_params in nested.items():
            valid[name].set_params(**sub_params)
        return self

    def __repr__(self) -> str:
        defaults = {
            p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values() if p.name != "self"
        }
        changed = []
        for name, value in self.get_params(deep=False).items():
            default = defaults.get(name, inspect.Parameter.empty)
            same = default is value or (
                not isinstance(value, np.ndarray) and type(value) is type(default) and _equal(value, default)
            )
            if not same:
                changed.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(changed)})"

    def _validate_params(self) -> None:
        """Check every parameter against ``_parameter_constraints`` (:func:`check_parameters`), once per set of
        values: ``train`` checks them at its edge, before any read, and ``fit`` then finds them checked (a caller
        who builds the estimator, or changes a value since, gets them checked in ``fit``)."""
        params = self.get_params(deep=False)
        checked = self.__dict__.get("_checked_params")
        unchanged = checked is not None and checked.keys() == params.keys()
        if unchanged and all(_same(value, checked[name]) for name, value in params.items()):
            return
        check_parameters(self._parameter_constraints, params, type(self).__name__)
        self._checked_params = params

    def __sklearn_tags__(self) -> Any:
        """scikit-learn's tags (only its tools ask, so it is imported by then)."""
        from sklearn.utils import InputTags, Tags, TargetTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=False), input_tags=InputTags())


def _same(a: Any, b: Any) -> bool:
    """Whether a parameter's value is the one checked: the same object, or an equal value of the same type."""
    return a is b or (type(a) is type(b) and not isinstance(a, np.ndarray) and _equal(a, b))


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) or (isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b))
    except (TypeError, ValueError):
        return False


class RegressorMixin:
    """A regressor: ``score`` is R^2."""

    def __sklearn_tags__(self) -> Any:
        from sklearn.utils import RegressorTags

        tags = super().__sklearn_tags__()
        tags.estimator_type = "regressor"
        tags.regressor_tags = RegressorTags()
        tags.target_tags.required = True
        return tags

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        from sklearn.metrics import r2_score

        return float(r2_score(y, self.predict(X), sample_weight=sample_weight))


class ClassifierMixin:
    """A classifier: ``score`` is the accuracy."""

    def __sklearn_tags__(self) -> Any:
        from sklearn.utils import ClassifierTags

        tags = super().__sklearn_tags__()
        tags.estimator_type = "classifier"
        tags.classifier_tags = ClassifierTags()
        tags.target_tags.required = True
        return tags

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        from sklearn.metrics import accuracy_score

        return float(accuracy_score(y, self.predict(X), sample_weight=sample_weight))


class ClusterMixin:
    """A clusterer: ``fit_predict`` is each row's cluster."""

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.estimator_type = "clusterer"
        if tags.transformer_tags is not None:
            tags.transformer_tags.preserves_dtype = []
        return tags

    def fit_predict(self, X: Any, y: Any = None, **kwargs: Any) -> np.ndarray:
        self.fit(X, **kwargs)
        return self.labels_


class TransformerMixin(TransformOutput):
    """A transformer: ``fit_transform`` fits, then transforms the same rows; ``set_output`` chooses what they return
    (:mod:`.transform_output`)."""

    def __sklearn_tags__(self) -> Any:
        from sklearn.utils import TransformerTags

        tags = super().__sklearn_tags__()
        tags.transformer_tags = TransformerTags()
        return tags

    def fit_transform(self, X: Any, y: Any = None, **fit_params: Any) -> Any:
        if y is None:
            return self.fit(X, **fit_params).transform(X)
        return self.fit(X, y, **fit_params).transform(X)


def input_feature_names(estimator: Any, input_features: Any = None) -> np.ndarray:
    """The input's column names as ``get_feature_names_out`` reads them (scikit-learn's rule and words):
    ``input_features`` checked against what ``fit`` saw, else the names ``fit`` saw, else ``x0``, ``x1``, ..."""
    known = getattr(estimator, "feature_names_in_", None)
    if input_features is None:
        if known is not None:
            return np.asarray(known, dtype=object)
        return np.asarray([f"x{i}" for i in range(estimator.n_features_in_)], dtype=object)
    names = np.asarray(input_features, dtype=object)
    if known is not None and not np.array_equal(names, known):
        raise ValueError("input_features is not equal to feature_names_in_")
    if len(names) != estimator.n_features_in_:
        raise ValueError(
            f"input_features should have length equal to number of features ({estimator.n_features_in_}), got "
            f"{len(names)}"
        )
    return names


class ClassNamePrefixFeaturesOutMixin:
    """A transformer whose output columns are new (``_n_features_out`` of them): named by its class, as
    scikit-learn names them (``kmeans0``, ``kmeans1``, ...)."""

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        check_fitted(self, "_n_features_out")
        input_feature_names(self, input_features)  # checked, as scikit-learn checks them
        prefix = type(self).__name__.lower()
        return np.asarray([f"{prefix}{i}" for i in range(self._n_features_out)], dtype=object)


class OneToOneFeatureMixin:
    """A transformer whose output columns are its input columns: their names go through."""

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        check_fitted(self, "n_features_in_")
        return input_feature_names(self, input_features)


__all__ = [
    "ARRAY_LIKE",
    "BOOLEAN",
    "RANDOM_STATE",
    "ClassNamePrefixFeaturesOutMixin",
    "ClassifierMixin",
    "ClusterMixin",
    "Estimator",
    "Interval",
    "InvalidParameterError",
    "NAMED_CONSTRAINTS",
    "NamedConstraint",
    "NotFittedError",
    "OneToOneFeatureMixin",
    "RegressorMixin",
    "StrOptions",
    "TransformerMixin",
    "available_if",
    "check_classification_targets",
    "check_fitted",
    "check_parameters",
    "clone",
    "input_feature_names",
    "named_constraint",
    "random_state",
    "scikit_learns_too",
    "target_type",
    "validate_data",
]
