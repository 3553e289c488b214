"""Exceptions raised by ilargi_db.

Every error says what was wrong and what to do about it. They derive from
``ValueError`` so that code catching bad input in the usual way keeps working.
"""

from __future__ import annotations


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
