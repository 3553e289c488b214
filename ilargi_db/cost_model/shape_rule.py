"""Amalur's shape rule: factorize when the join holds over ``FACTORIZE_ABOVE`` times the normalized matrix's cells.

A rule of thumb from the data's shape alone, as Amalur decides: the joined matrix has one row per
output row and every column; the normalized matrix holds each source's block once plus one row index
per output row and block. The cost model falls back on it when it cannot run, and lets it break ties
between plans predicted closer than its kernel models can tell apart; ``benchmarks/bench_plan.py``
scores it beside the cost model.
"""

from __future__ import annotations

from collections.abc import Iterable

from ilargi_db.models.catalog import Strategy

FACTORIZE_ABOVE = 1.5  # factorize when the join holds more than this many times the normalized matrix's cells


def join_cells(n_rows: float, blocks: Iterable[tuple[float, int]], columns: int) -> tuple[float, float]:
    """``(materialized, factorized)`` cells of a join of ``n_rows`` rows and ``columns`` columns.

    ``blocks``: ``(rows, width)`` of each source with features.

    >>> join_cells(100, [(100, 2), (10, 3)], 5)
    (500.0, 430.0)
    """
    blocks = [(float(rows), width) for rows, width in blocks if width]
    factorized = sum(rows * width for rows, width in blocks) + float(n_rows) * len(blocks)
    return float(n_rows) * columns, factorized


def cell_ratio(materialized: float, factorized: float) -> float:
    """How many times the normalized matrix's cells the joined matrix holds."""
    return float(materialized / max(factorized, 1.0))


def shape_strategy(ratio: float) -> str:
    """The strategy Amalur's rule picks for a join holding ``ratio`` times the normalized matrix's cells.

    >>> shape_strategy(1.5), shape_strategy(1.6)
    ('materialized', 'factorized')
    """
    return Strategy.FACTORIZED if ratio > FACTORIZE_ABOVE else Strategy.MATERIALIZED
