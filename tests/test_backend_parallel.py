"""Kernel calls run on as many threads as there are free cores, each task once, whatever the threads."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from ilargi_db.backend.parallel import free_cores, kernel_threads, other_running_tasks, pieces, run, threads_for


def test_free_cores_follow_the_tasks_running_beside_the_caller():
    assert free_cores(2, read_running=lambda: 1.0) == 2  # the caller alone
    assert free_cores(2, read_running=lambda: 2.0) == 1  # one busy process beside it
    assert free_cores(2, read_running=lambda: 9.0) == 1  # never fewer than the caller's own
    assert free_cores(8, read_running=lambda: 3.0) == 6
    assert free_cores(4, read_running=lambda: None) == 4  # no reading (not Linux): every core counts as free


def test_thread_counts_follow_the_free_cores_and_the_work():
    assert threads_for(8, free=2) == 2
    assert threads_for(8, free=1) == 1  # a core taken: the caller alone, nothing waits on it
    assert threads_for(1, free=4) == 1  # one task: one thread
    assert threads_for(20, min_tasks=16, free=2) == 1  # too little work for a second thread
    assert threads_for(40, min_tasks=16, free=4) == 2
    with kernel_threads(3):  # a fixed count, whatever the cores
        assert threads_for(8, free=1) == 3
        assert threads_for(2, free=1) == 2
    assert threads_for(8, free=1) == 1
    with pytest.raises(ValueError, match="at least 1 thread"):
        with kernel_threads(0):
            pass


def test_other_running_tasks_reads_this_machine():
    reading = other_running_tasks()
    assert reading is None or reading >= 0.0


@pytest.mark.parametrize("tasks", [0, 1, 2, 7, 100])
@pytest.mark.parametrize("threads", [1, 2, 3, 5])
def test_every_task_runs_once_on_at_most_the_threads_asked(tasks, threads):
    done = np.zeros(tasks, dtype=np.int64)
    seen = set()

    def kernel(out, first, last):  # a stand-in that releases the GIL as the compiled kernels do
        seen.add(threading.get_ident())
        time.sleep(0.001)
        out[first:last] += 1

    with kernel_threads(threads):
        run(kernel, tasks, done)
    assert (done == 1).all()
    assert len(seen) <= threads
    if threads == 1:
        assert seen <= {threading.get_ident()}  # on one thread, the caller does it all


def test_pieces_cover_the_tasks_in_order():
    assert pieces(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert pieces(2, 8) == [(0, 1), (1, 2)]  # never an empty piece
    assert pieces(5, 1) == [(0, 5)]


def test_a_failing_piece_fails_the_call_after_every_thread_is_done():
    running = []

    def kernel(first, last):
        running.append(first)
        time.sleep(0.002)
        if first == 0:
            raise RuntimeError("bad piece")

    with kernel_threads(2), pytest.raises(RuntimeError, match="bad piece"):
        run(kernel, 8)
    count = len(running)
    time.sleep(0.02)
    assert len(running) == count  # nothing still running after the call returned
