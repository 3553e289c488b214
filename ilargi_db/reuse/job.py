"""One job's use of the artifact store: what it finds, what it adds, and what it says about it.

The artifacts of a factorized read, each keyed by :mod:`~ilargi_db.reuse.fingerprint`:

- ``rows``: the key-only join's result (every source's indicator, the target, the coalesced
  features, each base table's rowids per block row);
- ``column``: one per feature, its values on its source's rows (numbers, or text for a
  categorical), so a job that adds a feature reads only that column;
- ``stats``: the cost model's statistics of the job;
- ``matrix`` (in process only): the encoded normalized matrix and its fitted encoder, with the
  sums it has computed (X^T X, column sums) memoized on it;
- ``gram``: X^T X and the column sums, so a new process skips them too.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ilargi_db.cost_model.plan import ReuseOffer
from ilargi_db.errors import IlargiError
from ilargi_db.metadata import BlockMetadata, CategoricalMetadata, DIMetadata
from ilargi_db.metadata.arrow_blocks import arrow_to_block, fetch_arrow
from ilargi_db.metadata.scans import ROWID, cast_part, part_column, quote
from ilargi_db.plan.join_graph import JoinGraph
from ilargi_db.plan.sources import with_prefix
from ilargi_db.read_snapshot import in_transaction, renew_snapshot
from ilargi_db.reuse.fingerprint import NOT_REUSABLE, JobFingerprint, digest, fingerprint_job, still_the_same
from ilargi_db.reuse.store import (
    MEMORY,
    Artifact,
    DatabaseTier,
    database_file,
    database_scope,
    nbytes_of,
    store_warnings,
)

MEMOIZED = ("crossprod", "colsums")  # the sums a NormalizedMatrix memoizes that the gram artifact keeps


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
    persist: bool = False  # the job may write ilargi.artifacts_store (train does; explain and predict do not)
    used: list[Use] = field(default_factory=list)
    made: list[tuple[Artifact, Any]] = field(default_factory=list)  # (artifact, payload function or None)
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
        enabled: bool = True,
        persist: bool = False,
    ) -> JobReuse:
        """Fingerprint ``graph``'s sources (inside the job's read snapshot) and look at the stored index."""
        if not enabled:
            return cls(con)
        fingerprint = fingerprint_job(con, graph, categorical)
        job = cls(con, fingerprint, persist=persist and database_file(con) is not None, database=database_scope(con))
        if job.persist and job.enabled:
            job.warnings = store_warnings(con)
        return job

    @property
    def enabled(self) -> bool:
        return self.fingerprint.reusable

    # -- lookups ------------------------------------------------------------------------------

    def _index(self) -> dict[str, tuple[int, float]]:
        if self.stored_index is None:
            self.stored_index = DatabaseTier.index(self.con)  # a read-only database still serves what it stores
        return self.stored_index

    def find(self, kind: str, key: str, what: str) -> Any:
        """The value stored under ``key`` (memory, then the database when worth loading), or None."""
        return self.find_many(kind, {key: what}).get(key)

    def find_many(self, kind: str, wanted: dict[str, str]) -> dict[str, Any]:
        """``{key: value}`` of the ``wanted`` keys (``{key: what}``) stored: memory first, then one query."""
        if not self.enabled:
            return {}
        found: dict[str, Any] = {}
        load = []
        for key, what in wanted.items():
            if not key:
                continue
            artifact = MEMORY.get(key, self.database)
            if artifact is not None:
                self.used.append(Use(kind, what, "memory", artifact.compute_seconds))
                if key in self._index():
                    self.hit_keys.append(key)  # the database counts the hits of what it stores
                found[key] = artifact.value
            elif key in self._index() and DatabaseTier.worth_loading(*self._index()[key]):
                load.append(key)
        for key, payload in DatabaseTier.load(self.con, dict.fromkeys(load, kind)).items():
            seconds = self._index()[key][1]
            self.used.append(Use(kind, wanted[key], "database", seconds))
            self.hit_keys.append(key)
            MEMORY.put(Artifact(key, kind, wanted[key], payload, nbytes_of(payload), seconds, hits=1), self.database)
            found[key] = payload
        return found

    def would_find(self, key: str) -> tuple[str, float] | None:
        """Without loading: the tier holding ``key`` and the seconds it saves, or None."""
        if not self.enabled or not key:
            return None
        found = MEMORY.items.get(key)
        if found is not None:
            return "memory", found.compute_seconds
        stored = self._index().get(key)
        if stored is not None and DatabaseTier.worth_loading(*stored):
            return "database", stored[1]
        return None

    def keep(self, kind: str, key: str, what: str, value: Any, seconds: float, persistable: bool = True) -> None:
        """Keep ``value`` in memory and, if the job persists and it is ``persistable``, in the database later."""
        if not self.enabled or not key:
            return
        artifact = Artifact(key, kind, what, value, nbytes_of(value), seconds)
        MEMORY.put(artifact, self.database)
        self.made.append((artifact, persistable))

    def finish(self) -> int:
        """Write this job's new artifacts (and the hits counted since the last write) to the database.

        Runs after the job's read snapshot closed, never inside a caller's transaction. Only what a later
        job would load rather than recompute is written: the read's artifacts (the key-only join and its
        columns) together or not at all, since one without the others serves nothing. A job that adds
        nothing writes nothing: its hits wait for the next write (a commit to a file costs an fsync).
        """
        if not (self.enabled and self.persist):
            return 0
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
        if not new or in_transaction(self.con):
            return 0
        with _HITS_LOCK:
            hits = _PENDING_HITS.pop(path, Counter())
        return DatabaseTier.save(self.con, [(a, (lambda a=a: a.value)) for a in new], dict(hits))

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

    def offer(self, graph: JoinGraph, matrix_key: str) -> ReuseOffer | None:
        """What the store holds for the factorized read of this job, priced for the cost model (no loading)."""
        if not self.enabled:
            return None
        fp = self.fingerprint
        matrix = MEMORY.items.get(matrix_key)
        if matrix is not None:
            sums = "crossprod" in matrix.value.X.memo
            lines = ["the encoded matrix (in memory)"] + (["X^T X"] if sums else [])
            return ReuseOffer(0.0, "the encoded matrix, kept in memory", sums, matrix.compute_seconds, tuple(lines))
        wanted = {"the key-only join": fp.rows_key}
        wanted.update({f"feature {graph.features[j].name!r}": fp.column_keys[j] for j in _plain(graph)})
        found = {what: self.would_find(key) for what, key in wanted.items()}
        have = {what: f for what, f in found.items() if f is not None}
        sums = self.would_find(digest("sums", matrix_key))
        if not have and sums is None:
            return None
        load = sum(self._load_seconds(wanted[what], tier) for what, (tier, _) in have.items())
        saved = sum(seconds for _, seconds in have.values()) + (sums[1] if sums else 0.0)
        tiers = sorted({tier for tier, _ in have.values()})
        lines = [f"{len(have)} of {len(wanted)} data artifacts (from {' and '.join(tiers)})"] if have else []
        lines += ["X^T X"] if sums else []
        whole = len(have) == len(wanted)
        what = f"{len(have)} stored artifacts from {' and '.join(tiers)}" if whole else ""
        return ReuseOffer(load if whole else None, what, sums is not None, saved, tuple(lines))

    def _load_seconds(self, key: str, tier: str) -> float:
        return 0.0 if tier == "memory" else DatabaseTier.load_seconds(self._index()[key][0])

    # -- warm starts -------------------------------------------------------------------------

    def _fits_key(self, algorithm: str, scaled: bool) -> str:
        return digest("fits", self.fingerprint.rows_key, algorithm, scaled) if self.enabled else ""

    def warm_start(self, algorithm: str, scaled: bool, names: list[str]) -> tuple[np.ndarray, float, str] | None:
        """The best earlier model of ``algorithm`` on the same rows whose columns this job has too.

        Best: the most columns in common, then the lowest training loss. Its coefficients go to the
        columns of the same name, zeros elsewhere. Returns (coefficients, intercept, what in words).
        """
        found = MEMORY.items.get(self._fits_key(algorithm, scaled))
        if found is None:
            return None
        position = {name: j for j, name in enumerate(names)}
        usable = [f for f in found.value["fits"] if set(f["names"]) <= position.keys()]
        if not usable:
            return None
        best = max(usable, key=lambda f: (len(f["names"]), -f["loss"]))
        coef = np.zeros(len(names))
        coef[[position[name] for name in best["names"]]] = best["coef"]
        same = "the same" if len(best["names"]) == len(names) else f"{len(best['names'])} of these {len(names)}"
        what = f"a warm start from an earlier {algorithm} on the same rows ({same} columns)"
        return coef, float(best["intercept"]), what

    def record_fit(
        self, algorithm: str, scaled: bool, names: list[str], coef: Any, intercept: float, loss: float
    ) -> None:
        """Remember a fitted model (in process) for later warm starts; the last few per algorithm and rows."""
        key = self._fits_key(algorithm, scaled)
        if not key:
            return
        held = MEMORY.items.get(key)
        fits = list(held.value["fits"]) if held is not None else []
        fits = [
            *fits,
            {"names": list(names), "coef": np.asarray(coef, dtype=float).copy(), "intercept": intercept, "loss": loss},
        ][-8:]
        value = {"fits": fits}
        MEMORY.put(
            Artifact(key, "model", f"earlier {algorithm} models", value, nbytes_of([f["coef"] for f in fits]), 0.0),
            self.database,
        )

    # -- the factorized read ------------------------------------------------------------------

    def metadata(self, graph: JoinGraph, categorical: frozenset[int], extract: Any) -> DIMetadata:
        """The job's metadata from stored artifacts where they hold, from ``extract()`` otherwise."""
        fp = self.fingerprint
        if not self.enabled:
            return extract()
        before = len(self.used)
        rows = self.find("rows", fp.rows_key, "the key-only join")
        if rows is not None:
            wanted = {fp.column_keys[j]: f"feature {graph.features[j].name!r}" for j in _plain(graph)}
            stored = self.find_many("column", wanted)
            columns = {j: stored.get(fp.column_keys[j]) for j in _plain(graph)}
            try:
                return assemble(self.con, graph, categorical, rows, columns, self)
            except (_Stale, KeyError, ValueError, IndexError, TypeError):  # a damaged or mismatched artifact
                del self.used[before:]  # read cold: what this read found was not used after all
        began = time.perf_counter()
        meta = extract()
        seconds = time.perf_counter() - began
        self.keep_metadata(graph, categorical, meta, seconds)
        return meta

    def keep_metadata(self, graph: JoinGraph, categorical: frozenset[int], meta: DIMetadata, seconds: float) -> None:
        """Split a cold read into the rows artifact and one artifact per feature."""
        fp = self.fingerprint
        rows, columns = split(graph, categorical, meta)
        # Values are in the row order of this read (a view's scan may return another order next time):
        # a column serves only the rows artifact of the same read, or is realigned by rowid.
        read = uuid.uuid4().hex
        rows["read"] = read
        for column in columns.values():
            column["read"] = read
        total = max(nbytes_of(rows) + sum(nbytes_of(c) for c in columns.values()), 1)
        # The read's seconds, shared out by bytes: what each artifact would cost to make again.
        self.keep("rows", fp.rows_key, "the key-only join", rows, seconds * nbytes_of(rows) / total)
        for j, column in columns.items():
            what = f"feature {graph.features[j].name!r}"
            self.keep("column", fp.column_keys[j], what, column, seconds * nbytes_of(column) / total)

    def matrix_key(self, settings: Any) -> str:
        """The key of the encoded matrix made with the encoder ``settings``; it names its sums' artifact too."""
        fp = self.fingerprint
        key = digest("matrix", fp.rows_key, [fp.column_keys[j] for j in sorted(fp.column_keys)], settings)
        self.sums_key = digest("sums", key)
        return key

    def restore_sums(self, X: Any) -> None:
        """Put the stored X^T X and column sums of this matrix (if any) where its operators look first."""
        found = self.find("gram", self.sums_key, "X^T X and column sums")
        if found is not None:
            X.memo.update({name: X.backend.asarray(found[name]) for name in MEMOIZED if name in found})
            self.sums_found = True

    def keep_sums(self, X: Any) -> None:
        """After the fits: keep the sums they computed on this matrix (a new process then skips them)."""
        from ilargi_db.backend import to_host

        if self.sums_found or not self.sums_key or not any(name in X.memo for name in MEMOIZED):
            return
        value = {name: np.asarray(to_host(X.memo[name])) for name in MEMOIZED if name in X.memo}
        seconds = float(X.memo.get("seconds", 0.0))
        self.keep("gram", self.sums_key, "X^T X and column sums", value, seconds)


# Per database file, the hits of its stored artifacts this process counted and has not written yet.
_PENDING_HITS: dict[str | None, Counter] = {}
_HITS_LOCK = threading.Lock()


class _Stale(Exception):
    """A stored artifact does not line up with the database (read a column cold instead)."""


def _plain(graph: JoinGraph) -> list[int]:
    """Features read from one source (their values are per-feature artifacts)."""
    return [j for j, f in enumerate(graph.features) if f.kind == "source"]


def split(graph: JoinGraph, categorical: frozenset[int], meta: DIMetadata) -> tuple[dict, dict[int, dict]]:
    """``meta`` as the rows artifact and one artifact per plain feature (what :func:`assemble` rebuilds)."""
    rows: dict[str, Any] = {"n_rows": meta.n_rows, "source_rows": dict(meta.source_rows)}
    for alias, indicator in meta.indicators.items():
        rows[f"indicator/{alias}"] = indicator
        ids = meta.row_ids.get(alias)
        if ids is not None:
            rows[f"rowids/{alias}"] = np.asarray(ids)
    if meta.target is not None:
        rows["target"] = meta.target
    coalesced = 0
    for block in meta.blocks:
        if graph.features[int(block.columns[0])].kind == "coalesce":
            prefix = f"coalesce/{coalesced}"
            rows.update({f"{prefix}/data": block.data.copy(), f"{prefix}/indicator": block.indicator})
            rows.update({f"{prefix}/column": block.columns, f"{prefix}/fill": block.fill})
            rows.setdefault("coalesce_sources", []).append(block.source)
            coalesced += 1
    columns: dict[int, dict] = {}
    for block in meta.blocks:
        for i, j in enumerate(block.columns):
            if graph.features[int(j)].kind == "source":
                # A copy: training clears NaN in block rows no labelled row uses, in place.
                columns[int(j)] = {"data": block.data[:, i].copy(), "fill": float(block.fill[i])}
    for cat in meta.categoricals:
        columns[cat.feature] = {"values": cat.values, "fill": cat.fill}
    return rows, columns


def _fetch_columns(
    con: duckdb.DuckDBPyConnection,
    graph: JoinGraph,
    alias: str,
    features: list[int],
    categorical: frozenset[int],
    row_ids: np.ndarray,
) -> pa.Table:
    """Features of base table ``alias`` on the rows ``row_ids`` names, in that order.

    Only those rows are read (a semi-join with the stored rowids), so an expression that fails on rows the
    job filtered out fails here neither; any error makes the job read cold instead.
    """
    source = graph.source(alias)
    text = frozenset(part_column(j, 0) for j in features if j in categorical)
    items = [f"{quote(alias)}.rowid AS {ROWID}"] + [
        cast_part(part_column(j, 0), graph.features[j].parts[0].sql, text) for j in features
    ]
    wanted = f"__ilargi_rowids_{uuid.uuid4().hex}"
    con.register(wanted, pa.table({"r": pa.array(np.unique(row_ids[row_ids >= 0]))}))
    try:
        sql = (
            f"{with_prefix(graph.select)}SELECT {', '.join(items)} FROM {source.relation_sql} "
            f"WHERE {quote(alias)}.rowid IN (SELECT r FROM {wanted})"
        )
        table = fetch_arrow(con, sql, what=f"new feature columns of {alias!r}")
    except (IlargiError, duckdb.Error):
        renew_snapshot(con)  # a failed statement aborts the job's read transaction
        raise _Stale from None
    finally:
        con.unregister(wanted)
    found = table.column(ROWID).to_numpy()
    order = np.argsort(found, kind="stable")
    at = np.searchsorted(found[order], row_ids)
    at = np.minimum(at, len(found) - 1) if len(found) else at
    if len(found) == 0 and len(row_ids):
        raise _Stale
    if len(row_ids) and not np.array_equal(found[order][at], row_ids):
        raise _Stale  # a row the stored join names is gone: the fingerprint and the table disagree
    return table.take(pa.array(order[at]))


def assemble(
    con: duckdb.DuckDBPyConnection,
    graph: JoinGraph,
    categorical: frozenset[int],
    rows: dict,
    columns: dict[int, dict | None],
    job: JobReuse,
) -> DIMetadata:
    """The DIMetadata a cold read would give, from the rows artifact and the features' artifacts.

    A feature without an artifact is read from its base table by rowid (one scan per table); a
    source that is not a base table has no rowids, so a missing feature there means a cold read.
    """
    missing: dict[str, list[int]] = {}
    for j, column in columns.items():
        if column is None or column.get("read") != rows.get("read"):  # another read's row order
            missing.setdefault(graph.features[j].parts[0].source, []).append(j)
    for alias, features in missing.items():
        ids = rows.get(f"rowids/{alias}")
        if ids is None:
            raise _Stale
        began = time.perf_counter()
        table = _fetch_columns(con, graph, alias, features, categorical, ids)
        fills = _fills(con, graph, alias, features, categorical)
        seconds = (time.perf_counter() - began) / len(features)
        for j in features:
            name = part_column(j, 0)
            if j in categorical:
                column = {"values": table.column(name).combine_chunks(), "fill": fills[name]}
            else:
                column = {"data": arrow_to_block(table, [name])[:, 0].copy(), "fill": fills[name]}
            column["read"] = rows.get("read")  # aligned to this rows artifact's order
            columns[j] = column
            job.keep("column", job.fingerprint.column_keys[j], f"feature {graph.features[j].name!r}", column, seconds)
    indicators = {s.alias: rows[f"indicator/{s.alias}"] for s in graph.sources}
    blocks: list[BlockMetadata] = []
    cats: list[CategoricalMetadata] = []
    for source in graph.sources:
        plain = [j for j in _plain(graph) if graph.features[j].parts[0].source == source.alias and j not in categorical]
        if plain:
            data = np.column_stack([columns[j]["data"] for j in plain])
            fill = np.array([columns[j]["fill"] for j in plain], dtype=np.float64)
            blocks.append(BlockMetadata(source.alias, data, indicators[source.alias], np.array(plain), fill))
    for j in sorted(categorical):
        alias = graph.features[j].parts[0].source
        column = columns[j]
        cats.append(CategoricalMetadata(alias, j, column["values"], indicators[alias], column["fill"]))
    for k, alias in enumerate(rows.get("coalesce_sources", [])):
        prefix = f"coalesce/{k}"
        blocks.append(
            BlockMetadata(
                alias,
                rows[f"{prefix}/data"],
                rows[f"{prefix}/indicator"],
                rows[f"{prefix}/column"],
                rows[f"{prefix}/fill"],
            )
        )
    n_rows = int(rows["n_rows"])
    for part in (*blocks, *cats):  # a payload from elsewhere may point anywhere: read cold instead
        _check_indicator(part.indicator, n_rows, part.n_source_rows)
    return DIMetadata(
        n_rows=n_rows,
        feature_names=graph.feature_names,
        blocks=blocks,
        indicators=indicators,
        source_rows={k: int(v) for k, v in rows["source_rows"].items()},
        target=rows.get("target"),
        categoricals=cats,
        row_ids={s.alias: rows.get(f"rowids/{s.alias}") for s in graph.sources},
    )


def _check_indicator(indicator: Any, n_rows: int, source_rows: int) -> None:
    """Raise :class:`_Stale` unless ``indicator`` is one source row per output row: an integer in
    [-2, ``source_rows``) (-1 an empty row, -2 a row a coalesce part does not own) for each of ``n_rows``."""
    if not (
        isinstance(indicator, np.ndarray)
        and indicator.shape == (n_rows,)
        and np.issubdtype(indicator.dtype, np.integer)
        and (n_rows == 0 or (int(indicator.min()) >= -2 and int(indicator.max()) < source_rows))
    ):
        raise _Stale


def _fills(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, alias: str, features: list[int], categorical: frozenset[int]
) -> dict[str, Any]:
    """Each feature's value on the all-NULL row an outer join adds (NaN / None where nothing fills it)."""
    from ilargi_db.metadata.scans import null_row_values

    source = graph.source(alias)
    parts = {part_column(j, 0): graph.features[j].parts[0].sql for j in features}
    text = frozenset(part_column(j, 0) for j in features if j in categorical)
    if source.nullable:
        return null_row_values(con, source, parts, text)
    return {name: None if name in text else np.nan for name in parts}


__all__ = ["JobReuse", "Use", "assemble", "split"]
