"""Stopping a long job: Ctrl-C or :func:`interrupt_training`, on whichever thread the job runs.

A job (train, evaluate, predict, explain, normalize, or an ilargi_db SQL function) registers a flag while it runs.
The training loops report progress through :func:`ilargi_db._terminal.progress`, whose ``update()`` checks the flag
and raises :class:`TrainingInterrupted`; a DuckDB query the job is running is interrupted too. Nothing is stored by
an interrupted job: the reads' transaction is rolled back and ``ilargi_train`` checks the flag before saving.

Ctrl-C reaches Python code on the main thread only, but DuckDB may run an SQL function on one of its own threads:
:func:`watch_sigint` (called by :func:`ilargi_db.install`) chains a SIGINT handler that sets the flags of every
running job before the previous handler runs. ``con.interrupt()`` cannot reach a Python function DuckDB is running
(DuckDB checks its interrupt flag only between chunks), so it stops an ``ilargi_train`` only once it has returned:
use Ctrl-C or :func:`interrupt_training` instead.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

import duckdb

from ilargi_db.errors import TrainingInterrupted

F = TypeVar("F", bound=Callable[..., Any])

MESSAGE = "interrupted: ilargi_db stopped before storing anything, and the connection is usable."


class _Job:
    def __init__(self) -> None:
        self.stop = threading.Event()
        self.connections: list[duckdb.DuckDBPyConnection] = []  # interrupted too: a running query stops


_JOBS: set[_Job] = set()
_LOCK = threading.Lock()
_CURRENT: ContextVar[_Job | None] = ContextVar("ilargi_db_job", default=None)


def is_interruption(err: BaseException) -> bool:
    """Whether ``err`` is, or was raised while handling, an interruption (DuckDB's wrappers included)."""
    seen = 0
    while err is not None and seen < 16:
        if isinstance(err, (KeyboardInterrupt, duckdb.InterruptException)):
            return True
        if type(err) is RuntimeError and str(err) == "Query interrupted":  # DuckDB's form of Ctrl-C
            return True
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False


@contextlib.contextmanager
def interruptible(con: duckdb.DuckDBPyConnection | None = None) -> Iterator[None]:
    """Run a job that :func:`interrupt_training` and Ctrl-C stop; a nested job shares its outer job's flag."""
    job = _CURRENT.get()
    if job is not None:
        if con is not None and all(c is not con for c in job.connections):
            job.connections.append(con)
        yield
        return
    job = _Job()
    if con is not None:
        job.connections.append(con)
    token = _CURRENT.set(job)
    with _LOCK:
        _JOBS.add(job)
    try:
        yield
    except BaseException as err:
        if not isinstance(err, TrainingInterrupted) and (job.stop.is_set() or is_interruption(err)):
            raise TrainingInterrupted(MESSAGE) from err
        raise
    finally:
        with _LOCK:
            _JOBS.discard(job)
        _CURRENT.reset(token)


def interruptible_job(function: F) -> F:
    """Decorate a function whose first argument is the DuckDB connection: it runs as an :func:`interruptible` job."""

    @functools.wraps(function)
    def job(con: Any, *args: Any, **kwargs: Any) -> Any:
        with interruptible(con if isinstance(con, duckdb.DuckDBPyConnection) else None):
            return function(con, *args, **kwargs)

    return job  # type: ignore[return-value]


def check_interrupted() -> None:
    """Raise :class:`TrainingInterrupted` if the running job was asked to stop."""
    job = _CURRENT.get()
    if job is not None and job.stop.is_set():
        raise TrainingInterrupted(MESSAGE)


def interrupt_training() -> int:
    """Stop every ilargi_db job running in this process (from any thread); return how many there were.

    Each stops at its next progress step (or its running DuckDB query stops) with :class:`TrainingInterrupted`,
    having stored nothing.
    """
    with _LOCK:
        jobs = list(_JOBS)
    for job in jobs:
        job.stop.set()
        for con in job.connections:
            try:
                con.interrupt()
            except duckdb.Error:  # closed meanwhile: nothing runs on it
                pass
    return len(jobs)


def watch_sigint() -> None:
    """Let Ctrl-C stop jobs on every thread: chain a SIGINT handler (main thread only; idempotent).

    The previous handler still runs after (by default it raises KeyboardInterrupt in the main thread).
    """
    if threading.current_thread() is not threading.main_thread():
        return  # signal.signal works on the main thread only
    previous = signal.getsignal(signal.SIGINT)
    if getattr(previous, "ilargi_db", False) or not callable(previous):
        return  # ours already; or SIG_IGN / SIG_DFL, which Python code does not run under

    def on_sigint(signum: int, frame: Any) -> Any:
        interrupt_training()
        return previous(signum, frame)

    on_sigint.ilargi_db = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGINT, on_sigint)


__all__ = [
    "TrainingInterrupted",
    "check_interrupted",
    "interrupt_training",
    "interruptible",
    "interruptible_job",
    "is_interruption",
    "watch_sigint",
]
