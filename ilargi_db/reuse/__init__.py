"""Reuse across training jobs: an artifact store in the process and inside the database (Experiment Graph).

A training job's steps leave artifacts (:mod:`~ilargi_db.reuse.job` lists them), each keyed by the
SQL of its step and a content fingerprint of every column it read
(:mod:`~ilargi_db.reuse.fingerprint`), so an artifact serves a later job only while everything it was
made from is unchanged. Two tiers (:mod:`~ilargi_db.reuse.store`): live objects in this process, and
files beside a database file (``<file>.ilargi/``, indexed in ``ilargi.artifacts_store``) for later
processes, each under a byte budget.

>>> import ilargi_db
>>> con = ilargi_db.connect()
>>> _ = con.sql("CREATE TABLE t AS SELECT range * 1.0 AS x, 2.0 * range AS y FROM range(50)")
>>> first = ilargi_db.train(con, "SELECT x, y FROM t", "y", "linear_regression", "factorized", "numpy", alpha=1.0)
>>> again = ilargi_db.train(con, "SELECT x, y FROM t", "y", "linear_regression", "factorized", "numpy", alpha=2.0)
>>> any("encoded matrix" in line for line in again.reused_)
True
>>> {"rows", "column", "matrix"} <= {a["kind"] for a in artifacts(con)}
True
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any

import duckdb

from ilargi_db.byte_sizes import size_in_bytes
from ilargi_db.database_identity import database_file, database_path, database_scope
from ilargi_db.errors import IlargiError, worded
from ilargi_db.reuse.fingerprint import JobFingerprint, fingerprint_job
from ilargi_db.reuse.job import JobReuse
from ilargi_db.reuse.payload_files import file_name
from ilargi_db.reuse.store import (
    ARTIFACTS_TABLE,
    MEMORY,
    DatabaseTier,
    refuse_foreign,
)


def artifacts(con: duckdb.DuckDBPyConnection | None = None) -> list[dict[str, Any]]:
    """Every stored artifact: this process's (tier ``"memory"``) and, given ``con``, its database's.

    Each is a dict: tier, kind, what, nbytes, compute_seconds (what making it took), hits, created,
    last_used (timestamps), key, location (``"this process"``, or the payload's file beside the database).
    """
    found = [
        {
            "tier": "memory",
            "kind": a.kind,
            "what": a.what,
            "nbytes": a.nbytes,
            "compute_seconds": a.compute_seconds,
            "hits": a.hits,
            "created": datetime.fromtimestamp(a.created, timezone.utc).replace(tzinfo=None),
            "last_used": datetime.fromtimestamp(a.last_used, timezone.utc).replace(tzinfo=None),
            "key": a.key,
            "location": "this process",
        }
        for a in MEMORY.of(database_scope(con) if con is not None else None)
    ]
    where = DatabaseTier.location(con) if con is not None else None
    if where is not None and DatabaseTier.exists(con):
        columns = "kind, what, nbytes, compute_seconds, hits, created, last_used, key"
        rows = con.execute(f"SELECT {columns}, payload FROM {ARTIFACTS_TABLE} ORDER BY last_used DESC").fetchall()
        for *row, payload in rows:
            name = file_name(payload)
            location = os.path.join(where, name) if name else "not readable (stored by another release)"
            found.append({"tier": "database", **dict(zip(columns.split(", "), row)), "location": location})
    return found


def clear_artifacts(con: duckdb.DuckDBPyConnection | None = None) -> dict[str, int]:
    """Forget every artifact of this process and, given ``con`` on a writable file, of its database.

    A table of the user's named ``ilargi.artifacts_store`` is never emptied: clearing is refused, with what to
    rename, before anything is forgotten.
    """
    if con is not None and database_file(con) is not None:
        refuse_foreign(con, "artifacts_store", "clear the artifacts")
    cleared = {"memory": MEMORY.clear(database_scope(con) if con is not None else None), "database": 0}
    if con is not None and database_file(con) is not None:
        cleared["database"] = DatabaseTier.clear(con)
    return cleared


def set_artifact_budget(
    con: duckdb.DuckDBPyConnection | None = None, memory: int | str | None = None, storage: int | str | None = None
) -> dict[str, int]:
    """Set the bytes the in-process tier (``memory``) and ``con``'s database (``storage``) may hold.

    Sizes are bytes or strings such as ``"512MB"``; ``0`` keeps nothing; None leaves a budget as it is.
    The storage budget is kept in the database (``ilargi.artifact_settings``), for every later session.
    Returns both budgets. A table of the user's named ``ilargi.artifact_settings`` is never replaced: setting
    the storage budget over it is refused, with what to rename.
    """
    memory_budget = None if memory is None else size_in_bytes(memory, "the memory budget")
    if storage is not None:
        if con is None or database_file(con) is None:
            read_only = con is not None and database_path(con) is not None  # a file, but opened read-only
            raise IlargiError(
                "a storage budget needs a connection to a database file opened for writing: "
                + (
                    "this one is open read-only, so nothing can be stored in it (reopen it writable: "
                    + worded("without read_only=True", "ATTACH it without READ_ONLY")
                    + ", or set the memory budget instead)."
                    if read_only
                    else "an in-memory database keeps no artifacts beyond the process (set the memory budget instead)."
                )
            )
        budget = size_in_bytes(storage, "the storage budget")
        DatabaseTier.set_budget(con, budget)  # first: a refusal leaves both budgets as they were
        DatabaseTier.shrink(con, budget)
    if memory_budget is not None:
        MEMORY.budget = memory_budget
        MEMORY.shrink()
    stored = DatabaseTier.budget(con) if con is not None and database_file(con) is not None else None
    return {"memory": MEMORY.budget, **({"storage": stored} if stored is not None else {})}


__all__ = [
    "JobFingerprint",
    "JobReuse",
    "artifacts",
    "clear_artifacts",
    "fingerprint_job",
    "set_artifact_budget",
]
