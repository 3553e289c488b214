"""A transformer's output as scikit-learn's ``set_output`` chooses it: arrays, or a pandas or polars DataFrame whose
columns are ``get_feature_names_out()``.

scikit-learn's own mixin (``sklearn.utils._set_output``) is private and would import scikit-learn with every
estimator; this one gives the same contract: ``set_output(transform=...)`` on the estimator first, else scikit-learn's
global ``transform_output`` where scikit-learn is loaded, else arrays. A pipeline's ``set_output`` reaches every step
through it. Only ``transform`` and ``fit_transform`` defined by a transformer that names its output columns are
wrapped, as scikit-learn wraps them. A transform that returns a view of the join (``StandardScaler`` on a normalized
matrix) returns it as it is, whatever the container: a DataFrame of it would build the join.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

CONTAINERS = ("default", "pandas", "polars")
WRAPPED = ("transform", "fit_transform")


def output_container(estimator: Any) -> str:
    """The container ``estimator``'s transforms return: its own ``set_output``, else scikit-learn's global one."""
    chosen = getattr(estimator, "_sklearn_output_config", {}).get("transform")
    if chosen is None:
        sklearn = sys.modules.get("sklearn")  # never imported for this: a process without it has no global choice
        chosen = sklearn.get_config().get("transform_output", "default") if sklearn is not None else "default"
    return checked_container(chosen)


def checked_container(container: str) -> str:
    """``container`` where it is one of :data:`CONTAINERS`, in scikit-learn's words else."""
    if container not in CONTAINERS:
        raise ValueError(f"output config must be in {sorted(CONTAINERS)}, got {container!r}")
    return container


def in_container(estimator: Any, data: Any, original: Any) -> Any:
    """``data`` (a transform's output) in ``estimator``'s output container, its columns the output's names and, for
    pandas, its index the input's (``original``) where that is a DataFrame."""
    container = output_container(estimator)
    if container == "default":
        return data
    from ilargi_db.linalg import is_normalized  # here: ilargi_db.connect() imports this module, not linalg

    if is_normalized(data):
        return data  # a view of the join (a normalized matrix standardized) stays one: a DataFrame would build it
    import scipy.sparse

    if scipy.sparse.issparse(data):
        raise ValueError(
            f"the transformer outputs a SciPy sparse matrix, which {container} output cannot hold: transform dense "
            "rows, or set_output(transform='default')."
        )
    columns = list(estimator.get_feature_names_out())
    if container == "pandas":
        import pandas as pd

        if isinstance(data, pd.DataFrame):
            data = data.copy(deep=False)
            data.columns = columns
            return data
        index = original.index if isinstance(original, (pd.DataFrame, pd.Series)) else None
        return pd.DataFrame(data, index=index, columns=columns, copy=False)
    try:
        import polars as pl
    except ImportError:
        raise ImportError("polars output (set_output(transform='polars')) needs polars: pip install polars") from None

    if isinstance(data, pl.DataFrame):
        return data.rename(dict(zip(data.columns, columns)))
    return pl.DataFrame(data, schema=columns, orient="row")


def _wrapped(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: Any, X: Any, *args: Any, **kwargs: Any) -> Any:
        out = method(self, X, *args, **kwargs)
        if isinstance(out, tuple):  # e.g. (transformed, extra): the first is the rows
            return (in_container(self, out[0], X), *out[1:])
        return in_container(self, out, X)

    return wrapper


class TransformOutput:
    """``set_output`` for a transformer (see the module's docstring)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not hasattr(cls, "get_feature_names_out"):
            return
        for name in WRAPPED:
            method = vars(cls).get(name)
            if method is not None and not getattr(method, "__wrapped__", None):
                setattr(cls, name, _wrapped(method))

    def set_output(self, *, transform: str | None = None) -> Any:
        """Set the container ``transform`` and ``fit_transform`` return: ``"default"`` (arrays), ``"pandas"`` or
        ``"polars"`` (a DataFrame of the output's columns); None keeps the current one."""
        if transform is None:
            return self
        self._sklearn_output_config = {
            **getattr(self, "_sklearn_output_config", {}),
            "transform": checked_container(transform),
        }
        return self


__all__ = ["CONTAINERS", "TransformOutput", "checked_container", "in_container", "output_container"]
