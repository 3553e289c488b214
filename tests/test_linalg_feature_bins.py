"""A feature's bins, by one set of rules: NumPy's edges are DuckDB's ``quantile_disc`` over the same rows.

The SQL path bins a dimension's values weighted by the training rows that take them; an estimator given an
array bins its rows as they are. Both must give the edges DuckDB computes over the joined rows.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ilargi_db.linalg.feature_bins import numeric_edges, quantile_probabilities, weighted_numeric_edges


def duckdb_edges(con: duckdb.DuckDBPyConnection, relation: str, max_bins: int) -> list[float]:
    """The edges by the rule, computed by DuckDB: every distinct value but the largest when few, else the
    distinct discrete quantiles at k / max_bins."""
    (distinct,) = con.execute(f"SELECT count(DISTINCT v) FROM {relation}").fetchone()
    if distinct == 0:
        return []
    if distinct <= max_bins:
        (values,) = con.execute(f"SELECT list(DISTINCT v ORDER BY v) FILTER (v IS NOT NULL) FROM {relation}").fetchone()
        return values[:-1]
    # k / max_bins as DOUBLE, as quantile_probabilities computes them (a literal 0.8333... would be a DECIMAL,
    # whose product with the row count rounds otherwise)
    probabilities = ", ".join(f"{k}::DOUBLE / {max_bins}" for k in range(1, max_bins))
    (edges,) = con.execute(f"SELECT quantile_disc(v, [{probabilities}]) FROM {relation}").fetchone()
    assert len(edges) == len(quantile_probabilities(max_bins))
    return sorted(set(edges))


values = st.lists(
    st.one_of(st.integers(-50, 50).map(float), st.floats(-1e6, 1e6, allow_nan=False), st.just(float("nan"))),
    min_size=0,
    max_size=400,
)


@settings(max_examples=60, deadline=None)
@given(values=values, max_bins=st.integers(2, 40))
@example(values=[0.0] * 6 + [1.0, -1.0, 2.0, -2.0, 3.0, -3.0], max_bins=6)  # 12 x 5/6 rounds to 10.0 exactly
def test_the_edges_of_an_arrays_rows_are_duckdbs_quantiles(values, max_bins):
    con = duckdb.connect()
    column = np.array(values, dtype=np.float64)
    con.register("rows_", pa.table({"v": pa.array(column, type=pa.float64(), from_pandas=True)}))
    assert numeric_edges(column, max_bins).tolist() == duckdb_edges(con, "rows_", max_bins)


@settings(max_examples=60, deadline=None)
@given(
    dimension=st.lists(st.one_of(st.integers(-20, 20).map(float), st.just(float("nan"))), min_size=1, max_size=60),
    keys=st.lists(st.integers(0, 59), min_size=0, max_size=500),
    max_bins=st.integers(2, 30),
)
def test_a_dimensions_weighted_edges_are_duckdbs_quantiles_over_the_joined_rows(dimension, keys, max_bins):
    con = duckdb.connect()
    values = np.array(dimension, dtype=np.float64)
    keys = [k for k in keys if k < len(values)]
    weights = np.bincount(np.array(keys, dtype=np.int64), minlength=len(values))
    dim = {"k": pa.array(range(len(values)), type=pa.int64()), "v": pa.array(values, pa.float64(), from_pandas=True)}
    con.register("dim", pa.table(dim))
    con.register("fact", pa.table({"k": pa.array(keys, type=pa.int64())}))
    joined = "(SELECT d.v FROM fact f JOIN dim d USING (k))"
    assert weighted_numeric_edges(values, weights, max_bins).tolist() == duckdb_edges(con, joined, max_bins)
