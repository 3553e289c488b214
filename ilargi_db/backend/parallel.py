"""How many cores are free, and row ranges of a compiled kernel run on that many threads.

The fused kernels are serial numba functions that release the GIL (``nogil=True``) over a range of tasks (row
tiles, or the chunks of a reduction). :func:`run` splits a call's tasks into a few contiguous pieces and lets
up to :func:`free_cores` threads take them one after another: the calling thread and a small pool. A thread
that has nothing left waits blocked, never spinning, so when another process takes a core the remaining
threads take the remaining pieces (an OpenMP region split its work evenly and spun at its barrier: with one
busy process beside it on 2 cores, a kernel ran up to 10x slower than on one thread). Which thread runs which
piece never changes a result: a reduction's tasks are chunks fixed by the shapes, each writing its own
accumulator, merged in chunk order by the caller.

Reading the free cores costs a read of ``/proc/loadavg``; a reading is reused for :data:`REFRESH_SECONDS`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

REFRESH_SECONDS = 0.05  # how long a reading of the free cores is reused (a kernel call takes 0.1-100 ms)
PIECES_PER_THREAD = 4  # a call's tasks cut into this many pieces per thread: a slowed thread takes fewer


# -- how busy the cores are ---------------------------------------------------------------


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the system says)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def running_tasks() -> float | None:
    """Tasks running or ready to run on the whole machine right now, this process's included (Linux), else None."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


def other_running_tasks() -> float | None:
    """Tasks of other processes running or ready to run right now (Linux), else None.

    The kernel's count (``/proc/loadavg``) includes this process's own threads, such as BLAS threads
    spinning after a product: those are counted from ``/proc/self/task`` and left out.
    """
    running = running_tasks()
    if running is None:
        return None
    own = 0
    try:
        for task in os.scandir("/proc/self/task"):
            try:
                with open(os.path.join(task.path, "stat")) as f:
                    own += f.read().rsplit(")", 1)[1].split()[0] == "R"
            except (OSError, IndexError):  # the thread ended
                continue
    except OSError:
        return None
    return max(running - max(own, 1), 0.0)


def free_cores(cores: int | None = None, read_running: Callable[[], float | None] = running_tasks) -> int:
    """Cores no other task wants now, this thread's own counted free: between 1 and ``cores`` (the usable ones).

    Every running task but the caller takes a core (another process's, or this process's DuckDB threads reading
    ahead); with no reading (no ``/proc``) every core counts as free.
    """
    cores = usable_cores() if cores is None else max(1, cores)
    running = read_running()
    if running is None:
        return cores
    return int(min(cores, max(1, cores - round(max(running - 1.0, 0.0)))))


class _Reading:
    """The last reading of :func:`free_cores`, reused for :data:`REFRESH_SECONDS` (one per process)."""

    def __init__(self) -> None:
        self.cores, self.at = 1, -float("inf")

    def get(self) -> int:
        now = time.monotonic()
        if now - self.at > REFRESH_SECONDS:
            self.cores, self.at = free_cores(), now
        return self.cores


_READING = _Reading()
_FIXED = threading.local()  # kernel_threads(): per calling thread, so concurrent jobs keep their own


@contextlib.contextmanager
def kernel_threads(threads: int) -> Iterator[None]:
    """Kernel calls this thread makes inside the block run on ``threads`` threads (1: the caller alone; fewer
    when a call has fewer tasks), whatever the free cores."""
    if int(threads) < 1:
        raise ValueError(f"kernel_threads needs at least 1 thread, got {threads}.")
    before = getattr(_FIXED, "threads", None)
    _FIXED.threads = int(threads)
    try:
        yield
    finally:
        _FIXED.threads = before


def threads_for(tasks: int, min_tasks: int = 1, free: int | None = None) -> int:
    """How many threads a call of ``tasks`` tasks runs on: the free cores (``free``, else read now; or
    :func:`kernel_threads`), at most one per ``min_tasks`` tasks (below that a thread costs more than it saves)."""
    fixed = getattr(_FIXED, "threads", None)
    if fixed is not None:
        free = fixed
    elif free is None:
        free = _READING.get()
    return int(max(1, min(free, tasks // max(1, min_tasks))))


# -- running a kernel over pieces of its tasks ----------------------------------------------


class _Pool:
    """Worker threads shared by every kernel call of the process, started on first use (one fewer than the
    usable cores: the calling thread works too), started again in a forked child."""

    def __init__(self) -> None:
        self.executor: ThreadPoolExecutor | None = None
        self.lock = threading.Lock()

    def get(self) -> ThreadPoolExecutor:
        with self.lock:
            if self.executor is None:
                workers = max(1, usable_cores() - 1)
                self.executor = ThreadPoolExecutor(workers, thread_name_prefix="ilargi-kernel")
            return self.executor

    def forget(self) -> None:  # in a forked child: the parent's threads do not exist there
        self.executor, self.lock = None, threading.Lock()


_POOL = _Pool()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_POOL.forget)


def pieces(tasks: int, count: int) -> list[tuple[int, int]]:
    """``[0, tasks)`` cut into ``count`` contiguous ranges as equal as can be (none empty)."""
    count = max(1, min(count, tasks))
    bounds = [tasks * k // count for k in range(count + 1)]
    return [(bounds[k], bounds[k + 1]) for k in range(count)]


def run(kernel: Callable[..., Any], tasks: int, *args: Any, min_tasks: int = 1) -> None:
    """``kernel(*args, first, last)`` over every task of ``[0, tasks)``, on :func:`threads_for` threads.

    The kernel must release the GIL and may write only to what its own tasks own. On one thread it is called
    once over every task; on several, each thread takes the next of a few pieces until none is left.
    """
    if tasks <= 0:
        return
    threads = threads_for(tasks, min_tasks)
    if threads == 1:
        kernel(*args, 0, tasks)
        return
    queue = iter(pieces(tasks, threads * PIECES_PER_THREAD))
    taking = threading.Lock()

    def work() -> None:
        while True:
            with taking:
                piece = next(queue, None)
            if piece is None:
                return
            kernel(*args, *piece)

    executor = _POOL.get()
    helpers: list[Future] = [executor.submit(work) for _ in range(threads - 1)]
    try:
        work()
    finally:
        for helper in helpers:  # their pieces write into the caller's arrays: wait for them even on an error
            helper.exception()
    for helper in helpers:
        helper.result()


__all__ = [
    "PIECES_PER_THREAD",
    "REFRESH_SECONDS",
    "free_cores",
    "kernel_threads",
    "other_running_tasks",
    "pieces",
    "run",
    "running_tasks",
    "threads_for",
    "usable_cores",
]
