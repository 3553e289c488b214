"""A query to score may select columns that are not the model's features (an id, a date): they are kept.

Scoring reads the model's columns alone (its features, in the order it learned them, and the target and
the group column where the query selects them), from the same FROM, WHERE and ORDER BY; the other columns
are carried beside the prediction, read in the same pass (:func:`ilargi_db.predict` with ``keep=True``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from ilargi_db.plan.statement import parse_training_query


@dataclass(frozen=True)
class ScoringQuery:
    """The query cut to the model's columns, and the columns it cut: their names and their SQL."""

    query: str
    kept_names: tuple[str, ...] = ()
    kept_sql: tuple[str, ...] = ()


def split_kept_columns(query: str, features: list[str], others: list[str]) -> ScoringQuery:
    """``query`` selecting ``features`` in this order (and whichever of ``others`` it selects); the rest kept.

    The query is returned as it is where it selects nothing else, or where it does not select every feature
    by name (the caller's check then names what is missing), or where it selects ``*`` (expanded later).
    """
    select = parse_training_query(query)
    items = list(select.expressions)
    if any(item.is_star for item in items):
        return ScoringQuery(query)
    named = {output_name(item).lower(): item for item in items}
    wanted = [name.lower() for name in features]
    if len(named) != len(items) or not all(name in named for name in wanted):
        return ScoringQuery(query)  # duplicate or missing names: refused by the features' check, in its words
    used = set(wanted) | {name.lower() for name in others}
    kept = [item for item in items if output_name(item).lower() not in used]
    if not kept and [output_name(i).lower() for i in items if output_name(i).lower() in wanted] == wanted:
        return ScoringQuery(query)  # the model's columns alone, in its order: nothing to cut
    cut = {item.alias.lower(): item.this for item in kept if item.alias}
    order = select.args.get("order")
    for ordered in order.expressions if order is not None else ():
        key = ordered.this
        if isinstance(key, exp.Literal) and key.is_int and 1 <= int(key.this) <= len(items):  # ORDER BY 2
            item = items[int(key.this) - 1]
            ordered.set("this", (item.this if item.alias else item).copy())
        else:  # ORDER BY a kept alias, alone or inside an expression (-sale): the expression it names
            ordered.set("this", key.transform(lambda node: _unaliased(node, cut)))
    rest = [named[name.lower()] for name in others if name.lower() in named]
    select.set("expressions", [*(named[name] for name in wanted), *rest])
    return ScoringQuery(
        select.sql("duckdb"),
        tuple(output_name(item) for item in kept),
        tuple((item.this if item.alias else item).sql("duckdb") for item in kept),
    )


def output_name(item: exp.Expression) -> str:
    """A select item's name: its alias or column name, else its expression as sqlglot writes it (alias it to choose)."""
    return item.alias_or_name or item.sql("duckdb")


def _unaliased(node: exp.Expression, cut: dict[str, exp.Expression]) -> exp.Expression:
    if isinstance(node, exp.Column) and not node.table and node.name.lower() in cut:
        return cut[node.name.lower()].copy()
    return node


__all__ = ["ScoringQuery", "split_kept_columns"]
