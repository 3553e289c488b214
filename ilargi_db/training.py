"""``train`` and ``predict``: from a SQL query over joined tables to a fitted model and back."""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import scipy.sparse as sp
import sqlglot

from ilargi_db._terminal import progress
from ilargi_db.backend import get_backend, to_host
from ilargi_db.cluster import cluster_data, connect_cluster
from ilargi_db.cost_model.choose import choose_batch_strategy, plan_for
from ilargi_db.cost_model.explain import Explanation, explain_graph, prepare_graph
from ilargi_db.cost_model.features import JobStats, job_stats
from ilargi_db.cost_model.iterations import record as record_iterations
from ilargi_db.cost_model.memory import (
    array_bytes,
    check_job_memory,
    format_bytes,
    partition_row_bytes,
    resident_bytes,
    size_in_bytes,
)
from ilargi_db.cost_model.plan import distributed_plan, streamed_plan
from ilargi_db.errors import IlargiError, PlanError, SpillLost, speaking_of, spell
from ilargi_db.interruption import interruptible_job
from ilargi_db.linalg import (
    Block,
    NormalizedMatrix,
    PartitionedMatrix,
    PartitionSource,
    ScaledMatrix,
    as_matrix,
)
from ilargi_db.metadata import BlockMetadata, CategoricalMetadata, clear_unused_nonfinite, extract_metadata
from ilargi_db.metadata.arrow_blocks import arrow_to_block, column_to_numpy, fetch_arrow
from ilargi_db.metadata.indicator import indicator_sql
from ilargi_db.metadata.scans import TARGET, materialized_sql, part_column, quote
from ilargi_db.metadata.stream import open_stream
from ilargi_db.metadata.value_range import check_metadata_values, check_table_values, check_values
from ilargi_db.models.catalog import CATALOG, NAMES, SUPERVISED, algorithm_facts, check_algorithm, make_estimator
from ilargi_db.plan import (
    JoinGraph,
    build_join_graph,
    categorical_flags,
    check_target_type,
    is_categorical,
    is_numeric,
    mark_categorical_coalesce,
)
from ilargi_db.preprocess import FeatureEncoder
from ilargi_db.read_snapshot import ReadSnapshot, renew_snapshot
from ilargi_db.reuse.fingerprint import volatile_expression as impure_expression_text
from ilargi_db.reuse.job import JobReuse
from ilargi_db.trained_model import TrainedModel

ALGORITHMS = {name: CATALOG[name].estimator_class() for name in NAMES}


@dataclass(frozen=True)
class TrainingData:
    """The model's input, built by one strategy."""

    X: NormalizedMatrix
    y: Any
    encoder: FeatureEncoder
    unlabelled: int = 0  # rows left out because their target is NULL

    @property
    def nbytes(self) -> int:
        return int(self.X.nbytes) + int(getattr(self.y, "nbytes", 0))


def _factorized(
    con,
    graph: JoinGraph,
    encoder: FeatureEncoder,
    fit: bool,
    backend,
    check: bool = False,
    labelled_only: bool = True,
    job: JobReuse | None = None,
) -> TrainingData:
    """The normalized matrix of ``graph``; with ``job``, from (and into) the artifact store where it can."""
    if job is None or not job.enabled:
        return _factorized_read(con, graph, encoder, fit, backend, check, labelled_only)
    began = time.perf_counter()
    settings = matrix_settings(graph, encoder.categorical, encoder.impute, backend.name, check, labelled_only)
    key = job.matrix_key(settings)
    found = job.find("matrix", key, "the encoded matrix")
    if found is not None:
        return found
    data = _factorized_read(con, graph, encoder, fit, backend, check, labelled_only, job)
    # In process only: live arrays (perhaps on a GPU) with the sums memoized on them as models use them.
    job.keep("matrix", key, "the encoded matrix", data, time.perf_counter() - began, persistable=False)
    return data


def matrix_settings(
    graph: JoinGraph, categorical: Any, impute: bool, backend: str, check: bool = True, labelled_only: bool = True
) -> list:
    """What, besides the data, decides the encoded matrix (part of its artifact's key): the encoder's
    settings and the names it gives the columns (two queries naming the same columns differently differ)."""
    target = graph.target.name if graph.target is not None else None
    settings = [list(map(bool, categorical)), bool(impute), backend, bool(check), bool(labelled_only)]
    return [*settings, graph.feature_names, target]


def _factorized_read(
    con, graph: JoinGraph, encoder: FeatureEncoder, fit: bool, backend, check: bool, labelled_only: bool, job=None
) -> TrainingData:
    categorical = frozenset(j for j, c in enumerate(encoder.categorical) if c)

    def extract() -> Any:
        return extract_metadata(con, graph, categorical=categorical)

    meta = extract() if job is None else job.metadata(graph, categorical, extract)
    unlabelled = 0
    if labelled_only and meta.target is not None and np.isnan(meta.target).any():
        labelled = np.flatnonzero(~np.isnan(meta.target))
        unlabelled = meta.n_rows - len(labelled)
        meta = meta.take_rows(labelled)  # unlabelled rows teach nothing
        for block in meta.blocks:  # rows only unlabelled rows used must not leak NaN * 0
            clear_unused_nonfinite(block)
    if check:  # inf, or values whose squares overflow, before they turn into NaN
        check_metadata_values(meta, graph.target.name if graph.target is not None else None)
    if fit:
        encoder.fit_metadata(meta)
    blocks = encoder.transform_metadata(meta)
    X = NormalizedMatrix(blocks, n_rows=meta.n_rows, feature_names=encoder.feature_names_out_, backend=backend)
    if job is not None:
        job.restore_sums(X)
    return TrainingData(X, meta.target, encoder, unlabelled)


STREAM_SHARE_OF_FREE_MEMORY = 0.5  # the default memory budget: this share of the memory free at the start
MIN_PARTITION_ROWS = 256  # below this a partition's query costs more than its rows


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


def _check_streamable(graph: JoinGraph, what: str, subqueries: bool = True) -> None:
    """Refuse expressions that give other values on every read: a stream reads the data several times (and
    a cluster's workers cannot read the tables a subquery names)."""
    expressions = [p.sql for p in graph.filters] + [f.sql for f in graph.features]
    why = impure_expression_text(expressions, subqueries)
    if why:
        raise IlargiError(
            f"{what} reads the data more than once, and the rows must be the same each time, but {why}: take it "
            "out of the query (materialize a sample into a table first), or train in memory."
        )


def _stream_plan(con, graph: JoinGraph, chosen: str, stats: Any, memory_budget: Any) -> dict | None:
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
    needed = array_bytes(stats)[chosen if graph.factorizable else "materialized"]
    if needed <= budget:
        return None
    fact = stats.source(graph.sources[0].alias)  # the first FROM source: the one streamed
    dimensions = resident_bytes(stats, fact.alias)
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
    spill, spill_why = _spill_fits(tempfile.gettempdir(), needed)
    why = (
        f"the data need about {format_bytes(needed)}, over the memory budget of {format_bytes(budget)}: the fact is "
        f"read from DuckDB in partitions of {rows:,} rows, the next read while the current one computes, again on "
        "every pass"
    )
    return {
        "memory_budget": budget,
        "needed": needed,
        "rows_per_partition": rows,
        "partitions": max(1, math.ceil(fact.rows / rows)),  # the rows in use: known once the stream opens
        "spill": spill,
        "spill_why": spill_why,
        "why": why,
    }


def _placed_plan(explanation: Any, plan: Any, stream_plan: dict | None, workers: int) -> Any:
    """The factorized plan of ``plan``'s solver as it runs streamed (``stream_plan``) or on ``workers`` workers,
    priced; ``plan`` itself when the cost model has no such plan."""
    if explanation is None or plan is None:
        return plan
    factorized = next((p for p in explanation.plans if p.strategy == "factorized" and p.solver == plan.solver), None)
    if factorized is None:
        return plan
    if stream_plan is not None:
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):  # no sysconf (Windows): priced as read back from disk
            memory = 0
        needed, partitions = stream_plan["needed"], stream_plan["partitions"]
        return streamed_plan(factorized, needed, partitions, stream_plan["spill"], memory)
    return distributed_plan(factorized, workers)


SPILL_HEADROOM = 1.25  # spill only where the disk has this many times the data free


def _spill_fits(where: str, needed: int) -> tuple[bool, str]:
    """Whether the encoded partitions fit on the spill directory's disk, and what the plan says about it."""
    free = shutil.disk_usage(where).free
    if free >= SPILL_HEADROOM * needed:
        return True, f"each partition spilled to local disk ({where}) after its first read, and loaded back"
    return False, (
        f"not spilled: {where} has {format_bytes(free)} free for about {format_bytes(needed)}, so every pass reads "
        "the fact from DuckDB again (set TMPDIR to a larger disk to spill)"
    )


def _streamed(con, graph: JoinGraph, encoder: FeatureEncoder, backend, rows_per_partition: int, spill: bool) -> tuple:
    """The training data as a streamed :class:`PartitionedMatrix`: the fact read range by range on every pass.

    The encoder is fitted from sums, counts and categories DuckDB computes over the training rows (one
    aggregate query); the dimensions are scanned and encoded once and shared by every partition; the
    target (n numbers) is read once. With ``spill`` (where the disk has room: :func:`_spill_fits`) the first
    pass spills each encoded partition to local disk and later passes load it back; otherwise every pass
    reads from DuckDB again, in the same snapshot. Returns (TrainingData, the stream, to close after the fits).
    """
    categorical = frozenset(j for j, c in enumerate(encoder.categorical) if c)
    stream = open_stream(con, graph, categorical, rows_per_partition)
    try:
        encoder.fit_query(con, graph)
        dims, dim_cats = stream.dimension_blocks(categorical)
        for block in dims:  # inf, or values whose squares overflow, before they turn into NaN
            for i, j in enumerate(block.columns):
                check_values(block.data[:, i], graph.features[j].name)
        shared = encoder.transform_dimensions(dims, dim_cats)
        fact_numeric = [
            j for j, f in enumerate(graph.features) if f.parts[0].source == stream.fact and j not in categorical
        ]
        fact_text = [j for j, f in enumerate(graph.features) if f.parts[0].source == stream.fact and j in categorical]

        def read(k: int) -> dict[str, np.ndarray]:
            """Partition ``k``'s own arrays, encoded: the fact's numbers, its category codes, every indicator."""
            part = stream.read(k)
            rows = np.arange(part.n_rows)
            arrays = {"n_rows": np.array(part.n_rows)}
            if fact_numeric:
                data = arrow_to_block(part.fact, [part_column(j, 0) for j in fact_numeric])
                for i, j in enumerate(fact_numeric):
                    check_values(data[:, i], graph.features[j].name)
                fill = np.full(len(fact_numeric), np.nan)
                meta = BlockMetadata(stream.fact, data, rows, np.array(fact_numeric), fill)
                arrays["fact"] = encoder.transform_block(meta).data
            for j in fact_text:
                values = part.fact.column(part_column(j, 0)).combine_chunks()
                block = encoder.transform_categorical(CategoricalMetadata(stream.fact, j, values, rows, None), 2)
                if block is not None:
                    arrays[f"codes/{j}"] = block.index
            arrays.update({f"index/{alias}": index for alias, index in part.indicators.items()})
            return arrays

        spilled: dict[int, list[tuple]] = {}  # partition -> where its arrays lie in its spill file
        unread: dict[int, dict[str, np.ndarray]] = {}  # read and not yet used (without a spill)

        def load(k: int) -> dict[str, np.ndarray]:
            nonlocal spill  # switched off when the disk fails a write
            # The first pass reads from DuckDB and spills the partition to local disk; later passes load it
            # back, which costs a file read instead of a join (cedar's offloading). A spill file that is gone
            # (a temp cleaner) or cut short, or a disk that fails a write (full), costs a read from DuckDB
            # again, in the same snapshot: the rows are the same.
            path = os.path.join(stream.spill_dir, f"{k}.part")
            if k in spilled:
                try:
                    return _unspill(path, spilled[k])
                except (OSError, SpillLost):
                    del spilled[k]
            if k in unread:  # read for the template: the first pass takes it instead of reading it again
                return unread.pop(k)
            arrays = read(k)
            if spill:
                try:
                    spilled[k] = _spill(path, arrays)
                except OSError:
                    spill = False
            return arrays

        # A fact category's block: the identity over its one-hot columns, indexed by each row's code; built
        # once, shared by every partition as the dimensions are.
        code_blocks = {
            j: (
                sp.identity(encoder.specs_[j].width, format="csr"),
                encoder.offsets_[j] + np.arange(encoder.specs_[j].width),
            )
            for j in fact_text
        }

        def build(arrays: dict[str, np.ndarray]) -> NormalizedMatrix:
            blocks = []
            if "fact" in arrays:
                blocks.append(Block(arrays["fact"], columns=encoder.offsets_[fact_numeric]))  # row i is row i
            for j, (identity, columns) in code_blocks.items():
                if f"codes/{j}" in arrays:
                    blocks.append(Block(identity, columns=columns, index=arrays[f"codes/{j}"]))
            for alias, block in shared:
                blocks.append(Block(block.data, columns=block.columns, index=arrays[f"index/{alias}"], fill=block.fill))
            n = int(arrays["n_rows"])
            return NormalizedMatrix(blocks, n_rows=n, feature_names=encoder.feature_names_out_, backend=backend)

        # The template says the columns, names and backend: a partition of no rows, so that it holds nothing
        # of the budget (the partitions then take two shares of it: the one computing, the one prefetched).
        first = load(0)
        template = build({name: a[:0].copy() if a.ndim else np.array(0) for name, a in first.items()})
        if not spill:
            unread[0] = first
        del first  # spilled (or held in unread): not kept here beside the budget's two partitions
        X = PartitionedMatrix(
            PartitionSource(lambda k: build(load(k)), len(stream.bounds)), sizes=stream.sizes, template=template
        )
        y = _streamed_target(con, graph, stream) if graph.target is not None else None
        if y is not None:
            check_values(y, graph.target.name, "target")
    except BaseException:
        stream.close()
        raise
    return TrainingData(X, y, encoder, stream.unlabelled), stream


SPILL_ALIGNMENT = 64  # each array of a spilled partition starts on a cache line


def _spill(path: str, arrays: dict[str, np.ndarray]) -> list[tuple]:
    """A partition's arrays to one file, raw and back to back; returns where each lies (kept in memory).

    Reading back is one ``readinto`` and a view per array: no header to parse, no zip checksum, no copy
    beyond the read itself (a ``.npz`` cost 3-4 times as much per pass).
    """
    layout, offset = [], 0
    with tempfile.NamedTemporaryFile(dir=os.path.dirname(path), suffix=".part", delete=False) as out:
        try:
            for name, array in arrays.items():
                array = np.asarray(array)
                out.write(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)  # C order; no copy if it is
                layout.append((name, array.dtype.str, array.shape, offset))
                padding = -array.nbytes % SPILL_ALIGNMENT
                out.write(b"\0" * padding)
                offset += array.nbytes + padding
            out.flush()  # a full disk fails here, not after the file is in place
        except BaseException:
            out.close()
            with contextlib.suppress(OSError):
                os.remove(out.name)  # a failed write (a full disk) leaves nothing behind
            raise
    os.replace(out.name, path)  # whole or absent: a pass interrupted mid-write leaves no torn file
    return layout


def _unspill(path: str, layout: list[tuple]) -> dict[str, np.ndarray]:
    ends = [offset + np.dtype(dtype).itemsize * int(np.prod(shape)) for _, dtype, shape, offset in layout]
    size = max(ends, default=0)  # from the layout, not the file: a file cut short is caught below
    buffer = np.empty(size, dtype=np.uint8)
    view, got = memoryview(buffer), 0
    with open(path, "rb", buffering=0) as stored:
        while got < size:  # one read returns at most about 2 GiB on Linux
            chunk = stored.readinto(view[got:])
            if not chunk:
                raise SpillLost(f"the spilled partition {path} was cut short.")
            got += chunk
    return {
        name: np.frombuffer(buffer, dtype=np.dtype(dtype), count=int(np.prod(shape)), offset=offset).reshape(shape)
        for name, dtype, shape, offset in layout
    }


def _streamed_target(con, graph: JoinGraph, stream: Any) -> np.ndarray:
    """The target of every labelled row, in the partitions' order (the fact's rowid): one query, n numbers."""
    table = fetch_arrow(con, _only_target(graph, stream), what="the target")
    return column_to_numpy(table.column(TARGET))


def _only_target(graph: JoinGraph, stream: Any) -> str:
    """The key-only join of the whole fact with only the target selected, labelled rows, in rowid order."""
    select = sqlglot.parse_one(indicator_sql(graph, stream.registered, stream.fact, ()), read="duckdb")
    select.set("expressions", [sqlglot.parse_one(f"CAST(({graph.target.sql}) AS DOUBLE) AS {TARGET}", read="duckdb")])
    value = f"CAST(({graph.target.sql}) AS DOUBLE)"
    select = select.where(f"{value} IS NOT NULL AND NOT isnan({value})", dialect="duckdb")
    select.set("order", None)
    return select.order_by(f"{quote(stream.fact)}.rowid", dialect="duckdb").sql("duckdb")


def _materialized(
    con,
    graph: JoinGraph,
    encoder: FeatureEncoder,
    fit: bool,
    backend,
    check: bool = False,
    labelled_only: bool = True,
) -> TrainingData:
    # DuckDB casts every value, as it does for the scans: both strategies read the same numbers.
    table = fetch_arrow(con, materialized_sql(graph, encoder.categorical), what="the materialized join")
    y = None
    unlabelled = 0
    if graph.target is not None:
        y = column_to_numpy(table.column(TARGET))
        if labelled_only and np.isnan(y).any():
            keep = ~np.isnan(y)
            unlabelled = int((~keep).sum())
            table, y = table.filter(pa.array(keep)), y[keep]  # unlabelled rows teach nothing
        table = table.drop_columns([TARGET])
    names = graph.feature_names
    if check:
        check_table_values(table, names, encoder.categorical, y, graph.target.name if graph.target else None)
    if fit:
        encoder.fit_table(table, names)
    blocks = encoder.transform_table(table, names)
    X = NormalizedMatrix(blocks, n_rows=table.num_rows, feature_names=encoder.feature_names_out_, backend=backend)
    return TrainingData(X, y, encoder, unlabelled)


def read_training_data(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, strategy: str, backend: str = "numpy"
) -> TrainingData:
    """Read ``graph``'s training set the way ``train`` does with ``strategy`` (what calibration times)."""
    encoder = FeatureEncoder(categorical_flags(graph))
    reader = _factorized if strategy == "factorized" else _materialized
    return reader(con, graph, encoder, True, get_backend(backend))


@interruptible_job
def train(
    con: duckdb.DuckDBPyConnection,
    query: str,
    target: str | None = None,
    algorithm: str = "linear_regression",
    strategy: str = "auto",
    backend: str = "auto",
    *,
    standardize: bool = False,
    impute: bool = True,
    reuse: bool = True,
    memory_budget: int | str | None = None,
    cluster: Any = None,
    **params: Any,
) -> Any:
    """Train a model on the rows of a SELECT over joined tables.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
    query : str
        A single SELECT (DuckDB SQL) whose columns are the features (and the target).
    target : str or None
        The label column for ``linear_regression`` / ``logistic_regression``.
    algorithm : {"linear_regression", "logistic_regression", "kmeans", "gnmf"}
    strategy : {"auto", "factorized", "materialized"}
        Train on the normalized matrix, on the DuckDB join, or let ilargi_db choose.
    backend : {"auto", "numpy", "cupy"}
    standardize : bool
        Train linear models on standardized columns (computed factorized); the
        coefficients are returned in the original units.
    impute : bool
        Replace numeric NULLs by the training mean (VARCHAR/ENUM/BOOLEAN columns
        are one-hot encoded, NULL as its own category).
    reuse : bool
        Use and keep artifacts of earlier jobs (statistics, the key-only join, each feature's values,
        the encoded matrix, X^T X) while the tables they came from are unchanged; ``False`` runs cold
        and keeps nothing (see :mod:`ilargi_db.reuse`).
    memory_budget : int, str or None
        Bytes (or a size such as ``"2GB"``) the training data may take in memory; above it the fact is
        streamed from DuckDB in row partitions, the next read while the current one computes (see
        docs/architecture.md, "Row partitions and streaming"). None: half the memory free when the job
        starts (and a job that cannot stream then trains in memory, as DuckDB's memory_limit allows).
    cluster : dask.distributed.Client, str or None
        Train on a Dask cluster (a client, or a scheduler address such as ``"tcp://host:8786"``, reached
        within :data:`~ilargi_db.cluster.CONNECT_SECONDS`; its workers must run this build): the fact
        must be ``read_parquet(...)`` files every worker can read; each worker reads its files with DuckDB
        and keeps its partitions; the driver adds the partials (see :mod:`ilargi_db.cluster`).
    **params
        The estimator's parameters (e.g. ``alpha=1.0``, ``n_clusters=5``).

    Returns
    -------
    TrainedModel
        The fitted estimator (``model.estimator_``; its ``coef_``, ``predict``... are the model's too),
        its encoder, and the job: ``strategy_``, ``decision_`` (why), ``plan_``, ``timings_`` (seconds
        of planning, data, training, training metrics and in total), ``training_metrics_`` (cheap
        ones: see :func:`training_metrics`), ``unlabelled_rows_``.

    Examples
    --------
    >>> import ilargi_db
    >>> con = ilargi_db.connect()
    >>> _ = con.sql("CREATE TABLE f AS SELECT range % 3 AS k, range * 1.0 AS x, 2.0 * range + 1 AS y FROM range(30)")
    >>> _ = con.sql("CREATE TABLE d AS SELECT range AS k, ['a', 'b', 'c'][range + 1] AS kind FROM range(3)")
    >>> model = ilargi_db.train(con, "SELECT x, kind, y FROM f JOIN d USING (k)", target="y", backend="numpy")
    >>> model.strategy_ in ("factorized", "materialized"), round(float(model.coef_[0]), 6)
    (True, 2.0)
    """
    check_algorithm(algorithm)
    if algorithm not in SUPERVISED and target is not None:
        raise IlargiError(
            f"{algorithm} is unsupervised and learns from every selected column: pass {spell('target', None)}, "
            f"and leave {target!r} out of the SELECT list unless it should be a feature."
        )
    (model,) = _train_models(
        con,
        query,
        target,
        [(algorithm, params)],
        strategy,
        backend,
        standardize,
        impute,
        reuse,
        memory_budget,
        cluster,
    )
    return model


@interruptible_job
def train_batch(
    con: duckdb.DuckDBPyConnection,
    query: str,
    target: str | None = None,
    models: Sequence[Any] = (),
    strategy: str = "auto",
    backend: str = "auto",
    *,
    standardize: bool = False,
    impute: bool = True,
    reuse: bool = True,
    memory_budget: int | str | None = None,
    cluster: Any = None,
) -> list[TrainedModel]:
    """Train several models on one training query in one call, reading the data once.

    One read-only snapshot, one plan of the query, one set of statistics and one read of the data
    (the key-only join and scans, or the materialized join) serve every model; each then fits on
    the same matrix. With ``strategy="auto"`` the cost model prices each model's plans and takes the
    strategy whose plans cost least in sum.

    Parameters
    ----------
    models : sequence
        Each model as an algorithm name, an ``(algorithm, {parameters})`` pair, or a dict
        ``{"algorithm": ..., **parameters}``.
    target : str or None
        The label column of the supervised models; unsupervised ones learn from the other columns. All
        models learn from the same rows: those whose target is not NULL (``unlabelled_rows_`` counts
        the others), so an unsupervised model may see fewer rows than it would alone.
    standardize : bool
        Standardize the columns of the supervised (linear) models.
    query, strategy, backend, impute, reuse, memory_budget, cluster
        As for :func:`train`.

    Returns
    -------
    list of TrainedModel, in the order of ``models``.

    Examples
    --------
    >>> import ilargi_db
    >>> con = ilargi_db.connect()
    >>> _ = con.sql("CREATE TABLE t AS SELECT range * 1.0 AS x, range % 7 * 1.0 AS z, 2.0 * range AS y FROM range(60)")
    >>> lin, km = ilargi_db.train_batch(con, "SELECT x, z, y FROM t", "y", ["linear_regression", ("kmeans",
    ...                                 {"n_clusters": 2, "random_state": 0})], backend="numpy")
    >>> round(float(lin.coef_[0]), 6), km.cluster_centers_.shape
    (2.0, (2, 2))
    """
    return _train_models(
        con,
        query,
        target,
        _model_specs(models),
        strategy,
        backend,
        standardize,
        impute,
        reuse,
        memory_budget,
        cluster,
    )


def _model_specs(models: Any) -> list[tuple[str, dict]]:
    """``models`` as ``[(algorithm, parameters)]``, refusing what is not a model."""
    if isinstance(models, (str, dict)) or not isinstance(models, Sequence) or not len(models):
        raise IlargiError(
            "models must be a non-empty list of models, each an algorithm name, an (algorithm, {parameters}) pair "
            f"or a dict with an 'algorithm' key; got {models!r}."
        )
    specs = []
    for i, m in enumerate(models, start=1):
        if isinstance(m, str):
            specs.append((m, {}))
        elif isinstance(m, dict) and "algorithm" in m:
            specs.append((m["algorithm"], {k: v for k, v in m.items() if k != "algorithm"}))
        elif isinstance(m, (tuple, list)) and len(m) == 2 and isinstance(m[1], dict):
            specs.append((m[0], dict(m[1])))
        else:
            raise IlargiError(
                f"model {i} of the batch is {m!r}: give an algorithm name, (algorithm, {{...}}) or a dict."
            )
    return specs


def _train_models(
    con: duckdb.DuckDBPyConnection,
    query: str,
    target: str | None,
    specs: list[tuple[str, dict]],
    strategy: str,
    backend: str,
    standardize: bool,
    impute: bool,
    reuse: bool = True,
    memory_budget: int | str | None = None,
    cluster: Any = None,
) -> list[TrainedModel]:
    """Train each ``(algorithm, parameters)`` of ``specs`` on one read of ``query``'s rows."""
    start = time.perf_counter()
    stages = progress(2 + len(specs), "planning")  # a bar over the stages, in a terminal only
    snapshot = ReadSnapshot(con)  # every read sees one committed state of the database
    stream = client = None
    batch = len(specs) > 1
    try:
        estimators = []
        for i, (algorithm, params) in enumerate(specs, start=1):
            try:
                estimators.append(make_estimator(algorithm, params))
            except ValueError as err:  # ours, or scikit-learn's parameter validation
                if not batch:
                    raise
                raise IlargiError(f"model {i} of the batch: {err}") from None
            if algorithm in SUPERVISED and target is None:
                raise IlargiError(f"{algorithm} needs a target: pass {spell('target', '<label column>')}.")
        for name, flag in (("standardize", standardize), ("impute", impute), ("reuse", reuse)):
            if not isinstance(flag, (bool, np.bool_)):
                raise IlargiError(f"{name} must be True or False, got {flag!r}.")
        if standardize and not any(a in SUPERVISED for a, _ in specs):
            raise IlargiError(
                f"{spell('standardize', True)} is for linear and logistic regression; scale columns in the query."
            )
        be = get_backend(backend)
        snapshot.open()
        graph = build_join_graph(con, query, target)
        if not graph.features:
            raise IlargiError("the training query selects no feature column: add the columns to learn from.")
        flags = categorical_flags(graph)
        check_target_type(graph)
        graph = mark_categorical_coalesce(graph, flags)
        job = JobReuse.open(con, graph, flags, enabled=reuse, persist=True)
        stats = None
        if job.enabled:  # the cost model's statistics, or the memory check's: one artifact serves both
            stats = _stored_stats(job)
            if stats is None and job.enabled:
                began = time.perf_counter()
                try:
                    stats = job_stats(con, graph)
                except IlargiError:  # the cost model's own fallback takes over (see choose_batch_strategy)
                    renew_snapshot(con)
                else:
                    seconds = time.perf_counter() - began
                    job.keep("stats", job.fingerprint.stats_key, "the job's statistics", stats.to_dict(), seconds)
        chosen, why, explanations = choose_batch_strategy(
            con,
            graph,
            strategy,
            specs,
            backend,
            stats=stats,
            reuse=job.offer(graph, job.matrix_key(matrix_settings(graph, flags, impute, be.name))),
        )
        if strategy != "auto":
            chosen_by = "the caller"
        elif graph.cross_source_features:
            chosen_by = "the query (a feature mixes sources)"
        elif explanations[0] is None:
            chosen_by = "Amalur's rule (the cost model failed)"
        else:
            chosen_by = "the batch (no plan of this model alone)"
        plans = [plan_for(e, chosen) for e in explanations]
        solver_picks = []
        for (algorithm, params), estimator, plan in zip(specs, estimators, plans):
            facts = algorithm_facts(algorithm)
            picks = plan is not None and facts.solver_parameter and params.get(facts.solver_parameter, "auto") == "auto"
            if picks:
                estimator.set_params(**{facts.solver_parameter: plan.solver})  # the solver the cost model chose
            solver_picks.append(bool(picks))
        client = connect_cluster(cluster) if cluster is not None else None
        stream_plan = None
        if client is None:
            try:
                stream_plan = _stream_plan(con, graph, chosen, stats, memory_budget)
            except IlargiError:
                if memory_budget is not None:
                    raise  # the caller's budget: say why it cannot be kept
                stream_plan = None  # the default budget only: train in memory, as DuckDB's memory_limit allows
            if stream_plan is not None:
                _check_streamable(graph, "streaming")
        else:
            _check_streamable(graph, "training on a cluster", subqueries=False)
        if client is not None or stream_plan is not None:  # the plans as they run there, priced
            workers = len(client.scheduler_info().get("workers", {})) if client is not None else 1
            plans = [_placed_plan(e, p, stream_plan, workers) for e, p in zip(explanations, plans)]
            predicted = f", {plans[0].seconds:.3g} s predicted" if plans[0] is not None else ""
        if client is not None:
            chosen = "factorized"
            why = f"{why} Distributed: the fact's Parquet files over the cluster's {workers} worker(s){predicted}."
        elif stream_plan is None:
            check_job_memory(con, graph, chosen, explanations[0], stats)  # before any feature column is read
        else:
            chosen = "factorized"
            why = f"{why} Streamed: {stream_plan['why']}; {stream_plan['spill_why']}{predicted}."
        planned = time.perf_counter()
        stages.update()
        stages.set_description(f"reading data ({'streamed' if stream_plan else chosen})")
        if client is not None:
            encoder = FeatureEncoder(flags, impute=impute)
            X, y, unlabelled = cluster_data(con, graph, encoder, client)
            if y is not None:
                check_values(y, graph.target.name, "target")
            data = TrainingData(X, y, encoder, unlabelled)
            stream_plan = None
        elif stream_plan is not None:
            encoder = FeatureEncoder(flags, impute=impute)
            data, stream = _streamed(con, graph, encoder, be, stream_plan["rows_per_partition"], stream_plan["spill"])
            stream_plan["partitions"] = len(stream.bounds)
        elif chosen == "factorized":
            data = _factorized(con, graph, FeatureEncoder(flags, impute=impute), True, be, check=True, job=job)
        else:
            data = _materialized(con, graph, FeatureEncoder(flags, impute=impute), True, be, check=True)
        if stream is None and client is None:
            job.confirm_read()  # a file read outside the snapshot did not change under the read
        if stream is None:
            snapshot.close()  # all read: the fits need no transaction (a stream reads on every pass)
        X, y, encoder = data.X, data.y, data.encoder
        if data.X.shape[0] == 0:
            what = "rows with a non-NULL target" if target is not None else "rows"
            raise IlargiError(f"the training query returned no {what}: check its joins and WHERE clause.")
        loaded = time.perf_counter()
        stages.update()
        models = []
        for (algorithm, params), estimator, plan, picks, explanation in zip(
            specs, estimators, plans, solver_picks, explanations
        ):
            stages.set_description(f"training {algorithm}")
            began = time.perf_counter()
            supervised = algorithm in SUPERVISED
            scaled = standardize and supervised
            M = ScaledMatrix.standardize(X, center=getattr(estimator, "fit_intercept", True)) if scaled else X
            init, warm = _warm_start(job, algorithm, estimator, scaled, M)
            if supervised:
                estimator.fit(M, y, **init)
                if init and unconverged_after(estimator):  # stopped by max_iter: the result hangs on the start
                    estimator.fit(M, y)  # so the cold start's, as without reuse
                    warm = ""
            else:
                estimator.fit(M)
            if hasattr(estimator, "coef_") and not unconverged_after(estimator):  # a start only from a converged fit
                loss = float(estimator.loss_curve_[-1]) if getattr(estimator, "loss_curve_", None) else 0.0
                job.record_fit(algorithm, scaled, M.feature_names, estimator.coef_, estimator.intercept_, loss)
            unconverged = getattr(estimator, "convergence_warning_", None)
            if scaled:
                scale, mean = to_host(M.scale), to_host(M.mean)
                estimator.coef_ = estimator.coef_ / scale
                estimator.intercept_ = float(estimator.intercept_ - mean @ estimator.coef_)  # mean 0 without intercept
            trained = time.perf_counter()
            facts = algorithm_facts(algorithm)
            solver = getattr(estimator, "solver_", None) or getattr(estimator, "solver", None) or facts.solvers[0].name
            if picks:
                estimator.set_params(**{facts.solver_parameter: "auto"})  # the caller's setting; solver_ says what ran
                estimator.solver_reason_ = f"the cost model's plan: {plan.label}, {plan.seconds:.3g} s predicted"
            if hasattr(estimator, "n_iter_"):
                record_iterations(algorithm, solver, params, float(estimator.n_iter_))
            model = TrainedModel(
                estimator,
                encoder,
                algorithm,
                query,
                target if supervised else None,
                target_type_=graph.target.duckdb_type if graph.target is not None and supervised else None,
                feature_types_=[f.duckdb_type for f in graph.features],
                standardize_=scaled,
                strategy_=chosen,
                decision_=why,
                plan_=(
                    plan.to_dict()
                    if plan is not None
                    else {"strategy": chosen, "solver": solver, "backend": be.name, "chosen_by": chosen_by}
                ),
                explanation_=explanation,
                n_rows_=int(X.shape[0]),
                streamed_=dict(stream_plan) if stream_plan else None,
                reused_=job.describe() + ([warm] if warm else []),
                unlabelled_rows_=data.unlabelled,
                warnings_=([unconverged] if unconverged else []) + job.warnings,
            )
            model.training_metrics_ = training_metrics(model, X, y)
            done = time.perf_counter()
            model.timings_ = {
                "planning": planned - start,
                "data": loaded - planned,
                "training": trained - began,
                "metrics": done - trained,
                "total": (done - began) + (loaded - start),
                **({"shared_by": len(specs)} if batch else {}),  # planning and data served the whole batch
            }
            models.append(model)
            stages.update()
        if isinstance(X, NormalizedMatrix):
            job.keep_sums(X)
        if stream is not None:
            stream.close()
            snapshot.close()
        if client is not None and client is not cluster:  # a client this call connected: not the caller's
            client.close()
        job.finish()  # new artifacts into the database (its own transaction, after the read)
    finally:
        if stream is not None:
            stream.close()
        if client is not None and client is not cluster:
            client.close()
        snapshot.close()
        stages.close()
    return models


@interruptible_job
def explain(
    con: duckdb.DuckDBPyConnection,
    query: str,
    target: str | None = None,
    algorithm: str = "linear_regression",
    backend: str = "auto",
    *,
    reuse: bool = True,
    memory_budget: int | str | None = None,
    **params: Any,
) -> Explanation:
    """The plan ``train(..., strategy="auto")`` would run, the runner-up, their predicted seconds per step, and why.

    As :func:`ilargi_db.cost_model.explain`, and with ``reuse`` (the default) it says what the artifact
    store holds for the job and prices the factorized plans with it, as ``train`` does: it fingerprints
    the columns the job reads (one aggregate query) to know. It also says when the job's data exceed
    ``memory_budget`` (as for :func:`train`) and would stream. Never trains, never writes.

    Examples
    --------
    >>> import ilargi_db
    >>> con = ilargi_db.connect()
    >>> _ = con.sql("CREATE TABLE t AS SELECT range * 1.0 AS x, range % 5 * 1.0 AS z, 3.0 * range AS y FROM range(40)")
    >>> _ = ilargi_db.train(con, "SELECT x, z, y FROM t", "y", strategy="factorized", backend="numpy")
    >>> e = ilargi_db.explain(con, "SELECT x, z, y FROM t", "y", backend="numpy")
    >>> any("reuses the encoded matrix" in r for r in e.reasons)
    True
    """
    make_estimator(algorithm, params)  # an unknown algorithm or parameter fails before the query is planned
    with ReadSnapshot(con):  # every read sees one committed state of the database
        graph = prepare_graph(con, query, target)
        flags = categorical_flags(graph)
        job = JobReuse.open(con, graph, flags, enabled=reuse)
        stats = _stored_stats(job)
        offer = job.offer(graph, job.matrix_key(matrix_settings(graph, flags, True, get_backend(backend).name)))
        explanation = explain_graph(con, graph, algorithm, backend, params, stats=stats, reuse=offer)
        try:
            streams = _stream_plan(con, graph, explanation.strategy, stats, memory_budget)
        except IlargiError as err:
            if memory_budget is not None:
                explanation.reasons.append(f"over the memory budget and cannot stream: {err}")
            streams = None
        if streams is not None:
            streamed = _placed_plan(explanation, explanation.plan, streams, 1)
            predicted = ""
            if streamed is not None and streamed.placement == "streamed":
                explanation = replace(explanation, placed=streamed)
                predicted = f"; {streamed.seconds:.3g} s predicted streamed ({streamed.label})"
            explanation.reasons.append(f"would stream: {streams['why']}; {streams['spill_why']}{predicted}")
        return explanation


def _stops_early(estimator: Any) -> bool:
    """Whether the caller asked the solver to stop before the estimator's defaults would: ``max_iter`` below
    its default, or a ``tol`` above it.

    The default tolerances (scikit-learn's) stop at what the estimator reports as the optimum: there a
    warm and a cold start agree to within that tolerance. A looser ``tol`` stops wherever the path from
    the start first meets it (a cold and a warm start measured 1.6 apart at logistic ``tol=0.01``), so
    the model would depend on what trained before.
    """
    defaults = inspect.signature(type(estimator)).parameters
    return estimator.max_iter < defaults["max_iter"].default or estimator.tol > defaults["tol"].default


def unconverged_after(estimator: Any) -> bool:
    """Whether the fit stopped at ``max_iter`` before its tolerance."""
    return getattr(estimator, "convergence_warning_", None) is not None


def _stored_stats(job: JobReuse) -> JobStats | None:
    """The job's statistics from the artifact store (None if not stored, or stored damaged)."""
    found = job.find("stats", job.fingerprint.stats_key, "the job's statistics")
    try:
        return JobStats.from_dict(found) if found is not None else None
    except (KeyError, TypeError, ValueError):
        job.used.pop()
        return None


def _warm_start(job: JobReuse, algorithm: str, estimator: Any, scaled: bool, M: Any) -> tuple[dict[str, Any], str]:
    """The ``fit`` arguments that start an iterative convex solver from an earlier model, and what it is.

    Only where the objective has one optimum and the solver runs to a tight tolerance: L2-regularized
    logistic regression, and ridge by conjugate gradients (alpha > 0), each with 0 < tol <= its default
    and ``max_iter`` not capped below its default (:func:`_stops_early`). The result then equals a cold
    start's within that tolerance (not bit for bit); with a looser ``tol`` it would depend on the start, so
    the fit starts cold and gives the cold model exactly. A fit stopped by ``max_iter`` would depend on its
    start too: a start is taken only from an earlier model that converged, and a warm-started fit that
    does not converge is fitted again cold. k-means and NMF are not convex: a start would change their
    result, so they never take one.
    """
    if _stops_early(estimator):  # an early stop lands where the path from the start first meets it
        return {}, ""
    if algorithm == "logistic_regression" and estimator.penalty == "l2" and estimator.tol > 0:
        found = job.warm_start(algorithm, scaled, M.feature_names)
        if found is not None:
            return {"coef_init": found[0], "intercept_init": found[1]}, found[2]
    if algorithm == "linear_regression" and estimator.alpha > 0 and estimator.tol > 0:
        solver = estimator.solver if estimator.solver != "auto" else estimator.choose_solver(M.shape[1])[0]
        found = job.warm_start(algorithm, scaled, M.feature_names) if solver == "cg" else None
        if found is not None:
            return {"coef_init": found[0]}, found[2]
    return {}, ""


def _regression_sums(X: Any, rows: tuple, args: tuple) -> tuple:
    """Over these rows (``reduce_rows``), r = X w + b - y: r . r, sum |r| and sum (y - mean y)^2."""
    (y,), (w, b, y_mean) = rows, args
    r = X @ w + (b - y)
    return float(r @ r), float(X.backend.xp.abs(r).sum()), float(((y - y_mean) ** 2).sum())


def _classification_sums(X: Any, rows: tuple, args: tuple) -> tuple:
    """Over these rows, z = X w + b against 0/1 truths: the rows classified right, and the summed log-loss."""
    (truth,), (w, b) = rows, args
    z = X @ w + b
    xp = X.backend.xp
    right = float(((z > 0) == (truth > 0.5)).sum())
    return right, float((xp.logaddexp(0, z) - xp.where(truth > 0.5, z, 0.0)).sum())  # -log p of the true class


def training_metrics(model: Any, X: Any, y: Any) -> dict[str, float]:
    """The cheap metrics a training reports: what the fit already knows, or one more pass over the rows.

    Sums over the rows (``reduce_rows``): a streamed or distributed matrix computes them where its rows
    are, without an n-length vector of scores. Ranking metrics (ROC AUC) and the like cost a sort of every
    row: :func:`evaluate` reports them.
    """
    kind = algorithm_facts(model.algorithm_).metrics
    if kind == "clustering":
        return {"inertia": float(model.inertia_)}
    if kind == "factorization":
        return {"reconstruction_error": float(model.reconstruction_err_)}
    M = as_matrix(X)  # what training holds (a normalized matrix, or row partitions of one), or a plain array
    y = np.asarray(to_host(y), dtype=float)
    n = len(y)
    w, b = M.backend.asarray(np.asarray(model.coef_, dtype=float)), float(model.intercept_)
    if kind == "regression":
        y_mean = float(y.mean())
        squares, absolute, total = M.reduce_rows(_regression_sums, (M.keep_rows(M.backend.asarray(y)),), (w, b, y_mean))
        return {
            "r2": 1.0 - squares / total if total > 0 and n > 1 else float("nan"),
            "rmse": float(np.sqrt(squares / n)),
            "mae": absolute / n,
        }
    truth = M.keep_rows(M.backend.asarray((y == model.classes_[1]).astype(float)))
    right, log_loss = M.reduce_rows(_classification_sums, (truth,), (w, b))
    return {"accuracy": right / n, "log_loss": log_loss / n}


def _encoded(
    con: duckdb.DuckDBPyConnection,
    model: Any,
    query: str,
    backend: str,
    check: bool = False,
    labelled_only: bool = True,
    role: str = "evaluate on",
) -> TrainingData:
    """The rows of ``query`` encoded as in ``model``'s training (factorized when the query allows).

    ``role`` says what the query is for, in errors ("the query to evaluate on").
    ``check`` refuses inf and values whose squares overflow, as training does; ``labelled_only``
    leaves out rows whose target (when the query selects it) is NULL.
    """
    if not isinstance(model, TrainedModel):
        raise IlargiError(
            "this needs a model returned by ilargi_db.train() or ilargi_db.load_model(); call model.predict(X) "
            "on arrays otherwise."
        )
    encoder = model.encoder_
    with ReadSnapshot(con), speaking_of(f"the query to {role}"):  # one committed state; errors name this query
        columns = [c.lower() for c in build_join_graph(con, query).feature_names]
        target = model.target_ if model.target_ is not None and model.target_.lower() in columns else None
        graph = build_join_graph(con, query, target)
        encoder.check_features(graph.feature_names)
        for feature, categorical in zip(graph.features, encoder.categorical):
            t = feature.duckdb_type
            if not (is_numeric(t) if not categorical else is_numeric(t) or is_categorical(t)):
                learned = "a category (text)" if categorical else "a number"
                raise PlanError(
                    f"feature {feature.name!r} has type {t} in this query, but the model learned it as {learned}: "
                    "cast it in the query."
                )
        graph = mark_categorical_coalesce(graph, encoder.categorical)
        build = _factorized if graph.factorizable else _materialized
        return build(con, graph, encoder, False, get_backend(backend), check=check, labelled_only=labelled_only)


@interruptible_job
def predict(con: duckdb.DuckDBPyConnection, model: Any, query: str, backend: str = "auto") -> np.ndarray:
    """Score the rows of another query with the same feature columns as ``model``'s training query.

    The features are encoded as in training (training means, training
    categories; unseen categories weigh zero) and the prediction runs
    factorized when the query allows it (a prediction is an LMM). Predictions
    come in the query's row order: add ORDER BY to line them up with rows.
    Every row gets one: the query need not select the target, and a row whose
    target is NULL is scored like any other.
    """
    return np.asarray(model.predict(_encoded(con, model, query, backend, labelled_only=False, role="predict on").X))


@interruptible_job
def evaluate(con: duckdb.DuckDBPyConnection, model: Any, query: str, backend: str = "auto") -> dict[str, float]:
    """Metrics of ``model`` on the rows of ``query`` (which selects the features, and the target if supervised).

    Regression: r2, rmse, mae. Logistic: accuracy, precision, recall, f1, log_loss,
    roc_auc. k-means: inertia. Gaussian NMF: reconstruction_error. Supervised models
    also report ``rows`` (the rows scored) and ``unlabelled_rows_left_out`` (rows
    whose target is NULL: they cannot be scored against a label).
    """
    data = _encoded(con, model, query, backend, check=True)
    if data.X.shape[0] == 0:
        raise IlargiError("the query to evaluate on returned no rows (with a non-NULL target): check its WHERE clause.")
    if model.algorithm_ in SUPERVISED and data.y is None:
        raise IlargiError(f"evaluating needs the target: select {model.target_!r} in the query.")
    metrics = metrics_of(model, data.X, data.y)
    if model.algorithm_ in SUPERVISED:
        metrics.update(rows=int(data.X.shape[0]), unlabelled_rows_left_out=int(data.unlabelled))
    return metrics


def metrics_of(model: Any, X: Any, y: Any) -> dict[str, float]:
    """The metrics ``evaluate`` reports, of a fitted ``model`` on encoded rows ``X`` (and labels ``y``)."""
    from sklearn import metrics

    kind = algorithm_facts(model.algorithm_).metrics
    if model.algorithm_ in SUPERVISED:
        y = np.asarray(to_host(y), dtype=float)
    if kind == "regression":
        p = model.predict(X)
        return {
            "r2": float(metrics.r2_score(y, p)) if len(y) > 1 else float("nan"),
            "rmse": float(np.sqrt(metrics.mean_squared_error(y, p))),
            "mae": float(metrics.mean_absolute_error(y, p)),
        }
    if kind == "classification":
        proba = model.predict_proba(X)[:, 1]
        truth = y == model.classes_[1]
        guess = proba > 0.5
        both = len(np.unique(truth)) == 2
        return {
            "accuracy": float(metrics.accuracy_score(truth, guess)),
            "precision": float(metrics.precision_score(truth, guess, zero_division=0)),
            "recall": float(metrics.recall_score(truth, guess, zero_division=0)),
            "f1": float(metrics.f1_score(truth, guess, zero_division=0)),
            "log_loss": float(metrics.log_loss(truth, proba, labels=[False, True])),
            "roc_auc": float(metrics.roc_auc_score(truth, proba)) if both else float("nan"),
        }
    if kind == "clustering":
        return {"inertia": -float(model.score(X))}
    return {"reconstruction_error": model.reconstruction_error(X)}


__all__ = [
    "ALGORITHMS",
    "check_algorithm",
    "evaluate",
    "explain",
    "metrics_of",
    "predict",
    "training_metrics",
    "train",
    "train_batch",
]
