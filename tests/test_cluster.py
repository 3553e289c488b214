"""Training on a Dask cluster (two worker processes here) gives the single-machine model."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time

import duckdb
import numpy as np
import pytest

import ilargi_db
from ilargi_db.cluster import CONNECT_SECONDS
from ilargi_db.errors import IlargiError

distributed = pytest.importorskip("dask.distributed")


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def parquet(tmp_path_factory):
    where = tmp_path_factory.mktemp("fact")
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE fact AS SELECT range AS id, range % 400 AS k, sin(range) AS x1, cos(range * 0.7) AS x2, "
        "['u', 'v', 'w'][range % 3 + 1] AS kind, 3 * sin(range) + (range % 400) * 0.01 AS y FROM range(30000)"
    )
    con.execute(
        "CREATE TABLE dim AS SELECT range AS k, range * 0.01 AS z1, ['a', 'b', 'c'][range % 3 + 1] AS grp "
        "FROM range(400)"
    )
    for i in range(4):
        con.execute(f"COPY (SELECT * FROM fact WHERE id % 4 = {i}) TO '{where}/part{i}.parquet' (FORMAT parquet)")
    query = (
        f"SELECT f.x1, f.x2, f.kind, d.z1, d.grp, f.y FROM read_parquet('{where}/*.parquet') AS f "
        "JOIN dim d ON f.k = d.k"
    )
    return con, query


LOCAL = dict(backend="numpy", reuse=False, strategy="factorized")


def test_linear_regression_on_two_workers_equals_one_machine(client, parquet):
    con, query = parquet
    local = ilargi_db.train(con, query, "y", **LOCAL)
    remote = ilargi_db.train(con, query, "y", backend="numpy", reuse=False, cluster=client)
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-9, atol=1e-12)
    assert remote.intercept_ == pytest.approx(local.intercept_, rel=1e-9)
    assert "Distributed" in remote.decision_ and remote.n_rows_ == local.n_rows_ == 30_000


def test_k_means_gives_the_same_labels_from_the_same_start(client, parquet):
    con, query = parquet
    features = query.replace(", f.y FROM", " FROM")
    d = ilargi_db.train(con, features, algorithm="kmeans", n_clusters=3, max_iter=1, **LOCAL).cluster_centers_.shape[1]
    start = dict(algorithm="kmeans", n_clusters=3, n_init=1, init=np.random.default_rng(0).random((3, d)))
    local = ilargi_db.train(con, features, **start, **LOCAL)
    remote = ilargi_db.train(con, features, backend="numpy", reuse=False, cluster=client, **start)
    np.testing.assert_allclose(remote.cluster_centers_, local.cluster_centers_, rtol=1e-9, atol=1e-12)
    ordered = features + " ORDER BY f.id"
    np.testing.assert_array_equal(
        ilargi_db.predict(con, remote, ordered), ilargi_db.predict(con, local, ordered)
    )  # every row in the same cluster


def test_logistic_regression_and_nmf_match_too(client, parquet):
    con, query = parquet
    late = query.replace("f.y FROM", "f.y > 0.5 AS late FROM")
    local = ilargi_db.train(con, late, "late", "logistic_regression", **LOCAL)
    remote = ilargi_db.train(con, late, "late", "logistic_regression", backend="numpy", reuse=False, cluster=client)
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-7, atol=1e-9)
    positive = query.replace("f.x1, f.x2", "abs(f.x1) AS x1").replace(", f.y FROM", " FROM")
    nmf = dict(algorithm="gnmf", n_components=2, random_state=0, max_iter=10)
    local = ilargi_db.train(con, positive, **nmf, **LOCAL)
    remote = ilargi_db.train(con, positive, backend="numpy", reuse=False, cluster=client, **nmf)
    np.testing.assert_allclose(remote.components_, local.components_, rtol=1e-7, atol=1e-9)


def test_an_iteration_ships_parameters_and_sums_never_a_row_vector(client, parquet, monkeypatch):
    """The solvers' n-length vectors (target, scores, residuals) stay on the workers: each task of an
    iteration carries d floats out and brings a loss and d floats back."""
    from ilargi_db.cluster import RemotePartitions, cluster_data
    from ilargi_db.models import KMeans, LinearRegression, LogisticRegression
    from ilargi_db.plan import build_join_graph, categorical_flags
    from ilargi_db.preprocess import FeatureEncoder

    con, query = parquet
    late = query.replace("f.y FROM", "f.y > 0.5 AS late FROM")
    graph = build_join_graph(con, late, "late")
    X, y, _ = cluster_data(con, graph, FeatureEncoder(categorical_flags(graph)), client)
    n, d = X.shape
    largest = []

    def sizes(value):
        if isinstance(value, np.ndarray):
            return [value.size]
        if isinstance(value, (tuple, list)):
            return [size for item in value for size in sizes(item)]
        return [0]

    real = RemotePartitions.each

    def each(self, fn, *per_partition):
        largest.append(max(sizes(per_partition)))
        found = real(self, fn, *per_partition)
        largest.append(max(sizes(found)))
        return found

    monkeypatch.setattr(RemotePartitions, "each", each)

    def row_vectors_shipped(model) -> int:
        largest.clear()
        model.fit(X, y) if not isinstance(model, KMeans) else model.fit(X)
        assert len(largest) > 4
        return sum(size > 3 * d for size in largest)

    assert 3 * d < n // 100
    for few, more in (
        (LogisticRegression(tol=0, max_iter=2), LogisticRegression(tol=0, max_iter=6)),
        (LinearRegression(solver="cg", tol=0, max_iter=2), LinearRegression(solver="cg", tol=0, max_iter=6)),
    ):
        assert row_vectors_shipped(few) == row_vectors_shipped(more) == 0, type(few).__name__
    # k-means ships row vectors only to seed (row norms) and for the final labels, never per iteration.
    kmeans = dict(n_clusters=3, init="random", random_state=0, tol=0)
    assert row_vectors_shipped(KMeans(max_iter=2, **kmeans)) == row_vectors_shipped(KMeans(max_iter=6, **kmeans))
    # Where each partition lives is asked once per matrix, not on every pass.
    asked = []
    who_has = client.who_has
    monkeypatch.setattr(client, "who_has", lambda *a, **k: asked.append(1) or who_has(*a, **k))
    LogisticRegression(tol=0, max_iter=2).fit(X, y)
    few = len(asked)
    LogisticRegression(tol=0, max_iter=6).fit(X, y)
    assert len(asked) == 2 * few <= 2  # keeping the target's slices: set-up, the same for 2 or 6 iterations
    monkeypatch.setattr(client, "who_has", who_has)
    # Partitions not computed yet (an element-wise map, as standardizing makes) stay beside their data: not
    # gathered into one task on one worker.
    squared = X**2
    np.testing.assert_allclose(squared.colsums(), (X**2).colsums())

    def workers(futures):
        return {w for where in client.who_has(futures).values() for w in where}

    assert workers(squared.partitions.futures) == workers(X.partitions.futures)


def test_a_worker_lost_mid_training_is_survived(client, parquet, monkeypatch):
    """Kill a worker process after the partitions are resident: Dask reads its files again elsewhere."""
    from ilargi_db.cluster import RemotePartitions, cluster_data
    from ilargi_db.models import LinearRegression
    from ilargi_db.plan import build_join_graph, categorical_flags
    from ilargi_db.preprocess import FeatureEncoder

    con, query = parquet
    graph = build_join_graph(con, query, "y")
    X, y, unlabelled = cluster_data(con, graph, FeatureEncoder(categorical_flags(graph)), client)
    assert X.n_partitions == 4 and unlabelled == 0
    assert isinstance(X.partitions, RemotePartitions)  # held by the workers, not gathered
    calls = []
    real = RemotePartitions.each
    monkeypatch.setattr(RemotePartitions, "each", lambda self, fn, *a: calls.append(fn) or real(self, fn, *a))
    first = LinearRegression(solver="cg", tol=1e-12, max_iter=200).fit(X, y)
    assert len(calls) >= 5  # every pass ran on the workers
    victim = next(iter(client.scheduler_info()["workers"]))
    with contextlib.suppress(Exception):  # the call cannot answer: the process dies (its nanny starts a new one)
        client.run(os._exit, 1, workers=[victim])
    again = LinearRegression(solver="cg", tol=1e-12, max_iter=200).fit(X, y)
    np.testing.assert_allclose(again.coef_, first.coef_, rtol=1e-9)
    client.wait_for_workers(2, timeout=60)


def test_a_partition_is_a_plain_matrix_and_its_target_travels_beside_it(client, parquet):
    """A worker's partition carries only what a NormalizedMatrix declares; its target and the rows a NULL target
    left out come back apart (``PartitionLabels``), added up by the driver."""
    from ilargi_db.cluster import cluster_data
    from ilargi_db.plan import build_join_graph, categorical_flags
    from ilargi_db.preprocess import FeatureEncoder

    con, query = parquet
    nulls = query.replace("f.y FROM", "CASE WHEN f.x1 > 0.9 THEN NULL ELSE f.y END AS y FROM")
    graph = build_join_graph(con, nulls, "y")
    X, y, unlabelled = cluster_data(con, graph, FeatureEncoder(categorical_flags(graph)), client)
    part = X.partitions[0]
    assert not hasattr(part, "target") and not hasattr(part, "unlabelled")
    (expected,) = con.execute(f"SELECT count(*) FILTER (WHERE y IS NULL) FROM ({nulls})").fetchone()
    assert unlabelled == expected > 0 and y.shape == (X.shape[0],) == (30_000 - expected,)
    assert not np.isnan(y).any()


def test_a_fact_that_is_not_parquet_is_refused(client, parquet):
    con, _ = parquet
    query = "SELECT f.x1, d.z1, f.y FROM fact f JOIN dim d ON f.k = d.k"
    with pytest.raises(IlargiError, match="first FROM source must be read_parquet"):
        ilargi_db.train(con, query, "y", reuse=False, cluster=client)


def test_an_unreachable_scheduler_is_a_clear_error(parquet):
    con, query = parquet
    with pytest.raises(IlargiError, match="scheduler at 'tcp://127.0.0.1:9'"):
        ilargi_db.train(con, query, "y", reuse=False, cluster="tcp://127.0.0.1:9")
    with pytest.raises(IlargiError, match="cluster must be a dask.distributed.Client or a scheduler address"):
        ilargi_db.train(con, query, "y", reuse=False, cluster=42)


def test_the_sql_option_names_a_cluster_the_host_registered(client, parquet):
    con, query = parquet
    ilargi_db.register_cluster("lab", client)
    try:
        options = json.dumps({"cluster": "lab", "strategy": "factorized"})
        summary = json.loads(
            con.sql(
                f"SELECT ilargi_train('on_cluster', 'linear_regression', $${query}$$, 'y', options := '{options}')"
            ).fetchall()[0][0]
        )
        assert "Distributed" in summary["why"]
    finally:
        ilargi_db.unregister_cluster("lab")
    assert "lab" not in ilargi_db.registered_clusters()


@contextlib.contextmanager
def listener(answer: bytes | None):
    """A local TCP listener that answers every connection with ``answer`` (None: says nothing, ever)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve():
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(conn)
            if answer is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        server.close()


def test_a_sql_string_never_chooses_where_the_process_connects(parquet):
    con, query = parquet
    with listener(None) as (address, accepted):
        options = json.dumps({"cluster": address})
        with pytest.raises(duckdb.Error, match="an address cannot be given here.*register_cluster"):
            sql = f"SELECT ilargi_train('m', 'linear_regression', $${query}$$, 'y', options := '{options}')"
            con.sql(sql).fetchall()
        time.sleep(0.3)
        assert accepted == []  # nothing connected, so nothing could be read back, let alone unpickled


def test_a_sandboxed_connection_reaches_no_cluster_even_a_registered_one(client, tmp_path):
    con = ilargi_db.connect()
    con.execute("CREATE TABLE t AS SELECT range AS x, 2.0 * range AS y FROM range(10)")
    ilargi_db.register_cluster("lab", client)
    try:
        con.execute("SET enable_external_access = false")
        options = json.dumps({"cluster": "lab"})
        with pytest.raises(duckdb.Error, match="enable_external_access = false"):
            con.sql(
                f"SELECT ilargi_train('m', 'linear_regression', 'SELECT x, y FROM t', 'y', options := '{options}')"
            ).fetchall()
    finally:
        ilargi_db.unregister_cluster("lab")


@pytest.mark.parametrize("answer", [None, b"\xff" * 64, b"\x00\x00\x00\x00\xff\xff\xff\x7f" * 8])
def test_a_scheduler_that_is_silent_or_speaks_garbage_is_a_clear_error_within_the_deadline(parquet, answer):
    con, query = parquet
    with listener(answer) as (address, _):
        began = time.monotonic()
        with pytest.raises(IlargiError, match=f"scheduler at '{address}'"):
            ilargi_db.train(con, query, "y", reuse=False, cluster=address)
        assert time.monotonic() - began < CONNECT_SECONDS + 3


def test_interrupt_training_stops_a_connection_that_hangs(parquet):
    con, query = parquet
    with listener(None) as (address, _):
        outcome = {}

        def run():
            try:
                ilargi_db.train(con.cursor(), query, "y", reuse=False, cluster=address)
            except BaseException as err:  # noqa: BLE001 - what stopped it is the test's answer
                outcome["error"] = err

        worker = threading.Thread(target=run)
        began = time.monotonic()
        worker.start()
        time.sleep(2.0)  # planned by now, and waiting on the listener
        ilargi_db.interrupt_training()
        worker.join(timeout=CONNECT_SECONDS)
        assert isinstance(outcome.get("error"), ilargi_db.TrainingInterrupted)
        assert time.monotonic() - began < CONNECT_SECONDS  # before the deadline: the interruption stopped it


def test_workers_running_another_build_of_ilargi_db_are_refused(client, parquet):
    con, query = parquet

    def claim(version):
        ilargi_db.__version__ = version

    client.run(claim, "0.0.1")
    try:
        with pytest.raises(IlargiError, match="run another build of ilargi_db.*0.0.1"):
            ilargi_db.train(con, query, "y", reuse=False, cluster=client)
    finally:
        client.run(claim, ilargi_db.__version__)


def test_null_targets_duplicate_features_and_random_filters(client, parquet):
    con, query = parquet
    nulls = query.replace("f.y FROM", "CASE WHEN f.x1 > 0.9 THEN NULL ELSE f.y END AS y FROM")
    local = ilargi_db.train(con, nulls, "y", **LOCAL)
    remote = ilargi_db.train(con, nulls, "y", backend="numpy", reuse=False, cluster=client)
    assert remote.unlabelled_rows_ == local.unlabelled_rows_ > 0
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-9, atol=1e-8)  # some are ~1e-9: noise
    twice = query.replace("f.x1, f.x2", "f.x1, f.x1 AS again, f.x2")
    local = ilargi_db.train(con, twice, "y", alpha=1.0, **LOCAL)
    remote = ilargi_db.train(con, twice, "y", alpha=1.0, backend="numpy", reuse=False, cluster=client)
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-9, atol=1e-8)
    sampled = query + " WHERE random() < 0.5"
    with pytest.raises(IlargiError, match="reads the data more than once.*random"):
        ilargi_db.train(con, sampled, "y", reuse=False, cluster=client)


def test_a_single_parquet_source_trains_on_the_workers_too(client, parquet):
    con, query = parquet
    single = query.replace(", d.z1, d.grp", "").replace(" JOIN dim d ON f.k = d.k", "")  # no dimension
    local = ilargi_db.train(con, single, "y", **LOCAL)
    remote = ilargi_db.train(con, single, "y", backend="numpy", reuse=False, cluster=client)
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-9, atol=1e-12)
