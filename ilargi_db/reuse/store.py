"""The artifact store: two tiers of the artifacts training jobs made, kept by utility under byte budgets.

- **In process** (:class:`MemoryTier`): live objects (arrays, the encoded matrix with its memoized Gram),
  shared by every connection of the process. Keys are content-addressed (see
  :mod:`~ilargi_db.reuse.fingerprint`), so an artifact is right for any database whose tables hold what
  it was made from.
  Listing and clearing are per database (:func:`database_scope`): a database sees and clears only the
  artifacts its own jobs made or used.
- **Beside the database** (:class:`DatabaseTier`): for a file database opened for writing, so a new
  process reuses them: the index in table ``ilargi.artifacts_store`` and each payload in a file of the
  directory beside the database file (:mod:`~ilargi_db.reuse.payload_files`, ``<file>.ilargi/``), read
  back at the disk's speed. Nothing read from there is believed: each payload is sealed (an HMAC over its
  key, its kind and its bytes, under a secret kept outside the database, :mod:`~ilargi_db.reuse.seal`),
  hashed as it is read, and only then decoded (:mod:`~ilargi_db.reuse.codec`: raw arrays, never pickles).
  A read-only database, or a job with ``reuse="memory"``, neither loads nor stores there.

Each tier keeps what it has room for by utility, Experiment Graph's measure: (hits + 1) x the seconds it
took to compute / its bytes. A stored artifact that would take longer to load than to recompute is not
loaded (:meth:`DatabaseTier.worth_loading`).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ilargi_db.database_identity import database_file
from ilargi_db.errors import IlargiError
from ilargi_db.read_snapshot import in_transaction, roll_back
from ilargi_db.reuse import payload_files
from ilargi_db.reuse.remembered import remembered
from ilargi_db.reuse.seal import artifact_secret, secret_path
from ilargi_db.schema_objects import described, ilargi_objects

DEFAULT_MEMORY_BUDGET = 1 << 30  # bytes the in-process tier may hold
DEFAULT_STORAGE_BUDGET = 1 << 30  # bytes the payload files of a database file may hold
# Reading a payload file back and hashing it (HMAC-SHA256, the bound): 9.6 MB in 5.3 ms from the page cache on
# 2 cores (a BLOB from DuckDB: 25 ms in a new process). A disk that has not cached the file reads slower.
LOAD_BYTES_PER_SECOND = 1.5e9
LOAD_SECONDS = 0.0003  # and opening its file


def nbytes_of(value: Any) -> int:
    """Bytes an artifact's value holds (arrays, Arrow arrays, dicts and lists of them, objects that say)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (pa.Array, pa.ChunkedArray, pa.Table)):
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(nbytes_of(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(nbytes_of(v) for v in value)
    nbytes = getattr(value, "nbytes", None)
    return int(nbytes) if isinstance(nbytes, (int, np.integer)) else 64


@dataclass
class Artifact:
    """One stored result of a step, with what it cost to make and how often it served."""

    key: str
    kind: str  # "rows", "column", "stats", "gram", ...
    what: str  # in words, for the artifacts view
    value: Any
    nbytes: int
    compute_seconds: float
    hits: int = 0
    created: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.time)
    databases: set[str] = field(default_factory=set)  # the databases whose jobs made or used it (database_scope)

    @property
    def utility(self) -> float:
        return (self.hits + 1) * self.compute_seconds / max(self.nbytes, 1)


class MemoryTier:
    """Live artifacts of this process under a byte budget; the least useful per byte leave first."""

    def __init__(self, budget: int = DEFAULT_MEMORY_BUDGET) -> None:
        self.budget = budget
        self.items: dict[str, Artifact] = {}
        self.lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.items.values())

    def get(self, key: str, database: str | None = None) -> Artifact | None:
        """The artifact under ``key``, counted as a hit (and as ``database``'s from now on), or None."""
        with self.lock:
            artifact = self.items.get(key)
            if artifact is not None:
                artifact.hits += 1
                artifact.last_used = time.time()
                if database is not None:
                    artifact.databases.add(database)
            return artifact

    def put(self, artifact: Artifact, database: str | None = None) -> bool:
        """Keep ``artifact`` (made by a job of ``database``) if it is worth its bytes against what is kept;
        whether it was kept."""
        with self.lock:
            if artifact.nbytes > self.budget:
                return False
            held = self.items.pop(artifact.key, None)
            if held is not None:
                artifact.databases |= held.databases
            if database is not None:
                artifact.databases.add(database)
            used = sum(a.nbytes for a in self.items.values())
            if used + artifact.nbytes > self.budget:
                ranked = sorted(self.items.values(), key=lambda a: a.utility)
                freed, leaving = 0, []
                for candidate in ranked:
                    if used - freed + artifact.nbytes <= self.budget:
                        break
                    if candidate.utility >= artifact.utility:
                        return False  # everything left to evict is worth more per byte
                    leaving.append(candidate.key)
                    freed += candidate.nbytes
                for key in leaving:
                    del self.items[key]
            self.items[artifact.key] = artifact
            return True

    def of(self, database: str | None) -> list[Artifact]:
        """The artifacts ``database``'s jobs made or used (every one for None: the process's own view)."""
        with self.lock:
            return [a for a in self.items.values() if database is None or database in a.databases]

    def discard(self, keys: list[str]) -> None:
        """Forget the artifacts under ``keys`` (made from a read that turned out not to be one snapshot)."""
        with self.lock:
            for key in keys:
                self.items.pop(key, None)

    def shrink(self) -> None:
        """Leave the budget: the least useful per byte go first."""
        with self.lock:
            for artifact in sorted(self.items.values(), key=lambda a: a.utility):
                if sum(a.nbytes for a in self.items.values()) <= self.budget:
                    break
                del self.items[artifact.key]

    def clear(self, database: str | None = None) -> int:
        """Forget ``database``'s artifacts (those another database used too stay, as its own); every one for
        None. Returns how many ``database`` no longer sees."""
        with self.lock:
            if database is None:
                n = len(self.items)
                self.items.clear()
                return n
            n = 0
            for key, artifact in list(self.items.items()):
                if database in artifact.databases:
                    artifact.databases.discard(database)
                    n += 1
                    if not artifact.databases:
                        del self.items[key]
            return n


# -- the database tier ---------------------------------------------------------------------------------

ARTIFACTS_TABLE = "ilargi.artifacts_store"
ARTIFACTS_VIEW = "ilargi.artifacts"
SETTINGS_TABLE = "ilargi.artifact_settings"

# What the store keeps in schema ilargi, as it creates each object. A table or view of one of these names is the
# store's only when DuckDB describes it exactly as this DDL does (the test ilargi.models passes, see
# sql_functions/registry.py): ilargi_db never writes, replaces or empties any other.
STORE_DDL = {
    "artifacts_store": (
        f"CREATE TABLE IF NOT EXISTS {ARTIFACTS_TABLE} (key VARCHAR PRIMARY KEY, kind VARCHAR, what VARCHAR, "
        "nbytes BIGINT, compute_seconds DOUBLE, hits BIGINT, created TIMESTAMP, last_used TIMESTAMP, payload BLOB)"
    ),
    "artifacts": (  # what any DuckDB client can list (the payloads stay out of it)
        f"CREATE VIEW IF NOT EXISTS {ARTIFACTS_VIEW} AS SELECT kind, what, nbytes, compute_seconds, hits, "
        f"created, last_used, key FROM {ARTIFACTS_TABLE}"
    ),
    "artifact_settings": f"CREATE TABLE IF NOT EXISTS {SETTINGS_TABLE} (storage_budget BIGINT)",
}


def _store_objects(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[str, str]]:
    """``{name: (kind, SQL)}`` of the tables and views in schema ilargi of the current database with a store name."""
    return {name: found for name, found in ilargi_objects(con).items() if name in STORE_DDL}


@functools.cache
def _expected_objects() -> dict[str, tuple[str, str]]:
    """The store's objects as :data:`STORE_DDL` creates them (described once per DuckDB release)."""
    found = remembered(f"described: {sorted(STORE_DDL.values())}", lambda: described(STORE_DDL.values()))
    return {name: (kind, sql) for name, (kind, sql) in found.items()}


def foreign_objects(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """``{name: kind}`` of the tables and views in schema ilargi named like a store object that the store did not
    create (its own are as :data:`STORE_DDL` makes them)."""
    expected = _expected_objects()
    return {name: kind for name, (kind, sql) in _store_objects(con).items() if (kind, sql) != expected[name]}


def not_ours(name: str, kind: str) -> str:
    """What to do about a user's table or view ``ilargi.<name>`` that has a store object's name."""
    return (
        f"schema ilargi has a {kind} {name} that ilargi_db did not create, and ilargi_db never writes or replaces "
        f"your objects: rename yours (ALTER {kind.upper()} ilargi.{name} RENAME TO my_{name}) or drop it"
    )


def refuse_foreign(con: duckdb.DuckDBPyConnection, name: str, then: str) -> None:
    """Raise :class:`IlargiError` when store object ``name`` is a user's table or view (before anything is written)."""
    if name in (foreign := foreign_objects(con)):
        raise IlargiError(f"{not_ours(name, foreign[name])}, then {then} again.")


def store_warnings(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Why a training on ``con`` stores no artifact in the database, or stores them under the default budget."""
    foreign = foreign_objects(con)
    found = [
        f"no artifact is stored in this database: {not_ours(name, kind)} to store them again."
        for name, kind in foreign.items()
        if name != "artifact_settings"
    ]
    why = DatabaseTier.settings(con, foreign)[1]
    if artifact_secret() is None:
        found.append(
            f"no artifact is stored in or loaded from this database: {secret_path()} is not "
            "a private file of this user's (mode 600), so nothing stored could be told from a forgery. Remove it, "
            "or set ILARGI_CACHE_DIR to a directory of your own."
        )
    database = database_file(con)
    if database is not None and not payload_files.usable_directory(database):
        where = payload_files.directory_of(database)
        found.append(
            f"no artifact is stored in or loaded from {where}: it is not a directory of this user's that only this "
            "user may write (a symlink, a file, another user's, or writable by others). Remove it: ilargi_db makes "
            "it again, private."
        )
    return found + ([why] if why else [])


class DatabaseTier:
    """``ilargi.artifacts_store`` of a file database: artifacts a later process or session can load."""

    @staticmethod
    def exists(con: duckdb.DuckDBPyConnection) -> bool:
        """Whether the store's own table is there (a user's table of its name is not read)."""
        return _store_objects(con).get("artifacts_store") == _expected_objects()["artifacts_store"]

    @staticmethod
    def settings(con: duckdb.DuckDBPyConnection, foreign: dict[str, str] | None = None) -> tuple[int, str | None]:
        """The storage budget set in this database, and why the default stands instead where it does.

        The default where none is set; where the settings table is a user's, or holds no one size (several
        rows, NULL, a negative number), the default with a warning: never a failing statement, which would
        fail a training after its fit or abort a caller's transaction.
        """
        foreign = foreign_objects(con) if foreign is None else foreign
        default = f"the default storage budget ({DEFAULT_STORAGE_BUDGET:,} bytes) is used"
        if "artifact_settings" in foreign:
            return DEFAULT_STORAGE_BUDGET, f"{not_ours('artifact_settings', foreign['artifact_settings'])}; {default}."
        if "artifact_settings" not in _store_objects(con):
            return DEFAULT_STORAGE_BUDGET, None
        rows = con.execute(f"SELECT storage_budget FROM {SETTINGS_TABLE} LIMIT 3").fetchall()
        if not rows:
            return DEFAULT_STORAGE_BUDGET, None
        (value,) = rows[0]
        if len(rows) == 1 and value is not None and value >= 0:
            return int(value), None
        if len(rows) > 1:
            held = f"{len(rows) if len(rows) < 3 else 'more than 2'} rows"
        else:
            held = "a NULL storage budget" if value is None else f"a storage budget of {value} bytes"
        return DEFAULT_STORAGE_BUDGET, (
            f"{SETTINGS_TABLE} holds {held}, not one budget of 0 bytes or more: {default}. Set it again "
            "(ilargi_artifact_budget(NULL, '1GB') in SQL, ilargi_db.set_artifact_budget(con, storage='1GB'))."
        )

    @staticmethod
    def budget(con: duckdb.DuckDBPyConnection) -> int:
        """The storage budget set in this database (the default where none is, or where it is not one size)."""
        return DatabaseTier.settings(con)[0]

    @staticmethod
    def set_budget(con: duckdb.DuckDBPyConnection, budget: int) -> None:
        """Keep ``budget`` in the store's settings table (created if missing; a user's table of its name is refused)."""
        refuse_foreign(con, "artifact_settings", "set the budget")
        own = not in_transaction(con)  # in a caller's transaction the writes are part of it
        if own:
            con.begin()
        try:
            con.execute("CREATE SCHEMA IF NOT EXISTS ilargi")
            con.execute(STORE_DDL["artifact_settings"])
            con.execute(f"DELETE FROM {SETTINGS_TABLE}")
            con.execute(f"INSERT INTO {SETTINGS_TABLE} VALUES (?)", [budget])
            if own:
                con.commit()
        except BaseException:
            if own:
                roll_back(con)
            raise

    @staticmethod
    def index(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[int, float]]:
        """key -> (bytes, compute seconds) of every stored artifact (no payload is read)."""
        if not DatabaseTier.exists(con):
            return {}
        rows = con.execute(  # what the file holds is checked, not believed: odd rows are left out
            f"SELECT key, TRY_CAST(nbytes AS BIGINT), TRY_CAST(compute_seconds AS DOUBLE) FROM {ARTIFACTS_TABLE} "
            "WHERE TRY_CAST(key AS VARCHAR) IS NOT NULL"
        ).fetchall()
        return {
            str(key): (int(nbytes), float(seconds))
            for key, nbytes, seconds in rows
            if nbytes is not None and nbytes >= 0 and seconds is not None and 0 <= seconds < float("inf")
        }

    @staticmethod
    def load_seconds(nbytes: int) -> float:
        return LOAD_SECONDS + nbytes / LOAD_BYTES_PER_SECOND

    @staticmethod
    def worth_loading(nbytes: int, compute_seconds: float) -> bool:
        return DatabaseTier.load_seconds(nbytes) < compute_seconds

    @staticmethod
    def load(con: duckdb.DuckDBPyConnection, keys: dict[str, str]) -> dict[str, dict[str, Any]]:
        """The payloads stored under ``keys`` (``{key: kind}``, one query for their index rows) that this user's
        processes sealed for that key and kind; anything else (unsealed, sealed elsewhere, a file damaged, cut
        short, swapped or missing) is left out: a miss, not an error."""
        secret = artifact_secret()
        database = database_file(con)
        if not keys or secret is None or database is None:
            return {}
        rows = con.execute(
            f"SELECT key, payload, TRY_CAST(nbytes AS BIGINT) FROM {ARTIFACTS_TABLE} "
            "WHERE key IN (SELECT unnest(?::VARCHAR[]))",
            [list(keys)],
        ).fetchall()
        found = {}
        with payload_files.opened_directory(database) as directory:
            if directory is None:
                return {}
            for key, row_payload, nbytes in rows:
                if key not in keys or nbytes is None or nbytes < 0:
                    continue
                try:
                    value = payload_files.read(directory, secret, key, keys[key], row_payload, nbytes)
                except Exception:  # noqa: BLE001 - sealed by us yet unreadable (another release's codec): a miss
                    continue
                if value is not None:
                    found[key] = value
        return found

    @staticmethod
    def save(
        con: duckdb.DuckDBPyConnection,
        artifacts: list[tuple[Artifact, Callable[[], dict[str, Any]]]],
        hits: dict[str, int],
    ) -> list[tuple[Artifact, int]]:
        """Store ``artifacts`` (with a function giving each payload) and add ``hits``, in one transaction.

        Each payload goes to a new file beside the database, its index row to ``ilargi.artifacts_store``. An
        artifact stored under the same key is replaced (the new one belongs with the read that made it). Keeps
        the stored set under the database's storage budget by utility; the files of what left are deleted once
        the transaction commits, those written are deleted if it does not. Returns the artifacts stored, each
        with its file's bytes; none when anything failed, another connection writing at the same time
        included: artifacts are an optimization, so the training that made them never fails for them, and no
        transaction is left open.
        """
        budget = DatabaseTier.budget(con)
        secret = artifact_secret()
        database = database_file(con)
        if secret is None or database is None:
            return []  # nothing this process stores could be believed by a later one
        with payload_files.opened_directory(database, create=True) as directory:
            if directory is None:
                return []
            try:
                con.begin()
            except duckdb.Error:
                return []
            written: list[str] = []
            leaving: list[str] = []
            try:
                stored = DatabaseTier._save_in(con, directory, secret, budget, artifacts, hits, written, leaving)
                con.commit()
            except BaseException as err:
                roll_back(con)  # a failed commit has already ended it
                payload_files.remove(directory, written)
                if not isinstance(err, Exception):  # an interruption goes on up, the transaction ended
                    raise
                return []
            payload_files.remove(directory, leaving)
            return stored

    @staticmethod
    def _save_in(
        con: duckdb.DuckDBPyConnection,
        directory: int,
        secret: bytes,
        budget: int,
        artifacts: list[tuple[Artifact, Callable[[], dict[str, Any]]]],
        hits: dict[str, int],
        written: list[str],
        leaving: list[str],
    ) -> list[tuple[Artifact, int]]:
        """:meth:`save`'s writes inside its transaction; the files it wrote and those to delete after it."""
        if set(foreign_objects(con)) & {"artifacts_store", "artifacts"}:  # a user's: never written (store_warnings)
            return []
        con.execute("CREATE SCHEMA IF NOT EXISTS ilargi")
        con.execute(STORE_DDL["artifacts_store"])
        con.execute(STORE_DDL["artifacts"])
        if hits:
            con.execute(
                f"UPDATE {ARTIFACTS_TABLE} AS a SET hits = a.hits + h.n, last_used = now()::TIMESTAMP "
                "FROM (SELECT unnest(?::VARCHAR[]) AS key, unnest(?::BIGINT[]) AS n) AS h WHERE a.key = h.key",
                [list(hits), list(hits.values())],
            )
        keys = [a.key for a, _ in artifacts]
        leaving += DatabaseTier._delete(con, keys)
        used = int(con.execute(f"SELECT coalesce(sum(nbytes), 0) FROM {ARTIFACTS_TABLE}").fetchall()[0][0])
        stored = []
        for artifact, payload in artifacts:
            if artifact.nbytes > budget:  # the payload's arrays (its file adds a header of a few hundred bytes)
                continue
            row_payload = payload_files.write(directory, secret, artifact.key, artifact.kind, payload())
            name = payload_files.file_name(row_payload)
            written.append(name)
            size = payload_files.size_on_disk(directory, [name])
            if used + size > budget:
                freed, evicted = DatabaseTier._evict(con, used + size - budget, artifact.compute_seconds / size)
                used -= freed
                leaving += evicted
                if used + size > budget:
                    payload_files.remove(directory, [written.pop()])
                    continue
            con.execute(
                f"INSERT INTO {ARTIFACTS_TABLE} VALUES (?, ?, ?, ?, ?, 0, now()::TIMESTAMP, now()::TIMESTAMP, ?)",
                [artifact.key, artifact.kind, artifact.what, size, artifact.compute_seconds, row_payload],
            )
            used += size
            stored.append((artifact, size))
        return stored

    @staticmethod
    def _delete(con: duckdb.DuckDBPyConnection, keys: list[str] | None) -> list[str]:
        """Delete the index rows of ``keys`` (every row for None); the payload files they named."""
        where = "" if keys is None else " WHERE key IN (SELECT unnest(?::VARCHAR[]))"
        params = [] if keys is None else [keys]
        rows = con.execute(f"SELECT payload FROM {ARTIFACTS_TABLE}{where}", params).fetchall()
        con.execute(f"DELETE FROM {ARTIFACTS_TABLE}{where}", params)
        return [name for (payload,) in rows if (name := payload_files.file_name(payload)) is not None]

    @staticmethod
    def clear(con: duckdb.DuckDBPyConnection) -> int:
        """Forget every stored artifact: the index rows, and every payload file beside the database (those of
        writes that never committed too). Returns how many index rows there were."""
        n = 0
        if DatabaseTier.exists(con):
            n = int(con.execute(f"SELECT count(*) FROM {ARTIFACTS_TABLE}").fetchall()[0][0])
            DatabaseTier._delete(con, None)
        database = database_file(con)
        if database is not None:
            with payload_files.opened_directory(database) as directory:
                if directory is not None:
                    payload_files.remove(directory, payload_files.every_file(directory))
        return n

    @staticmethod
    def location(con: duckdb.DuckDBPyConnection) -> str | None:
        """The directory holding ``con``'s database's payload files (None where it keeps none)."""
        database = database_file(con)
        return None if database is None else str(payload_files.directory_of(database))

    @staticmethod
    def shrink(con: duckdb.DuckDBPyConnection, budget: int) -> None:
        """Delete the least useful stored artifacts until they fit ``budget``."""
        if not DatabaseTier.exists(con):
            return
        used = int(con.execute(f"SELECT coalesce(sum(nbytes), 0) FROM {ARTIFACTS_TABLE}").fetchall()[0][0])
        if used > budget:
            leaving = DatabaseTier._evict(con, used - budget, float("inf"))[1]
            database = database_file(con)
            if database is not None:
                with payload_files.opened_directory(database) as directory:
                    if directory is not None:
                        payload_files.remove(directory, leaving)

    @staticmethod
    def _evict(con: duckdb.DuckDBPyConnection, needed: int, utility: float) -> tuple[int, list[str]]:
        """Delete the index rows of the least useful stored artifacts (below ``utility`` per byte) to free
        ``needed`` bytes: the bytes freed and the payload files to delete once that commits."""
        rows = con.execute(
            f"SELECT key, nbytes FROM {ARTIFACTS_TABLE} WHERE (hits + 1) * compute_seconds / greatest(nbytes, 1) < ? "
            "ORDER BY (hits + 1) * compute_seconds / greatest(nbytes, 1)",
            [utility],
        ).fetchall()
        freed, leaving = 0, []
        for key, nbytes in rows:
            if freed >= needed:
                break
            leaving.append(key)
            freed += int(nbytes)
        if freed < needed:
            return 0, []
        return freed, DatabaseTier._delete(con, leaving)


MEMORY = MemoryTier()  # the process's in-process tier


__all__ = [
    "ARTIFACTS_TABLE",
    "ARTIFACTS_VIEW",
    "Artifact",
    "DEFAULT_MEMORY_BUDGET",
    "DEFAULT_STORAGE_BUDGET",
    "DatabaseTier",
    "MEMORY",
    "MemoryTier",
    "STORE_DDL",
    "foreign_objects",
    "not_ours",
    "nbytes_of",
    "refuse_foreign",
    "store_warnings",
]
