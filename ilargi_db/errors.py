"""Exceptions raised by ilargi_db.

Every error says what was wrong and what to do about it. They derive from
``ValueError`` so that code catching bad input in the usual way keeps working.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class IlargiError(ValueError):
    """Base class of every error ilargi_db raises on bad input."""


class PlanError(IlargiError):
    """The training query cannot be read as a training set over joins."""


class NotFactorizableError(IlargiError):
    """A feature of the query cannot be computed inside a single source.

    The query is valid SQL and describes a training set, but at least one
    feature expression mixes columns of two or more sources, so the normalized
    matrix cannot hold it. ``features`` lists ``(name, expression, sources)``.
    """

    def __init__(self, message: str, features: tuple[tuple[str, str, tuple[str, ...]], ...]):
        super().__init__(message)
        self.features = features


class BackendUnavailableError(IlargiError):
    """The requested array backend (e.g. CuPy) cannot run on this machine."""


class NotStreamable(IlargiError):
    """The job cannot be read in row partitions (its fact is not a base table read once per row)."""


class DivergenceError(IlargiError, FloatingPointError):
    """Training produced NaN or inf."""


class ModelNotFoundError(IlargiError):
    """No model of that name in the registry."""


class ForeignRegistryError(IlargiError):
    """Schema ``ilargi`` holds a table or view of a registry name that ilargi_db did not create."""


class DamagedModelError(IlargiError):
    """A stored model (a registry row or a saved file) cannot be rebuilt: edited, cut short, or not a model.

    ``why`` says what did not read back (e.g. ``"KeyError: 'coef_'"``).
    """

    def __init__(self, message: str, why: str):
        super().__init__(message)
        self.why = why


class SpillLost(IlargiError):
    """A spilled partition's file no longer holds what was written (cut short): it is read from DuckDB again."""


class InvalidParameterError(ValueError, TypeError):
    """An estimator parameter of the wrong type or out of its range (raised, as scikit-learn's is, before any
    fitting; see :func:`ilargi_db.models.estimator.scikit_learns_too`)."""


class NotFittedError(ValueError, AttributeError):
    """An estimator used before ``fit`` (as scikit-learn's, both a ValueError and an AttributeError)."""


class ConvergenceWarning(UserWarning):
    """A fit stopped at its iteration limit before its tolerance (as scikit-learn's warning of the name; ilargi_db's
    own class, so that training never imports scikit-learn: filter ``ilargi_db.ConvergenceWarning``)."""


class StaleArtifact(Exception):
    """A stored artifact does not line up with the database: the job reads cold instead (never reaches a caller)."""


class TrainingInterrupted(KeyboardInterrupt):
    """A job was interrupted (Ctrl-C or :func:`~ilargi_db.interruption.interrupt_training`): nothing was stored.

    A ``KeyboardInterrupt``, so that ``except Exception`` does not swallow a request to stop.
    """


# -- the caller's language -------------------------------------------------------------------
#
# One message serves three surfaces: Python keywords, SQL arguments and JSON options, CLI flags.
# Entry points set CALLER (the SQL functions on DuckDB's thread, the command line in main); a
# message names a setting through ``spell`` and reads right wherever it surfaces.

CALLER: ContextVar[str] = ContextVar("ilargi_caller", default="python")

# Settings that are arguments of the SQL functions and of the command line, not options.
ARGUMENTS = frozenset({"target", "algorithm", "query", "name"})


@contextmanager
def _set(variable: ContextVar[str], value: str) -> Iterator[None]:
    token = variable.set(value)
    try:
        yield
    finally:
        variable.reset(token)


def speaking_to(caller: str) -> contextlib.AbstractContextManager[None]:
    """Word the errors raised inside for ``caller``: "python", "sql" or "cli"."""
    return _set(CALLER, caller)


# The query a planner error is about: the training query, unless an entry point that reads another
# query (evaluate, predict) names it with ``speaking_of``.
QUERY: ContextVar[str] = ContextVar("ilargi_query", default="the training query")


def speaking_of(query: str) -> contextlib.AbstractContextManager[None]:
    """Name the query the errors raised inside are about, e.g. "the query to evaluate on"."""
    return _set(QUERY, query)


def the_query() -> str:
    """The query the current planner errors are about ("the training query" by default).

    >>> with speaking_of("the query to score"):
    ...     the_query()
    'the query to score'
    """
    return QUERY.get()


def spell(name: str, value: object = ...) -> str:
    """How the current caller passes setting ``name`` (with ``value``, when one is given).

    A string value in angle brackets is a placeholder (``"<label column>"``).

    >>> spell("standardize", True)
    'standardize=True'
    >>> with speaking_to("sql"):
    ...     spell("standardize", True), spell("target", "<label column>")
    ('options := \\'{"standardize": true}\\'', "the target argument ('<label column>')")
    >>> with speaking_to("cli"):
    ...     spell("standardize", True), spell("target", "<label column>"), spell("target", None)
    ('--options \\'{"standardize": true}\\'', '--target <label column>', 'no --target')
    """
    caller = CALLER.get()
    given = value is not ...
    placeholder = isinstance(value, str) and value.startswith("<")
    if caller == "python":
        if not given:
            return name
        return f"{name}={value!r}"
    if name in ARGUMENTS:
        if caller == "cli":
            if not given:
                return f"--{name}"
            return f"no --{name}" if value is None else f"--{name} {value}"
        if not given:
            return f"the {name} argument"
        return f"the {name} argument ({'NULL' if value is None else repr(value) if placeholder else _sql(value)})"
    option = f"'{{{json.dumps(name)}: {json.dumps(value)}}}'" if given else f"'{{{json.dumps(name)}: ...}}'"
    return f"options := {option}" if caller == "sql" else f"--options {option}"


def worded(python: str, options: str) -> str:
    """One message in the caller's words: ``python`` for keyword parameters, ``options`` where settings are
    options (SQL's options JSON, the command line's ``--options``)."""
    return python if CALLER.get() == "python" else options


def literal(value: object) -> str:
    """``value`` as the current caller writes it: ``None`` in Python, ``NULL`` in SQL and the command line."""
    return repr(value) if CALLER.get() == "python" else "NULL" if value is None else _sql(value)


def _sql(value: object) -> str:
    return "'" + str(value).replace("'", "''") + "'" if isinstance(value, str) else json.dumps(value)
