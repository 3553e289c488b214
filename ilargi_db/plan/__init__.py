"""The planner: a training query in, a join graph out (sqlglot, DuckDB dialect).

Small passes, each in its own module, run in order by :func:`build_join_graph`:
``statement`` (parse, refuse what is not a training set), ``sources`` (FROM
items and their schemas), ``joins`` (join types, USING/NATURAL, equality keys),
``columns`` (stars, ORDER BY, qualification), ``reserved`` (names ilargi_db's
own queries use), ``sampling`` (a seeded sample, LIMIT ordered by rowid), ``features`` (filters, features,
target); ``feature_types`` then types each feature.
"""

from ilargi_db.plan.builder import build_join_graph
from ilargi_db.plan.feature_types import (
    categorical_flags,
    check_single_source,
    check_target_type,
    is_categorical,
    is_numeric,
    is_text,
    mark_categorical_coalesce,
)
from ilargi_db.plan.join_graph import Feature, FeaturePart, JoinEdge, JoinGraph, Predicate, Source
from ilargi_db.plan.kept_columns import ScoringQuery, split_kept_columns
from ilargi_db.plan.statement import parse_training_query

__all__ = [
    "build_join_graph",
    "categorical_flags",
    "check_single_source",
    "check_target_type",
    "is_categorical",
    "is_numeric",
    "is_text",
    "mark_categorical_coalesce",
    "parse_training_query",
    "split_kept_columns",
    "ScoringQuery",
    "Feature",
    "FeaturePart",
    "JoinEdge",
    "JoinGraph",
    "Predicate",
    "Source",
]
