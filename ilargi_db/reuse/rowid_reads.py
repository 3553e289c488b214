"""Feature columns read by rowid: the rows a stored key-only join names, and only those.

A job that adds a feature to an earlier one reuses the earlier ``rows`` artifact (with each base
table's rowids per block row) and reads the new feature from its base table here: one scan of that
table, a semi-join with the stored rowids, so an expression that fails on rows the job filtered out
fails here neither. Anything that does not line up raises
:class:`~ilargi_db.errors.StaleArtifact`, and the job reads cold instead.
"""

from __future__ import annotations

import uuid
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ilargi_db.errors import IlargiError, StaleArtifact
from ilargi_db.metadata.arrow_blocks import arrow_to_block, arrow_to_numpy, fetch_arrow, numpy_to_arrow
from ilargi_db.metadata.scans import ROWID, cast_part, null_row_values, part_column
from ilargi_db.plan.join_graph import JoinGraph
from ilargi_db.plan.sources import with_prefix
from ilargi_db.read_snapshot import renew_snapshot
from ilargi_db.sql_text import quote_identifier


def read_columns(
    con: duckdb.DuckDBPyConnection,
    graph: JoinGraph,
    categorical: frozenset[int],
    alias: str,
    features: list[int],
    row_ids: np.ndarray,
) -> dict[int, dict]:
    """``{feature: column}`` of base table ``alias``'s ``features`` on the rows ``row_ids`` names, in that
    order: the artifacts a cold read would have made (values and the fill of an outer join's empty row)."""
    table = fetch_columns(con, graph, alias, features, categorical, row_ids)
    fills = null_fills(con, graph, alias, features, categorical)
    columns = {}
    for j in features:
        name = part_column(j, 0)
        if j in categorical:
            columns[j] = {"values": table.column(name).combine_chunks(), "fill": fills[name]}
        else:
            columns[j] = {"data": arrow_to_block(table, [name])[:, 0].copy(), "fill": fills[name]}
    return columns


def fetch_columns(
    con: duckdb.DuckDBPyConnection,
    graph: JoinGraph,
    alias: str,
    features: list[int],
    categorical: frozenset[int],
    row_ids: np.ndarray,
) -> pa.Table:
    """Features of base table ``alias`` on the rows ``row_ids`` names, in that order (one scan of the table).

    Only those rows are read (a semi-join with the stored rowids), so an expression that fails on rows the
    job filtered out fails here neither; any error raises :class:`StaleArtifact`.
    """
    source = graph.source(alias)
    text = frozenset(part_column(j, 0) for j in features if j in categorical)
    items = [f"{quote_identifier(alias)}.rowid AS {ROWID}"] + [
        cast_part(part_column(j, 0), graph.features[j].parts[0].sql, text) for j in features
    ]
    wanted = f"__ilargi_rowids_{uuid.uuid4().hex}"
    con.register(wanted, pa.table({"r": numpy_to_arrow(np.unique(row_ids[row_ids >= 0]))}))
    try:
        sql = (
            f"{with_prefix(graph.select)}SELECT {', '.join(items)} FROM {source.relation_sql} "
            f"WHERE {quote_identifier(alias)}.rowid IN (SELECT r FROM {wanted})"
        )
        table = fetch_arrow(con, sql, what=f"new feature columns of {alias!r}")
    except (IlargiError, duckdb.Error):
        renew_snapshot(con)  # a failed statement aborts the job's read transaction
        raise StaleArtifact from None
    finally:
        con.unregister(wanted)
    found = arrow_to_numpy(table.column(ROWID))
    order = np.argsort(found, kind="stable")
    at = np.searchsorted(found[order], row_ids)
    at = np.minimum(at, len(found) - 1) if len(found) else at
    if len(found) == 0 and len(row_ids):
        raise StaleArtifact
    if len(row_ids) and not np.array_equal(found[order][at], row_ids):
        raise StaleArtifact  # a row the stored join names is gone: the fingerprint and the table disagree
    return table.take(numpy_to_arrow(order[at]))


def null_fills(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, alias: str, features: list[int], categorical: frozenset[int]
) -> dict[str, Any]:
    """Each feature's value on the all-NULL row an outer join adds (NaN / None where nothing fills it)."""
    source = graph.source(alias)
    parts = {part_column(j, 0): graph.features[j].parts[0].sql for j in features}
    text = frozenset(part_column(j, 0) for j in features if j in categorical)
    if source.nullable:
        return null_row_values(con, source, parts, text)
    return {name: None if name in text else np.nan for name in parts}


__all__ = ["fetch_columns", "null_fills", "read_columns"]
