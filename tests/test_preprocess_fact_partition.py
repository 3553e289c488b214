"""One builder of a fact's row partitions (``preprocess.PartitionBuilder``), for a stream and a cluster's
workers alike: a partition's rows, encoded over the shared dimension blocks, are the in-memory encoding's."""

from __future__ import annotations

import numpy as np

import ilargi_db
from ilargi_db.linalg import NormalizedMatrix
from ilargi_db.metadata.stream import open_stream
from ilargi_db.plan import build_join_graph, categorical_flags
from ilargi_db.preprocess import FeatureEncoder, PartitionBuilder

QUERY = "SELECT f.x, f.kind, d.z, d.grp, f.y FROM fact f JOIN dim d ON f.k = d.k ORDER BY f.id"


def star():
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE fact AS SELECT range AS id, range % 9 AS k, CASE WHEN range % 5 = 0 THEN NULL ELSE sin(range) "
        "END AS x, ['u', 'v', NULL][range % 3 + 1] AS kind, cos(range) AS y FROM range(300)"
    )
    con.execute(
        "CREATE TABLE dim AS SELECT range AS k, range * 0.5 AS z, ['a', 'b'][range % 2 + 1] AS grp FROM range(9)"
    )
    return con


def test_a_streams_partitions_are_the_rows_of_the_in_memory_encoding():
    con = star()
    graph = build_join_graph(con, QUERY, "y")
    encoder = FeatureEncoder(categorical_flags(graph))
    categorical = frozenset(j for j, c in enumerate(encoder.categorical) if c)
    stream = open_stream(con, graph, categorical, rows_per_partition=70)
    try:
        encoder.fit_query(con, graph)
        builder = PartitionBuilder.of(graph, stream.fact, encoder, *stream.dimension_blocks(categorical))
        parts = [stream.read(k) for k in range(len(stream.bounds))]
        built = [builder.build(part) for part in parts]
        # What a stream spills between the two halves is enough to build the partition again.
        again = [builder.matrix(builder.encode(part)) for part in parts]
    finally:
        stream.close()
    assert len(built) == 5 and [p.shape[0] for p in built] == stream.sizes
    table = con.sql(QUERY).to_arrow_table()
    whole = NormalizedMatrix(encoder.transform_table(table, graph.feature_names), n_rows=table.num_rows)
    np.testing.assert_array_equal(np.vstack([p.materialize() for p in built]), whole.materialize())
    np.testing.assert_array_equal(np.vstack([p.materialize() for p in again]), whole.materialize())
