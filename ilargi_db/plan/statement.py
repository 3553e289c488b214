"""Pass 1: parse the training query and refuse what is not a training set over joins."""

from __future__ import annotations

import json
import re

import duckdb
import sqlglot
from sqlglot import exp

from ilargi_db.errors import PlanError, the_query
from ilargi_db.plan.sampling import check_samples

_NOT_A_TRAINING_SET = (
    "{what} does not describe a training set over joins: every output row must be one "
    "combination of source rows. Remove it, or materialize the result into a table "
    "first and train on that table."
)


_SET_RETURNING = {"unnest", "generate_series", "range", "explode", "json_each"}

# Statements that change a database, a file or the session. DuckDB runs INSERT, UPDATE, DELETE and COPY TO inside a
# WITH clause, and once for every query ilargi_db builds from the training query: none may appear anywhere.
_WRITING_STATEMENTS = tuple(
    getattr(exp, name)
    for name in (
        "DML",  # INSERT, UPDATE, DELETE, MERGE, COPY
        "Create",
        "Drop",
        "Alter",
        "TruncateTable",
        "Set",
        "Pragma",
        "Attach",
        "Detach",
        "Use",
        "Install",
        "LoadData",
        "Export",
        "Comment",
        "Analyze",
        "Transaction",
        "Commit",
        "Rollback",
        "Command",  # a statement sqlglot only knows as text
    )
    if hasattr(exp, name)  # not every sqlglot release has every node
)
_WRITING_FUNCTIONS = {"nextval", "setval"}  # advance a sequence: a write that a SELECT can make
# DuckDB's own parse tree (json_serialize_sql) names these query nodes; any other (INSERT_QUERY_NODE,
# DELETE_QUERY_NODE, COPY_QUERY_NODE...) is a statement that writes.
_READING_NODES = {"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"}
_ONLY_READS = (
    "ilargi_db only reads training data, and DuckDB would run it once for every query ilargi_db builds from "
    "the training query. Run it on its own first, then train on a plain SELECT."
)


def _article(word: str) -> str:
    return "an" if word[:1].upper() in "AEIOU" else "a"


def _not_a_select(kind: str) -> PlanError:
    return PlanError(
        f"ilargi_db only reads training data, but the query is {_article(kind)} {kind} statement. "
        "Write the training set as a single SELECT over joined tables."
    )


def _where(node: exp.Expression) -> str:
    """Where ``node`` sits in the query, in words: the CTE that holds it, or a nested query."""
    cte = node.find_ancestor(exp.CTE)
    if cte is not None:
        return f"in the WITH clause ({cte.alias_or_name})"
    return "in a nested query"


def refuse_writes(statement: exp.Expression) -> exp.Expression:
    """Refuse any node of ``statement`` that writes: CTE bodies, subqueries and set operations included.

    >>> refuse_writes(sqlglot.parse_one("WITH g AS (DELETE FROM v RETURNING id) SELECT t.x FROM t", read="duckdb"))
    Traceback (most recent call last):
    ...
    ilargi_db.errors.PlanError: the training query holds a DELETE statement in the WITH clause (g): ilargi_db only...
    """
    for node in statement.walk():
        if isinstance(node, _WRITING_STATEMENTS) and node is not statement:
            kind = node.key.upper() if not isinstance(node, exp.Command) else str(node.this).upper()
            raise PlanError(f"{the_query()} holds {_article(kind)} {kind} statement {_where(node)}: {_ONLY_READS}")
        if isinstance(node, exp.Anonymous) and node.name.lower() in _WRITING_FUNCTIONS:
            raise PlanError(f"{the_query()} calls {node.sql('duckdb', normalize_functions=False)}, {_ADVANCES}")
    return statement


_ADVANCES = (
    "which advances a sequence: ilargi_db only reads training data and runs the query several times. "
    "Number the rows in a table first."
)


class _Definitions:
    """The views and macros of ``con``'s catalog, each parsed once, the macros read only when a call needs them
    (listing DuckDB's functions takes some 20 ms)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        database, schemas = con.execute(
            "SELECT system.main.current_database(), system.main.current_schemas(true)"
        ).fetchall()[0]
        self.database, self.schemas = database.lower(), {schema.lower() for schema in schemas}
        self.views: dict[str, list[tuple[str, str, str]]] = {}  # name -> [(database, schema, SQL)]
        for database, schema, name, sql in con.execute(
            "SELECT database_name, schema_name, view_name, sql FROM system.main.duckdb_views() WHERE NOT internal"
        ).fetchall():
            self.views.setdefault(name.lower(), []).append((database.lower(), schema.lower(), sql))
        self.macros: dict[str, list[str]] = {}  # name -> the bodies of its overloads ([] for no macro)

    def views_named(self, table: exp.Table) -> list[str]:
        """The SQL of every view ``table`` may name (DuckDB's search path, widened: a miss would let a write by)."""
        catalog, schema = table.catalog.lower(), table.db.lower()
        found = []
        for database, view_schema, sql in self.views.get(table.name.lower(), []):
            if catalog:
                matches = (database, view_schema) == (catalog, schema)
            elif schema:  # schema.view of the current database, or database.view (its default schema)
                matches = view_schema == schema or database == schema
            else:  # the search path, in this database or among the temporary views
                matches = database in (self.database, "temp") and view_schema in self.schemas
            if matches:
                found.append(sql)
        return found

    def macro_bodies(self, names: set[str]) -> None:
        missing = sorted(names - set(self.macros))
        if not missing:
            return
        for name in missing:
            self.macros[name] = []
        for name, body in self.con.execute(
            "SELECT lower(function_name), macro_definition FROM system.main.duckdb_functions() WHERE NOT internal "
            "AND function_type IN ('macro', 'table_macro') AND lower(function_name) IN (SELECT unnest(?::VARCHAR[]))",
            [missing],
        ).fetchall():
            self.macros[name].append(body)


def _parse_definition(sql: str) -> exp.Expression | None:
    try:
        return sqlglot.parse_one(sql, read="duckdb")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, RecursionError):
        return None


_SEQUENCE_CALL = re.compile(r"\b(nextval|setval)\s*\(", re.IGNORECASE)


def _hidden_sequence_call(tree: exp.Expression, definitions: _Definitions, seen: set[str]) -> list[str]:
    """How ``tree`` reaches a ``nextval``/``setval`` through views and macros, in words; [] where it does not."""
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    calls = {node.name.lower(): node for node in tree.find_all(exp.Anonymous)}
    for name, node in calls.items():
        if name in _WRITING_FUNCTIONS:
            return [f"calls {node.sql('duckdb', normalize_functions=False)}"]
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier) or (not table.db and table.name.lower() in ctes):
            continue
        found = _through(f"reads view {table.name}", definitions.views_named(table), definitions, seen)
        if found:
            return found
    definitions.macro_bodies(set(calls))
    for name, node in calls.items():
        found = _through(f"calls macro {node.name}", definitions.macros.get(name, []), definitions, seen)
        if found:
            return found
    return []


def _through(step: str, bodies: list[str], definitions: _Definitions, seen: set[str]) -> list[str]:
    """``[step, ...]`` if one of ``bodies`` (a view's or macros' SQL, each judged once) reaches a sequence call."""
    for body in bodies:
        if body in seen:
            continue
        seen.add(body)
        found = _reaches(body, definitions, seen)
        if found:
            return [step, *found]
    return []


def _reaches(sql: str, definitions: _Definitions, seen: set[str]) -> list[str]:
    """:func:`_hidden_sequence_call` of a view's or macro's SQL; SQL sqlglot cannot parse is judged by its text."""
    tree = _parse_definition(sql)
    if tree is None:
        match = _SEQUENCE_CALL.search(sql)
        return [f"calls {match.group(1)}(...)"] if match else []
    return _hidden_sequence_call(tree, definitions, seen)


def refuse_hidden_writes(con: duckdb.DuckDBPyConnection, statement: exp.Expression) -> None:
    """Refuse a view or macro that ``statement`` reads, at any depth, that advances a sequence (nextval, setval).

    :func:`refuse_writes` sees the query's own text only; DuckDB expands views and macros when it binds, and
    inside a caller's transaction (where ilargi_db reads without its read-only wall) would advance the sequence
    once per row on every read.
    """
    found = _hidden_sequence_call(statement, _Definitions(con), set())
    if found:
        raise PlanError(f"{the_query()} {', which '.join(found)}, {_ADVANCES}")


def _query_nodes(tree: object, cte: str | None = None):
    """``(type, CTE name or None)`` of every query node in DuckDB's JSON parse tree."""
    if isinstance(tree, dict):
        kind = tree.get("type")
        if isinstance(kind, str) and kind.endswith("_NODE"):
            yield kind, cte
        for key, value in tree.items():
            if key == "cte_map":  # {"map": [{"key": <name>, "value": <CTE>}]}
                for entry in value.get("map", []):
                    yield from _query_nodes(entry.get("value"), entry.get("key"))
            else:
                yield from _query_nodes(value, cte)
    elif isinstance(tree, list):
        for value in tree:
            yield from _query_nodes(value, cte)


def check_reads_only(con: duckdb.DuckDBPyConnection, query: str) -> None:
    """Ask DuckDB's own parser whether ``query`` only reads; raise :class:`PlanError` if it may write.

    sqlglot and DuckDB do not always agree (sqlglot cannot parse a COPY inside WITH, which DuckDB runs): the query
    must be one statement DuckDB calls a SELECT, and DuckDB's parse tree (``json_serialize_sql``) may hold no
    query node that writes. Parsing runs nothing. A query DuckDB cannot parse is left to
    :func:`parse_training_query`, which explains the error (DuckDB could not run it either).
    """
    if not isinstance(query, str) or not query.strip():
        return
    try:
        statements = con.extract_statements(query)
    except duckdb.ParserException:
        return
    if len(statements) != 1:
        return  # parse_training_query counts the statements
    kind = statements[0].type.name
    if kind != "SELECT":
        raise _not_a_select(kind)
    tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [query]).fetchall()[0][0])
    if tree.get("error"):
        raise PlanError(
            f"DuckDB cannot show ilargi_db the parse tree of {the_query()} ({tree.get('error_message')}), so "
            "ilargi_db cannot check that it only reads. Write it as a plain SELECT over joined tables."
        )
    for node, cte in _query_nodes(tree):
        if node not in _READING_NODES:
            kind = node.removesuffix("_NODE").removesuffix("_QUERY")
            where = f" in the WITH clause ({cte})" if cte else ""
            raise PlanError(f"{the_query()} holds {_article(kind)} {kind} statement{where}: {_ONLY_READS}")


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
        raise PlanError(f"{the_query()} is empty: pass a SELECT over joined tables.")
    try:
        statements = [s for s in sqlglot.parse(query, read="duckdb") if s is not None]
    except sqlglot.errors.ParseError as err:
        first = err.errors[0] if err.errors else {}
        where = f" (line {first.get('line')}, column {first.get('col')})" if first else ""
        description = first.get("description", str(err))
        raise PlanError(f"could not parse {the_query()}{where}: {description}") from None
    if len(statements) != 1:
        raise PlanError(
            f"{the_query()} must be a single SELECT statement, but it holds "
            f"{len(statements)} statements. Pass one SELECT."
        )
    statement = statements[0]
    refuse_writes(statement)  # first: a write anywhere matters more than any other refusal
    if isinstance(statement, exp.SetOperation):
        kind = type(statement).__name__.upper()
        raise PlanError(_NOT_A_TRAINING_SET.format(what=f"a set operation ({kind})"))
    if not isinstance(statement, exp.Select):
        raise _not_a_select(statement.key.upper())
    refuse_non_training_clauses(statement)
    return statement


def refuse_non_training_clauses(select: exp.Select) -> exp.Select:
    """Refuse clauses that aggregate, deduplicate or write, and samples that are not the same on every read.

    LIMIT/OFFSET pass here: the builder orders them by rowid, or refuses them (:mod:`ilargi_db.plan.sampling`).
    """
    clauses = {
        "group": "GROUP BY",
        "having": "HAVING",
        "qualify": "QUALIFY",
        "distinct": "DISTINCT",
        "windows": "a WINDOW clause",
    }
    for arg, what in clauses.items():
        if select.args.get(arg):
            raise PlanError(_NOT_A_TRAINING_SET.format(what=what))
    for call in select.find_all(exp.Anonymous):  # anywhere, subqueries included
        if call.name.lower().lstrip("_").startswith("ilargi_"):
            raise PlanError(
                f"{the_query()} calls {call.name}: ilargi_db's SQL functions train and write models, and "
                "cannot run inside a query that only reads training data. Call them on their own."
            )
    if select.args.get("into"):
        raise PlanError("SELECT ... INTO writes a table; ilargi_db only reads. Remove INTO.")
    check_samples(select)
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
        raise PlanError(f"{the_query()} has no FROM clause: name the tables it reads.")
    return select
