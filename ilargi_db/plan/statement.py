"""Pass 1: parse the training query and refuse what is not a training set over joins."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from ilargi_db.errors import PlanError

_NOT_A_TRAINING_SET = (
    "{what} does not describe a training set over joins: every output row must be one "
    "combination of source rows. Remove it, or materialize the result into a table "
    "first and train on that table."
)


_SET_RETURNING = {"unnest", "generate_series", "range", "explode", "json_each"}


def outer_scope(node: exp.Expression):
    """Yield the nodes of ``node`` in its own scope: nested subqueries are skipped."""

    def nested(n: exp.Expression) -> bool:
        return n is not node and isinstance(n, (exp.Query, exp.Subquery))

    # walk() still yields the pruned nodes themselves; skip them too.
    yield from (n for n in node.walk(prune=nested) if not nested(n))


def parse_training_query(query: str) -> exp.Select:
    """Parse ``query`` (DuckDB dialect) into a single SELECT, or raise :class:`PlanError`.

    >>> parse_training_query("SELECT f.x, f.y FROM f").sql()
    'SELECT f.x, f.y FROM f'
    >>> parse_training_query("DELETE FROM f")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ilargi_db.errors.PlanError: ilargi_db only reads training data, but the query is a DELETE statement...
    """
    if not isinstance(query, str) or not query.strip():
        raise PlanError("the training query is empty: pass a SELECT over joined tables.")
    try:
        statements = [s for s in sqlglot.parse(query, read="duckdb") if s is not None]
    except sqlglot.errors.ParseError as err:
        first = err.errors[0] if err.errors else {}
        where = f" (line {first.get('line')}, column {first.get('col')})" if first else ""
        description = first.get("description", str(err))
        raise PlanError(f"could not parse the training query{where}: {description}") from None
    if len(statements) != 1:
        raise PlanError(
            f"the training query must be a single SELECT statement, but it holds "
            f"{len(statements)} statements. Pass one SELECT."
        )
    statement = statements[0]
    if isinstance(statement, exp.SetOperation):
        kind = type(statement).__name__.upper()
        raise PlanError(_NOT_A_TRAINING_SET.format(what=f"a set operation ({kind})"))
    if not isinstance(statement, exp.Select):
        kind = statement.key.upper()
        raise PlanError(
            f"ilargi_db only reads training data, but the query is {'an' if kind[0] in 'AEIOU' else 'a'} {kind} "
            "statement. "
            "Write the training set as a single SELECT over joined tables."
        )
    refuse_non_training_clauses(statement)
    return statement


def refuse_non_training_clauses(select: exp.Select) -> exp.Select:
    """Refuse clauses that aggregate, deduplicate, truncate or write."""
    clauses = {
        "group": "GROUP BY",
        "having": "HAVING",
        "qualify": "QUALIFY",
        "distinct": "DISTINCT",
        "limit": "LIMIT",
        "offset": "OFFSET",
        "windows": "a WINDOW clause",
    }
    for arg, what in clauses.items():
        if select.args.get(arg):
            raise PlanError(_NOT_A_TRAINING_SET.format(what=what))
    for call in select.find_all(exp.Anonymous):  # anywhere, subqueries included
        if call.name.lower().lstrip("_").startswith("ilargi_"):
            raise PlanError(
                f"the training query calls {call.name}: ilargi_db's SQL functions train and write models, and "
                "cannot run inside a query that only reads training data. Call them on their own."
            )
    if select.args.get("into"):
        raise PlanError("SELECT ... INTO writes a table; ilargi_db only reads. Remove INTO.")
    for sample in select.find_all(exp.TableSample):
        raise PlanError(
            f"{sample.sql('duckdb')} samples rows at random: the scans and the join would draw different "
            "samples. Sample into a table first (CREATE TABLE s AS SELECT ... USING SAMPLE ...) and train on it."
        )
    for node in outer_scope(select):
        if isinstance(node, (exp.Unnest, exp.Explode)) or (
            isinstance(node, exp.Anonymous) and node.name.lower() in _SET_RETURNING
        ):
            raise PlanError(
                f"{node.sql('duckdb')} returns several rows per input row; a training query's rows must come "
                "from its joins. Unnest in a subquery in FROM instead."
            )
        if isinstance(node, exp.Window):
            raise PlanError(_NOT_A_TRAINING_SET.format(what=f"the window function {node.sql('duckdb')}"))
        if isinstance(node, exp.AggFunc):
            raise PlanError(_NOT_A_TRAINING_SET.format(what=f"the aggregate {node.sql('duckdb')}"))
    if not select.args.get("from_"):
        raise PlanError("the training query has no FROM clause: name the tables to train on.")
    return select
