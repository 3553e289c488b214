"""Row selections a training query may hold: a seeded sample, and LIMIT/OFFSET over an order DuckDB repeats.

A training reads its rows more than once (the statistics, the key-only join or the materialized join, the
scans, reuse's fingerprints), so a clause that picks rows must pick the same ones on every read:

- ``USING SAMPLE`` / ``TABLESAMPLE`` with a seed and the ``bernoulli`` or ``reservoir`` method. DuckDB 2.0 draws
  the same rows for the same seed on the same data whatever its thread count and plan (measured on a 1M-row
  table of 9 row groups, threads 1 to 8, after a join, through a view, an Arrow table or a Parquet file).
  ``system`` sampling keeps whole vectors in the order the threads read them: another run, other rows, seed
  or not. The rows are sampled where DuckDB samples them in the query: each training's key-only join (or its
  materialized join) reads them once, and every other read follows those rows.
- ``LIMIT n [OFFSET m]`` when every source is a base table: the key-only join and the materialized join order
  by the query's ORDER BY (if any), then by each source's ``rowid`` in FROM order, which breaks every tie.
  Without ORDER BY that is the first n rows of the fact in storage order; with one, DuckDB's own answer
  wherever it is deterministic (no ties at the cut).
"""

from __future__ import annotations

import duckdb
import sqlglot
from sqlglot import exp

from ilargi_db.errors import PlanError, the_query
from ilargi_db.sql_text import quote_identifier

REPEATABLE_METHODS = ("BERNOULLI", "RESERVOIR")  # seeded, the same rows on every read (see the module's docstring)
SAMPLE_FIX = "USING SAMPLE 10% (bernoulli, 42) or USING SAMPLE 10000 ROWS (reservoir, 42)"


def check_samples(select: exp.Select) -> None:
    """Refuse a sample that another read of the same training would draw otherwise: no seed, or ``system``."""
    for sample in select.find_all(exp.TableSample):
        method = sample.text("method").upper() or ("RESERVOIR" if sample.args.get("size") else "SYSTEM")
        seed = sample.args.get("seed")  # False or None without one
        written = _written(sample, select)
        if method not in REPEATABLE_METHODS:
            raise PlanError(
                f"{written} draws whole vectors of rows in the order DuckDB's threads read them, so every read of "
                f"the training would draw other rows, seed or not (a percentage samples by system by default). "
                f"Sample by bernoulli or reservoir with a seed, e.g. {SAMPLE_FIX}."
            )
        if not seed:
            raise PlanError(
                f"{written} has no seed, so every read of the training would draw other rows. Add a seed, "
                f"e.g. {SAMPLE_FIX} (TABLESAMPLE bernoulli(10%) REPEATABLE (42) on a table)."
            )


def _written(sample: exp.TableSample, select: exp.Select) -> str:
    """A sample as the query writes it: ``USING SAMPLE`` on the whole query, ``TABLESAMPLE`` on a table."""
    text = sample.sql("duckdb").strip()
    return text.replace("TABLESAMPLE", "USING SAMPLE", 1) if sample is select.args.get("sample") else text


def _count(node: exp.Expression | None) -> int | None:
    """The number of rows a LIMIT or OFFSET node names (None without one); anything else is refused."""
    if node is None:
        return None
    value = node.args.get("expression")
    options = node.args.get("limit_options")
    in_rows = options is None or not (options.args.get("percent") or options.args.get("with_ties"))
    if in_rows and isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
        return int(value.this)
    raise PlanError(
        f"{node.sql('duckdb').strip()} must be a number of rows written as a whole number (a percentage or an "
        "expression is not read ahead): write it as, e.g., LIMIT 10000."
    )


def limit_and_offset(select: exp.Select) -> tuple[int | None, int]:
    """The query's LIMIT (None without one) and OFFSET (0 without one), checked to be row counts."""
    return _count(select.args.get("limit")), _count(select.args.get("offset")) or 0


def limited_rows(select: exp.Select, rows: int) -> int:
    """How many of ``rows`` join rows the query's LIMIT/OFFSET keep."""
    if not select.args.get("limit") and not select.args.get("offset"):
        return rows
    limit, offset = limit_and_offset(select)
    kept = max(rows - offset, 0)
    return kept if limit is None else min(kept, limit)


def _names_rows_by_rowid(con: duckdb.DuckDBPyConnection, prefix: str, alias: str, kind: str, relation: str) -> bool:
    if kind != "table":
        return False
    try:
        con.sql(f"{prefix}SELECT {quote_identifier(alias)}.rowid FROM {relation} LIMIT 0")
    except duckdb.Error:
        return False  # a view, a CTE, a registered DataFrame or a file
    return True


def order_limit_by_rowids(
    con: duckdb.DuckDBPyConnection, select: exp.Select, sources: list, prefix: str, repeatable: bool = True
) -> None:
    """Make a LIMIT/OFFSET pick the same rows on every read: ORDER BY the query's keys, then every source's rowid.

    Refused, with the fix, where a source is not a base table (its rows have no name that DuckDB repeats), unless
    the rows are read once (``repeatable=False``, scoring): then the LIMIT takes the rows as DuckDB returns them.
    ``sources`` are the query's :class:`~ilargi_db.plan.join_graph.Source` records; ``select`` is changed in place.
    """
    if not select.args.get("limit") and not select.args.get("offset"):
        return
    limit_and_offset(select)  # refuse what is not a row count first
    for source in sources:
        if source.has_column("rowid") or not _names_rows_by_rowid(
            con, prefix, source.alias, source.kind, source.relation_sql
        ):
            if not repeatable:
                return  # one read: the rows DuckDB returns first (ORDER BY a unique key to fix which)
            raise PlanError(
                f"{the_query()} takes a LIMIT, but source {source.alias!r} is not a base table, so ilargi_db cannot "
                "order its rows the same way on every read (it orders by each table's rowid after the ORDER BY). "
                f"Take a seeded sample instead ({SAMPLE_FIX}), or create a table of the rows first."
            )
    keys = [f"{quote_identifier(s.alias)}.rowid" for s in sources]
    order = select.args.get("order")
    ties = [sqlglot.parse_one(key, read="duckdb") for key in keys]
    if order is None:
        select.set("order", exp.Order(expressions=[exp.Ordered(this=key) for key in ties]))
    else:
        order.set("expressions", [*order.expressions, *(exp.Ordered(this=key) for key in ties)])


def row_selection(select: exp.Select) -> str:
    """The clauses of ``select`` that pick some of the join's rows, as SQL ("" for none)."""
    found = [_written(sample, select) for sample in select.find_all(exp.TableSample)]
    found += [select.args[a].sql("duckdb").strip() for a in ("limit", "offset") if select.args.get(a)]
    return " ".join(found)


__all__ = ["check_samples", "limit_and_offset", "limited_rows", "order_limit_by_rowids", "row_selection"]
