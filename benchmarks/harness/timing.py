"""Timing: one call, interleaved repeats of two calls (medians), every call of a method inside a run."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

# A pause before each block of in_blocks: OpenBLAS's threads spin on after a product, and the package's reading of
# the free cores (/proc/loadavg) counts them, so a factorized call just after the materialized side's product ran on
# one thread (4.5 ms for X @ w at TR 20 / FR 4, against 3.0 ms on two). 0.2 s lets them sleep.
SETTLE_SECONDS = 0.2


def timed(work: Callable[[], Any]) -> tuple[float, Any]:
    """``(seconds, result)`` of one call of ``work``."""
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def fastest_alternating(ways: dict[str, Callable[[], Any]], repeats: int) -> tuple[dict[str, float], dict[str, Any]]:
    """Each way's fastest of ``repeats`` calls, the ways taken in turn (reversed every other round, so none always
    runs first or after another), and each way's last result."""
    best, found = dict.fromkeys(ways, float("inf")), {}
    for r in range(repeats):
        for way in ways if r % 2 == 0 else reversed(ways):
            seconds, found[way] = timed(ways[way])
            best[way] = min(best[way], seconds)
    return best, found


def interleaved(
    first: Callable[[], object], second: Callable[[], object], repeats: int, min_seconds: float = 0.0
) -> tuple[float, float, float, float]:
    """Median seconds of ``first`` and ``second``, timed alternately; also each one's first (cold) call.

    Repeats at least ``repeats`` times and until each side has run ``min_seconds`` in total
    (at most 10x ``repeats``). Results are dropped before the next call.
    """
    cold = []
    for f in (first, second):
        gc.collect()
        seconds, result = timed(f)
        cold.append(seconds)
        del result
    times: tuple[list[float], list[float]] = ([], [])
    while True:
        for f, sink in ((first, times[0]), (second, times[1])):
            seconds, result = timed(f)
            sink.append(seconds)
            del result
        done = len(times[0])
        if done >= 10 * repeats or (done >= repeats and min(sum(times[0]), sum(times[1])) >= min_seconds):
            break
    return statistics.median(times[0]), statistics.median(times[1]), cold[0], cold[1]


def in_blocks(
    first: Callable[[], object], second: Callable[[], object], rounds: int, per_block: int, min_seconds: float = 0.0
) -> tuple[float, float]:
    """Median seconds of ``first`` and ``second``, each timed in blocks of ``per_block`` calls in a row.

    The blocks alternate (``rounds`` of each, more until each side has run ``min_seconds``, at most 10x),
    and every block starts after a pause (:data:`SETTLE_SECONDS`) with one untimed call: what a loop calling one
    operator sees, with no call of the other side (a BLAS whose threads still spin, say) just before each timed one.
    """
    times: tuple[list[float], list[float]] = ([], [])
    done = 0
    while True:
        for f, sink in ((first, times[0]), (second, times[1])):
            gc.collect()
            time.sleep(SETTLE_SECONDS)
            f()  # untimed: the block's first call follows the other side's
            for _ in range(per_block):
                seconds, result = timed(f)
                sink.append(seconds)
                del result
        done += 1
        if done >= 10 * rounds or (done >= rounds and min(sum(times[0]), sum(times[1])) >= min_seconds):
            break
    return statistics.median(times[0]), statistics.median(times[1])


def record_seconds(owner: Any, name: str) -> list[float]:
    """Wrap the method ``owner.name`` so that each call appends its seconds to the list returned.

    How the benchmarks time passes over the data (an evaluation of the loss, one ``_each``) inside a run.
    """
    seconds: list[float] = []
    method = getattr(owner, name)

    def timed_call(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - began)

    setattr(owner, name, timed_call)
    return seconds


def later_passes(passes: list[float]) -> float:
    """The median seconds of the passes after the first (which reads the data, compiles, spills)."""
    return statistics.median(passes[1:] or passes)
