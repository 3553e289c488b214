"""The factorized read as artifacts: a job's :class:`~ilargi_db.metadata.DIMetadata` split into the
``rows`` artifact and one ``column`` artifact per feature, and assembled back.

- ``rows``: the key-only join's result: every source's indicator, each base table's rowids per block
  row, the target, the coalesced features' blocks;
- ``column``: one per feature read from one source, its values on its source's rows (numbers, or text
  for a categorical), so a job that adds a feature reads only that column.

Values are in the row order of the read that made them (a view's scan may return another order next
time), so each artifact carries its read's id: a column serves only the rows artifact of the same read,
or is read again by rowid (:mod:`~ilargi_db.reuse.rowid_reads`).
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from ilargi_db.errors import StaleArtifact
from ilargi_db.metadata import BlockMetadata, CategoricalMetadata, DIMetadata
from ilargi_db.plan.join_graph import JoinGraph

READ = "read"  # the id of the read an artifact's row order comes from


def plain_features(graph: JoinGraph) -> list[int]:
    """Features read from one source (their values are per-feature artifacts)."""
    return [j for j, f in enumerate(graph.features) if f.kind == "source"]


def split(graph: JoinGraph, categorical: frozenset[int], meta: DIMetadata) -> tuple[dict, dict[int, dict]]:
    """``meta`` as the rows artifact and one artifact per plain feature (what :func:`assemble` rebuilds),
    all of them marked as one read."""
    read = uuid.uuid4().hex
    rows: dict[str, Any] = {"n_rows": meta.n_rows, "source_rows": dict(meta.source_rows), READ: read}
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
            rows.update({f"{prefix}/data": block.data.copy(order="K"), f"{prefix}/indicator": block.indicator})
            rows.update({f"{prefix}/column": block.columns, f"{prefix}/fill": block.fill})
            rows.setdefault("coalesce_sources", []).append(block.source)
            coalesced += 1
    columns: dict[int, dict] = {}
    for block in meta.blocks:
        for i, j in enumerate(block.columns):
            if graph.features[int(j)].kind == "source":
                # A copy: training clears NaN in block rows no labelled row uses, in place.
                columns[int(j)] = {"data": block.data[:, i].copy(), "fill": float(block.fill[i]), READ: read}
    for cat in meta.categoricals:
        columns[cat.feature] = {"values": cat.values, "fill": cat.fill, READ: read}
    return rows, columns


def unaligned(graph: JoinGraph, rows: dict, columns: dict[int, dict | None]) -> dict[str, list[int]]:
    """``{source alias: features}`` whose artifact is missing or from another read than ``rows``: to read
    again, by rowid."""
    missing: dict[str, list[int]] = {}
    for j, column in columns.items():
        if column is None or column.get(READ) != rows.get(READ):
            missing.setdefault(graph.features[j].parts[0].source, []).append(j)
    return missing


def row_ids(rows: dict, alias: str) -> np.ndarray:
    """The rowids of base table ``alias`` per block row of ``rows`` (a source that is not a base table
    has none: :class:`StaleArtifact`, read cold)."""
    ids = rows.get(f"rowids/{alias}")
    if ids is None:
        raise StaleArtifact
    return ids


def aligned(column: dict, rows: dict) -> dict:
    """``column`` (read by rowid in the order of ``rows``) marked as of the read of ``rows``."""
    return {**column, READ: rows.get(READ)}


def assemble(graph: JoinGraph, categorical: frozenset[int], rows: dict, columns: dict[int, dict]) -> DIMetadata:
    """The DIMetadata a cold read would give, from the rows artifact and every plain feature's artifact.

    Raises :class:`StaleArtifact` (or the ``KeyError``, ``ValueError``... of a damaged payload) where
    they do not make one read.
    """
    indicators = {s.alias: rows[f"indicator/{s.alias}"] for s in graph.sources}
    blocks: list[BlockMetadata] = []
    cats: list[CategoricalMetadata] = []
    plain = plain_features(graph)
    for source in graph.sources:
        numeric = [j for j in plain if graph.features[j].parts[0].source == source.alias and j not in categorical]
        if numeric:
            data = np.empty((len(columns[numeric[0]]["data"]), len(numeric)), order="F")  # as a cold read gives it
            for i, j in enumerate(numeric):
                data[:, i] = columns[j]["data"]
            fill = np.array([columns[j]["fill"] for j in numeric], dtype=np.float64)
            blocks.append(BlockMetadata(source.alias, data, indicators[source.alias], np.array(numeric), fill))
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
    """Raise :class:`StaleArtifact` unless ``indicator`` is one source row per output row: an integer in
    [-2, ``source_rows``) (-1 an empty row, -2 a row a coalesce part does not own) for each of ``n_rows``."""
    if not (
        isinstance(indicator, np.ndarray)
        and indicator.shape == (n_rows,)
        and np.issubdtype(indicator.dtype, np.integer)
        and (n_rows == 0 or (int(indicator.min()) >= -2 and int(indicator.max()) < source_rows))
    ):
        raise StaleArtifact


__all__ = ["READ", "StaleArtifact", "aligned", "assemble", "plain_features", "row_ids", "split", "unaligned"]
