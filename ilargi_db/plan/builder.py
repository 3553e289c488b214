"""Run the planner passes in order: training query in, :class:`JoinGraph` out."""

from __future__ import annotations

import duckdb
from sqlglot import exp

from ilargi_db.errors import PlanError, the_query
from ilargi_db.plan.columns import expand_stars, qualify_columns, resolve_order_by
from ilargi_db.plan.features import classify_item, pick_column, split_filters
from ilargi_db.plan.join_graph import JoinGraph
from ilargi_db.plan.joins import join_edges, resolve_using
from ilargi_db.plan.reserved import refuse_reserved_names
from ilargi_db.plan.sampling import order_limit_by_rowids
from ilargi_db.plan.sources import collect_sources, with_prefix
from ilargi_db.plan.statement import check_reads_only, parse_training_query, refuse_hidden_writes
from ilargi_db.read_snapshot import ReadSnapshot


def output_schema(con: duckdb.DuckDBPyConnection, query: str) -> tuple[list[str], list[str]]:
    """Output names and types as DuckDB binds them (binding only, nothing runs)."""
    try:
        relation = con.sql(query)
    except duckdb.Error as err:
        raise PlanError(f"DuckDB cannot bind {the_query()}: {str(err).strip()}") from None
    if relation is None:  # pragma: no cover - parse_training_query only lets SELECTs through
        raise PlanError(f"{the_query()} returned no result set; pass a SELECT.")
    return list(relation.columns), [str(t) for t in relation.dtypes]


def build_join_graph(
    con: duckdb.DuckDBPyConnection,
    query: str,
    target: str | None = None,
    group_by: str | None = None,
    *,
    read_once: bool = False,
) -> JoinGraph:
    """Plan a training query against the catalog of ``con``; ``target`` and ``group_by`` name SELECT columns
    that are not features (the label, and the column whose values each get a model of their own).

    A training reads its rows more than once, so a LIMIT must pick the same rows every time (ordered by each
    source's rowid, refused where a source has none); ``read_once`` (scoring: one pass over the rows) takes the
    rows a LIMIT gives as DuckDB returns them.

    >>> import duckdb
    >>> con = duckdb.connect()
    >>> _ = con.sql("CREATE TABLE f AS SELECT range AS k, range * 1.0 AS x, range % 2 AS y FROM range(4)")
    >>> _ = con.sql("CREATE TABLE d AS SELECT range AS k, range * 2.0 AS z FROM range(2)")
    >>> print(build_join_graph(con, "SELECT x, z, y FROM f LEFT JOIN d ON f.k = d.k", target="y").describe())
    source f (table)
    source d (table, nullable)
    join left d on f.k = d.k
    feature x <- source f: f.x
    feature z <- source d: d.z
    target y <- f: f.y
    """
    if not isinstance(con, duckdb.DuckDBPyConnection):
        raise PlanError(f"con must be a DuckDB connection (duckdb.connect() or ilargi_db.connect()), got {con!r}.")
    if not isinstance(query, str):
        raise PlanError(f"{the_query()} must be a string holding one SELECT, got {type(query).__name__}.")
    try:
        return _run_passes(con, query, target, group_by, read_once)
    except RecursionError:  # sqlglot recurses once per nesting level: some 40 parentheses deep is its end
        raise PlanError(
            f"{the_query()} nests expressions too deeply for ilargi_db's SQL parser: define the deeply "
            "nested expressions in a view (CREATE VIEW v AS SELECT ...) and train on the view, or flatten them."
        ) from None


def _run_passes(
    con: duckdb.DuckDBPyConnection, query: str, target: str | None, group_by: str | None, read_once: bool
) -> JoinGraph:
    check_reads_only(con, query)  # DuckDB's parser, before anything binds (binding runs a statement that writes)
    select = parse_training_query(query)
    refuse_hidden_writes(con, select)  # a nextval in a view or macro, which DuckDB expands when it binds
    with ReadSnapshot(con):  # binding reads the catalog; nothing may write
        return _plan(con, query, target, group_by, select, read_once)


def _plan(
    con: duckdb.DuckDBPyConnection,
    query: str,
    target: str | None,
    group_by: str | None,
    select: exp.Select,
    read_once: bool = False,
) -> JoinGraph:
    sources = collect_sources(select, con)
    sources, using = resolve_using(select, sources)
    expand_stars(select, sources, using)
    resolve_order_by(select)
    qualify_columns(select, sources, using)
    joins = join_edges(select, sources)
    filters = split_filters(select, sources)

    names, types = output_schema(con, query)
    if len(names) != len(select.expressions):  # pragma: no cover - a star form we did not expand
        raise PlanError(
            f"could not match the {len(names)} output columns to the SELECT list; list the "
            "columns explicitly instead of using star expressions."
        )
    refuse_reserved_names(select, sources, names)
    order_limit_by_rowids(con, select, sources, with_prefix(select), repeatable=not read_once)
    items = [classify_item(item, name, type_, sources) for item, name, type_ in zip(select.expressions, names, types)]
    features, target_feature = pick_column(items, target)
    if group_by is not None and target_feature is not None and str(group_by).lower() == target_feature.name.lower():
        raise PlanError(f"group_by {group_by!r} is the target: group by another column of the SELECT list.")
    features, group = pick_column(features, group_by, role="group_by")
    order = select.args.get("order")
    order_by = tuple(o.sql("duckdb") for o in order.expressions) if order else ()
    return JoinGraph(
        query=query,
        sources=tuple(sources),
        joins=tuple(joins),
        filters=tuple(filters),
        features=tuple(features),
        target=target_feature,
        order_by=order_by,
        select=select,
        target_index=None if target_feature is None else items.index(target_feature),
        group=group,
        group_index=None if group is None else items.index(group),
    )


__all__ = ["build_join_graph", "output_schema"]
