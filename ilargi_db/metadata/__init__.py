"""Data-integration metadata: source scans, indicators and mappings from a join graph.

:func:`extract_metadata` runs one scan per source (feature expressions
evaluated by DuckDB, own filters pushed in) and one key-only join that gives
every source's row for every output row. Nothing wide is ever joined.
"""

from __future__ import annotations

import uuid

import duckdb
import numpy as np
import pyarrow as pa

from ilargi_db.errors import IlargiError
from ilargi_db.metadata.arrow_blocks import arrow_to_block, fetch_arrow, numpy_to_arrow
from ilargi_db.metadata.di_metadata import BlockMetadata, CategoricalMetadata, DIMetadata, GroupCodes
from ilargi_db.metadata.indicator import STREAMED_ROWID, TARGET, compute_indicators, winner_column
from ilargi_db.metadata.scans import GROUP, cast_part, join_columns, part_column, scan_source, supports_rowid
from ilargi_db.plan.join_graph import JoinGraph
from ilargi_db.plan.sources import with_prefix


def sorting_order(rows: np.ndarray, distinct: bool = False) -> np.ndarray | None:
    """The stable permutation that sorts ``rows`` (None: already sorted): a counting sort for dense distinct
    keys (``distinct``: known to be, else checked), O(n + their span)."""
    n = len(rows)
    if n == 0 or bool(np.all(rows[1:] >= rows[:-1])):
        return None
    low = int(rows.min())
    span = int(rows.max()) - low + 1
    keys = rows if low == 0 else rows - low  # no copy for rowids from 0
    if span <= 4 * n and (distinct or np.bincount(keys, minlength=span).max() == 1):
        slot = np.full(span, -1, dtype=np.int64)
        slot[keys] = np.arange(n)
        return slot if span == n else slot[slot >= 0]
    return np.argsort(rows, kind="stable")


def _permuted(arrays: dict[str, np.ndarray], order: np.ndarray, keep: str) -> dict[str, np.ndarray]:
    """``arrays`` (but ``keep``) put in ``order``, in place through one scratch vector where they can be: a
    sorted copy of each would add their size to the read's peak (their memory stays with Arrow's pool)."""
    scratch = np.empty(len(order) * 8, dtype=np.uint8)
    out = {}
    for name, values in arrays.items():
        if name != keep and values.flags.writeable and values.ndim == 1 and values.dtype.itemsize <= 8:
            sorted_values = scratch[: values.nbytes].view(values.dtype)
            np.take(values, order, out=sorted_values)
            values[:] = sorted_values
        elif name != keep:
            values = values[order]
        out[name] = values
    return out


def in_anchor_order(
    joined: dict[str, np.ndarray], graph: JoinGraph, widths: dict[str, int], heights: dict[str, int]
) -> dict:
    """Put output rows in the row order of the largest non-nullable source (the fact table).

    Without ORDER BY any row order is the query's answer; this one makes the
    fact's indicator the identity in a star join (no gather in X @ W) and
    sequential otherwise, and the same on every run (DuckDB's threads return
    row groups in any order). A permutation of the fact's rows is inverted in O(n). The arrays move
    out of ``joined`` into the dict returned (``joined`` is left empty when they are reordered).
    """
    candidates = [s for s in graph.sources if not s.nullable and widths[s.alias]]
    if not candidates:
        return joined
    anchor = max(candidates, key=lambda s: heights[s.alias] * widths[s.alias])
    order = sorting_order(joined[anchor.alias])
    if order is None:
        return joined
    # Taken out one at a time: each column the join returned is let go as soon as its reordered copy exists.
    return {name: joined.pop(name)[order] for name in list(joined)}


def streamable_source(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, parts: dict[str, dict], parts_in_join: dict[str, list]
) -> str | None:
    """The FROM source whose features can come straight out of the key-only join, if any.

    The first source of a star or snowflake (the fact table) is read by the join
    anyway; selecting its feature expressions there saves its own scan and puts
    its block in output order (identity indicator), with no reordering. Only a
    base table no outer join can empty, whose rows no join can repeat, qualifies:
    its rows flow through the join at most once each.
    """
    first = graph.sources[0]
    if first.nullable or not parts[first.alias] or parts_in_join[first.alias]:
        return None
    prefix = with_prefix(graph.select)
    if not supports_rowid(con, first, prefix) or not joins_cannot_repeat_rows(con, graph):
        return None
    return first.alias


def joins_cannot_repeat_rows(con: duckdb.DuckDBPyConnection, graph: JoinGraph) -> bool:
    """Whether every join matches a row with at most one row: each joined source is unique on its join keys.

    Then the first source's rows flow through the join at most once each, and
    streaming its features costs no more than scanning it. Where a join can repeat
    them (an M:N join, or a dimension first in FROM), a streamed block would grow
    to the size of the join. One aggregate query over the joined sources decides
    (NULL keys count as duplicates: a conservative answer only costs the stream).
    """
    checks = []
    for edge in graph.joins:
        keys = ", ".join(right for _, right in edge.keys)
        checks.append(f"(SELECT count(*) = count(DISTINCT row({keys})) FROM {graph.source(edge.right).relation_sql})")
    if not checks:
        return True
    try:
        found = fetch_arrow(con, f"{with_prefix(graph.select)}SELECT {', '.join(checks)}", what="unique join keys")
    except IlargiError:  # a key DuckDB cannot count on its own (e.g. correlated): scanning is always right
        return False
    return all(column[0].as_py() for column in found.columns)


def clear_unused_nonfinite(block: BlockMetadata) -> None:
    """Zero NaN and +-inf (NULLs included) in block rows no output row takes.

    Such rows never appear in T, but NaN * 0 and inf * 0 = NaN would still leak
    into T^T V and T^T T through them.
    """
    if np.isfinite(block.data.sum()):
        return  # no NaN or inf anywhere (one pass, no mask)
    missing = ~np.isfinite(block.data)
    used = np.bincount(block.indicator[block.indicator >= 0], minlength=block.n_source_rows) > 0
    block.data[missing & ~used[:, None]] = 0.0


def _feature_parts(graph: JoinGraph) -> tuple[dict[str, dict[str, str]], dict[str, list[str]]]:
    """Per source, the feature expressions it computes (by part column), and those the join must carry
    (the parts of a COALESCE across sources, which the join decides between)."""
    parts: dict[str, dict[str, str]] = {s.alias: {} for s in graph.sources}
    parts_in_join: dict[str, list[str]] = {s.alias: [] for s in graph.sources}
    for j, feature in enumerate(graph.features):
        for k, part in enumerate(feature.parts):
            parts[part.source][part_column(j, k)] = part.sql
            if feature.kind == "coalesce":
                parts_in_join[part.source].append(part_column(j, k))
    return parts, parts_in_join


def _coalesced_blocks(graph: JoinGraph, joined: dict, scans: dict, dtype: np.dtype) -> list[BlockMetadata]:
    """One block per part of each COALESCE across sources: the winning source gives the cell."""
    blocks = []
    for j, feature in enumerate(graph.features):
        if feature.kind != "coalesce":
            continue
        winner = joined[winner_column(j)]
        for k, part in enumerate(feature.parts):
            rows = joined[part.source]
            # A row no source fills is empty (-1) in the first part only; elsewhere the part gives nothing (-2).
            other = np.where(winner == -1, -1, -2) if k == 0 else -2
            blocks.append(
                BlockMetadata(
                    source=part.source,
                    data=arrow_to_block(scans[part.source].values, [part_column(j, k)], dtype),
                    indicator=np.where(winner == k, rows, other).astype(rows.dtype, copy=False),
                    columns=np.array([j], dtype=np.int64),
                    fill=np.full(1, np.nan, dtype=dtype),
                )
            )
    return blocks


def group_codes(graph: JoinGraph, join_table: pa.Table, joined: dict[str, np.ndarray]) -> GroupCodes | None:
    """The group_by column's codes put in ``joined`` (reordered with the indicators), and its labels."""
    if graph.group is None:
        return None
    groups = GroupCodes.from_arrow(join_table.column(GROUP))
    joined[GROUP] = groups.codes
    return groups


def extract_metadata(
    con: duckdb.DuckDBPyConnection,
    graph: JoinGraph,
    dtype: np.dtype = np.float64,
    categorical: frozenset[int] = frozenset(),
) -> DIMetadata:
    """Scan every source and compute all indicators with one DuckDB query.

    Features whose index is in ``categorical`` are read as text, one value per
    source row, for an encoder to expand (see :mod:`ilargi_db.preprocess`).
    """
    if not graph.factorizable:
        raise ValueError("extract_metadata needs a factorizable join graph")  # normalize() checks first
    if any(graph.features[j].kind == "coalesce" for j in categorical):
        raise ValueError("a categorical feature must read one source")  # classified as cross-source upstream
    keys = join_columns(graph)
    parts, parts_in_join = _feature_parts(graph)
    text_parts = frozenset(part_column(j, 0) for j in categorical)
    anchor = streamable_source(con, graph, parts, parts_in_join)
    scans = {
        s.alias: scan_source(con, graph, s, keys[s.alias], parts[s.alias], parts_in_join[s.alias], text_parts)
        for s in graph.sources
        if s.alias != anchor
    }
    streamed = None
    if anchor is not None:
        streamed = (anchor, {name: cast_part(name, sql, text_parts) for name, sql in parts[anchor].items()})
    joined, join_table = compute_indicators(con, graph, scans, uuid.uuid4().hex, streamed)
    n_rows = join_table.num_rows
    groups = group_codes(graph, join_table, joined)
    order = None  # where the anchor's rows come out of the join: their rowid order, as DuckDB returned them
    if not graph.order_by and anchor is None:
        join_table = None  # nothing more to read from it: its columns go as they are reordered
        widths = {alias: len(p) for alias, p in parts.items()}
        joined = in_anchor_order(joined, graph, widths, {alias: scan.n_rows for alias, scan in scans.items()})
    elif not graph.order_by:
        # DuckDB's threads return the fact's row groups in any order: in rowid order, every sum over the rows
        # adds them in the same order on every run (a model the same bit for bit).
        order = sorting_order(joined[STREAMED_ROWID], distinct=True)  # a fact's rows flow through once each
        if order is not None:
            joined = _permuted(joined, order, keep=anchor)

    def values_of(alias: str):
        return join_table if alias == anchor else scans[alias].values

    def block_of(alias: str, names: list[str]) -> np.ndarray:
        data = arrow_to_block(values_of(alias), names, dtype)
        if alias == anchor and order is not None:
            for j in range(data.shape[1]):  # a column at a time: one column's copy at most
                data[:, j] = data[order, j]
        return data

    def fill_of(alias: str, name: str):
        if alias != anchor:
            return scans[alias].fill[name]
        return None if name in text_parts else np.nan  # the streamed fact never has empty rows

    blocks: list[BlockMetadata] = []
    categoricals: list[CategoricalMetadata] = []
    for source in graph.sources:
        plain = [
            (j, part_column(j, 0))
            for j, f in enumerate(graph.features)
            if f.kind == "source" and f.parts[0].source == source.alias and j not in categorical
        ]
        if plain:
            names = [name for _, name in plain]
            blocks.append(
                BlockMetadata(
                    source=source.alias,
                    data=block_of(source.alias, names),
                    indicator=joined[source.alias],
                    columns=np.array([j for j, _ in plain], dtype=np.int64),
                    fill=np.array([fill_of(source.alias, name) for name in names], dtype=dtype),
                )
            )
    for j in sorted(categorical):
        source = graph.features[j].parts[0].source
        name = part_column(j, 0)
        values = values_of(source).column(name).combine_chunks()
        if source == anchor and order is not None:
            values = values.take(numpy_to_arrow(order))
        categoricals.append(CategoricalMetadata(source, j, values, joined[source], fill_of(source, name)))
    blocks += _coalesced_blocks(graph, joined, scans, dtype)
    for block in blocks:
        clear_unused_nonfinite(block)
    return DIMetadata(
        n_rows=n_rows,
        feature_names=graph.feature_names,
        blocks=blocks,
        indicators={s.alias: joined[s.alias] for s in graph.sources},
        source_rows={s.alias: n_rows if s.alias == anchor else scans[s.alias].n_rows for s in graph.sources},
        target=joined.get(TARGET),
        categoricals=categoricals,
        row_ids={
            s.alias: joined.get(STREAMED_ROWID) if s.alias == anchor else scans[s.alias].rowids for s in graph.sources
        },
        groups=None if groups is None else GroupCodes(joined[GROUP], groups.labels),
    )


__all__ = [
    "BlockMetadata",
    "CategoricalMetadata",
    "DIMetadata",
    "GroupCodes",
    "clear_unused_nonfinite",
    "extract_metadata",
]
