"""The sizes ilargi_db refuses to build, in one place, and how a user raises them.

A tree model is stored as one SQL macro that DuckDB binds on every query calling it, so its size bounds the
model: every node of every tree, every category an ``IN`` list names and every group's model count against one
budget (:data:`MACRO_NODES`). A model the SQL functions or the command line train (to be written as a macro:
``ModelSpec.as_macro``) is checked from its options before anything is read or allocated (``n_estimators`` x the
most nodes a tree may have, an upper bound), and for a model per group as its groups' trees grow (the nodes grown
so far: a bound times the groups would refuse most such models); every model exactly before its macro is written
(``save_model`` too). A search's parameter sets are counted before any is built (:data:`GRID_SETS`).

Each limit is raised by an environment variable read when it is checked (``ILARGI_MAX_MACRO_NODES=400000``),
the same for Python, SQL and the command line: a larger macro binds slower (DuckDB takes about a second for
60,000 nodes), which the user accepts by raising it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ilargi_db.errors import IlargiError


@dataclass(frozen=True)
class Limit:
    """One bound: its default, the environment variable that raises it, and what it counts (in words)."""

    variable: str
    default: int
    counts: str  # what it bounds, after "more than the 100,000": "a SQL macro holds"

    def value(self) -> int:
        """The bound in force: the environment variable's positive integer, or the default where it is unset."""
        text = os.environ.get(self.variable, "").strip().replace("_", "")
        if not text:
            return self.default
        if not (text.isascii() and text.isdigit()) or len(text) > 15 or int(text) < 1:
            raise IlargiError(
                f"environment variable {self.variable}={os.environ[self.variable]!r} must be a positive integer: "
                f"the most {self.counts}, {self.default:,} if unset."
            )
        return int(text)

    def check(self, count: int, what: str, fix: str) -> None:
        """Refuse ``count`` above the bound: the error says ``what`` was counted (its ``{count}`` the number),
        the limit, ``fix`` and how to raise the limit."""
        limit = self.value()
        if count > limit:
            raise IlargiError(
                f"{what.format(count=f'{count:,}')}, more than the {limit:,} {self.counts}. {fix}; or raise the "
                f"limit with the environment variable {self.variable} (e.g. {self.variable}={_raised(count)})."
            )


def _raised(count: int) -> int:
    """A round limit above ``count`` (two significant digits), for the error's example."""
    step = 10 ** max(len(str(count)) - 2, 0)
    return (count // step + 1) * step


# How to bring a tree ensemble under MACRO_NODES, in the option names every refusal gives.
SMALLER_TREES = "Train fewer trees (n_estimators) or smaller ones (max_leaves, max_depth)"


@runtime_checkable
class NodeBounded(Protocol):
    """An estimator whose SQL macro grows with its nodes (a tree ensemble): what :data:`MACRO_NODES` bounds."""

    def max_nodes(self) -> int:
        """The most nodes its options let it grow, known before any row is read."""
        ...

    def node_count(self) -> int:
        """The nodes it grew (fitted)."""
        ...

    def size_options(self) -> str:
        """The options that bound :meth:`max_nodes`, in words (``n_estimators=100 trees of max_leaves=31``)."""
        ...


# DuckDB binds a CASE ensemble of 500 trees of 63 leaves (62,500 nodes) in about a second (docs/benchmarks.md).
MACRO_NODES = Limit(
    "ILARGI_MAX_MACRO_NODES",
    100_000,
    "a SQL macro holds (its tree nodes and the categories it lists, all groups' together)",
)
# Each set is fitted once per fold; ten thousand already takes hours on any real join.
GRID_SETS = Limit("ILARGI_MAX_GRID_SETS", 10_000, "a search tries")

__all__ = ["GRID_SETS", "MACRO_NODES", "SMALLER_TREES", "Limit", "NodeBounded"]
