"""Training on a Dask cluster: the fact's Parquet files partitioned over the workers, the dimensions broadcast.

The sums these models need (X^T X, gradients, k-means' sums and counts) are sums of per-partition pieces,
so no shuffle is needed (background.md, section 6). The driver scans the dimensions (small), fits the
encoder in one aggregate query and broadcasts both; every worker runs DuckDB on its Parquet files for the
key-only join against the broadcast dimension keys, and keeps its partitions resident across
iterations. Each operator of the :class:`~ilargi_db.linalg.PartitionedMatrix` then runs where the
partitions are, and only its small results travel: the driver broadcasts parameters and adds the partials
in partition order (deterministic). A worker lost mid-training is survived: its partitions are the pure
results of reading their files, and Dask computes them again elsewhere.

>>> from ilargi_db.cluster import parquet_files   # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import sqlglot
from sqlglot import exp

from ilargi_db.cluster.connection import (
    CONNECT_SECONDS,
    build_id,
    check_versions,
    connect_cluster,
    register_cluster,
    registered_cluster,
    registered_clusters,
    unregister_cluster,
)
from ilargi_db.errors import IlargiError
from ilargi_db.linalg import Block, NormalizedMatrix, PartitionedMatrix
from ilargi_db.metadata import joins_cannot_repeat_rows
from ilargi_db.metadata.arrow_blocks import arrow_to_block, column_to_numpy
from ilargi_db.metadata.di_metadata import BlockMetadata, CategoricalMetadata
from ilargi_db.metadata.indicator import indicator_sql, row_column
from ilargi_db.metadata.scans import TARGET, cast_part, join_columns, part_column, quote, scan_source
from ilargi_db.metadata.stream import dimension_metadata
from ilargi_db.metadata.value_range import check_values
from ilargi_db.plan.join_graph import JoinGraph
from ilargi_db.plan.sources import from_items

FILE_ROW = "file_row_number"  # read_parquet's row number within a file: a partition's fixed order


class RemotePartitions(Sequence):
    """Partitions held by a cluster's workers, as Dask futures; operators run where they are."""

    resident = False

    def __init__(self, client: Any, futures: list[Any]):
        self.client, self.futures = client, futures
        self._groups: dict[Any, list[int]] | None = None  # worker -> the partitions it holds, once all are held

    def __len__(self) -> int:
        return len(self.futures)

    def __getitem__(self, k: int) -> NormalizedMatrix:  # type: ignore[override]
        return self.client.gather(self.futures[k])  # a local copy (the template; rows for k-means++)

    def each(self, fn: Callable[..., Any], *per_partition: Sequence[Any]) -> list[Any]:
        """``fn(partition, *its arguments)`` on the worker holding each partition; the results, in order.

        One task per worker, over the partitions it holds (the scheduler's cost grows with the tasks of a
        pass, not with the partitions); each returns its partitions' results apart, and the caller adds
        them in partition order. Arguments travel inside the tasks (parameters are small: d floats), not as
        scattered data: a task's inputs must survive a lost worker, and Dask can only recompute what it
        has the recipe for. A partition whose worker was lost is read again wherever Dask places it.
        """
        groups = self._groups if self._groups is not None else self._group()
        tasks = []
        for worker, ks in groups.items():
            placement = {"workers": [worker], "allow_other_workers": True} if isinstance(worker, str) else {}
            arguments = [tuple(args[k] for args in per_partition) for k in ks]
            partitions = [self.futures[k] for k in ks]
            tasks.append(self.client.submit(_each_held, fn, partitions, arguments, pure=False, **placement))
        results: list[Any] = [None] * len(self.futures)
        for ks, found in zip(groups.values(), self.client.gather(tasks)):
            for k, result in zip(ks, found):
                results[k] = result
        return results

    def _group(self) -> dict[Any, list[int]]:
        """The partitions by the worker holding each (one scheduler query). Kept once every partition is held:
        placement is a hint (a task may run elsewhere, after a lost worker), so a stale one costs a transfer,
        never a wrong result."""
        holders = self.client.who_has(self.futures)
        groups: dict[Any, list[int]] = {}
        for k, future in enumerate(self.futures):
            where = sorted(holders.get(future.key, ()))
            # A partition not computed yet (or being read again after a lost worker) is a task of its own,
            # for Dask to place: grouped, they would all land on one worker.
            groups.setdefault(where[0] if where else ("unplaced", k), []).append(k)
        if all(isinstance(worker, str) for worker in groups):
            self._groups = groups
        return groups

    def keep(self, pieces: list[Any]) -> list[Any]:
        """Each partition's slice of a vector, sent once to the worker holding that partition.

        As tasks that return their argument, not scattered data: Dask can recompute them on another worker
        if this one is lost.
        """
        holders = self.client.who_has(self.futures)
        kept = []
        for future, piece in zip(self.futures, pieces):
            where = list(holders.get(future.key, ()))  # none while a lost partition is being read again
            placement = {"workers": where, "allow_other_workers": True} if where else {}
            kept.append(self.client.submit(_identity, piece, pure=False, **placement))
        return kept

    def mapped(self, f: Callable[[NormalizedMatrix], NormalizedMatrix]) -> RemotePartitions:
        return RemotePartitions(self.client, [self.client.submit(f, future) for future in self.futures])


def parquet_files(con: duckdb.DuckDBPyConnection, graph: JoinGraph) -> tuple[exp.Expression, list[str]]:
    """The fact's ``read_parquet(...)`` call and the files it reads (globs expanded), or a clear refusal."""
    fact = graph.sources[0]
    item = from_items(graph.select)[0]
    call = item.this if isinstance(item, exp.Table) else None
    name = (call.name if isinstance(call, exp.Anonymous) else getattr(call, "key", "")).lower() if call else ""
    if fact.kind != "function" or "parquet" not in (name + fact.relation_sql.lower()):
        raise IlargiError(
            f"on a cluster every worker reads its share of the fact from Parquet files: the training query's first "
            f"FROM source must be read_parquet('path/*.parquet') that every worker can read, got "
            f"{fact.relation_sql!r}. Write the fact to Parquet (COPY ... TO 'dir' (FORMAT parquet)), or train "
            "without cluster=."
        )
    args = call.expressions or [call.this]
    first = args[0]
    patterns = [e.this for e in first.expressions] if isinstance(first, exp.Array) else [first.this]
    files: list[str] = []
    for pattern in patterns:
        found = con.execute("SELECT file FROM glob(?) ORDER BY file", [pattern]).fetchall()
        # A relative path means the driver's working directory: the workers get it spelled out.
        files += [row[0] if "://" in row[0] else os.path.abspath(row[0]) for row in found]
    if not files:
        raise IlargiError(f"read_parquet of the training query matches no file ({', '.join(patterns)}).")
    return call, files


def _file_sql(graph: JoinGraph, registered: dict[str, str], fact_items: tuple[str, ...], call: Any, file: str) -> str:
    """The key-only join of one Parquet file of the fact against the registered dimensions, in file order."""
    sql = indicator_sql(graph, registered, graph.sources[0].alias, fact_items, streamed_rowid=False)
    select = sqlglot.parse_one(sql, read="duckdb")
    one = call.copy()
    rest = [a for a in (one.expressions or [])][1:]
    options = [*rest, sqlglot.parse_one(f"{FILE_ROW} = true", read="duckdb")]
    item = from_items(select)[0]
    function = exp.Anonymous(this="read_parquet", expressions=[exp.Literal.string(file), *options])
    item.set("this", function)
    select.set("order", None)
    return select.order_by(f"{quote(graph.sources[0].alias)}.{FILE_ROW}", dialect="duckdb").sql("duckdb")


def build_partition(sql: str, shared: dict, file: str, stamp: tuple, backend: str = "numpy") -> NormalizedMatrix:
    """On a worker: read one file's rows with DuckDB and build its partition over the broadcast dimensions.

    Refuses a file that changed since the driver read it (its size and modification time): the encoder was
    fitted on the old one, and the target the driver holds lines up with the old rows.
    """
    if _stamp(file) != tuple(stamp):
        raise IlargiError(f"{file} changed during training (size or modification time): train again.")
    con = duckdb.connect()
    for name, table in shared["keys"].items():
        con.register(name, table)
    table = con.sql(sql).to_arrow_table()
    con.close()
    unlabelled = 0
    if TARGET in table.column_names:  # rows whose target is NULL (or NaN) teach nothing, as in memory
        target = column_to_numpy(table.column(TARGET))
        keep = ~np.isnan(target)
        unlabelled = int((~keep).sum())
        if unlabelled:
            table = table.filter(pa.array(keep))
    n = table.num_rows
    rows = np.arange(n)
    encoder = shared["encoder"]
    blocks = []
    if shared["fact_numeric"]:
        data = arrow_to_block(table, [part_column(j, 0) for j in shared["fact_numeric"]])
        for i, j in enumerate(shared["fact_numeric"]):  # inf, or squares that overflow: refused as in memory
            check_values(data[:, i], shared["names"][j])
        meta = BlockMetadata(
            "fact", data, rows, np.array(shared["fact_numeric"]), np.full(len(shared["fact_numeric"]), np.nan)
        )
        blocks.append(encoder.transform_block(meta))
    for j in shared["fact_text"]:
        values = table.column(part_column(j, 0)).combine_chunks()
        block = encoder.transform_categorical(CategoricalMetadata("fact", j, values, rows, None), 2)
        if block is not None:
            blocks.append(block)
    for position, block in shared["dimensions"]:
        index = column_to_numpy(table.column(row_column(position))).astype(np.int64)
        blocks.append(Block(block.data, columns=block.columns, index=index, fill=block.fill))
    X = NormalizedMatrix(blocks, n_rows=n, feature_names=encoder.feature_names_out_, backend=backend)
    X.target = column_to_numpy(table.column(TARGET)) if TARGET in table.column_names else None
    X.unlabelled = unlabelled
    return X


def _stamp(file: str) -> tuple:
    """What says a local file changed (its size and modification time); a remote URL has none here."""
    try:
        found = os.stat(file)
    except OSError:
        return ()
    return (found.st_size, found.st_mtime_ns)


def _each_held(fn: Callable[..., Any], partitions: list[NormalizedMatrix], arguments: list[tuple]) -> list[Any]:
    """On a worker: ``fn`` on each partition it holds, the results apart (added in order by the driver)."""
    return [fn(p, *args) for p, args in zip(partitions, arguments)]


def _unlabelled(p: NormalizedMatrix) -> int:
    return p.unlabelled


def _identity(value: Any) -> Any:
    return value


def _n_rows(p: NormalizedMatrix) -> int:
    return p.shape[0]


def _target(p: NormalizedMatrix) -> Any:
    return p.target


def cluster_data(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, encoder: Any, client: Any
) -> tuple[PartitionedMatrix, np.ndarray | None, int]:
    """The training data as a :class:`PartitionedMatrix` held by ``client``'s workers, one partition per file.

    Returns (X, y, the rows left out for a NULL target). The driver reads the files too (the encoder's
    aggregate query); each worker reads its own.
    """
    fact = graph.sources[0]
    if not graph.factorizable or any(f.kind != "source" for f in graph.features):
        raise IlargiError("on a cluster each source is read on its own: a feature may not mix sources.")
    if fact.nullable or not joins_cannot_repeat_rows(con, graph):
        raise IlargiError(
            "on a cluster the fact (the first FROM source) is split by file, so no outer join may empty it and no "
            "join may repeat its rows (each joined table unique on its join keys)."
        )
    call, files = parquet_files(con, graph)
    categorical = frozenset(j for j, c in enumerate(encoder.categorical) if c)
    text = frozenset(part_column(j, 0) for j in categorical)
    keys = join_columns(graph)
    parts: dict[str, dict[str, str]] = {s.alias: {} for s in graph.sources}
    for j, feature in enumerate(graph.features):
        parts[feature.parts[0].source][part_column(j, 0)] = feature.parts[0].sql
    encoder.fit_query(con, graph)
    registered, key_tables, scans = {}, {}, {}
    for position, source in enumerate(graph.sources):
        if source.alias != fact.alias:
            scan = scan_source(con, graph, source, keys[source.alias], parts[source.alias], (), text, native=False)
            scans[source.alias] = scan
            registered[source.alias] = name = f"__ilargi_dimension_{position}"
            key_tables[name] = scan.keys
    for name, table in key_tables.items():  # registered here too, for the rows the training uses
        con.register(name, table)
    try:
        dims, dim_cats = dimension_metadata(con, graph, registered, fact.alias, scans, categorical)
    finally:
        for name in key_tables:
            con.unregister(name)
    for block in dims:  # inf, or values whose squares overflow: refused as in memory
        for i, j in enumerate(block.columns):
            check_values(block.data[:, i], graph.features[j].name)
    position = {s.alias: p for p, s in enumerate(graph.sources)}
    dimensions = [(position[alias], block) for alias, block in encoder.transform_dimensions(dims, dim_cats)]
    fact_items = tuple(cast_part(n, sql, text) for n, sql in parts[fact.alias].items())
    shared = {
        "keys": key_tables,
        "encoder": encoder,
        "dimensions": dimensions,
        "fact_numeric": [
            j for j, f in enumerate(graph.features) if f.parts[0].source == fact.alias and j not in categorical
        ],
        "fact_text": [j for j, f in enumerate(graph.features) if f.parts[0].source == fact.alias and j in categorical],
        "names": graph.feature_names,
    }
    # A task that returns the shared payload (not scattered data): if the worker holding it is lost, Dask
    # recomputes it, and the partitions built from it, elsewhere.
    broadcast = client.submit(_identity, shared, pure=False)
    sqls = [_file_sql(graph, registered, fact_items, call, file) for file in files]
    futures = [
        client.submit(build_partition, sql, broadcast, file, _stamp(file), pure=True) for sql, file in zip(sqls, files)
    ]
    sizes = client.gather([client.submit(_n_rows, f) for f in futures])
    targets = client.gather([client.submit(_target, f) for f in futures]) if graph.target is not None else None
    y = np.concatenate(targets) if targets is not None else None
    unlabelled = sum(client.gather([client.submit(_unlabelled, f) for f in futures]))
    partitions = RemotePartitions(client, futures)
    X = PartitionedMatrix(partitions, sizes=sizes, template=partitions[0])
    return X, y, unlabelled


__all__ = [
    "CONNECT_SECONDS",
    "RemotePartitions",
    "build_id",
    "build_partition",
    "check_versions",
    "cluster_data",
    "connect_cluster",
    "parquet_files",
    "register_cluster",
    "registered_cluster",
    "registered_clusters",
    "unregister_cluster",
]
