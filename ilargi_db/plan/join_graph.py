"""The join graph: what the planner learns from a training query.

These are plain, immutable records. The planner passes (``statement``,
``sources``, ``columns``, ``joins``, ``features``) fill them in; the metadata
stage reads them to build one scan per source and one key-only join.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from sqlglot import exp

from ilargi_db.plan.sampling import row_selection


@dataclass(frozen=True)
class Source:
    """One relation in FROM: a table or view, a table function, or a subquery.

    ``relation_sql`` is the FROM item as written (with its alias), so that a
    scan ``SELECT ... FROM <relation_sql>`` reads exactly what the query reads.
    ``nullable`` is true when an outer join may leave this source's side empty.
    """

    alias: str
    relation_sql: str
    kind: str  # "table" | "function" | "subquery"
    columns: tuple[str, ...]
    types: tuple[str, ...]
    nullable: bool = False

    def has_column(self, name: str) -> bool:
        return name.lower() in self._lower_columns

    @functools.cached_property
    def _lower_columns(self) -> frozenset[str]:  # once: a query of n columns asks n times
        return frozenset(c.lower() for c in self.columns)


@dataclass(frozen=True)
class JoinEdge:
    """A join of ``right`` onto the sources before it, with its equality keys."""

    right: str
    how: str  # "inner", "left", "right" or "full"
    keys: tuple[tuple[str, str], ...]  # (left expression SQL, right expression SQL)


@dataclass(frozen=True)
class Predicate:
    """One conjunct of WHERE. ``pushed`` ones are applied inside their source's scan."""

    sql: str
    sources: tuple[str, ...]
    pushed: bool


@dataclass(frozen=True)
class FeaturePart:
    """An expression evaluated inside one source's scan."""

    source: str
    sql: str


@dataclass(frozen=True)
class Feature:
    """One SELECT item.

    ``kind`` is ``"source"`` (one part, read from one source), ``"coalesce"``
    (several parts from different sources; a cell takes the first non-NULL
    part) or ``"cross_source"`` (mixes sources: not factorizable).
    """

    name: str
    sql: str
    kind: str
    sources: tuple[str, ...]
    parts: tuple[FeaturePart, ...]
    duckdb_type: str

    def describe_sources(self) -> str:
        """Which sources the feature reads, in words (why a cross-source feature cannot be factorized)."""
        return f"feature {self.name!r} = {self.sql} reads {' and '.join(self.sources) or 'the joined row'}"


@dataclass(frozen=True)
class JoinGraph:
    """Sources, joins, filters and features of a training query."""

    query: str
    sources: tuple[Source, ...]
    joins: tuple[JoinEdge, ...]
    filters: tuple[Predicate, ...]
    features: tuple[Feature, ...]
    target: Feature | None
    order_by: tuple[str, ...]
    # The qualified statement the metadata stage rewrites into the key-only join.
    select: exp.Select = field(repr=False, compare=False)
    target_index: int | None = None  # position of the target in the SELECT list
    group: Feature | None = None  # the group_by column: one model per value (not a feature)
    group_index: int | None = None  # its position in the SELECT list
    # A text target's classes, sorted: the target is read as each row's position among them (metadata.target_labels).
    target_classes: tuple[str, ...] | None = None

    @property
    def feature_names(self) -> list[str]:
        return [f.name for f in self.features]

    @property
    def row_selection(self) -> str:
        """The query's seeded samples and LIMIT/OFFSET as SQL ("" when it trains on every row of its join)."""
        return row_selection(self.select)

    @property
    def cross_source_features(self) -> tuple[Feature, ...]:
        return tuple(f for f in self.features if f.kind == "cross_source")

    @property
    def factorizable(self) -> bool:
        return not self.cross_source_features

    def source(self, alias: str) -> Source:
        for s in self.sources:
            if s.alias == alias:
                return s
        raise KeyError(alias)

    def describe(self) -> str:
        """A stable, human-readable summary (used by the fixture tests)."""
        lines = []
        for s in self.sources:
            lines.append(f"source {s.alias} ({s.kind}{', nullable' if s.nullable else ''})")
        for j in self.joins:
            keys = ", ".join(f"{a} = {b}" for a, b in j.keys)
            lines.append(f"join {j.how} {j.right} on {keys}")
        for p in self.filters:
            where = "scan of " + p.sources[0] if p.pushed else "join"
            lines.append(f"filter {p.sql} [{where}]")
        for f in self.features:
            lines.append(f"feature {f.name} <- {f.kind} {','.join(f.sources)}: {f.sql}")
        if self.target is not None:
            lines.append(f"target {self.target.name} <- {','.join(self.target.sources)}: {self.target.sql}")
        if self.group is not None:
            lines.append(f"group {self.group.name} <- {','.join(self.group.sources)}: {self.group.sql}")
        for o in self.order_by:
            lines.append(f"order {o}")
        return "\n".join(lines)
