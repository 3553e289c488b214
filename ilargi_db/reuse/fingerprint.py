"""Fingerprints: what a training job read, so that an artifact is used only while all of it is unchanged.

DuckDB 2.0 keeps no data version per table: ``duckdb_tables()`` has an oid and an estimated size
that INSERT moves but UPDATE does not, and no commit counter is exposed. A content fingerprint is the
correct test, and it costs one aggregate query over the columns the job reads (not the others):

- a base table: ``count(*)``, ``sum(hash(rowid))`` and ``sum(hash(rowid, c))`` for every column ``c``
  the job reads; a column's artifact depends on its own sum, so UPDATE of one column spoils only the
  artifacts made from it, while DELETE and INSERT (the rowids) spoil every artifact of the table;
- any other source (a view, a CTE, a subquery, ``read_parquet(...)``, a registered DataFrame):
  ``count(*)`` and ``sum(hash(c1, ..., cn))`` over all its columns the job reads: a changed Parquet
  file, a replaced view or a re-registered DataFrame with other content gives another fingerprint.

Each column is hashed as a model sees it, not as DuckDB's equality does (:func:`as_compared`: text as
bytes, floats with their sign); a star, ``COLUMNS(...)`` or a position reads every column; the definitions
of the tables and views a source reaches (their types and collations) are part of its key. Sums of 64-bit
hashes (as HUGEINT, never wrapping) are a multiset hash: two different states collide with probability
about 2^-64. DROP and CREATE of a table with the same definition and content keeps its artifacts: they
are still right. The expressions the job evaluates outside the hashed content (features, filters, join
conditions, the target) must be pure functions of it and of the session settings in every key: a
subquery inside them, a macro, a user-defined type, a function of the clock or the session
(``random()``, ``now()``, ``current_date``, one-argument ``age()``), or a database whose macros shadow a
DuckDB built-in makes the job not reusable, and it runs cold.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp

from ilargi_db.metadata.scans import supports_rowid
from ilargi_db.plan.join_graph import JoinGraph, Source
from ilargi_db.plan.sources import scalar_values, with_prefix
from ilargi_db.query_settings import MEANING, current_values_sql
from ilargi_db.read_snapshot import renew_snapshot
from ilargi_db.reuse.remembered import remembered
from ilargi_db.sql_text import quote_identifier

ROWS = "__rows"  # the hash of a base table's rowids (which rows exist), beside each column's
# A source's column hashes come in items of at most this many: DuckDB's planning of one aggregate grows faster than
# its expressions (5,000 column hashes over 40 rows: 8.2 s in one item, 1.5 s in items of 256).
HASHES_PER_ITEM = 256
# Part of every key: a release that changes what an artifact holds (or how a read computes it) bumps it,
# and artifacts an older release stored in a database are then never served.
REUSE_FORMAT = 3
# Settings that change what a read returns for the same columns: every setting that changes a query's meaning
# (ilargi_db.query_settings, the list the SQL functions carry too), and the row order of a read without ORDER BY.
SETTINGS = (*MEANING, "preserve_insertion_order")


def digest(*parts: Any) -> str:
    """A short stable key of ``parts`` (their JSON), for artifact keys."""
    text = json.dumps([REUSE_FORMAT, parts], sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


@dataclass(frozen=True)
class SourcePrint:
    """The content hashes of one source: per column read (a base table), or one for all of them."""

    alias: str
    rows: int
    native: bool  # a base table: hashes per column, with the rowid
    hashes: dict[str, str]  # ROWS -> rowids with the join's columns (or every column read); column -> hash

    def of(self, columns: set[str]) -> str:
        """The hash of ``columns`` (and of which rows there are, and how they join)."""
        if not self.native:
            return digest(self.rows, self.hashes[ROWS])
        return digest(self.rows, self.hashes[ROWS], sorted((c, self.hashes[c]) for c in columns if c in self.hashes))


@dataclass(frozen=True)
class JobFingerprint:
    """Keys of a job's artifacts, each covering the SQL of its step and the content it read."""

    reusable: bool
    why_not: str = ""
    rows_key: str = ""  # the key-only join: which output row takes which source row, and the target
    stats_key: str = ""  # the cost model's statistics of the whole job
    column_keys: dict[int, str] = field(default_factory=dict)  # feature index -> key of its scanned values
    seconds: float = field(default=0.0, compare=False)  # what fingerprinting cost
    # The hashes of the sources a transaction does not hold still (files, DataFrames, views over them): the
    # query's WITH, its scalar items and their values, the same after the read, or the read was not of one
    # state (still_the_same).
    outside_snapshot: tuple[str, tuple[str, ...], tuple] | None = field(default=None, compare=False)


def still_the_same(con: duckdb.DuckDBPyConnection, fingerprint: JobFingerprint) -> bool:
    """Whether the sources outside the read's snapshot (a Parquet file, a view over one) still hold what
    ``fingerprint`` hashed: after a read, False means the read may mix two states of a file."""
    if fingerprint.outside_snapshot is None:
        return True
    prefix, items, values = fingerprint.outside_snapshot
    try:
        return tuple(scalar_values(con, prefix, items)) == values
    except duckdb.Error:
        renew_snapshot(con)
        return False


NOT_REUSABLE = JobFingerprint(False, "reuse is off for this call")


# SQL keywords DuckDB parses as a column reference when unqualified (the planner qualifies every real column).
CLOCK_KEYWORDS = frozenset(
    "current_date current_time current_timestamp localtime localtimestamp current_user session_user user "
    "current_role current_catalog current_schema".split()
)
# Overloads DuckDB marks CONSISTENT although they read the clock: age(ts) is age(current_date, ts).
CLOCK_OVERLOADS = frozenset({("age", 1)})
# Time-zone-aware types: an overload that takes or returns one reads the session's TimeZone and Calendar
# (DuckDB 2.0 marks it CONSISTENT_WITHIN_QUERY for that reason), both part of every key (SETTINGS).
ZONED_TYPES = ("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ_NS", "TIME WITH TIME ZONE")


@functools.lru_cache(maxsize=1)
def _private_database() -> duckdb.DuckDBPyConnection:
    """An in-memory database of this process's own: DuckDB's built-ins and nothing of a caller's (no macro, no
    extension function). Opened once, since opening one takes some 15 ms; each use takes a cursor of it."""
    return duckdb.connect()


_PRIVATE_LOCK = threading.Lock()  # one cursor at a time is taken from the shared connection


def _private_cursor() -> duckdb.DuckDBPyConnection:
    """A connection of its own to :func:`_private_database` (close it after use)."""
    with _PRIVATE_LOCK:
        return _private_database().cursor()


@functools.lru_cache(maxsize=1)
def _built_ins() -> tuple[frozenset[str], frozenset[str]]:
    """(the names of DuckDB's built-in functions, those of them :func:`consistent_functions` passes), lower case,
    from one query of the private database (once per DuckDB release: :func:`~ilargi_db.reuse.remembered.remembered`)."""
    found = remembered("built-in functions, consistent", _ask_built_ins)
    names = frozenset(name.lower() for name, _ in found)
    return names, frozenset(name.lower() for name, consistent in found if consistent)


def _ask_built_ins() -> list[list]:
    with _private_cursor() as fresh:
        found = fresh.execute(
            "SELECT function_name, bool_and(stability = 'CONSISTENT' OR (stability = 'CONSISTENT_WITHIN_QUERY' AND "
            "(list_has_any(parameter_types, ?::VARCHAR[]) OR (len(parameter_types) > 0 AND return_type IN "
            "(SELECT unnest(?::VARCHAR[])))))) FROM system.main.duckdb_functions() WHERE internal "
            "GROUP BY function_name ORDER BY function_name",
            [list(ZONED_TYPES), list(ZONED_TYPES)],
        ).fetchall()
    return [[str(name), bool(consistent)] for name, consistent in found]


def consistent_functions() -> frozenset[str]:
    """DuckDB's built-in functions whose result depends on their arguments and the keyed settings only.

    A name passes when every overload DuckDB could bind is CONSISTENT, or CONSISTENT_WITHIN_QUERY only because
    it converts to or from a time-zone-aware value (``year(TIMESTAMPTZ)``, ``timezone('UTC', ts)``): whichever
    overload the job binds, its result is then fixed by the data, the time zone and the calendar. Functions of
    the clock, the transaction, variables or the catalog (``now()``, ``current_date``, ``getvariable``) and
    VOLATILE ones (``random()``) never pass.
    """
    return _built_ins()[1]


def parse_tree_nodes(tree: Any) -> Iterator[dict]:
    """Every object of a JSON tree (DuckDB's ``json_serialize_sql``), depth first."""
    if isinstance(tree, dict):
        yield tree
        for value in tree.values():
            yield from parse_tree_nodes(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from parse_tree_nodes(value)


def impure_expression(con: duckdb.DuckDBPyConnection, expressions: list[str]) -> str | None:
    """Why the result of ``expressions`` may change while the columns they read do not; None if it cannot.

    Only DuckDB's consistent built-ins pass (:func:`consistent_functions`), and only in a database whose own
    functions (macros, UDFs) shadow none of DuckDB's built-ins: DuckDB would call those in the job's
    expressions and in ilargi_db's own queries (the hashes, the reads), and the artifacts this job made
    could then serve another database of the process wrongly.
    """
    why = _impure(tuple(expressions))[0] if expressions else None
    if why:
        return why
    own = con.execute("SELECT DISTINCT function_name FROM system.main.duckdb_functions() WHERE NOT internal").fetchall()
    shadowed = sorted(name for (name,) in own if name.lower() in built_in_functions())
    if shadowed:
        return f"{shadowed[0]}() is defined in this database (a macro or function) over DuckDB's built-in of that name"
    return None


def built_in_functions() -> frozenset[str]:
    """The names of DuckDB's built-in functions, lower case (from a private database: nothing of a caller's)."""
    return _built_ins()[0]


def volatile_expression(expressions: list[str], subqueries: bool = True) -> str | None:
    """Why ``expressions`` may give other values on another read of the same data (None if they cannot).

    A function DuckDB does not mark CONSISTENT (``random()``, ``now()``...) or a user-defined one; with
    ``subqueries=False`` also a subquery (which reads tables a cluster's workers cannot see).
    """
    if not expressions:
        return None
    why, _ = _impure(tuple(expressions))
    if why and why.startswith("a subquery") and subqueries:
        return None
    return why


@functools.lru_cache(maxsize=256)  # by the text alone: what it says holds for DuckDB's built-ins
def _impure(expressions: tuple[str, ...]) -> tuple[str | None, frozenset[str]]:
    """(why not pure or None, the functions the expressions call)."""
    sql = "SELECT " + ", ".join(f"({e})" for e in expressions)
    with _private_cursor() as parser:  # parsing needs no data: a private database, not the caller's
        tree = json.loads(parser.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()[0][0])
    if tree.get("error"):
        return f"DuckDB could not parse an expression of the job ({tree.get('error_message')})", frozenset()
    allowed = consistent_functions()
    called = set()
    for node in parse_tree_nodes(tree.get("statements", [])):
        kind = node.get("class")
        names = node.get("column_names") or []
        if kind == "COLUMN_REF" and len(names) == 1 and names[0].lower() in CLOCK_KEYWORDS:
            return f"{names[0]} reads the clock or the session, not the data", frozenset()
        if kind == "SUBQUERY":
            why = "a subquery in a feature, filter or join condition reads tables the fingerprint does not cover"
            return why, frozenset()
        if kind == "FUNCTION":
            name = node["function_name"].lower()
            arity = len(node.get("arguments", node.get("children")) or [])
            if node.get("schema") or name not in allowed or (name, arity) in CLOCK_OVERLOADS:
                return (
                    f"{node['function_name']}() may return other values for the same input (or is user-defined)",
                    frozenset(),
                )
            called.add(name)
        if kind == "CAST" and (node.get("cast_type") or {}).get("id") == "USER":
            return "a cast to a user-defined type depends on the type's current definition", frozenset()
    return None, frozenset(called)


def _settings(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """The caller's values of the settings that change what an expression returns (:data:`SETTINGS`)."""
    values = json.loads(con.execute(f"SELECT CAST({current_values_sql(SETTINGS)} AS VARCHAR)").fetchall()[0][0])
    return sorted((name.lower(), value) for name, value in values.items())


ALL_COLUMNS = "*"  # a reference to every column of a source: a star, COLUMNS(...) or a position (#2)
# Expressions that read columns without naming them; PositionalColumn is missing from older sqlglot releases.
_UNNAMED = tuple(t for t in (exp.Star, exp.Columns, getattr(exp, "PositionalColumn", None)) if t is not None)


@functools.lru_cache(maxsize=4096)
def _references(sql: str) -> tuple[tuple[str, str], ...]:
    """``(source alias, column)`` of every column ``sql`` reads, lower case (parsed once per text).

    A star, ``COLUMNS(...)`` or a positional reference reads columns it does not name: it gives
    ``(alias, ALL_COLUMNS)``, with alias ``""`` where it is not qualified (any source).
    """
    tree = sqlglot.parse_one(sql, read="duckdb")
    found = []
    for node in tree.walk():
        if isinstance(node, exp.Column):
            found.append((node.table.lower(), ALL_COLUMNS if isinstance(node.this, exp.Star) else node.name))
        elif isinstance(node, _UNNAMED) and not isinstance(node.parent, exp.Column):
            found.append(("", ALL_COLUMNS))
    return tuple(found)


def _columns(sql: str, alias: str, source: Source) -> set[str]:
    """The raw columns of ``source`` (as ``alias``) that ``sql`` reads, lower case (all of them for a star,
    ``COLUMNS(...)`` or a position)."""
    found = set()
    for table, name in _references(sql):
        if table not in ("", alias.lower()):
            continue
        if name == ALL_COLUMNS:
            return {c.lower() for c in source.columns}
        if source.has_column(name):  # unqualified too: reading more than the job does is never stale
            found.add(name.lower())
    return found


def _row_expressions(graph: JoinGraph) -> list[str]:
    """The SQL deciding which rows join how: join conditions, filters, ORDER BY, target, coalesced parts."""
    select = graph.select
    found = [j.args["on"].sql("duckdb") for j in select.args.get("joins") or [] if j.args.get("on") is not None]
    found += [p.sql for p in graph.filters]
    found += list(graph.order_by)
    if graph.target is not None:
        found.append(graph.target.sql)
    found += [part.sql for f in graph.features if f.kind == "coalesce" for part in f.parts]
    return found


def _row_columns(graph: JoinGraph) -> dict[str, set[str]]:
    """Per source, the raw columns that decide the join's rows (keys, filters, order, target, coalesced parts)."""
    columns: dict[str, set[str]] = {s.alias: set() for s in graph.sources}
    for join in graph.select.args.get("joins") or []:
        for key in join.args.get("using") or []:
            for s in graph.sources:
                if s.has_column(key.name):
                    columns[s.alias].add(key.name.lower())
    for sql in _row_expressions(graph):
        for s in graph.sources:
            columns[s.alias] |= _columns(sql, s.alias, s)
    return columns


def _feature_columns(graph: JoinGraph) -> list[dict[str, set[str]]]:
    """Per feature, the raw columns of each source it reads: of any source, since ``COLUMNS('z')`` or ``#5``
    in a part the planner gave the fact may name a dimension's column."""
    found = []
    for f in graph.features:
        read: dict[str, set[str]] = {part.source: set() for part in f.parts}
        for part in f.parts:
            for s in graph.sources:
                columns = _columns(part.sql, s.alias, s)
                if columns:
                    read.setdefault(s.alias, set()).update(columns)
        found.append(read)
    return found


@dataclass(frozen=True)
class Definitions:
    """What a source reads beyond its rows: the DDL of every table and view it reaches (column types and
    collations, which decide how its values compare), and whether those are base tables alone, whose
    reads the job's transaction holds still (files and DataFrames it does not)."""

    ddl: tuple[str, ...]
    held: bool


def source_definitions(con: duckdb.DuckDBPyConnection, graph: JoinGraph) -> dict[str, Definitions]:
    """:class:`Definitions` of each source of ``graph`` (views followed at any depth; one catalog query)."""
    catalog: dict[str, list[tuple[str, str]]] = {}
    for name, kind, sql in con.execute(
        "SELECT lower(table_name), 'table', sql FROM system.main.duckdb_tables() WHERE NOT internal "
        "UNION ALL SELECT lower(view_name), 'view', sql FROM system.main.duckdb_views() WHERE NOT internal"
    ).fetchall():
        catalog.setdefault(name, []).append((kind, sql or ""))
    prefix = with_prefix(graph.select)
    found = {}
    for source in graph.sources:
        ddl: list[str] = []
        held = _reach(f"{prefix}SELECT * FROM {source.relation_sql}", catalog, ddl)
        found[source.alias] = Definitions(tuple(ddl), held)
    return found


def _reach(sql: str, catalog: dict[str, list[tuple[str, str]]], ddl: list[str]) -> bool:
    """Add the DDL of the tables and views ``sql`` reads to ``ddl`` (by name, in every schema: more than it
    reads is never stale); whether they are all base tables (a file, a table function or a name the catalog
    does not hold, such as a registered DataFrame, is not)."""
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, RecursionError):
        return False
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    held = True
    for table in tree.find_all(exp.Table):
        name = table.name.lower()
        if not isinstance(table.this, exp.Identifier):
            held = False  # read_parquet(...), range(...): a table function
            continue
        if not table.db and name in ctes:
            continue
        if name not in catalog:
            held = False
            continue
        for kind, definition in catalog[name]:
            if definition in ddl:
                continue
            ddl.append(definition)
            if kind == "view":
                held = _reach(definition, catalog, ddl) and held
    return held


FLOATS = ("DOUBLE", "FLOAT")


def as_compared(column: str, duckdb_type: str) -> str:
    """What to hash of ``column`` so that values a model tells apart hash apart.

    ``hash()`` follows DuckDB's equality, which is looser than what a model sees: under a NOCASE collation
    'A' and 'a' hash alike, and -0.0 hashes as 0.0. Text is hashed as its UTF-8 bytes (``encode``), floats
    with their sign bit, nested values (lists, structs, maps) also as their text, which spells -0.0 and
    every text's bytes. A column's collation is in its source's definition (part of every key).
    """
    kind = duckdb_type.upper()
    if kind == "VARCHAR":
        return f"encode({column})"
    if kind in FLOATS:
        return f"{column}, signbit({column})"
    if "[" in kind or kind.startswith(("STRUCT", "MAP", "UNION")):
        return f"{column}, {column}::VARCHAR"
    return column


def _hash_query(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, rows: dict[str, set[str]], read: dict[str, set[str]]
) -> tuple[str, list[str], list]:
    """The hash query as (its WITH prefix, its items, their layout): per source, its rows and the content hash(es)
    of the columns read, in items of at most :data:`HASHES_PER_ITEM` hashes (each with the source's row count).

    A base table gives one hash of its rowids with the columns that decide the join (``ROWS``) and one per
    other column read; any other source one hash of every column read.
    """
    items, layout = [], []
    prefix = with_prefix(graph.select)
    for s in graph.sources:
        real = {c.lower(): c for c in s.columns}
        types = {c.lower(): t for c, t in zip(s.columns, s.types)}

        def named(columns: list[str], alias: str = s.alias, real: dict = real, types: dict = types) -> list[str]:
            return [as_compared(f"{quote_identifier(alias)}.{quote_identifier(real[c])}", types[c]) for c in columns]

        native = supports_rowid(con, s, prefix)
        if native:
            row = f"{quote_identifier(s.alias)}.rowid"
            others = sorted(read[s.alias] - rows[s.alias])
            sums = [f"sum(hash({', '.join([row, *named(sorted(rows[s.alias]))])}))"]
            sums += [f"sum(hash({row}, {n}))" for n in named(others)]
            keys = [ROWS, *others]
        else:
            names = named(sorted(read[s.alias]))
            # The row count is in the key too (SourcePrint.of): a row of zeros hashes to 0.
            sums = [f"sum(hash({', '.join(names)}))" if names else "sum(hash(0))"]
            keys = [ROWS]
        for start in range(0, len(sums), HASHES_PER_ITEM):
            values = ", ".join(f"coalesce({total}, 0)::VARCHAR" for total in sums[start : start + HASHES_PER_ITEM])
            items.append(f"(SELECT [count(*)::VARCHAR, {values}] FROM {s.relation_sql})")
            layout.append((s.alias, native, keys[start : start + HASHES_PER_ITEM]))
    return prefix, items, layout


def fingerprint_job(con: duckdb.DuckDBPyConnection, graph: JoinGraph, categorical: list[bool]) -> JobFingerprint:
    """The keys of ``graph``'s artifacts on the database's current content (one aggregate query).

    ``categorical`` says which features are read as categories (their artifacts hold text, not numbers).
    """
    began = time.perf_counter()
    expressions = _row_expressions(graph) + [f.sql for f in graph.features]
    why = impure_expression(con, expressions)
    if why:
        return JobFingerprint(False, why, seconds=time.perf_counter() - began)
    rows_by_source = _row_columns(graph)
    by_feature = _feature_columns(graph)
    read = {alias: set(columns) for alias, columns in rows_by_source.items()}
    for parts in by_feature:
        for alias, columns in parts.items():
            read[alias] |= columns
    prefix, items, layout = _hash_query(con, graph, rows_by_source, read)
    try:
        found = scalar_values(con, prefix, items)
    except duckdb.Error as err:
        renew_snapshot(con)  # a failed statement aborts the job's read transaction
        return JobFingerprint(False, f"the content of a source could not be hashed ({err})")
    counts, natives, hashes = {}, {}, {}
    for (alias, native, keys), values in zip(layout, found):  # a wide source's hashes come in several items
        counts[alias], natives[alias] = int(values[0]), native
        hashes.setdefault(alias, {}).update(zip(keys, values[1:]))
    prints = {alias: SourcePrint(alias, counts[alias], natives[alias], hashes[alias]) for alias in counts}
    definitions = source_definitions(con, graph)
    sources = [
        (s.alias, s.relation_sql, s.kind, dict(zip(s.columns, s.types)), definitions[s.alias].ddl)
        for s in graph.sources
    ]
    with_ = with_prefix(graph.select)
    rows = [(alias, prints[alias].of(columns)) for alias, columns in sorted(rows_by_source.items())]
    select = graph.select
    # FROM, the joins, WHERE, ORDER BY, and the sample and LIMIT that pick rows, as DuckDB SQL: the query less its
    # SELECT list.
    clauses = [
        select.args[a].sql("duckdb")
        for a in ("from_", "where", "order", "sample", "limit", "offset")
        if select.args.get(a) is not None
    ]
    clauses += [j.sql("duckdb") for j in select.args.get("joins") or []]
    rows_key = digest("rows", with_, clauses, _row_expressions(graph), sources, rows, _settings(con))
    column_keys = {}
    for j, (feature, parts) in enumerate(zip(graph.features, by_feature)):
        content = [(alias, prints[alias].of(columns)) for alias, columns in sorted(parts.items())]
        column_keys[j] = digest(
            "column", rows_key, feature.kind, [(p.source, p.sql) for p in feature.parts], categorical[j], content
        )
    stats_key = digest("stats", rows_key, [column_keys[j] for j in sorted(column_keys)], categorical)
    outside = [k for k, (alias, _, _) in enumerate(layout) if not definitions[alias].held]
    again = (prefix, tuple(items[k] for k in outside), tuple(found[k] for k in outside))
    seconds = time.perf_counter() - began
    return JobFingerprint(True, "", rows_key, stats_key, column_keys, seconds, again if outside else None)


__all__ = [
    "JobFingerprint",
    "NOT_REUSABLE",
    "SourcePrint",
    "digest",
    "fingerprint_job",
    "impure_expression",
    "parse_tree_nodes",
    "still_the_same",
    "volatile_expression",
]
