"""The memory a training job's arrays need, against DuckDB's ``memory_limit``.

DuckDB keeps its own memory (joins, the Arrow results it hands over) under
``memory_limit``, spilling to disk when needed. The blocks, indicators and
one-hot columns ilargi_db builds are NumPy arrays: DuckDB's buffer manager
never sees them, so the limit cannot bound them. Before any feature column is
read, ilargi_db estimates a lower bound of those arrays from the job's row
counts (:func:`~ilargi_db.cost_model.features.job_stats`) and refuses a job that
needs more than the limit, rather than exceed it.
"""

from __future__ import annotations

from typing import Any

import duckdb

from ilargi_db.byte_sizes import format_bytes, parse_bytes
from ilargi_db.cost_model.features import JobStats, SourceStats, job_stats
from ilargi_db.errors import IlargiError
from ilargi_db.models.catalog import STRATEGIES, Strategy
from ilargi_db.plan import JoinGraph
from ilargi_db.read_snapshot import renew_snapshot

FLOAT_BYTES = 8  # one float64 cell of a dense block
INDEX_BYTES = 8  # one int64 entry of an indicator
ONE_HOT_BYTES = 12  # one stored entry of a sparse one-hot row: a float64 value and an int32 column index


def memory_limit_bytes(con: duckdb.DuckDBPyConnection) -> int | None:
    """DuckDB's ``memory_limit`` setting in bytes (None if it cannot be read)."""
    try:
        shown = con.sql("SELECT system.main.current_setting('memory_limit')").fetchall()[0][0]
    except duckdb.Error:
        return None
    return parse_bytes(str(shown))


def array_bytes(stats: JobStats) -> dict[str, int]:
    """A lower bound of the bytes of the arrays each strategy builds.

    Factorized: every source's block (numeric columns dense, one one-hot entry
    per categorical feature and source row, counting the rows the join uses)
    and one indicator entry per output row and source. Materialized: the same columns, but one row per output row.
    Both hold the target. Temporary copies (Arrow results, caches) come on top.
    """
    n = stats.n_rows
    factorized = materialized = n * FLOAT_BYTES  # the target
    for s in stats.sources:
        if not s.width:
            continue
        row = row_bytes(s)
        # A block holds the source rows that pass its filters, at least those the join uses.
        factorized += min(s.rows, s.referenced) * row + n * INDEX_BYTES
        materialized += n * row
    materialized += n * stats.cross_width * FLOAT_BYTES
    return {Strategy.FACTORIZED: int(factorized), Strategy.MATERIALIZED: int(materialized)}


def row_bytes(source: SourceStats) -> int:
    """Bytes of one row of ``source``'s block: numeric columns dense, one stored entry per categorical feature."""
    return (source.width - source.categorical_width) * FLOAT_BYTES + source.categorical_features * ONE_HOT_BYTES


def resident_bytes(stats: JobStats, streamed: str) -> int:
    """Bytes of the blocks read whole while the source ``streamed`` is read in partitions: the rows of every
    other source the join uses, counted as :func:`array_bytes` counts them."""
    return sum(min(s.rows, s.referenced) * row_bytes(s) for s in stats.sources if s.alias != streamed)


def partition_row_bytes(stats: JobStats, streamed: str) -> int:
    """Bytes one row of the streamed source ``streamed`` takes in a partition: its numbers and categorical
    codes (a code is an index into its categories) with their Arrow copy, an index per other source, the target.
    """
    source = stats.source(streamed)
    numeric = source.width - source.categorical_width
    per_copy = numeric * FLOAT_BYTES + (source.categorical_features + len(stats.sources) - 1) * INDEX_BYTES
    return 2 * per_copy + FLOAT_BYTES


def check_memory_limit(con: duckdb.DuckDBPyConnection, needed: dict[str, int], strategy: str) -> None:
    """Refuse ``strategy`` when its arrays need more than DuckDB's ``memory_limit``, saying what would fit."""
    limit = memory_limit_bytes(con)
    if limit is None or needed[strategy] <= limit:
        return
    other = Strategy.MATERIALIZED if strategy == Strategy.FACTORIZED else Strategy.FACTORIZED
    advice = "raise it (SET memory_limit = '...'), or select fewer rows or columns"
    if other in needed and needed[other] <= limit:
        advice = f"train {other} (it needs about {format_bytes(needed[other])}), or " + advice
    raise IlargiError(
        f"training {strategy} needs at least {format_bytes(needed[strategy])} of arrays, more than DuckDB's "
        f"memory_limit of {format_bytes(limit)}. These NumPy arrays live outside DuckDB's buffer manager, so the "
        f"limit cannot bound them, and ilargi_db refuses rather than exceed it: {advice}."
    )


def check_job_memory(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, strategy: str, explanation: Any = None, stats: Any = None
) -> None:
    """Refuse training ``graph`` with ``strategy`` when its arrays would exceed DuckDB's ``memory_limit``.

    Reuses the sizes the cost estimator's ``explanation`` holds, or the job's ``stats``; otherwise counts
    the job's rows (:func:`~ilargi_db.cost_model.features.job_stats`, two aggregate queries).
    """
    if explanation is not None and "array_bytes_factorized" in explanation.features:
        needed = {s: int(explanation.features[f"array_bytes_{s}"]) for s in STRATEGIES}
    elif stats is not None:
        needed = array_bytes(stats)
    else:
        try:
            needed = array_bytes(job_stats(con, graph))
        except (duckdb.Error, ValueError):  # the counts failed: reading the data will say why
            renew_snapshot(con)  # a failed statement aborted the job's read transaction
            return
    if not graph.factorizable:
        needed.pop(Strategy.FACTORIZED)
    check_memory_limit(con, needed, strategy)
