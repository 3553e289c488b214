"""What the artifact store holds for a job's factorized read, as facts: which artifacts, in which tier,
what making each took and what loading it would take. Nothing is loaded to find them.

The cost model prices these facts (``cost_model.plan.reuse_offer``); the store knows nothing of plans.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Held:
    """One artifact the store holds."""

    what: str  # in words
    tier: str  # "memory" or "database"
    compute_seconds: float  # what making it took: what reusing it saves
    load_seconds: float  # what loading it takes (0 for a live object in memory)


@dataclass(frozen=True)
class ReadHoldings:
    """What the store holds for one job's factorized read.

    The encoded matrix, where this process holds it, serves the whole read: the other artifacts are not
    looked up then.
    """

    matrix: Held | None = None  # the encoded matrix, live in this process
    matrix_gram: bool = False  # X^T X is memoized on it
    needed: int = 0  # the data artifacts the read needs: the key-only join and one per plain feature
    data: tuple[Held, ...] = ()  # those of them the store holds (and a load would be worth it)
    gram: Held | None = None  # X^T X and the column sums, stored by an earlier job


__all__ = ["Held", "ReadHoldings"]
