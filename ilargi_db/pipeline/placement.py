"""Where the training rows live while the model fits: in memory, streamed from DuckDB, or on a cluster.

Part of the plan phase: after the cost model has chosen a strategy, :func:`stream_plan` says whether the
data exceed the memory budget (and how to partition the fact then), and :func:`placed_choice` prices the
chosen plan where it will run.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import duckdb

from ilargi_db.byte_sizes import format_bytes, size_in_bytes
from ilargi_db.cost_model.features import JobStats, job_stats
from ilargi_db.cost_model.memory import array_bytes, memory_limit_bytes, partition_row_bytes, resident_bytes
from ilargi_db.cost_model.plan import PhysicalPlan, cheapest_streamed, distributed_plan, streamed_plan
from ilargi_db.errors import IlargiError, NotStreamable
from ilargi_db.metadata.stream import read_once
from ilargi_db.models.catalog import Placement, Strategy
from ilargi_db.plan import JoinGraph
from ilargi_db.read_snapshot import renew_snapshot
from ilargi_db.reuse.fingerprint import volatile_expression

STREAM_SHARE_OF_FREE_MEMORY = 0.5  # the default memory budget: this share of the memory free at the start
MIN_PARTITION_ROWS = 256  # below this a partition's query costs more than its rows
SPILL_HEADROOM = 1.25  # spill only where the disk has this many times the data free
# While a job streams, DuckDB's own memory_limit, left at its default (80% of the machine, where its buffer pool
# keeps every block of the fact it has read), is held at this share of the budget, and at least DUCKDB_LEAST (its
# scans and aggregates over a Parquet fact failed at 32 MiB). A limit the caller set is theirs: it is kept, and so
# is an in-memory database's whose tables already take more than half of it.
DUCKDB_SHARE_OF_BUDGET = 0.5
DUCKDB_LEAST = 128 << 20


@dataclass(frozen=True)
class StreamPlan:
    """How a job over the memory budget streams: the fact read in partitions, spilled to disk or not."""

    memory_budget: int
    needed: int  # bytes the training data would take in memory
    rows_per_partition: int
    partitions: int  # as planned from the fact's rows; the rows in use are known once the stream opens
    spill: bool
    spill_why: str
    why: str
    duckdb_memory: int | None = None  # DuckDB's memory_limit while the job streams (None: the caller's, lower)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_memory_budget() -> int | None:
    """Half the memory free now (Linux ``MemAvailable``), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(STREAM_SHARE_OF_FREE_MEMORY * int(line.split()[1]) * 1024)
    except OSError:
        return None
    return None


def check_streamable(graph: JoinGraph, placement: Placement) -> None:
    """Refuse expressions that give other values on every read: a stream reads the data several times (and
    a cluster's workers cannot read the tables a subquery names)."""
    what = "streaming" if placement == Placement.STREAMED else "training on a cluster"
    if graph.row_selection:
        how = "reads the fact in ranges of its rowid" if placement == Placement.STREAMED else "reads its files apart"
        raise IlargiError(
            f"{what} {how}, so it cannot keep the rows that {graph.row_selection} picks from the whole join. "
            "Train the sample in memory (it is over the memory budget: sample fewer rows, or raise memory_budget), "
            "or create a table of the sampled rows first and train on it."
        )
    expressions = [p.sql for p in graph.filters] + [f.sql for f in graph.features]
    why = volatile_expression(expressions, subqueries=placement == Placement.STREAMED)
    if why:
        raise IlargiError(
            f"{what} reads the data more than once, and the rows must be the same each time, but {why}: take it "
            "out of the query (materialize a sample into a table first), or train in memory."
        )


def stream_plan(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, chosen: str, stats: JobStats | None, memory_budget: Any
) -> StreamPlan | None:
    """How to stream the job when its data exceed the memory budget (None: it fits in memory).

    Partitions are sized so that two (the one computing, the one prefetched) fit in the budget beside the
    dimensions (scanned whole). The budget bounds the training data; the solvers' few
    n-length vectors (the target, scores, residuals: 8 bytes a row each) come on top.
    """
    budget = size_in_bytes(memory_budget, "memory_budget") if memory_budget is not None else default_memory_budget()
    if budget is None:
        return None
    if stats is None:
        try:
            stats = job_stats(con, graph)
        except IlargiError:  # the counts failed: the in-memory read will say why, if anything is wrong
            renew_snapshot(con)
            return None
    needed = array_bytes(stats)[chosen if graph.factorizable else Strategy.MATERIALIZED]
    if needed <= budget:
        return None
    fact = stats.source(graph.sources[0].alias)  # the first FROM source: the one streamed
    dimensions = resident_bytes(stats, fact.alias)  # read whole, beside the partitions
    per_row = partition_row_bytes(stats, fact.alias)
    free = budget - dimensions
    if free < 2 * per_row * MIN_PARTITION_ROWS:
        least = dimensions + 2 * per_row * MIN_PARTITION_ROWS
        raise IlargiError(
            f"memory_budget {format_bytes(budget)} cannot hold the dimensions ({format_bytes(dimensions)}, read "
            f"whole) beside partitions of the fact: give at least {format_bytes(least)} (the whole job needs about "
            f"{format_bytes(needed)})."
        )
    rows = int(free // (2 * per_row))
    spill, spill_why = spill_fits(tempfile.gettempdir(), needed)
    if not spill and read_once(con, graph):
        raise NotStreamable(
            f"this query's fact is not a base table or Parquet files, so streaming reads it once and keeps its "
            f"partitions on local disk, but {spill_why.removeprefix('not spilled: ')}. Free disk space (or point "
            "TMPDIR at a larger disk), copy the fact into a DuckDB table, or raise the memory budget."
        )
    duckdb_memory = duckdb_memory_for(con, budget)
    held = f"; DuckDB's memory_limit held at {format_bytes(duckdb_memory)} meanwhile" if duckdb_memory else ""
    why = (
        f"the data need about {format_bytes(needed)}, over the memory budget of {format_bytes(budget)}: the fact is "
        f"read from DuckDB in partitions of {rows:,} rows, the next read while the current one computes, again on "
        f"every pass{held}"
    )
    return StreamPlan(
        memory_budget=budget,
        needed=needed,
        rows_per_partition=rows,
        partitions=max(1, math.ceil(fact.rows / rows)),
        spill=spill,
        spill_why=spill_why,
        why=why,
        duckdb_memory=duckdb_memory,
    )


def duckdb_memory_for(con: duckdb.DuckDBPyConnection, budget: int) -> int | None:
    """DuckDB's memory_limit for a job streamed under ``budget`` (None: the caller's own limit stays)."""
    wanted = max(int(DUCKDB_SHARE_OF_BUDGET * budget), DUCKDB_LEAST)
    current = memory_limit_bytes(con)
    if current is None or current != _default_memory_limit():  # the caller's own setting: kept
        return None
    if current <= wanted:
        return None
    try:  # an in-memory database's tables live in that memory: a lower limit would push them out to disk
        path, used = con.sql(
            "SELECT (SELECT path FROM duckdb_databases() WHERE database_name = current_database()), "
            "(SELECT sum(memory_usage_bytes) FROM duckdb_memory())"
        ).fetchall()[0]
    except duckdb.Error:
        return None
    return wanted if path or (used or 0) <= wanted // 2 else None


@functools.cache
def _default_memory_limit() -> int | None:
    """DuckDB's default memory_limit on this machine (the same for every database the process opens)."""
    with duckdb.connect() as fresh:
        return memory_limit_bytes(fresh)


@contextlib.contextmanager
def duckdb_memory_held(con: duckdb.DuckDBPyConnection, limit: int | None) -> Iterator[None]:
    """DuckDB's ``memory_limit`` (at its default) held at ``limit`` bytes for the block, then reset.

    The setting is the database's (every connection to it shares one buffer pool), so it is held only while
    the job runs, and only where the caller left it at DuckDB's default (:func:`duckdb_memory_for`).
    """
    if limit is None:
        yield
        return
    con.execute(f"SET memory_limit = '{int(limit) // 1024}KiB'")
    try:
        yield
    finally:
        try:
            con.execute("RESET memory_limit")
        except duckdb.Error:  # pragma: no cover - a connection closed under the job: nothing to restore
            pass


def placed_choice(
    explanation: Any, plan: PhysicalPlan | None, streams: StreamPlan | None, workers: int, choose: bool = False
) -> tuple[Any, str]:
    """The factorized plan of ``plan``'s solver as it runs streamed (``streams``) or on ``workers`` workers,
    priced (``plan`` itself when the cost model has no such plan), and why where it chose the solver.

    ``choose`` (the caller left the solver to the plan): streamed, the cheapest solver as it runs there
    (DuHL reads the partitions otherwise than the others), and why, against the next one (else "")."""
    if explanation is None or plan is None:
        return plan, ""
    factorized = [
        p
        for p in explanation.plans
        if p.strategy == Strategy.FACTORIZED and (p.solver == plan.solver or choose and streams is not None)
    ]
    if not factorized:
        return plan, ""
    if streams is not None:
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):  # no sysconf (Windows): priced as read back from disk
            memory = 0
        priced = [streamed_plan(p, streams.needed, streams.partitions, streams.spill, memory) for p in factorized]
        return cheapest_streamed(priced)
    return distributed_plan(factorized[0], workers), ""


def spill_fits(where: str, needed: int) -> tuple[bool, str]:
    """Whether the encoded partitions fit on the spill directory's disk, and what the plan says about it."""
    free = shutil.disk_usage(where).free
    if free >= SPILL_HEADROOM * needed:
        return True, f"each partition spilled to local disk ({where}) after its first read, and loaded back"
    return False, (
        f"not spilled: {where} has {format_bytes(free)} free for about {format_bytes(needed)}, so every pass reads "
        "the fact from DuckDB again (set TMPDIR to a larger disk to spill)"
    )
