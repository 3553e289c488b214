"""Hypothesis strategies: random normalized schemas in DuckDB and a training query over them.

Shapes: a fact table and 1-4 dimension tables, joined as a star or a snowflake,
INNER, LEFT or FULL, on single or composite keys, unique (PK-FK) or repeated
(M:N) dimension keys, with NULL and dangling foreign keys, filters on one or
several sources, and feature columns of several DuckDB types.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa
from hypothesis import strategies as st

TYPES = ["DOUBLE", "INTEGER", "FLOAT", "DECIMAL(12,2)", "BOOLEAN", "BIGINT"]


@dataclass
class Schema:
    tables: dict[str, pa.Table]
    casts: dict[str, dict[str, str]]
    query: str
    target: str
    sparse: bool
    notes: list[str] = field(default_factory=list)

    def load(self, con: duckdb.DuckDBPyConnection) -> None:
        for name, table in self.tables.items():
            con.register(f"{name}_arrow", table)
            items = ", ".join(
                f'CAST("{c}" AS {self.casts[name].get(c, "BIGINT")}) AS "{c}"' for c in table.column_names
            )
            con.sql(f"CREATE TABLE {name} AS SELECT {items} FROM {name}_arrow")
            con.unregister(f"{name}_arrow")


def _values(draw, rng: np.random.Generator, n: int, type_: str, sparse: bool) -> np.ndarray:
    if type_ == "BOOLEAN":
        return rng.integers(0, 2, n).astype(float)
    if type_ in ("INTEGER", "BIGINT"):
        values = rng.integers(-4, 5, n).astype(float)
    else:
        values = np.round(rng.uniform(-3, 3, n) * 4) / 4  # exact in FLOAT and DECIMAL too
    if sparse:
        values[rng.random(n) < 0.8] = 0.0
    return values


@st.composite
def schemas(draw, max_dims: int = 4) -> Schema:
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n_dims = draw(st.integers(1, max_dims))
    sparse = draw(st.booleans())
    n_fact = draw(st.integers(1, 40))
    tables: dict[str, pa.Table] = {}
    casts: dict[str, dict[str, str]] = {}
    select: list[str] = []
    joins: list[str] = []
    where: list[str] = []

    # Shape first: each dimension hangs off the fact table (star) or an earlier dimension (snowflake).
    parents = [draw(st.integers(-1, i - 1)) for i in range(n_dims)]
    sizes = [draw(st.integers(1, 12)) for _ in range(n_dims)]
    dims = []
    for i in range(n_dims):
        name, rows = f"d{i}", sizes[i]
        composite = draw(st.booleans())
        many = draw(st.booleans())  # M:N: dimension keys repeat
        ids = rng.integers(0, max(1, rows // 2), rows) if many else rng.permutation(rows)
        cols = {"id": ids.astype(float)}
        if composite:
            cols["id2"] = rng.integers(0, 2, rows).astype(float)
        for child, parent in enumerate(parents):
            if parent == i:
                cols[f"up{child}"] = rng.integers(0, sizes[child] + 1, rows).astype(float)
        width = draw(st.integers(1, 3))
        types = {}
        for c in range(width):
            type_ = draw(st.sampled_from(TYPES))
            cols[f"v{c}"] = _values(draw, rng, rows, type_, sparse)
            types[f"v{c}"] = type_
        parent = parents[i]
        kinds = ["JOIN", "LEFT JOIN", "LEFT JOIN", "FULL JOIN"] if i == 0 else ["JOIN", "LEFT JOIN"]
        how = draw(st.sampled_from(kinds))
        if parent >= 0 and how == "FULL JOIN":
            how = "JOIN"
        dims.append((name, rows, composite, parent, how, width))
        tables[name] = pa.table(cols)
        casts[name] = {**types, **{c: "BIGINT" for c in cols if c not in types}}

    fact_cols: dict[str, np.ndarray] = {}
    fact_types: dict[str, str] = {}
    for c in range(draw(st.integers(1, 3))):
        type_ = draw(st.sampled_from(TYPES))
        fact_cols[f"x{c}"] = _values(draw, rng, n_fact, type_, sparse)
        fact_types[f"x{c}"] = type_
    fact_cols["y"] = rng.normal(size=n_fact).round(3)
    fact_types["y"] = "DOUBLE"
    for name, rows, composite, parent, how, width in dims:
        if parent < 0:
            key = rng.integers(0, rows + 2, n_fact).astype(float)  # some keys dangle
            key[rng.random(n_fact) < 0.1] = np.nan  # NULL keys
            fact_cols[f"{name}_id"] = key
            fact_types[f"{name}_id"] = "BIGINT"
            on = f"f.{name}_id = {name}.id"
            if composite:
                fact_cols[f"{name}_id2"] = rng.integers(0, 2, n_fact).astype(float)
                fact_types[f"{name}_id2"] = "BIGINT"
                on += f" AND f.{name}_id2 = {name}.id2"
        else:
            on = f"d{parent}.up{name[1:]} = {name}.id"
        joins.append(f"{how} {name} ON {on}")
        for c in range(width):
            select.append(f"{name}.v{c} AS {name}_v{c}")
        if how == "FULL JOIN":
            select.append(f"COALESCE(f.{name}_id, {name}.id) AS {name}_key")
    tables["f"] = pa.table({k: pa.array(v, from_pandas=True) for k, v in fact_cols.items()})
    casts["f"] = fact_types
    select = [f"f.x{c}" for c in range(len(fact_types) - 1 - sum(1 for k in fact_types if "_id" in k))] + select
    select.append("f.y")
    if draw(st.booleans()):
        where.append("CAST(f.x0 AS DOUBLE) > -2")  # pushed into the fact scan
    if draw(st.booleans()):
        where.append("CAST(f.x0 AS DOUBLE) + d0.id >= -1")  # spans two sources: stays in the join
    query = f"SELECT {', '.join(select)} FROM f {' '.join(joins)}"
    if where:
        query += " WHERE " + " AND ".join(where)
    query += " ORDER BY ALL"
    return Schema(tables, casts, query, "y", sparse)
