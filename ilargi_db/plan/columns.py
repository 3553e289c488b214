"""Passes 4 and 5: expand stars, resolve ORDER BY, and qualify every column with its source."""

from __future__ import annotations

from sqlglot import exp

from ilargi_db.errors import PlanError
from ilargi_db.plan.join_graph import Source
from ilargi_db.plan.joins import UsingGroups
from ilargi_db.plan.statement import outer_scope


def _column(name: str, table: str | None = None) -> exp.Column:
    return exp.column(exp.to_identifier(name), table=exp.to_identifier(table) if table else None)


def expand_stars(select: exp.Select, sources: list[Source], using: UsingGroups) -> exp.Select:
    """Replace ``*`` and ``alias.*`` by the columns they stand for, as DuckDB does.

    A USING key appears once, at its first source, and is left unqualified so
    that :func:`qualify_columns` resolves it like DuckDB (coalescing outer joins).
    """
    expanded: list[exp.Expression] = []
    for item in select.expressions:
        if isinstance(item, exp.Star):
            if any(item.args.get(k) for k in ("except", "except_", "replace", "rename")):
                raise PlanError(f"{item.sql('duckdb')} is not supported: list the feature columns explicitly.")
            for source in sources:
                for name in source.columns:
                    chain = using.get(name.lower())
                    if chain and source.alias != chain[0]:
                        continue
                    expanded.append(_column(name, None if chain else source.alias))
        elif isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
            if any(item.this.args.get(k) for k in ("except", "except_", "replace", "rename")):
                raise PlanError(f"{item.sql('duckdb')} is not supported: list the feature columns explicitly.")
            source = _find_source(sources, item.table, item)
            expanded += [_column(name, source.alias) for name in source.columns]
        else:
            expanded.append(item)
    select.set("expressions", expanded)
    return select


def resolve_order_by(select: exp.Select) -> exp.Select:
    """Rewrite ``ORDER BY ALL``, positions and SELECT aliases into expressions.

    The key-only join replaces the SELECT list, so ORDER BY must not depend on it.
    """
    order = select.args.get("order")
    if not order:
        return select
    items = select.expressions
    aliases = {item.alias.lower(): item.this for item in items if isinstance(item, exp.Alias)}
    resolved: list[exp.Expression] = []
    for ordered in order.expressions:
        key = ordered.this
        if isinstance(key, (exp.Var, exp.Column)) and key.name.upper() == "ALL" and not getattr(key, "table", None):
            targets = [item.unalias() for item in items]
        elif isinstance(key, exp.Literal) and not key.is_string:
            position = int(key.this)
            if not 1 <= position <= len(items):
                raise PlanError(f"ORDER BY {position} is out of range: the SELECT list has {len(items)} items.")
            targets = [items[position - 1].unalias()]
        elif isinstance(key, exp.Column) and not key.table and key.name.lower() in aliases:
            targets = [aliases[key.name.lower()]]
        else:
            targets = [key]
        for target in targets:
            if isinstance(target, exp.Literal) or isinstance(target, exp.Null):
                continue  # ordering by a constant orders nothing (and would read as a position)
            new = ordered.copy()
            new.set("this", target.copy())
            resolved.append(new)
    if resolved:
        order.set("expressions", resolved)
    else:
        select.set("order", None)
    return select


def qualify_columns(select: exp.Select, sources: list[Source], using: UsingGroups) -> exp.Select:
    """Give every column reference its source alias, or raise a precise :class:`PlanError`."""
    nullable = {s.alias: s.nullable for s in sources}
    aliases = {item.alias.lower(): item.this for item in select.expressions if isinstance(item, exp.Alias)}
    parts: list[tuple[str, exp.Expression]] = [("SELECT", e) for e in select.expressions]
    parts += [("ON", j.args["on"]) for j in select.args.get("joins") or [] if j.args.get("on")]
    if select.args.get("where"):
        parts.append(("WHERE", select.args["where"]))
    if select.args.get("order"):
        parts.append(("ORDER BY", select.args["order"]))
    for clause, part in parts:
        for column in [c for c in outer_scope(part) if isinstance(c, exp.Column)]:
            if isinstance(column.this, exp.Star):
                raise PlanError(f"{column.sql('duckdb')} is only allowed in the SELECT list.")
            if column.table:
                source = _find_source(sources, column.table, column)
                if not source.has_column(column.name):
                    raise PlanError(
                        f"column {column.name!r} in {clause} ({column.sql('duckdb')}) is not a column of "
                        f"source {source.alias!r}; its columns are: {', '.join(source.columns)}."
                    )
                column.set("table", exp.to_identifier(source.alias))
                continue
            name = column.name
            chain = using.get(name.lower())
            if chain:
                if not nullable[chain[0]]:
                    column.set("table", exp.to_identifier(chain[0]))
                else:
                    column.replace(exp.func("COALESCE", *[_column(name, a) for a in chain]))
                continue
            owners = [s for s in sources if s.has_column(name)]
            if len(owners) == 1:
                column.set("table", exp.to_identifier(owners[0].alias))
            elif len(owners) > 1:
                raise PlanError(
                    f"column {name!r} in {clause} is ambiguous: sources "
                    f"{', '.join(s.alias for s in owners)} all have it. Qualify it, e.g. "
                    f"{owners[0].alias}.{name}."
                )
            elif clause in {"WHERE", "ORDER BY"} and name.lower() in aliases:
                replacement = aliases[name.lower()].copy()
                column.replace(replacement)
                qualify_columns_in(replacement, select, sources, using)
            else:
                raise PlanError(
                    f"unknown column {name!r} in {clause}: no source has it (sources: "
                    f"{', '.join(s.alias for s in sources)}). Check the spelling."
                )
    return select


def qualify_columns_in(node: exp.Expression, select: exp.Select, sources: list[Source], using: UsingGroups) -> None:
    """Qualify the columns of one expression (used for substituted aliases)."""
    wrapper = exp.Select(expressions=[exp.alias_(node.copy(), "_")])
    wrapper = qualify_columns(wrapper, sources, using)
    node.replace(wrapper.expressions[0].this)


def _find_source(sources: list[Source], alias: str, where: exp.Expression) -> Source:
    for source in sources:
        if source.alias.lower() == alias.lower():
            return source
    raise PlanError(
        f"{where.sql('duckdb')} names {alias!r}, which is not a source in FROM "
        f"(sources: {', '.join(s.alias for s in sources)})."
    )
