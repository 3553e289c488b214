"""The double's ``cupy.cuda`` subset: streams, events and pinned host memory, with CUDA's ordering enforced.

What the transfer path (``ilargi_db.backend.transfer``) relies on, kept as strictly as CUDA keeps it:

- Work enqueued while a created :class:`Stream` is current (``with stream:``) is ordered on that stream: the
  device arrays it makes (an upload's ``set(..., stream=)``, every operation's result, an item assigned) are
  marked with the stream and their place on it. A marked array may be read on its own stream; anywhere else
  only once ordered after it: the host synchronized an :class:`Event` recorded after it (or the stream), or
  the reading stream waited on such an event (``wait_event``). Any other read raises :class:`UnorderedRead`:
  on a GPU it would read memory a copy or kernel may still be writing.
- An asynchronous upload from pinned memory (``ndarray.set(pinned, stream=s)``) lands on the device only when
  the copy is ordered before a read or the host synchronizes it: the pinned source is read then, not at the
  call. A host that reuses a staging buffer before the copy is synchronized thus sees the new contents on the
  device, as a GPU's DMA engine may; a pageable source is copied at the call (CUDA stages pageable memory
  before ``cudaMemcpyAsync`` returns).
- ``alloc_pinned_memory`` gives page-locked memory as a buffer (``np.ndarray(..., buffer=)`` over it, as
  ``cupyx.empty_pinned`` does); :func:`is_pinned` tells an array over it, and the allocations are counted.

What it does not model: the default (null) stream's own asynchrony (its work is complete when the call
returns, as if every operation on it synchronized; CuPy's runs ahead of the host), the legacy default stream's
implicit ordering with blocking streams (created streams order nothing against it here, as non-blocking
ones), an event's ``done`` turning true on its own (only a synchronization completes work here), several
devices, a sparse matrix's own arrays (a matrix built on a stream is marked as a whole), views (taking one
is a read here; CuPy's needs no ordering), and CuPy's stream-ordered memory pool: device memory freed while
another stream's kernels still read it, then reused by its own stream, is not caught (every array here
has memory of its own). :data:`WAITS` logs every ``wait_event``, so a test sees what orders what.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class UnorderedRead(RuntimeError):
    """A device array read where nothing orders the read after the stream work that writes it."""


@dataclass
class PinnedAllocations:
    """Pinned host memory allocated since the last :meth:`reset` (``alloc_pinned_memory`` calls)."""

    count: int = 0
    nbytes: int = 0

    def reset(self) -> None:
        self.count = self.nbytes = 0


PINNED = PinnedAllocations()
WAITS: list = []  # (waiting stream, stream waited on, position on it) of every wait_event: clear it before a test


class PinnedMemory(bytearray):
    """Page-locked host memory (``cupy.cuda.PinnedMemoryPointer``'s place): a buffer NumPy arrays view."""


def alloc_pinned_memory(nbytes: int) -> PinnedMemory:
    PINNED.count += 1
    PINNED.nbytes += int(nbytes)
    memory = PinnedMemory(int(nbytes))
    start = np.frombuffer(memory, dtype=np.uint8).ctypes.data if nbytes else 0
    with _LOCK:
        _PINNED_RANGES[start] = (int(nbytes), weakref.ref(memory))
    return memory


def pinned_bytes(address: int, nbytes: int) -> np.ndarray | None:
    """The ``nbytes`` at host ``address`` when they lie in one live pinned allocation (a view), else None."""
    with _LOCK:
        for start, (size, memory) in list(_PINNED_RANGES.items()):
            owner = memory()
            if owner is None:
                del _PINNED_RANGES[start]
            elif start <= address and address + nbytes <= start + size:
                return np.frombuffer(owner, dtype=np.uint8)[address - start : address - start + nbytes]
    return None


def is_pinned(array: np.ndarray) -> bool:
    """Whether ``array`` views pinned memory (an array over :func:`alloc_pinned_memory`'s buffer, or a view of one)."""
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return isinstance(base, PinnedMemory)


@dataclass(eq=False)
class Stream:
    """A CUDA stream: work is numbered in the order it is enqueued; ``completed`` is what the host knows is done."""

    null: bool = False
    non_blocking: bool = False
    ptr: int = 0
    enqueued: int = 0
    completed: int = 0
    waited: dict = field(default_factory=dict)  # stream -> the position on it this stream's later work follows
    landing: list = field(default_factory=list)  # (position, destination, pinned source): copies not yet landed

    def __hash__(self) -> int:
        return id(self)

    def __enter__(self) -> Stream:
        _current().append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _current().pop()

    def use(self) -> Stream:
        _current()[-1:] = [self]
        return self

    def enqueue(self) -> int:
        with _LOCK:
            self.enqueued += 1
            return self.enqueued

    def record(self, event: Event | None = None) -> Event:
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event: Event) -> None:
        with _LOCK:
            if event.stream is not None and event.stream is not self:
                self.waited[event.stream] = max(self.waited.get(event.stream, 0), event.position)
                WAITS.append((self, event.stream, event.position))

    def synchronize(self) -> None:
        self.complete(self.enqueued)

    @property
    def done(self) -> bool:
        return self.completed >= self.enqueued

    def complete(self, position: int) -> None:
        """The host knows the work up to ``position`` is done: the copies enqueued up to it land now."""
        with _LOCK:
            self.land(position)
            self.completed = max(self.completed, position)

    def land(self, position: int) -> None:
        with _LOCK:  # streams are used from several threads (a prefetching one enqueues while another reads)
            kept = []
            for at, destination, source in self.landing:
                if at > position:
                    kept.append((at, destination, source))
                else:
                    destination[...] = source  # the pinned source as it is now: what the DMA engine would read
            self.landing = kept


Stream.null = Stream(null=True)  # type: ignore[attr-defined]


@dataclass(eq=False)
class Event:
    """A CUDA event: a position on a stream."""

    block: bool = False
    disable_timing: bool = False
    interprocess: bool = False
    stream: Stream | None = None
    position: int = 0

    def record(self, stream: Stream | None = None) -> None:
        with _LOCK:
            self.stream = get_current_stream() if stream is None else stream
            self.position = self.stream.enqueued

    def synchronize(self) -> None:
        if self.stream is not None:
            self.stream.complete(self.position)

    @property
    def done(self) -> bool:
        return self.stream is None or self.stream.completed >= self.position


_threads = threading.local()
_LOCK = threading.RLock()
_PINNED_RANGES: dict = {}  # start address -> (bytes, weak reference to the allocation)


def _current() -> list[Stream]:
    if not hasattr(_threads, "streams"):
        _threads.streams = [Stream.null]
    return _threads.streams


def get_current_stream() -> Stream:
    return _current()[-1]


Mark = tuple[Stream, int]


def mark_new() -> Mark | None:
    """The mark of work enqueued now: its stream and place, or None on the null stream (complete at once)."""
    stream = get_current_stream()
    return None if stream.null else (stream, stream.enqueue())


def require(mark: Mark | None, what: str = "a device array") -> None:
    """Refuse a read of work marked ``mark`` that nothing orders after it; land the copies it waits for."""
    if mark is None:
        return
    stream, position = mark
    reader = get_current_stream()
    with _LOCK:
        ordered = reader is stream or stream.completed >= position or reader.waited.get(stream, 0) >= position
    if ordered:
        stream.land(position)
        return
    raise UnorderedRead(
        f"{what} written on a stream (work {position} on it) is read on another stream that is not ordered after "
        "it: synchronize an event recorded after the write, or make the reading stream wait on one "
        "(stream.wait_event), before reading it."
    )


def later_upload(destination: np.ndarray, source: np.ndarray, mark: Mark) -> None:
    """An asynchronous copy from pinned ``source`` into ``destination``, landing when ordered (see the module)."""
    stream, position = mark
    with _LOCK:
        stream.landing.append((position, destination, source))  # held until it lands: device memory in use


class _Runtime:
    @staticmethod
    def getDeviceCount() -> int:  # noqa: N802 - CuPy's name
        return 1


runtime = _Runtime()
