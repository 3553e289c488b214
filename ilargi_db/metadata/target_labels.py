"""Targets as people write them: numbers, BOOLEAN, or text class labels.

Every read takes the target as DOUBLE, so that the readers, the row filters and the fingerprints handle one
kind of column. A text target is read as each row's position in its sorted classes (found by one DISTINCT
query before the read: :func:`with_target_classes`); the estimators are fitted on the labels themselves
(:func:`target_labels`), as scikit-learn's are, so ``classes_`` and every prediction are the labels, and a
BOOLEAN target's classes are ``False`` and ``True``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import duckdb
import numpy as np

from ilargi_db.errors import IlargiError
from ilargi_db.metadata.arrow_blocks import fetch_arrow
from ilargi_db.plan import JoinGraph, is_text
from ilargi_db.sql_text import quote_identifier, quote_string

MAX_TEXT_CLASSES = 1000  # a text target of more distinct values is refused: those are not classes
UNSEEN = -1  # the position read for a label that is not among the classes (scoring rows a model never saw)
BOOLEAN = "BOOLEAN"


def target_sql(graph: JoinGraph) -> str:
    """The target as DOUBLE: its value, or for a text target its position among ``graph.target_classes``
    (:data:`UNSEEN` for another label); NULL stays NULL (an unlabelled row)."""
    value = f"({graph.target.sql})"
    if graph.target_classes is None:
        if is_text(graph.target.duckdb_type):
            raise AssertionError("a text target is read after its classes are found (with_target_classes)")
        return f"CAST({value} AS DOUBLE)"
    listed = "[" + ", ".join(quote_string(c) for c in graph.target_classes) + "]::VARCHAR[]"
    position = f"coalesce(list_position({listed}, CAST({value} AS VARCHAR)), 0) - 1"
    return f"CAST(CASE WHEN {value} IS NULL THEN NULL ELSE {position} END AS DOUBLE)"


def labelled_sql(graph: JoinGraph) -> str:
    """The condition that a row's target is set (NULL and NaN targets teach nothing; a text label is never NaN,
    and its position is looked up once, in the read, not again in the filter)."""
    if graph.target_classes is not None:
        return f"(({graph.target.sql}) IS NOT NULL)"
    value = target_sql(graph)
    return f"({value} IS NOT NULL AND NOT isnan({value}))"


def with_target_classes(
    con: duckdb.DuckDBPyConnection, graph: JoinGraph, classes: Sequence[str] | None = None
) -> JoinGraph:
    """``graph`` with its text target's classes: ``classes`` (a trained model's, for scoring), else the query's
    distinct labels, sorted. A graph whose target is not text is returned as it is."""
    if graph.target is None or not is_text(graph.target.duckdb_type):
        return graph
    if classes is None:
        classes = _distinct_labels(con, graph)
    return dataclasses.replace(graph, target_classes=tuple(str(c) for c in classes))


def _distinct_labels(con: duckdb.DuckDBPyConnection, graph: JoinGraph) -> list[str]:
    name = quote_identifier("__ilargi_label")
    select = graph.select.copy()
    select.set("expressions", [])
    inner = select.select(f"CAST(({graph.target.sql}) AS VARCHAR) AS {name}", dialect="duckdb", copy=False)
    if not inner.args.get("limit") and not inner.args.get("offset"):
        inner.set("order", None)  # which labels the rows hold, whatever their order (a LIMIT's order picks rows)
    sql = f"SELECT DISTINCT {name} FROM ({inner.sql('duckdb')}) WHERE {name} IS NOT NULL LIMIT {MAX_TEXT_CLASSES + 1}"
    labels = sorted(fetch_arrow(con, sql, what="the target's classes").column(0).to_pylist())
    if len(labels) > MAX_TEXT_CLASSES:
        raise IlargiError(
            f"target {graph.target.name!r} holds text with more than {MAX_TEXT_CLASSES} distinct values: those are "
            "not classes to predict. Group them into fewer classes in the query (e.g. a CASE), or predict a number."
        )
    return labels


def target_labels(y: np.ndarray, target_type: str | None, classes: Sequence | None) -> np.ndarray:
    """The labels an estimator is fitted or scored on, from the target as read (``y``, without NULLs): a text
    target's classes (``classes``, in the order its positions were read), a BOOLEAN's ``False``/``True``, and
    numbers as they are."""
    if is_text(target_type):
        read = np.asarray(y, dtype=float)
        labelled = ~np.isnan(read)  # NULL (kept where unlabelled rows are kept) is None
        positions = read[labelled].astype(np.int64)
        if (positions == UNSEEN).any():
            unseen = int(np.count_nonzero(positions == UNSEEN))
            raise IlargiError(
                f"{unseen} row(s) hold a target label the model never saw (its classes: "
                f"{', '.join(map(repr, list(classes)[:10]))}): filter them in the query, or train on them too."
            )
        labels = np.full(len(read), None, dtype=object)
        labels[labelled] = np.asarray(classes, dtype=object)[positions]
        return labels
    if target_type is not None and target_type.upper() == BOOLEAN:
        return np.asarray(y) != 0
    return y


__all__ = ["MAX_TEXT_CLASSES", "UNSEEN", "labelled_sql", "target_labels", "target_sql", "with_target_classes"]
