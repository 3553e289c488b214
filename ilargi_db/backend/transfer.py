"""Host blocks onto a backend's device: through reusable pinned buffers, on the stream that will use them.

A device backend (CuPy, or an array library registered like it) copies a host block in pieces, each in two
steps: into a pinned (page-locked) host buffer, the one host-side copy, then from there to the device with
an asynchronous copy on the current CUDA stream. A copy from pageable memory makes the driver stage it
through its own pinned buffer anyway, and cannot run while the host goes on; from pinned memory it is a
DMA the host need not wait for. The pinned buffers are a few, of a fixed size, reused
(:class:`PinnedBuffers`): pinning memory costs far more than copying into it, a streamed job would otherwise
pin a partition's worth per read, and pinned memory is outside the memory budget's accounting, so it stays
at ``PINNED_BUFFERS * PINNED_CHUNK_BYTES`` whatever the blocks' sizes.

Ordering is CUDA's: work on one stream runs in order, so an upload on the stream that then computes on it
needs no wait. A streamed matrix reads its next partition on a prefetching thread (``linalg.partitions``):
that thread builds the partition inside :meth:`DeviceTransfers.staging`, on a copy stream of its own, and
the computing thread's stream waits on the partition's :class:`Fence` (on the device: the host does not
block) before its first kernel on it. Partition k+1's copies thus overlap partition k's kernels.

On NumPy, :class:`HostTransfers` moves nothing: an upload is the array itself, a fence is no wait.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse

PINNED_BUFFERS = 4  # pinned staging buffers per device backend: the copies in flight at once, at most
PINNED_CHUNK_BYTES = 16 << 20  # a block is staged in pieces of at most this: the buffers' size, pinned once


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
    """At most ``keep`` pinned host buffers of ``size`` bytes each, each reused once the copy from it is done.

    A buffer is handed out when no copy from it is in flight (its event is done); when every one is busy and
    ``keep`` are pinned, the host waits for the copy that started first. The pinned bytes never exceed
    ``keep * size``, however many blocks and partitions pass through.
    """

    xp: Any
    keep: int = PINNED_BUFFERS
    size: int = PINNED_CHUNK_BYTES
    slots: list = field(default_factory=list)  # least recently taken first
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def nbytes(self) -> int:
        """Pinned bytes held."""
        return sum(s.nbytes for s in self.slots)

    def take(self) -> _Slot:
        """A buffer no copy reads any more, for the caller alone until :meth:`release`."""
        with self._lock:
            idle = [s for s in self.slots if not s.taken]
            slot = next((s for s in idle if s.copy is None or s.copy.done), None)
            if slot is None and len(self.slots) < self.keep:
                slot = _Slot(self.xp.cuda.alloc_pinned_memory(self.size), self.size)
            elif slot is None and idle:
                slot = idle[0]  # the copy that started first: the host waits for it below
            elif slot is None:
                raise RuntimeError(f"all {self.keep} pinned buffers are being filled at once: keep more of them.")
            if slot in self.slots:
                self.slots.remove(slot)
            self.slots.append(slot)
            slot.taken = True
        if slot.copy is not None:
            slot.copy.synchronize()  # the copy from it is done (usually long since) before it is overwritten
            slot.copy = None
        return slot

    def release(self, slot: _Slot, copy: Any) -> None:
        with self._lock:
            slot.copy, slot.taken = copy, False


class DeviceTransfers:
    """A device backend's uploads: through its pinned buffers, on the current stream (see the module)."""

    def __init__(self, xp: Any, sparse: Any, keep: int = PINNED_BUFFERS, chunk: int = PINNED_CHUNK_BYTES):
        self.xp, self.sparse = xp, sparse
        self.buffers = PinnedBuffers(xp, keep, chunk)
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
        # Its bytes in memory order (a block contiguous in neither order is made so first: one host copy), in
        # pieces of a buffer's size: the pinned bytes stay bounded whatever the block's size, and the host
        # fills one buffer while the device copies from another.
        raw = np.asarray(host, order=order).reshape(-1, order=order).view(np.uint8)
        stream = self.xp.cuda.get_current_stream()
        chunk = self.buffers.size
        for start in range(0, raw.size, chunk):
            piece = raw[start : start + chunk]
            slot = self.buffers.take()
            try:
                staged = np.ndarray(piece.size, dtype=np.uint8, buffer=slot.memory)
                np.copyto(staged, piece)  # the one host copy: pageable -> pinned
                (device.data + start).copy_from_host_async(ctypes.c_void_p(staged.ctypes.data), piece.size, stream)
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


__all__ = [
    "NO_FENCE",
    "PINNED_BUFFERS",
    "PINNED_CHUNK_BYTES",
    "DeviceTransfers",
    "Fence",
    "HostTransfers",
    "PinnedBuffers",
]
