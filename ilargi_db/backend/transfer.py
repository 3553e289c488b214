"""Host blocks onto a backend's device: through reusable pinned buffers, on the stream that will use them.

A device backend (CuPy, or an array library registered like it) copies a host block in two steps: into a
pinned (page-locked) host buffer, the one host-side copy, then from there to the device with an
asynchronous copy on the current CUDA stream. A copy from pageable memory makes the driver stage it
through its own pinned buffer anyway, and cannot run while the host goes on; from pinned memory it is a
DMA the host need not wait for. The pinned buffers are a few, reused (:class:`PinnedBuffers`): pinning
memory costs far more than copying into it, and a streamed job would otherwise pin a partition's worth per
read.

Ordering is CUDA's: work on one stream runs in order, so an upload on the stream that then computes on it
needs no wait. A streamed matrix reads its next partition on a prefetching thread (``linalg.partitions``):
that thread builds the partition inside :meth:`DeviceTransfers.staging`, on a copy stream of its own, and
the computing thread's stream waits on the partition's :class:`Fence` (on the device: the host does not
block) before its first kernel on it. Partition k+1's copies thus overlap partition k's kernels.

On NumPy, :class:`HostTransfers` moves nothing: an upload is the array itself, a fence is no wait.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse

PINNED_BUFFERS = 4  # pinned staging buffers per device backend: the copies in flight at once, at most
PINNED_MINIMUM_BYTES = 1 << 20  # a buffer is pinned at least this large: small blocks share the first one


class Fence:
    """What a consumer on another stream waits for before using blocks staged on a copy stream."""

    def __init__(self, xp: Any = None, event: Any = None):
        self._xp, self._event = xp, event

    def wait(self) -> None:
        """Order the current stream's later work after the staged copies (on the device; the host goes on)."""
        if self._event is not None:
            self._xp.cuda.get_current_stream().wait_event(self._event)


NO_FENCE = Fence()


@dataclass(eq=False)
class _Slot:
    memory: Any  # the pinned allocation
    nbytes: int
    copy: Any = None  # the event recorded after the last copy from it: free once that is done
    taken: bool = False  # being filled by a thread (between take and release)


@dataclass(eq=False)
class PinnedBuffers:
    """At most ``keep`` pinned host buffers, each reused once the copy from it is done.

    A buffer is handed out when no copy from it is in flight (its event is done); when every one is busy
    and ``keep`` are pinned, the host waits for the oldest copy. A buffer too small for a block is replaced
    by a larger one: the count never exceeds ``keep``, the bytes never exceed ``keep`` times the largest block
    (rounded up), however many partitions pass through.
    """

    xp: Any
    keep: int = PINNED_BUFFERS
    slots: list = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def nbytes(self) -> int:
        """Pinned bytes held."""
        return sum(s.nbytes for s in self.slots)

    def take(self, nbytes: int) -> _Slot:
        """A buffer of at least ``nbytes`` that no copy reads any more, for the caller alone until :meth:`release`."""
        with self._lock:
            idle = [s for s in self.slots if not s.taken]  # least recently used first
            free = [s for s in idle if s.copy is None or s.copy.done]
            slot = next((s for s in free if s.nbytes >= nbytes), None)
            if slot is None and len(self.slots) < self.keep:
                slot = self._pin(max(nbytes, PINNED_MINIMUM_BYTES))
                self.slots.append(slot)
            elif slot is None and idle:  # the largest free one, or else the one whose copy started first
                slot = max(free, key=lambda s: s.nbytes) if free else idle[0]
            elif slot is None:
                raise RuntimeError(f"all {self.keep} pinned buffers are being filled at once: keep more of them.")
            self.slots.remove(slot)
            self.slots.append(slot)
            slot.taken = True
        if slot.copy is not None:
            slot.copy.synchronize()  # the copy from it is done (usually long since) before it is overwritten
            slot.copy = None
        if slot.nbytes < nbytes:
            slot.memory, slot.nbytes = None, 0  # the small one unpinned before the larger is pinned
            fresh = self._pin(max(nbytes, 2 * PINNED_MINIMUM_BYTES))
            slot.memory, slot.nbytes = fresh.memory, fresh.nbytes
        return slot

    def release(self, slot: _Slot, copy: Any) -> None:
        with self._lock:
            slot.copy, slot.taken = copy, False

    def _pin(self, nbytes: int) -> _Slot:
        return _Slot(self.xp.cuda.alloc_pinned_memory(nbytes), nbytes)


class DeviceTransfers:
    """A device backend's uploads: through its pinned buffers, on the current stream (see the module)."""

    def __init__(self, xp: Any, sparse: Any, keep: int = PINNED_BUFFERS):
        self.xp, self.sparse = xp, sparse
        self.buffers = PinnedBuffers(xp, keep)
        self._copy_streams = threading.local()  # one copy stream per staging thread

    def upload(self, host: Any) -> Any:
        """``host`` (a NumPy array or scipy.sparse matrix) on the device, copied on the current stream."""
        if scipy.sparse.issparse(host):
            csr = host.tocsr()
            arrays = (self._dense(csr.data), self._dense(csr.indices), self._dense(csr.indptr))
            return self.sparse.csr_matrix(arrays, shape=csr.shape)
        return self._dense(np.asarray(host))

    def _dense(self, host: np.ndarray) -> Any:
        order = "F" if host.ndim > 1 and host.flags.f_contiguous and not host.flags.c_contiguous else "C"
        device = self.xp.empty(host.shape, dtype=host.dtype, order=order)
        if host.nbytes == 0:
            return device
        slot = self.buffers.take(host.nbytes)
        try:
            staged = np.ndarray(host.shape, dtype=host.dtype, buffer=slot.memory, order=order)
            np.copyto(staged, host)  # the one host copy: pageable -> pinned
            stream = self.xp.cuda.get_current_stream()
            device.set(staged, stream=stream)
            copied = stream.record()
        except BaseException:
            self.buffers.release(slot, None)
            raise
        self.buffers.release(slot, copied)
        return device

    def fence(self) -> Fence:
        """The work enqueued so far on the current stream, for another stream to wait on."""
        return Fence(self.xp, self.xp.cuda.get_current_stream().record())

    @contextlib.contextmanager
    def staging(self, after: Fence = NO_FENCE) -> Iterator[list[Fence]]:
        """Work in this block runs on this thread's copy stream, after ``after``; the list gets the fence that
        work ends with.

        ``after`` is the consumer's work on the blocks staged before: device memory they free goes back to
        CuPy's pool for the stream that allocated it (this copy stream), which may hand it to the next copy
        while the consumer's kernels still read it.
        """
        streams = self._copy_streams
        if not hasattr(streams, "stream"):
            streams.stream = self.xp.cuda.Stream(non_blocking=True)
        fences: list[Fence] = []
        with streams.stream:
            after.wait()
            yield fences
        fences.append(Fence(self.xp, streams.stream.record()))


class HostTransfers:
    """NumPy's: the host is the device; nothing is copied, nothing waited for."""

    def upload(self, host: Any) -> Any:
        return host.tocsr() if scipy.sparse.issparse(host) else np.asarray(host)

    def fence(self) -> Fence:
        return NO_FENCE

    @contextlib.contextmanager
    def staging(self, after: Fence = NO_FENCE) -> Iterator[list[Fence]]:
        fences: list[Fence] = []
        yield fences
        fences.append(NO_FENCE)


__all__ = ["NO_FENCE", "PINNED_BUFFERS", "DeviceTransfers", "Fence", "HostTransfers", "PinnedBuffers"]
