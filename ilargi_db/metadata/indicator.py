"""Indicators I_k: one key-only join computes, for every output row, each source's row."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import sqlglot
from sqlglot import exp

from ilargi_db.metadata.arrow_blocks import column_to_numpy, fetch_arrow
from ilargi_db.metadata.scans import ROW, TARGET, SourceScan, group_item, part_column
from ilargi_db.metadata.target_labels import target_sql
from ilargi_db.plan.join_graph import JoinGraph
from ilargi_db.plan.sources import from_items
from ilargi_db.sql_text import quote_identifier


def row_column(position: int) -> str:
    return f"__ilargi_i{position}"


def winner_column(feature_index: int) -> str:
    return f"__ilargi_w{feature_index}"


STREAMED_ROWID = "__ilargi_streamed_rowid"  # the streamed source's rowid per output row


def indicator_sql(
    graph: JoinGraph,
    registered: dict[str, str],
    streamed: str | None = None,
    streamed_items: tuple[str, ...] = (),
    streamed_rowid: bool = True,
) -> str:
    """The user's FROM/WHERE/ORDER BY with the projection replaced by row numbers.

    Base tables stay as they are and give their ``rowid``; every other source
    is replaced by its registered key-only scan (same alias) and gives its row
    number. DuckDB runs every join and filter; no feature column is joined.
    """
    select = graph.select.copy()
    for item, source in zip(from_items(select), graph.sources):
        if source.alias not in registered:
            continue  # a base table, read natively
        item.replace(
            exp.Table(
                this=exp.to_identifier(registered[source.alias], quoted=True),
                alias=exp.TableAlias(this=exp.to_identifier(source.alias)),
            )
        )
    items = list(streamed_items)  # the streamed source's feature columns, already in output order
    if streamed is not None and streamed_rowid:  # a base table's rowid (a Parquet file has none)
        items.append(f"{quote_identifier(streamed)}.rowid AS {STREAMED_ROWID}")
    for position, source in enumerate(graph.sources):
        if source.alias == streamed:
            continue
        row = f"{quote_identifier(source.alias)}.{ROW if source.alias in registered else 'rowid'}"
        value = f"COALESCE({row}, -1)" if source.nullable else row
        items.append(f"{value} AS {row_column(position)}")
    if graph.target is not None:
        items.append(f"{target_sql(graph)} AS {TARGET}")
    if graph.group is not None:
        items.append(group_item(graph))
    for j, feature in enumerate(graph.features):
        if feature.kind == "coalesce":
            cases = " ".join(
                f"WHEN {quote_identifier(p.source)}.{quote_identifier(part_column(j, k))} IS NOT NULL THEN {k}"
                for k, p in enumerate(feature.parts)
            )
            items.append(f"CAST(CASE {cases} ELSE -1 END AS INTEGER) AS {winner_column(j)}")
    select.set("expressions", [sqlglot.parse_one(i, read="duckdb") for i in items])
    # A pushed filter already shaped a registered scan; a native table still needs it.
    kept = [p.sql for p in graph.filters if not p.pushed or p.sources[0] not in registered]
    where = sqlglot.parse_one(" AND ".join(f"({k})" for k in kept), read="duckdb") if kept else None
    select.set("where", exp.Where(this=where) if kept else None)
    return select.sql("duckdb")


def compute_indicators(
    con: duckdb.DuckDBPyConnection,
    graph: JoinGraph,
    scans: dict[str, SourceScan],
    token: str,
    streamed: tuple[str, dict[str, str]] | None = None,
) -> tuple[dict[str, np.ndarray], pa.Table]:
    """Run the key-only join; return its columns as NumPy arrays, and the Arrow result.

    Keys: each source alias (its row per output row, -1 where empty), the target
    column name :data:`TARGET` and one winner column per coalesced feature.
    ``streamed`` = (alias, {column: select item}): that source has no scan; its
    feature columns come out of the join itself, one row per output row, and
    its indicator is the identity.
    """
    registered = {
        alias: f"__ilargi_{token}_{position}" for position, (alias, scan) in enumerate(scans.items()) if not scan.native
    }
    try:
        for alias, name in registered.items():
            con.register(name, scans[alias].keys)
        alias, columns = streamed if streamed else (None, {})
        sql = indicator_sql(graph, registered, alias, tuple(columns.values()))
        table = fetch_arrow(con, sql, what="the key-only join")
    finally:
        for name in registered.values():
            try:
                con.unregister(name)
            except duckdb.Error:  # pragma: no cover - already gone with a closed connection
                pass
    result = {}
    for position, source in enumerate(graph.sources):
        if streamed and source.alias == streamed[0]:
            result[source.alias] = np.arange(table.num_rows)
            continue
        rows = column_to_numpy(table.column(row_column(position)))
        scan = scans[source.alias]
        result[source.alias] = scan.positions(rows) if scan.native else rows
    returned = set(table.column_names)  # a new list on each access
    for name in (TARGET, STREAMED_ROWID, *(winner_column(j) for j in range(len(graph.features)))):
        if name in returned:
            result[name] = column_to_numpy(table.column(name))
    return result, table
