"""A long job stops on Ctrl-C or interrupt_training() wherever it runs, stores nothing, and the connection works."""

from __future__ import annotations

import _thread
import threading
import time

import duckdb
import pytest

import ilargi_db
from ilargi_db import TrainingInterrupted, cli, interruption
from ilargi_db.read_snapshot import in_transaction

POINTS = "SELECT p.a, p.b, p.c FROM points p"
# Jobs that would run for many seconds: a stop must cut them short.
LONG = {
    "kmeans": {"n_clusters": 8, "n_init": 5000, "random_state": 0},
    "gnmf": {"n_components": 3, "max_iter": 20000, "tol": 0.0},
}
PROMPT = 3.0  # seconds from the request to stop to the job being gone (the jobs above take 15 s or more)


@pytest.fixture(scope="module", autouse=True)
def kernels_loaded():
    """The kernels compiled or loaded before any timing: the promptness measured is the stopping's, not the
    first use's (a fresh install compiles them once, uninterruptibly: `ilargi warmup` does it ahead)."""
    warm = ilargi_db.connect()
    warm.execute("CREATE TABLE points AS SELECT random() AS a, random() AS b, random() AS c FROM range(50)")
    for algorithm in LONG:
        ilargi_db.train(warm, POINTS, algorithm=algorithm, reuse=False, **{**LONG[algorithm], "max_iter": 2})
    warm.close()


@pytest.fixture
def con():
    con = ilargi_db.connect()
    con.execute(
        "CREATE TABLE points AS SELECT range AS id, random() AS a, random() AS b, random() AS c FROM range(20000)"
    )
    yield con
    con.close()


def when_running(action) -> threading.Thread:
    """Call ``action`` on another thread once an ilargi_db job has been running for a moment."""

    def wait_then_act() -> None:
        deadline = time.monotonic() + 30
        while not interruption._JOBS and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.2)  # into the training loop
        action()

    thread = threading.Thread(target=wait_then_act)
    thread.start()
    return thread


def sql_train(algorithm: str) -> str:
    options = ", ".join(f'"{k}": {v}' for k, v in LONG[algorithm].items())
    return f"SELECT ilargi_train('m', '{algorithm}', '{POINTS}', NULL, '{{{options}}}')"


def assert_nothing_stored(con: duckdb.DuckDBPyConnection) -> None:
    assert con.execute("SELECT count(*) FROM ilargi.models").fetchall() == [(0,)]
    assert con.execute("SELECT count(*) FROM duckdb_functions() WHERE function_name LIKE 'm_predict%'").fetchall() == [
        (0,)
    ]
    assert not in_transaction(con)
    assert con.execute("SELECT count(*) FROM points").fetchall() == [(20000,)]


@pytest.mark.parametrize("algorithm", ["kmeans", "gnmf"])
def test_ctrl_c_stops_a_python_training_promptly(con, algorithm):
    thread = when_running(_thread.interrupt_main)
    start = time.perf_counter()
    with pytest.raises(TrainingInterrupted, match="stopped before storing anything"):
        ilargi_db.train(con, POINTS, algorithm=algorithm, **LONG[algorithm])
    assert time.perf_counter() - start < PROMPT
    thread.join()
    assert not in_transaction(con)
    assert ilargi_db.train(con, POINTS, algorithm="kmeans", n_clusters=2, random_state=0).n_rows_ == 20000


def test_interrupt_training_stops_a_training_on_another_thread(con):
    failures: list[BaseException] = []

    def run() -> None:
        try:
            ilargi_db.train(con, POINTS, algorithm="gnmf", **LONG["gnmf"])
        except BaseException as err:  # the thread's outcome, checked below
            failures.append(err)

    worker = threading.Thread(target=run)
    worker.start()
    when_running(lambda: None).join()
    start = time.perf_counter()
    assert ilargi_db.interrupt_training() == 1
    worker.join()
    assert time.perf_counter() - start < PROMPT
    assert len(failures) == 1 and isinstance(failures[0], TrainingInterrupted)
    assert ilargi_db.interrupt_training() == 0  # nothing runs any more


def test_an_interruption_while_reading_rolls_the_snapshot_back(con, monkeypatch):
    import ilargi_db.metadata
    from ilargi_db.interruption import check_interrupted

    join = ilargi_db.metadata.compute_indicators

    def stop_then_join(*args, **kwargs):
        assert in_transaction(con)  # reading in the snapshot
        ilargi_db.interrupt_training()
        check_interrupted()
        return join(*args, **kwargs)

    monkeypatch.setattr(ilargi_db.metadata, "compute_indicators", stop_then_join)
    with pytest.raises(TrainingInterrupted):
        # reuse off: an earlier test's stored row indices (the same 20,000 rows of one table) would skip the join
        ilargi_db.train(con, POINTS, algorithm="kmeans", strategy="factorized", n_clusters=2, reuse=False)
    assert not in_transaction(con)


@pytest.mark.parametrize("algorithm", ["kmeans", "gnmf"])
def test_ctrl_c_stops_ilargi_train_and_stores_nothing(con, algorithm):
    con.execute("SET threads = 1")  # DuckDB then runs the function on the calling (main) thread
    thread = when_running(_thread.interrupt_main)
    start = time.perf_counter()
    with pytest.raises(duckdb.Error, match="TrainingInterrupted: interrupted: ilargi_db stopped"):
        con.execute(sql_train(algorithm))
    assert time.perf_counter() - start < PROMPT
    thread.join()
    assert_nothing_stored(con)


def test_ctrl_c_stops_ilargi_train_on_a_thread_ctrl_c_does_not_reach(con):
    # DuckDB may run a Python function on one of its own threads; Python delivers Ctrl-C to the main thread only.
    # Here the statement runs on another thread, so only the SIGINT handler install() chains can stop it.
    cursor = ilargi_db.install(con.cursor())  # the functions' TEMP macros are per connection
    failures: list[BaseException] = []

    def run() -> None:
        try:
            cursor.execute(sql_train("gnmf"))
        except BaseException as err:  # the thread's outcome, checked below
            failures.append(err)

    worker = threading.Thread(target=run)
    worker.start()
    when_running(lambda: None).join()
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):  # the main thread's Ctrl-C, as the previous handler raises it
        _thread.interrupt_main()
        while worker.is_alive():
            worker.join(0.01)
    worker.join()
    assert time.perf_counter() - start < PROMPT
    assert len(failures) == 1 and "TrainingInterrupted" in str(failures[0])
    cursor.close()
    assert_nothing_stored(con)


def test_interrupt_training_stops_ilargi_train_and_stores_nothing(con):
    thread = when_running(ilargi_db.interrupt_training)
    start = time.perf_counter()
    with pytest.raises(duckdb.Error, match="TrainingInterrupted"):
        con.execute(sql_train("kmeans"))
    assert time.perf_counter() - start < PROMPT
    thread.join()
    assert_nothing_stored(con)


def test_ctrl_c_in_the_shell_stops_the_statement_not_the_shell(con, monkeypatch, capsys):
    lines = iter([sql_train("gnmf") + ";", "SELECT count(*) FROM ilargi.models;", ".quit"])
    interrupter: list[threading.Thread] = []

    def read(prompt: str = "") -> str:
        line = next(lines)
        if not interrupter:
            interrupter.append(when_running(_thread.interrupt_main))
        return line

    monkeypatch.setattr("builtins.input", read)
    start = time.perf_counter()
    cli.shell(con)
    assert time.perf_counter() - start < PROMPT
    interrupter[0].join()
    captured = capsys.readouterr()
    assert "nterrupted" in captured.err and captured.out.rstrip().splitlines()[-2].split() == ["│", "0", "│"]
    assert_nothing_stored(con)
