"""Pass 9: refuse names that would collide with the columns ilargi_db adds to its own queries.

The scans and the key-only join add columns and registered relations named
``__ilargi_...`` (row numbers, feature parts, the target, winners). A source
alias, a column the query reads, or an output column with that prefix could
silently take the place of one of them, so the planner refuses it up front.
"""

from __future__ import annotations

from sqlglot import exp

from ilargi_db.errors import PlanError
from ilargi_db.plan.join_graph import Source

RESERVED_PREFIX = "__ilargi_"


def is_reserved(name: str) -> bool:
    """Whether ``name`` (case-insensitive, as DuckDB compares identifiers) uses the reserved prefix."""
    return name.lower().startswith(RESERVED_PREFIX)


def refuse_reserved_names(select: exp.Select, sources: list[Source], output_names: list[str]) -> None:
    """Raise :class:`PlanError` for a reserved source alias, source column read by the query, or output name.

    Expects qualified columns (after ``qualify_columns``). Columns of a source that
    the query never reads are harmless and allowed.

    >>> import duckdb
    >>> from ilargi_db.plan import build_join_graph
    >>> con = duckdb.connect()
    >>> _ = con.sql("CREATE TABLE f AS SELECT 1.0 AS x")
    >>> build_join_graph(con, "SELECT x AS __ilargi_row FROM f")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ilargi_db.errors.PlanError: the SELECT column '__ilargi_row' starts with __ilargi_, a prefix ilargi_db reserves...
    """
    rename = "ilargi_db reserves for the columns of its own queries"
    for source in sources:
        if is_reserved(source.alias):
            raise PlanError(
                f"the source name {source.alias!r} starts with {RESERVED_PREFIX}, a prefix {rename}: "
                "give the source another alias (FROM ... AS d)."
            )
    by_alias = {s.alias.lower(): s for s in sources}
    used: list[tuple[str, str]] = []
    for column in select.find_all(exp.Column):
        source = by_alias.get(column.table.lower()) if column.table else None
        if source is not None and source.has_column(column.name):
            used.append((source.alias, column.name))
    for join, source in zip(select.args.get("joins") or [], sources[1:]):
        used += [(source.alias, key.name) for key in join.args.get("using") or []]
    for alias, name in used:
        if is_reserved(name):
            raise PlanError(
                f"column {name!r} of source {alias!r} starts with {RESERVED_PREFIX}, a prefix {rename}: rename it in "
                f"a view or subquery, e.g. (SELECT * EXCLUDE ({name}), {name} AS another_name FROM ...) AS {alias}."
            )
    for name in output_names:
        if is_reserved(name):
            raise PlanError(
                f"the SELECT column {name!r} starts with {RESERVED_PREFIX}, a prefix {rename}: "
                "give it another name (... AS another_name)."
            )
