"""Passes 7 and 8: WHERE predicates (and which can be pushed into a scan), features and target."""

from __future__ import annotations

from sqlglot import exp

from ilargi_db.errors import PlanError, spell
from ilargi_db.plan.join_graph import Feature, FeaturePart, Predicate, Source
from ilargi_db.plan.joins import conjuncts, referenced_sources

_VOLATILE = {"RANDOM", "UUID", "GEN_RANDOM_UUID", "NEXTVAL", "SETSEED", "NOW", "CURRENT_TIMESTAMP"}


def _has_subquery_or_volatile(node: exp.Expression) -> bool:
    for sub in node.walk():
        if isinstance(sub, (exp.Subquery, exp.Query, exp.Exists)) and sub is not node:
            return True
        if isinstance(sub, (exp.Rand,)):
            return True
        if isinstance(sub, exp.Anonymous) and sub.name.upper() in _VOLATILE:
            return True
    return False


def split_filters(select: exp.Select, sources: list[Source]) -> list[Predicate]:
    """Split WHERE into conjuncts; mark those that can run inside one source's scan.

    A conjunct reading one source is pushed into that source's scan when no
    outer join can null-extend that source: filtering the source first then
    gives the same join. Other conjuncts stay in the key-only join.
    """
    where = select.args.get("where")
    nullable = {s.alias: s.nullable for s in sources}
    predicates = []
    for part in conjuncts(where.this if where else None):
        used = referenced_sources(part)
        pushed = len(used) == 1 and not nullable[next(iter(used))] and not _has_subquery_or_volatile(part)
        predicates.append(Predicate(sql=part.sql("duckdb"), sources=tuple(sorted(used)), pushed=pushed))
    return predicates


def _coalesce_parts(node: exp.Expression) -> tuple[FeaturePart, ...] | None:
    """Parts of ``COALESCE(a.x, b.y, ...)`` over plain columns of several sources."""
    if not isinstance(node, exp.Coalesce):
        return None
    args = [node.this, *node.expressions]
    parts = []
    for arg in args:
        inner = arg.this if isinstance(arg, exp.Cast) else arg
        if not (isinstance(inner, exp.Column) and inner.table):
            return None
        parts.append(FeaturePart(source=inner.table, sql=arg.sql("duckdb")))
    return tuple(parts) if len({p.source for p in parts}) > 1 else None


def classify_item(item: exp.Expression, name: str, duckdb_type: str, sources: list[Source]) -> Feature:
    """Which source(s) one SELECT item reads, and whether a scan can evaluate it."""
    node = item.unalias()
    sql = node.sql("duckdb")
    used = sorted(referenced_sources(node), key=[s.alias for s in sources].index)
    if _has_subquery_or_volatile(node):
        return Feature(name, sql, "cross_source", tuple(used), (), duckdb_type)
    if not used:
        # A constant: any source that every output row has exactly one row of can carry it.
        carriers = [s.alias for s in sources if not s.nullable]
        if carriers:
            return Feature(name, sql, "source", (carriers[0],), (FeaturePart(carriers[0], sql),), duckdb_type)
        return Feature(name, sql, "cross_source", (), (), duckdb_type)
    if len(used) == 1:
        return Feature(name, sql, "source", tuple(used), (FeaturePart(used[0], sql),), duckdb_type)
    parts = _coalesce_parts(node)
    if parts:
        return Feature(name, sql, "coalesce", tuple(used), parts, duckdb_type)
    return Feature(name, sql, "cross_source", tuple(used), (), duckdb_type)


def pick_column(
    features: list[Feature], name: str | None, role: str = "target"
) -> tuple[list[Feature], Feature | None]:
    """Separate the column ``name`` (the target, or the ``role`` column: ``group_by``) from the features; refuse a
    missing or duplicated one."""
    if name is None:
        return features, None
    if not isinstance(name, str):
        raise PlanError(f"{role} must be the name of a SELECT column (a string), got {name!r}.")
    matches = [f for f in features if f.name == name]
    if not matches:
        matches = [f for f in features if f.name.lower() == name.lower()]
    if not matches:
        otherwise = (
            f", or for unsupervised work pass {spell('target', None)}"
            if role == "target"
            else ": each row's group picks its model"
        )
        raise PlanError(
            f"{role} {name!r} is not a column of the query's SELECT list (columns: "
            f"{', '.join(f.name for f in features)}). Add it to the SELECT list{otherwise}."
        )
    if len(matches) > 1:
        raise PlanError(
            f"{role} {name!r} appears {len(matches)} times in the SELECT list: give the {role} "
            "column a unique alias (e.g. SELECT ..., f.y AS label) and pass that name."
        )
    chosen = matches[0]
    return [f for f in features if f is not chosen], chosen
