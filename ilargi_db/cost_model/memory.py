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

import re
from typing import Any

import duckdb

from ilargi_db.cost_model.features import JobStats, SourceStats, job_stats
from ilargi_db.errors import IlargiError
from ilargi_db.plan import JoinGraph
from ilargi_db.read_snapshot import renew_snapshot

FLOAT_BYTES = 8  # one float64 cell of a dense block
INDEX_BYTES = 8  # one int64 entry of an indicator
ONE_HOT_BYTES = 12  # one stored entry of a sparse one-hot row: a float64 value and an int32 column index
_UNITS = {
    "bytes": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "pib": 2**50,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "pb": 10**15,
}


def parse_bytes(text: str) -> int | None:
    """``'1.5 GiB'`` as bytes (DuckDB's way of showing a size); None when it is not a size.

    >>> parse_bytes("953.6 MiB"), parse_bytes("2 GB"), parse_bytes("unlimited")
    (999922073, 2000000000, None)
    """
    found = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", text or "")
    unit = found.group(2).lower() or "bytes" if found else ""
    if unit not in _UNITS:
        return None
    return int(float(found.group(1)) * _UNITS[unit])


def size_in_bytes(value: Any, what: str) -> int:
    """A size the caller gave (bytes, or a string such as ``"512MB"`` or ``"2 GiB"``) as bytes; refuses others.

    >>> size_in_bytes("2GB", "the budget"), size_in_bytes(1024, "the budget")
    (2000000000, 1024)
    """
    found = None
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 and value == int(value):
            found = int(value)
        elif isinstance(value, str):
            found = parse_bytes(value)
    except (OverflowError, ValueError):  # inf, nan, 1e400GB
        found = None
    if found is None:
        raise IlargiError(f"{what} must be a number of bytes or a size such as '512MB' or '2GB', got {value!r}.")
    return found


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
    return {"factorized": int(factorized), "materialized": int(materialized)}


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


def format_bytes(n: float) -> str:
    """``1536`` as ``'1.5 KiB'``.

    >>> format_bytes(10.7 * 2**30)
    '10.7 GiB'
    """
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def check_memory_limit(con: duckdb.DuckDBPyConnection, needed: dict[str, int], strategy: str) -> None:
    """Refuse ``strategy`` when its arrays need more than DuckDB's ``memory_limit``, saying what would fit."""
    limit = memory_limit_bytes(con)
    if limit is None or needed[strategy] <= limit:
        return
    other = "materialized" if strategy == "factorized" else "factorized"
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
        needed = {s: int(explanation.features[f"array_bytes_{s}"]) for s in ("factorized", "materialized")}
    elif stats is not None:
        needed = array_bytes(stats)
    else:
        try:
            needed = array_bytes(job_stats(con, graph))
        except (duckdb.Error, ValueError):  # the counts failed: reading the data will say why
            renew_snapshot(con)  # a failed statement aborted the job's read transaction
            return
    if not graph.factorizable:
        needed.pop("factorized")
    check_memory_limit(con, needed, strategy)
