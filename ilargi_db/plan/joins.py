"""Passes 3 and 6: join types, USING/NATURAL keys, and the equality keys of every join."""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from ilargi_db.errors import PlanError
from ilargi_db.plan.join_graph import JoinEdge, Source
from ilargi_db.plan.statement import outer_scope

UsingGroups = dict[str, list[str]]  # lower-cased key name -> aliases joined on it, in order


def join_kind(join: exp.Join) -> str:
    """``inner``, ``left``, ``right`` or ``full``; refuses joins that are not."""
    kind = (join.kind or "").upper()
    method = (join.method or "").upper()
    if kind in {"SEMI", "ANTI"} or method in {"ASOF", "POSITIONAL"} or kind in {"ASOF", "POSITIONAL"}:
        what = kind or method
        raise PlanError(
            f"{what} JOIN is not supported in a training query: use an INNER or OUTER join "
            "with equality keys"
            + (
                " (a semi or anti join can be written as WHERE [NOT] EXISTS (...))."
                if kind in {"SEMI", "ANTI"}
                else "."
            )
        )
    if join.args.get("lateral") or isinstance(join.this, exp.Lateral):
        raise PlanError("LATERAL joins are not supported: join on equality keys instead.")
    side = (join.side or "").upper()
    return {"LEFT": "left", "RIGHT": "right", "FULL": "full"}.get(side, "inner")


def resolve_using(select: exp.Select, sources: list[Source]) -> tuple[list[Source], UsingGroups]:
    """Turn NATURAL joins into USING, mark outer-join sides nullable, group USING keys.

    Mutates ``select`` (NATURAL -> USING). Returns the sources with ``nullable``
    set and, for every USING key, the aliases it joins, so that an unqualified
    reference to the key can be resolved like DuckDB does.
    """
    nullable = {s.alias: False for s in sources}
    groups: UsingGroups = {}
    joins = select.args.get("joins") or []
    for position, join in enumerate(joins, start=1):
        right = sources[position]
        earlier = sources[:position]
        how = join_kind(join)
        if (join.method or "").upper() == "NATURAL":
            common = [c for c in right.columns if any(s.has_column(c) for s in earlier)]
            if not common:
                raise PlanError(
                    f"NATURAL JOIN with {right.alias!r} has no column in common with the sources "
                    "before it, so it has no equality key: join with ON or USING."
                )
            join.set("method", None)
            join.set("using", [exp.to_identifier(c) for c in common])
        for key in join.args.get("using") or []:
            name = key.name
            if not right.has_column(name):
                raise PlanError(f"USING ({name}): source {right.alias!r} has no column {name!r}.")
            chain = groups.get(name.lower())
            if chain is None:
                owners = [s.alias for s in earlier if s.has_column(name)]
                if not owners:
                    raise PlanError(f"USING ({name}): no source before {right.alias!r} has a column {name!r}.")
                if len(owners) > 1:
                    raise PlanError(
                        f"USING ({name}) is ambiguous: {', '.join(owners)} all have {name!r}. "
                        "Join with ON and qualified columns instead."
                    )
                chain = groups[name.lower()] = owners
            chain.append(right.alias)
        if how in {"left", "full"}:
            nullable[right.alias] = True
        if how in {"right", "full"}:
            for s in earlier:
                nullable[s.alias] = True
    sources = [dataclasses.replace(s, nullable=nullable[s.alias]) for s in sources]
    return sources, groups


def conjuncts(condition: exp.Expression | None) -> list[exp.Expression]:
    """Split ``a AND b AND c`` into its parts (parentheses removed)."""
    if condition is None:
        return []
    condition = condition.unnest()
    if isinstance(condition, exp.And):
        return conjuncts(condition.this) + conjuncts(condition.expression)
    return [condition]


def referenced_sources(node: exp.Expression) -> set[str]:
    """Aliases of the sources whose columns ``node`` reads (qualified columns only)."""
    return {c.table for c in outer_scope(node) if isinstance(c, exp.Column) and c.table}


def equality_key(condition: exp.Expression, right: str, earlier: set[str]) -> tuple[str, str] | None:
    """``(left_sql, right_sql)`` if ``condition`` equates ``right`` with earlier sources."""
    if not isinstance(condition, (exp.EQ, exp.NullSafeEQ)):
        return None
    a, b = condition.this, condition.expression
    sa, sb = referenced_sources(a), referenced_sources(b)
    if sb == {right} and sa and sa <= earlier:
        return a.sql("duckdb"), b.sql("duckdb")
    if sa == {right} and sb and sb <= earlier:
        return b.sql("duckdb"), a.sql("duckdb")
    return None


def join_edges(select: exp.Select, sources: list[Source]) -> list[JoinEdge]:
    """The equality keys of every join, from ON, USING or (inner joins) WHERE.

    Expects qualified columns. Raises :class:`PlanError` for a join without an
    equality key: such a join is a cross product, never a training set.
    """
    where = select.args.get("where")
    where_parts = conjuncts(where.this if where else None)
    edges = []
    for position, join in enumerate(select.args.get("joins") or [], start=1):
        right = sources[position].alias
        earlier = {s.alias for s in sources[:position]}
        how = join_kind(join)
        keys: list[tuple[str, str]] = []
        for name in join.args.get("using") or []:
            owner = next(s.alias for s in sources[:position] if s.has_column(name.name))
            left_key, right_key = (exp.Column(this=name.copy(), table=exp.to_identifier(a)) for a in (owner, right))
            keys.append((left_key.sql("duckdb"), right_key.sql("duckdb")))
        for part in conjuncts(join.args.get("on")):
            key = equality_key(part, right, earlier)
            if key:
                keys.append(key)
        if not keys and how == "inner":
            for part in where_parts:
                key = equality_key(part, right, earlier)
                if key:
                    keys.append(key)
        if not keys:
            on = join.args.get("on")
            written = f" ON {on.sql('duckdb')}" if on is not None else ""
            raise PlanError(
                f"the join with {right!r}{written} has no equality key, so it is a cross "
                f"product: join with ON {right}.<key> = <other source>.<key> (or USING), "
                "or for a comma join put the key equality in WHERE."
            )
        edges.append(JoinEdge(right=right, how=how, keys=tuple(keys)))
    return edges
