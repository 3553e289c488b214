"""One job's use of the artifact store: what it finds, what it adds, and what it says about it.

:class:`JobReuse` coordinates; what it coordinates lives beside it. The artifacts of a job, each keyed by
:mod:`~ilargi_db.reuse.fingerprint`:

- ``rows`` and ``column``: the factorized read (:mod:`~ilargi_db.reuse.read_artifacts`), a new feature
  read alone by rowid (:mod:`~ilargi_db.reuse.rowid_reads`);
- ``stats``: the cost model's statistics of the job;
- ``matrix`` (in process only): the encoded normalized matrix and its fitted encoder, with the
  sums it has computed (X^T X, column sums) memoized on it;
- ``gram``: X^T X and the column sums, so a new process skips them too;
- ``model`` (in process only): earlier fits on the same rows, for warm starts
  (:mod:`~ilargi_db.reuse.warm_starts`).

What the store holds for a read goes to the cost model as facts (:mod:`~ilargi_db.reuse.holdings`),
which it prices.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from ilargi_db.backend import to_host
from ilargi_db.database_identity import database_file, database_scope
from ilargi_db.errors import IlargiError, StaleArtifact
from ilargi_db.linalg import CROSSPROD, NormalizedMatrix
from ilargi_db.metadata import DIMetadata
from ilargi_db.models.catalog import REUSE_IN_MEMORY
from ilargi_db.plan.join_graph import JoinGraph
from ilargi_db.read_snapshot import in_transaction
from ilargi_db.reuse import rowid_reads, warm_starts
from ilargi_db.reuse.fingerprint import NOT_REUSABLE, JobFingerprint, digest, fingerprint_job, still_the_same
from ilargi_db.reuse.holdings import Held, ReadHoldings
from ilargi_db.reuse.read_artifacts import aligned, assemble, plain_features, row_ids, split, unaligned
from ilargi_db.reuse.store import (
    MEMORY,
    Artifact,
    DatabaseTier,
    nbytes_of,
    store_warnings,
)

STATS, STATS_WHAT = "stats", "the job's statistics"  # the cost model's statistics, as an artifact
MATRIX, MATRIX_WHAT = "matrix", "the encoded matrix"  # the training data, encoded (in process only)
BINS, BINS_WHAT = "bins", "the features' bins"  # a tree model's bin edges and categories (JSON)
BINNED_WHAT = "the binned rows"  # a tree model's training data, binned (in process only)


@dataclass
class Use:
    """One artifact a job used: what, from which tier, and the seconds it took to make."""

    kind: str
    what: str
    tier: str  # "memory" or "database"
    saved_seconds: float


@dataclass
class JobReuse:
    """The store as one job sees it. ``enabled=False`` (``reuse=False``) finds and keeps nothing."""

    con: duckdb.DuckDBPyConnection
    fingerprint: JobFingerprint = NOT_REUSABLE
    persist: bool = False  # the job may write the database tier (train does; explain and predict do not)
    on_disk: bool = False  # the database tier is on: a file database opened for writing, reuse not "memory"
    used: list[Use] = field(default_factory=list)
    made: list[tuple[Artifact, Any]] = field(default_factory=list)  # (artifact, payload function or None)
    deferred: list[Artifact] = field(default_factory=list)  # written with the next write unless worth one alone
    stored_index: dict[str, tuple[int, float]] | None = None
    hit_keys: list[str] = field(default_factory=list)  # keys found that the database stores
    sums_key: str = ""
    sums_found: bool = False
    database: str = ""  # database_scope(con): whose artifacts these are, for listing and clearing
    warnings: list[str] = field(default_factory=list)  # what the store tells the models (store_warnings)

    @classmethod
    def open(
        cls,
        con: duckdb.DuckDBPyConnection,
        graph: JoinGraph,
        categorical: list[bool],
        enabled: bool | str = True,
        persist: bool = False,
        off_because: str = "",
    ) -> JobReuse:
        """Fingerprint ``graph``'s sources (inside the job's read snapshot) and look at the stored index.

        ``enabled``: True (both tiers), False (none), or ``"memory"`` (this process's tier alone).
        A database opened read-only has no database tier: nothing is loaded from or written beside it.
        ``off_because`` says why a job that keeps nothing does (the caller's ``reuse=False`` otherwise).
        """
        if off_because:
            return cls(con, JobFingerprint(False, off_because))
        if not enabled:
            return cls(con)
        fingerprint = fingerprint_job(con, graph, categorical)
        on_disk = enabled != REUSE_IN_MEMORY and database_file(con) is not None
        job = cls(con, fingerprint, persist=persist and on_disk, on_disk=on_disk, database=database_scope(con))
        if job.persist and job.enabled:
            job.warnings = store_warnings(con)
        return job

    @property
    def enabled(self) -> bool:
        return self.fingerprint.reusable

    # -- lookups ------------------------------------------------------------------------------

    def _index(self) -> dict[str, tuple[int, float]]:
        if self.stored_index is None:
            self.stored_index = DatabaseTier.index(self.con) if self.on_disk else {}
        return self.stored_index

    def find(self, kind: str, key: str, what: str) -> Any:
        """The value stored under ``key`` (memory, then the database when worth loading), or None."""
        return self.find_many(kind, {key: what}).get(key)

    def find_many(self, kind: str, wanted: dict[str, str], together: bool = False) -> dict[str, Any]:
        """``{key: value}`` of the ``wanted`` keys (``{key: what}``) stored: memory first, then one query.

        ``together``: the stored ones are loaded if loading them all is worth it (a read's columns: one
        missing is read again by rowid, a scan of its table, which costs more than its share of the cold read
        that made it), else each one if loading it is.
        """
        if not self.enabled:
            return {}
        found: dict[str, Any] = {}
        load = []
        if together:
            stored = [self._index()[key] for key in wanted if key and key in self._index()]
            together = DatabaseTier.worth_loading(sum(n for n, _ in stored), sum(s for _, s in stored))
        for key, what in wanted.items():
            if not key:
                continue
            artifact = MEMORY.get(key, self.database)
            if artifact is not None:
                self.used.append(Use(kind, what, "memory", artifact.compute_seconds))
                if key in self._index():
                    self.hit_keys.append(key)  # the database counts the hits of what it stores
                found[key] = artifact.value
            elif key in self._index() and (together or DatabaseTier.worth_loading(*self._index()[key])):
                load.append(key)
        for key, payload in DatabaseTier.load(self.con, dict.fromkeys(load, kind)).items():
            seconds = self._index()[key][1]
            self.used.append(Use(kind, wanted[key], "database", seconds))
            self.hit_keys.append(key)
            MEMORY.put(Artifact(key, kind, wanted[key], payload, nbytes_of(payload), seconds, hits=1), self.database)
            found[key] = payload
        return found

    def held(self, key: str, what: str) -> Held | None:
        """Without loading: ``key``'s artifact as held (its tier, and the seconds it saves and loading takes),
        or None where no tier holds it or loading it would take longer than making it."""
        if not self.enabled or not key:
            return None
        found = MEMORY.items.get(key)
        if found is not None:
            return Held(what, "memory", found.compute_seconds, 0.0)
        stored = self._index().get(key)
        if stored is not None and DatabaseTier.worth_loading(*stored):
            return Held(what, "database", stored[1], DatabaseTier.load_seconds(stored[0]))
        return None

    def find_matrix(self, key: str) -> Any:
        """The encoded matrix under ``key`` (live, in this process only), or None."""
        return self.find(MATRIX, key, MATRIX_WHAT)

    def keep_matrix(self, key: str, data: Any, seconds: float) -> None:
        """Keep the encoded matrix in this process: live arrays (perhaps on a GPU), its sums memoized on it."""
        self.keep(MATRIX, key, MATRIX_WHAT, data, seconds, persistable=False)

    def find_stats(self) -> Any:
        """The job's statistics as stored (a dict the cost model reads back), or None."""
        return self.find(STATS, self.fingerprint.stats_key, STATS_WHAT)

    def keep_stats(self, stats: dict, seconds: float) -> None:
        """Keep the job's statistics (as a dict) for later jobs on the same data."""
        self.keep(STATS, self.fingerprint.stats_key, STATS_WHAT, stats, seconds)

    def unuse_last(self) -> None:
        """The artifact :meth:`find` returned last could not be read back: it was not used after all."""
        self.used.pop()

    def keep(
        self,
        kind: str,
        key: str,
        what: str,
        value: Any,
        seconds: float,
        persistable: bool = True,
        in_memory: bool = True,
        deferrable: bool = False,
    ) -> None:
        """Keep ``value`` in memory (if ``in_memory``) and, if the job persists and it is ``persistable``, in the
        database later: ``deferrable``, with the next write when this job would write nothing else and it
        saves less than :data:`WRITE_ALONE_SECONDS`."""
        if not self.enabled or not key:
            return
        artifact = Artifact(key, kind, what, value, nbytes_of(value), seconds)
        if in_memory:
            MEMORY.put(artifact, self.database)
        if deferrable:
            self.deferred.append(artifact)
        else:
            self.made.append((artifact, persistable))

    def find_all_stored(self, kind: str, keys: list[str], what: str, decode: Callable[[Any], Any]) -> list | None:
        """The values the database tier stores under every one of ``keys`` (never this process's tier), each
        through ``decode``, read in one load; None, and no use or hit counted, unless every one is there and
        decodes (``decode`` returns None for one it refuses)."""
        if not (self.enabled and keys and all(key in self._index() for key in keys)):
            return None
        found = DatabaseTier.load(self.con, dict.fromkeys(keys, kind))
        values = [decode(found[key]) if key in found else None for key in keys]
        if any(v is None for v in values):
            return None
        for key in keys:
            self.used.append(Use(kind, what, "database", self._index()[key][1]))
            self.hit_keys.append(key)
        return values

    def finish(self) -> str | None:
        """Write this job's new artifacts (and the hits counted since the last write) to the database tier;
        what was written, in words (None when nothing was).

        Runs after the job's read snapshot closed, never inside a caller's transaction. Only what a later
        job would load rather than recompute is written: the read's artifacts (the key-only join and its
        columns) together or not at all, since one without the others serves nothing. A job that adds
        nothing writes nothing: its hits, and its deferrable artifacts saving less than
        :data:`WRITE_ALONE_SECONDS`, wait for the next write (a commit to a file costs an fsync).
        """
        if not (self.enabled and self.persist):
            return None
        path = database_file(self.con)
        with _HITS_LOCK:
            _PENDING_HITS.setdefault(path, Counter()).update(self.hit_keys)
        made = [a for a, persistable in self.made if persistable]
        read = [a for a in made if a.kind in ("rows", "column")]
        worth = DatabaseTier.worth_loading(sum(a.nbytes for a in read), sum(a.compute_seconds for a in read))
        new = [
            a
            for a in made
            if a.kind not in ("rows", "column") and DatabaseTier.worth_loading(a.nbytes, a.compute_seconds)
        ]
        new += read if read and worth else []
        deferred = [a for a in self.deferred if DatabaseTier.worth_loading(a.nbytes, a.compute_seconds)]
        alone = sum(a.compute_seconds for a in deferred) >= WRITE_ALONE_SECONDS
        with _HITS_LOCK:
            waiting = _PENDING_WRITES.setdefault(path, [])
            # One artifact per key (the latest): a key twice in one save breaks the index's primary key.
            if in_transaction(self.con) or not (new or alone):
                waiting[:] = list({a.key: a for a in waiting + deferred}.values())[-MAX_WAITING:]
                return None
            new = list({a.key: a for a in _PENDING_WRITES.pop(path) + deferred + new}.values())
            hits = _PENDING_HITS.pop(path, Counter())
        stored = DatabaseTier.save(self.con, [(a, (lambda a=a: a.value)) for a in new], dict(hits))
        return stored_line(stored, DatabaseTier.location(self.con)) if stored else None

    def confirm_read(self) -> None:
        """After the job read its data: refuse the job if a source outside the read's snapshot (a Parquet or
        CSV file, a view over one) changed since it was fingerprinted. The read may mix two states of the
        file, and its artifacts would serve under the old content's keys: they are forgotten."""
        if not self.enabled or not self.made or still_the_same(self.con, self.fingerprint):
            return
        MEMORY.discard([artifact.key for artifact, _ in self.made])
        self.made.clear()
        raise IlargiError(
            "a file (or another source outside the database) that the training query reads changed while it was "
            "read: the rows may mix its old and new contents. Train again once it no longer changes."
        )

    def saved_seconds(self) -> float:
        return sum(u.saved_seconds for u in self.used)

    def describe(self) -> list[str]:
        """What this job reused, in words, for the model and ``explain``."""
        if not self.fingerprint.reusable:
            return [f"no reuse: {self.fingerprint.why_not}"] if self.fingerprint.why_not else []
        lines = [f"{u.what} ({u.kind}, from {u.tier}, saved {u.saved_seconds * 1e3:,.0f} ms)" for u in self.used]
        return lines

    def holdings(self, graph: JoinGraph, matrix_key: str) -> ReadHoldings | None:
        """What the store holds for the factorized read of this job (nothing loaded), for the cost model to
        price; None when the job reuses nothing."""
        if not self.enabled:
            return None
        matrix = MEMORY.items.get(matrix_key)
        if matrix is not None:
            memoized = CROSSPROD in matrix.value.X.memoized_sums()
            return ReadHoldings(Held("the encoded matrix", "memory", matrix.compute_seconds, 0.0), memoized)
        fp = self.fingerprint
        wanted = {"the key-only join": fp.rows_key}
        wanted.update({f"feature {graph.features[j].name!r}": fp.column_keys[j] for j in plain_features(graph)})
        data = tuple(found for what, key in wanted.items() if (found := self.held(key, what)) is not None)
        gram = self.held(digest("sums", matrix_key), "X^T X and column sums")
        return ReadHoldings(needed=len(wanted), data=data, gram=gram)

    # -- warm starts -------------------------------------------------------------------------

    def warm_start(self, algorithm: str, scaled: bool, names: list[str]) -> tuple[np.ndarray, float, str] | None:
        """The best earlier model of ``algorithm`` on the same rows whose columns this job has too
        (:func:`~ilargi_db.reuse.warm_starts.warm_start`): (coefficients, intercept, what in words)."""
        if not self.enabled:
            return None
        key = warm_starts.fits_key(self.fingerprint.rows_key, algorithm, scaled)
        return warm_starts.warm_start(key, algorithm, names)

    def record_fit(
        self, algorithm: str, scaled: bool, names: list[str], coef: Any, intercept: float, loss: float
    ) -> None:
        """Remember a fitted model (in process) for later warm starts; the last few per algorithm and rows."""
        if self.enabled:
            key = warm_starts.fits_key(self.fingerprint.rows_key, algorithm, scaled)
            warm_starts.record_fit(key, self.database, algorithm, names, coef, intercept, loss)

    # -- the factorized read ------------------------------------------------------------------

    def metadata(self, graph: JoinGraph, categorical: frozenset[int], extract: Any) -> DIMetadata:
        """The job's metadata from stored artifacts where they hold, from ``extract()`` otherwise."""
        fp = self.fingerprint
        if not self.enabled:
            return extract()
        before = len(self.used)
        rows = self.find("rows", fp.rows_key, "the key-only join")
        if rows is not None:
            wanted = {fp.column_keys[j]: f"feature {graph.features[j].name!r}" for j in plain_features(graph)}
            stored = self.find_many("column", wanted, together=True)
            columns = {j: stored.get(fp.column_keys[j]) for j in plain_features(graph)}
            try:
                self._read_unaligned(graph, categorical, rows, columns)
                return assemble(graph, categorical, rows, columns)
            except (StaleArtifact, KeyError, ValueError, IndexError, TypeError):  # a damaged or mismatched artifact
                del self.used[before:]  # read cold: what this read found was not used after all
        began = time.perf_counter()
        meta = extract()
        seconds = time.perf_counter() - began
        self.keep_metadata(graph, categorical, meta, seconds)
        return meta

    def _read_unaligned(
        self, graph: JoinGraph, categorical: frozenset[int], rows: dict, columns: dict[int, dict | None]
    ) -> None:
        """Fill ``columns`` where no artifact of this read of ``rows`` serves: read by rowid from each base
        table (one scan of it), and kept. A source that is not a base table has no rowids: a cold read."""
        for alias, features in unaligned(graph, rows, columns).items():
            ids = row_ids(rows, alias)
            began = time.perf_counter()
            read = rowid_reads.read_columns(self.con, graph, categorical, alias, features, ids)
            seconds = (time.perf_counter() - began) / len(features)
            for j, column in read.items():
                columns[j] = aligned(column, rows)
                what = f"feature {graph.features[j].name!r}"
                self.keep("column", self.fingerprint.column_keys[j], what, columns[j], seconds)

    def keep_metadata(self, graph: JoinGraph, categorical: frozenset[int], meta: DIMetadata, seconds: float) -> None:
        """Split a cold read into the rows artifact and one artifact per feature."""
        fp = self.fingerprint
        rows, columns = split(graph, categorical, meta)
        total = max(nbytes_of(rows) + sum(nbytes_of(c) for c in columns.values()), 1)
        # The read's seconds, shared out by bytes: what each artifact would cost to make again.
        self.keep("rows", fp.rows_key, "the key-only join", rows, seconds * nbytes_of(rows) / total)
        for j, column in columns.items():
            what = f"feature {graph.features[j].name!r}"
            self.keep("column", fp.column_keys[j], what, column, seconds * nbytes_of(column) / total)

    def matrix_key(
        self,
        graph: JoinGraph,
        categorical: Any,
        impute: bool,
        backend: str,
        check: bool = True,
        labelled_only: bool = True,
    ) -> str:
        """The key of ``graph``'s matrix as an encoder with these settings encodes it on ``backend``; it names
        the matrix's sums' artifact too. Besides the data, the key holds the encoder's settings and the names
        it gives the columns (two queries naming the same columns differently differ)."""
        target = graph.target.name if graph.target is not None else None
        flags = [list(map(bool, categorical)), bool(impute), backend, bool(check), bool(labelled_only)]
        settings = [*flags, graph.feature_names, target]
        fp = self.fingerprint
        key = digest("matrix", fp.rows_key, [fp.column_keys[j] for j in sorted(fp.column_keys)], settings)
        self.sums_key = digest("sums", key)
        return key

    def bins_keys(
        self, graph: JoinGraph, categorical: Any, max_bins: int, labelled_only: bool = True
    ) -> tuple[str, str]:
        """Keys of ``graph``'s bins (edges and categories, from its training rows) and of its rows binned with
        them, for trees with ``max_bins``."""
        target = graph.target.name if graph.target is not None else None
        fp = self.fingerprint
        data = [fp.column_keys[j] for j in sorted(fp.column_keys)]
        settings = [list(map(bool, categorical)), int(max_bins), graph.feature_names]
        # The training rows decide the bins: the target (its NULLs left out) is part of their key, and the tag
        # is not the one bins computed over each source's own rows were stored under.
        bins = digest("training bins", fp.rows_key, data, settings, target, bool(labelled_only))
        return bins, digest("binned", bins)

    def find_bins(self, key: str) -> Any:
        """The bins' state stored under ``key`` (JSON, read back through the binner's checks), or None."""
        return self.find(BINS, key, BINS_WHAT)

    def keep_bins(self, key: str, state: dict, seconds: float) -> None:
        self.keep(BINS, key, BINS_WHAT, state, seconds)

    def find_binned(self, key: str) -> Any:
        """The binned training data under ``key`` (live, in this process only), or None."""
        return self.find(MATRIX, key, BINNED_WHAT)

    def keep_binned(self, key: str, data: Any, seconds: float) -> None:
        self.keep(MATRIX, key, BINNED_WHAT, data, seconds, persistable=False)

    def restore_sums(self, X: NormalizedMatrix) -> None:
        """Give ``X`` the stored X^T X and column sums of its matrix (if any): its operators then skip them."""
        found = self.find("gram", self.sums_key, "X^T X and column sums")
        if found is not None:
            X.restore_memoized_sums(found)
            self.sums_found = True

    def keep_sums(self, X: NormalizedMatrix) -> None:
        """After the fits: keep the sums they computed on this matrix (a new process then skips them)."""
        memoized = X.memoized_sums()
        if self.sums_found or not self.sums_key or not memoized or self.sums_key in self._index():
            return  # found, none, or stored already (a matrix from memory whose sums a job before kept)
        value = {name: np.asarray(to_host(sums)) for name, sums in memoized.items()}
        self.keep("gram", self.sums_key, "X^T X and column sums", value, X.memoized_seconds)


def stored_line(stored: list[tuple[Artifact, int]], where: str | None) -> str:
    """What a job stored beside its database, in words: how many artifacts, of what, how many bytes, where."""
    kinds = Counter(artifact.kind for artifact, _ in stored)
    what = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    total = sum(size for _, size in stored)
    size = f"{total / 1e6:,.1f} MB" if total >= 1e5 else f"{total / 1e3:,.1f} kB"
    return (
        f"stored {len(stored)} artifact{'s' if len(stored) != 1 else ''} ({what}; {size}) in {where} "
        '(listed by ilargi_artifacts(); reuse="memory" keeps them in this process only)'
    )


# Per database file, the hits of its stored artifacts this process counted and has not written yet, and the
# deferrable artifacts (each model's record) waiting for the next write.
_PENDING_HITS: dict[str | None, Counter] = {}
_PENDING_WRITES: dict[str | None, list[Artifact]] = {}
# A commit to a database file costs 10-30 ms (an fsync; measured on the 400k star's sweeps): a deferrable
# artifact is worth a write of its own only when it saves a later process ten times that.
WRITE_ALONE_SECONDS = 0.2
MAX_WAITING = 64  # deferrable artifacts kept waiting per database file (the oldest leave first)
_HITS_LOCK = threading.Lock()


__all__ = ["JobReuse", "Use", "stored_line"]
