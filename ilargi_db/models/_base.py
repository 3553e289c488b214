"""What every ilargi_db estimator shares: inputs as normalized matrices, divergence, progress."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ilargi_db._terminal import progress
from ilargi_db.backend import to_host  # noqa: F401 - to_host: the models' import of it
from ilargi_db.errors import ConvergenceWarning, DivergenceError, IlargiError, spell  # noqa: F401 - DivergenceError: the models' import of it
from ilargi_db.linalg import as_matrix, is_normalized  # noqa: F401 - as_matrix: the models' import of it
from ilargi_db.models.convergence import not_converged
from ilargi_db.models.estimator import check_classification_targets, scikit_learns_too, target_type, validate_data


class SparseInputMixin:
    """Tells scikit-learn's checks that the estimator takes sparse matrices (as normalized matrices hold)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


class HostTargetScoreMixin:
    """``score(X, y)`` with ``y`` on a device too: scikit-learn's metrics are NumPy's, so the target comes to
    the host once, explicitly (``np.asarray`` of a CuPy array raises). Listed before scikit-learn's mixin."""

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        host = [to_host(a) if hasattr(a, "get") else a for a in (y, sample_weight)]
        return super().score(X, host[0], sample_weight=host[1])


_NO_Y = object()


def check_input(estimator: Any, X: Any, y: Any = _NO_Y, *, reset: bool, y_numeric: bool = False) -> tuple:
    """Validate X (and y, when given, even as None) once; record ``n_features_in_``/``feature_names_in_``.

    A normalized matrix is trusted as built (its columns and names come from
    the planner); anything else goes through scikit-learn's ``validate_data``.
    """
    if not is_normalized(X):
        if y is _NO_Y:
            return (validate_data(estimator, X, accept_sparse="csr", reset=reset, dtype=[np.float64, np.float32]),)
        return validate_data(
            estimator, X, y, accept_sparse="csr", reset=reset, dtype=[np.float64, np.float32], y_numeric=y_numeric
        )
    if reset:
        estimator.n_features_in_ = X.shape[1]
        estimator.feature_names_in_ = np.asarray(X.feature_names, dtype=object)
    elif X.shape[1] != estimator.n_features_in_:
        raise ValueError(
            f"X has {X.shape[1]} features, but {type(estimator).__name__} is expecting "
            f"{estimator.n_features_in_} features as input."
        )
    if y is _NO_Y:
        return (X,)
    if y is None:
        raise ValueError(f"{type(estimator).__name__} requires y to be passed, but the target y is None.")
    y = to_host(y) if hasattr(y, "get") else np.asarray(y)
    if y.shape != (X.shape[0],):
        raise ValueError(f"X has {X.shape[0]} rows but y has shape {y.shape}.")
    if y_numeric:
        y = y.astype(float)
        if not np.isfinite(y).all():
            raise ValueError("y contains NaN or inf: filter those rows in the query (WHERE y IS NOT NULL).")
    return X, y


EXACT_LABELS = 2.0**53  # a target is read as DOUBLE: beyond this magnitude two integer labels may read as one


def exact_classes(classes: np.ndarray, what: str) -> np.ndarray:
    """``classes``, if each reads back as the label it came from: an integer label beyond 2^53 is rounded as
    DOUBLE (9007199254740993 reads as ...992), and predict and the macros would answer a label that does not exist."""
    if not np.issubdtype(classes.dtype, np.number):  # text labels (scikit-learn's checks) are kept as they are
        return classes
    far = classes[np.abs(classes.astype(float)) >= EXACT_LABELS]
    if len(far):
        raise IlargiError(
            f"{what}'s target has a class label of about {float(far[0]):.17g}, at or beyond 2^53 "
            "(9007199254740992): ilargi_db reads a target as DOUBLE, which cannot keep such a label exact, so "
            "predictions would name a label that does not exist. Give the classes smaller numbers in the query "
            "(e.g. label - 9007199254740000 AS label, or label = 9007199254740993 AS is_that)."
        )
    return classes


def binary_classes(y_host: np.ndarray, what: str, multiclass_fix: str = "", multiclass: bool = False) -> np.ndarray:
    """The two classes of a classifier's target, sorted (two or more with ``multiclass``); a clear error for a
    continuous target, or a multi-class one the model cannot fit.

    ``what`` names the model ("logistic regression"); ``multiclass_fix`` adds another way out to the
    multi-class error. scikit-learn's own words come first in each message: its estimator checks look for them.
    """
    if target_type(y_host) == "continuous":
        raise IlargiError(
            f"{what} needs two classes, but the target is continuous ({len(np.unique(y_host))} distinct values; "
            "Unknown label type: continuous): turn it into a label in the query (e.g. y > 15 AS late), or use "
            "linear_regression."
        )
    check_classification_targets(y_host)
    classes = exact_classes(np.unique(y_host), what)
    if len(classes) != 2 and not (multiclass and len(classes) > 2):
        raise IlargiError(
            f"Only binary classification is supported. The type of the target is {target_type(y_host)}: "
            f"y has {len(classes)} classes ({classes[:5].tolist()}). Encode it as two classes in the query (e.g. "
            f"y = 2 AS is_two){multiclass_fix}."
        )
    return classes


def minimize_lbfgs(
    objective: Callable[[np.ndarray], tuple[float, np.ndarray, float]],
    x0: np.ndarray,
    estimator: Any,
    what: str,
) -> tuple[Any, list[float]]:
    """scipy's L-BFGS-B on ``objective`` (params -> value, gradient, mean loss) with scikit-learn's settings, so
    both stop at the same point; the result and the loss curve (a mean loss per iteration). A stop at
    ``estimator.max_iter`` is recorded as not converged (``what`` names the fit in the warning)."""
    losses: list[float] = []
    last: dict[bytes, float] = {}  # mean loss of the parameters fun() saw, for the loss curve
    bar = progress(estimator.max_iter, what)

    def fun(params):
        value, grad, mean_loss = objective(params)
        check_finite(value, "the log-loss")
        last.clear()
        last[params.tobytes()] = mean_loss
        return value, grad

    def callback(params):
        # L-BFGS accepts the point its last line search evaluated: no extra pass over X.
        known = last.get(params.tobytes())
        losses.append(known if known is not None else objective(params)[2])
        bar.update()

    import scipy.optimize  # SciPy's optimizers load with the first fit that needs one

    result = scipy.optimize.minimize(
        fun,
        x0,
        jac=True,
        method="L-BFGS-B",
        callback=callback,
        options={"maxiter": estimator.max_iter, "maxls": 50, "gtol": estimator.tol, "ftol": 64 * np.finfo(float).eps},
    )
    bar.close()
    if result.status == 1:  # scipy: the iteration limit was reached
        record_not_converged(estimator, what, estimator.max_iter)
    return result, losses or [objective(result.x)[2]]


def check_finite(value: Any, what: str) -> None:
    """Stop with a helpful error when training diverged."""
    if not bool(np.all(np.isfinite(np.asarray(value if np.ndim(value) else [value], dtype=float)))):
        raise DivergenceError(
            f"training diverged: {what} became NaN or inf. Standardize the features ({spell('standardize', True)}, or "
            "scale the columns in the query), lower the learning rate, or raise the regularization."
        )


def record_not_converged(estimator: Any, what: str, max_iter: int) -> None:
    """Keep, in ilargi_db's words, that the fit stopped at ``max_iter`` before converging: ``convergence_warning_``.

    Recorded the same way whoever fits; the caller decides how to tell: ``fit`` warns (scikit-learn's
    ``ConvergenceWarning``) unless told ``warn=False``, ``ilargi_db.train`` warns once the model is whole,
    the SQL functions and the command line return it in their summary. Kept on the estimator because
    warnings filters are process-wide: two threads training at once cannot tell whose warning is whose.
    """
    estimator.convergence_warning_ = not_converged(what, max_iter)


def warn_if_not_converged(estimator: Any, stacklevel: int = 2) -> None:
    """``fit``'s way of telling what it recorded: scikit-learn's ``ConvergenceWarning``, at the caller of ``fit``."""
    message = getattr(estimator, "convergence_warning_", None)
    if message:
        warnings.warn(message, scikit_learns_too(ConvergenceWarning), stacklevel=stacklevel + 1)


def check_gram_size(d: int, max_gram_bytes: int, what: str) -> None:
    """Refuse a dense d x d matrix above the stated memory bound, before any work."""
    needed = 8 * d * d
    if needed > max_gram_bytes:
        raise ValueError(
            f"{what} forms a dense {d:,} x {d:,} matrix ({needed / 2**20:,.0f} MiB), above "
            f"{spell('max_gram_bytes', max_gram_bytes)} bytes: use the default {spell('solver', 'auto')} (an "
            f"iterative solver that never forms it), or raise {spell('max_gram_bytes')}."
        )
