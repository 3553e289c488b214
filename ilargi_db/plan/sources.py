"""Pass 2: find the sources in FROM and read their schemas from DuckDB."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
from sqlglot import exp

from ilargi_db.errors import CALLER, PlanError
from ilargi_db.plan.join_graph import Source


def from_items(select: exp.Select) -> list[exp.Expression]:
    """The FROM item and the item of every JOIN, in query order."""
    items = [select.args["from_"].this]
    items += [join.this for join in select.args.get("joins") or []]
    return items


def with_prefix(select: exp.Select) -> str:
    """``WITH ...`` of the query, so scans of CTE sources still resolve."""
    with_ = select.args.get("with_")
    return with_.sql("duckdb") + " " if with_ else ""


def scalar_values(con: duckdb.DuckDBPyConnection, prefix: str, items: Sequence[str]) -> list[Any]:
    """The value of each scalar subquery of ``items`` (``(SELECT one value ...)``), in order, from one query.

    As the rows of a UNION ALL, not the columns of one SELECT: DuckDB plans n scalar subqueries in one
    SELECT as a cross join of n one-row relations, whose join order takes a time that grows fast with n
    (nine items: 20 ms against 5 ms as a union). The values come in DuckDB's common type of the items
    (counts and shares: DOUBLE). ``prefix``: the query's ``WITH`` (:func:`with_prefix`), or "".
    """
    if not items:
        return []
    union = " UNION ALL ".join(f"SELECT {k} AS k, {item} AS v" for k, item in enumerate(items))
    found = dict(con.sql(f"{prefix}{union}").fetchall())
    return [found[k] for k in range(len(items))]


def _kind_and_name(item: exp.Expression) -> tuple[str, str | None]:
    if isinstance(item, exp.Subquery):
        if isinstance(item.this, exp.Query):
            return "subquery", None
        raise PlanError(
            f"parenthesized join trees such as {item.sql('duckdb')!r} are not supported: "
            "write the joins one after another."
        )
    if isinstance(item, exp.Table):
        if isinstance(item.this, exp.Identifier):
            return "table", item.name
        return "function", None
    raise PlanError(
        f"unsupported FROM item {item.sql('duckdb')!r}: use tables, views, table functions "
        "such as read_parquet(...), registered DataFrames/Arrow tables or subqueries."
    )


def collect_sources(select: exp.Select, con: duckdb.DuckDBPyConnection) -> list[Source]:
    """Give every FROM item an alias and read its columns and types.

    Mutates ``select``: unaliased table functions and subqueries get an alias
    (``src1``, ``src2``...) so that scans and the key-only join can name them.
    """
    sources: list[Source] = []
    prefix = with_prefix(select)
    for position, item in enumerate(from_items(select)):
        kind, name = _kind_and_name(item)
        if not item.alias and kind == "table" and _names_a_file(item, con):
            # FROM 'dir/f.parquet': DuckDB reads the file and calls it f (the name up to its first dot)
            item.set("alias", exp.TableAlias(this=exp.to_identifier(_file_alias(item.text("db") or name))))
        alias = item.alias or name
        generated = not alias
        if generated:
            alias = f"src{position + 1}"
        if any(s.alias.lower() == alias.lower() for s in sources):
            raise PlanError(
                f"the source name {alias!r} is used twice in FROM: give each occurrence its "
                f"own alias (e.g. {alias} AS {alias}_a, {alias} AS {alias}_b)."
            )
        relation_sql = item.sql("duckdb")
        try:
            relation = con.sql(f"{prefix}SELECT * FROM {relation_sql}")
            columns, types = tuple(relation.columns), tuple(str(t) for t in relation.dtypes)
        except duckdb.CatalogException as err:
            what = f"table {name!r}" if name else f"source {relation_sql!r}"
            fix = _UNKNOWN_TABLE_FIX[CALLER.get()]
            raise PlanError(f"unknown {what} in FROM ({_first_line(err)}). {fix}") from None
        except duckdb.Error as err:
            raise PlanError(f"DuckDB cannot read the source {relation_sql!r}: {_first_line(err)}") from None
        if generated:  # read above without it: DuckDB names a one-column function's column after its alias
            pinned = [exp.to_identifier(c, quoted=True) for c in columns] if kind == "function" else []
            item.set("alias", exp.TableAlias(this=exp.to_identifier(alias), columns=pinned))
            relation_sql = item.sql("duckdb")
        sources.append(Source(alias=alias, relation_sql=relation_sql, kind=kind, columns=columns, types=types))
    return sources


def _names_a_file(item: exp.Table, con: duckdb.DuckDBPyConnection) -> bool:
    """Whether a name in FROM is one file DuckDB reads by replacement scan, not a table or view: ``'f.parquet'``,
    or ``f.parquet`` unquoted where no schema or database is called ``f`` (a glob keeps its whole text as its
    name)."""
    name, db = item.name, item.text("db")
    if db and not item.this.quoted and not item.args.get("catalog"):
        found = "SELECT 1 FROM duckdb_schemas() WHERE schema_name = $1 UNION ALL SELECT 1 FROM duckdb_databases() "
        return not con.execute(found + "WHERE database_name = $1", [db]).fetchall()
    path_like = any(c in name for c in "./\\") and not any(c in name for c in "*?[")
    if not item.this.quoted or db or not path_like:
        return False
    known = (
        "SELECT 1 FROM duckdb_tables() WHERE table_name = $1 "
        "UNION ALL SELECT 1 FROM duckdb_views() WHERE view_name = $1"
    )
    return not con.execute(known, [name]).fetchall()


def _file_alias(name: str) -> str:
    stem = name.replace("\\", "/").rsplit("/", 1)[-1].split(".", 1)[0]
    return stem or "src"


# What a caller can do about a name the database lacks: only Python can register data frames, and only
# the command line chooses the database with a flag.
_UNKNOWN_TABLE_FIX = {
    "python": "Create it, fix the name, or register a DataFrame/Arrow table with con.register(name, data).",
    "sql": "Create it, or fix the name.",
    "cli": "Fix the name, or pass --db with the DuckDB file that holds it.",
}


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0]
