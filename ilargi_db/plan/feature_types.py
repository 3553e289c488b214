"""Feature types: which DuckDB types are numbers, which are categories, and what is refused.

The planner's last word on a feature: ``categorical_flags`` types every feature of a join graph (or
refuses it, naming the cast to write), ``check_target_type`` the target; a categorical COALESCE across
sources is marked cross-source, since its categories span sources.
"""

from __future__ import annotations

import dataclasses
import re

from ilargi_db.errors import NotFactorizableError, PlanError
from ilargi_db.plan.join_graph import JoinGraph

CATEGORICAL_TYPES = ("VARCHAR", "ENUM", "BOOLEAN")


_NUMERIC = re.compile(
    r"^(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|UTINYINT|USMALLINT|UINTEGER|UBIGINT|UHUGEINT|"
    r"FLOAT|DOUBLE|REAL|BOOLEAN|DECIMAL(\(\d+,\s*\d+\))?|\"NULL\"|NULL)$"
)


def is_numeric(duckdb_type: str) -> bool:
    """Types read as numbers (DOUBLE)."""
    return bool(_NUMERIC.match(duckdb_type.upper()))


def categorical_flags(graph: JoinGraph) -> list[bool]:
    """For each feature of ``graph``, whether it is one-hot encoded; other types are refused."""
    flags = []
    for f in graph.features:
        if is_categorical(f.duckdb_type):
            flags.append(True)
        elif is_numeric(f.duckdb_type):
            flags.append(False)
        else:
            raise PlanError(
                f"feature {f.name!r} has type {f.duckdb_type}: ilargi_db trains on numbers, text, ENUM and "
                "BOOLEAN columns. Cast it or leave it out."
            )
    return flags


def mark_categorical_coalesce(graph: JoinGraph, flags: list[bool]) -> JoinGraph:
    """A categorical COALESCE across sources is trained materialized (its categories span sources)."""
    features = tuple(
        dataclasses.replace(f, kind="cross_source", parts=()) if flag and f.kind == "coalesce" else f
        for f, flag in zip(graph.features, flags, strict=True)
    )
    return dataclasses.replace(graph, features=features)


def is_categorical(duckdb_type: str) -> bool:
    """VARCHAR, ENUM and BOOLEAN features are one-hot encoded (not lists of them, such as VARCHAR[])."""
    return duckdb_type.upper().startswith(CATEGORICAL_TYPES) and not duckdb_type.endswith("]")


def check_single_source(graph: JoinGraph) -> None:
    """Refuse features that mix sources (the normalized matrix cannot hold them), naming each and its sources."""
    mixed = graph.cross_source_features
    if mixed:
        described = "; ".join(
            f"{f.name!r} = {f.sql} reads {' and '.join(f.sources) or 'the joined row'}" for f in mixed
        )
        raise NotFactorizableError(
            f"cannot factorize: {described}. A feature must be computable inside one source. "
            "Split it into one feature per source, or train on the materialized join.",
            tuple((f.name, f.sql, f.sources) for f in mixed),
        )


def is_text(duckdb_type: str | None) -> bool:
    """Text and ENUM columns: a target of this type holds class labels."""
    return duckdb_type is not None and is_categorical(duckdb_type) and not is_numeric(duckdb_type)


def check_target_type(graph: JoinGraph) -> None:
    """Refuse a target that is not a number, BOOLEAN or text (class labels), saying what to cast it to."""
    if graph.target is not None and not (is_numeric(graph.target.duckdb_type) or is_text(graph.target.duckdb_type)):
        raise PlanError(
            f"target {graph.target.name!r} has type {graph.target.duckdb_type}: it must be a number, BOOLEAN or "
            "text (class labels). Cast it in the query (e.g. CAST(label AS VARCHAR), or epoch(day) for a date)."
        )
