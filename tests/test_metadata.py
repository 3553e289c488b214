"""DI metadata: T = sum_k I_k S_k M_k^T, compressed indicators, and the Arrow hand-off."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from ilargi_db.metadata import extract_metadata
from ilargi_db.metadata.arrow_blocks import arrow_to_block, column_to_numpy
from ilargi_db.plan import build_join_graph
from tests.oracle import assert_close, materialized


def _rebuild(meta):
    """T from the metadata with explicit sparse I_k and M_k, empty rows filled."""
    T = np.zeros((meta.n_rows, meta.n_features))
    for k, block in enumerate(meta.blocks):
        T += meta.indicator_matrix(k) @ block.data @ meta.mapping_matrix(k).T
        T[np.ix_(meta.empty_rows(k), block.columns)] += np.nan_to_num(block.fill)  # NULL on an empty row: 0
    return T


def test_formula_holds_with_gaps_masks_and_fills(con):
    query = (
        "SELECT COALESCE(f.hour, w.hour) AS hour, f.dep_delay, w.temp, COALESCE(d.lat, 5) AS dlat, f.arr_delay "
        "FROM flights f FULL JOIN weather w ON f.origin = w.origin AND f.hour = w.hour "
        "LEFT JOIN airports d ON f.dest = d.faa ORDER BY ALL"
    )
    meta = extract_metadata(con, build_join_graph(con, query, "arr_delay"))
    T, y = materialized(con, query, "arr_delay")
    assert_close(_rebuild(meta), T)
    assert_close(meta.target, y)
    # Two blocks feed "hour", and no output row takes a value from both.
    hour_blocks = [k for k, b in enumerate(meta.blocks) if 0 in b.columns]
    assert len(hour_blocks) == 2
    taken = sum((meta.blocks[k].indicator >= 0).astype(int) for k in hour_blocks)
    assert taken.max() == 1


def test_indicators_are_compressed_row_indexes(con):
    query = "SELECT f.dep_delay, d.lat FROM flights f LEFT JOIN airports d ON f.dest = d.faa ORDER BY f.id"
    meta = extract_metadata(con, build_join_graph(con, query))
    dims = meta.indicators["d"]
    assert dims.dtype in (np.int32, np.int64)  # compressed row indexes, -1 where empty
    # XXX (no such airport) and NULL dest are empty rows; the rest point into the airports scan.
    np.testing.assert_array_equal(dims < 0, [False, False, False, True, False, True])
    assert meta.source_rows == {"f": 6, "d": 5}


def test_pushed_filters_shrink_the_scan(con):
    query = "SELECT f.dep_delay, o.lat FROM flights f JOIN airports o ON f.origin = o.faa WHERE o.alt > 20"
    graph = build_join_graph(con, query)
    assert [p.pushed for p in graph.filters] == [True]
    meta = extract_metadata(con, graph)
    assert meta.source_rows["o"] == 3  # LGA, LAX, ORD


def test_null_free_arrow_columns_become_views():
    column = pa.chunked_array([pa.array(np.arange(5, dtype=np.float64))])
    view = column_to_numpy(column)
    assert not view.flags.owndata  # a view on the Arrow buffer, no copy
    table = pa.table({"a": pa.chunked_array([[1.0, 2.0], [3.0]]), "b": pa.array([4.0, None, 6.0])})
    block = arrow_to_block(table, ["a", "b"])
    assert block.flags.f_contiguous
    np.testing.assert_array_equal(block, [[1.0, 4.0], [2.0, np.nan], [3.0, 6.0]])


def test_categorical_metadata_counts_its_source_rows():
    import pyarrow as pa

    from ilargi_db.metadata.di_metadata import CategoricalMetadata

    meta = CategoricalMetadata("d", 0, pa.array(["a", "b", None]), np.array([0, 1, 1, 2]), None)
    assert meta.n_source_rows == 3  # it read a field the class does not have (issue 12)


def test_a_fact_of_many_row_groups_comes_out_in_rowid_order_on_every_read():
    # DuckDB's threads join row groups (122,880 rows each) in any order; the read puts the fact's rows back in
    # rowid order, so every sum over the rows adds them in the same order (a rerun's model bit for bit).
    con = duckdb.connect()
    n = 400_000
    con.execute(
        f"CREATE TABLE f AS SELECT range AS id, range % 50 AS k, sin(range) AS x, range % 3 AS c FROM range({n})"
    )
    con.execute("CREATE TABLE d AS SELECT range AS k, cos(range) AS z FROM range(50)")
    query = "SELECT f.x, CAST(f.c AS VARCHAR) AS c, d.z, f.id * 1.0 AS y FROM f JOIN d ON f.k = d.k"
    for _ in range(3):
        meta = extract_metadata(con, build_join_graph(con, query, "y"), categorical=frozenset({1}))
        np.testing.assert_array_equal(meta.row_ids["f"], np.arange(n))
        np.testing.assert_array_equal(meta.target, np.arange(n))
        (fact,) = [b for b in meta.blocks if b.source == "f"]
        np.testing.assert_array_equal(fact.data[:, 0], np.sin(np.arange(n)))
        (codes,) = meta.categoricals
        assert codes.values.to_pylist()[:6] == ["0", "1", "2", "0", "1", "2"]
        dim = meta.indicators["d"]
        (z,) = [b for b in meta.blocks if b.source == "d"]
        np.testing.assert_allclose(z.data[dim, 0], np.cos(np.arange(n) % 50))
