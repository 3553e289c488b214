"""The spill format of streamed partitions: a partition's arrays raw and back to back in one local file.

Reading back is one ``readinto`` and a view per array: no header to parse, no zip checksum, no copy
beyond the read itself (a ``.npz`` cost 3-4 times as much per pass). Where each array lies (the layout)
stays in memory, in the process that wrote the file.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading

import numpy as np

from ilargi_db.errors import SpillLost

SPILL_ALIGNMENT = 64  # each array of a spilled partition starts on a cache line

Layout = list[tuple[str, str, tuple, int, str]]  # (name, dtype, shape, byte offset, order "C" or "F") of each array


def write_spill(path: str, arrays: dict[str, np.ndarray]) -> Layout:
    """A partition's arrays to one file at ``path``, whole or not at all; returns where each lies."""
    layout, offset = [], 0
    with tempfile.NamedTemporaryFile(dir=os.path.dirname(path), suffix=".part", delete=False) as out:
        try:
            for name, array in arrays.items():
                array = np.asarray(array)
                # In its own order (a column-major block stays column-major, as the kernels read it): no copy.
                order = "F" if array.ndim > 1 and array.flags.f_contiguous and not array.flags.c_contiguous else "C"
                flat = array.T if order == "F" else np.ascontiguousarray(array)
                out.write(np.ascontiguousarray(flat).reshape(-1).view(np.uint8).data)
                layout.append((name, array.dtype.str, array.shape, offset, order))
                padding = -array.nbytes % SPILL_ALIGNMENT
                out.write(b"\0" * padding)
                offset += array.nbytes + padding
            out.flush()  # a full disk fails here, not after the file is in place
        except BaseException:
            out.close()
            with contextlib.suppress(OSError):
                os.remove(out.name)  # a failed write (a full disk) leaves nothing behind
            raise
    os.replace(out.name, path)  # whole or absent: a pass interrupted mid-write leaves no torn file
    return layout


class SpillBuffers:
    """The buffers a stream reads its spilled partitions into, reused once no array of theirs is alive.

    A partition is read on the prefetching thread and freed on the computing one: a fresh buffer each time came
    from malloc's per-thread heaps, which kept what was freed (117 MiB more at an 18.6 MiB budget), and a fresh
    mapping each time cost its pages' first touch (a pass twice as slow). A few buffers, reused, cost neither.
    Every array made from a buffer (views of views included) holds a reference to it, so a buffer whose only
    references are this pool's is free.
    """

    def __init__(self, keep: int = 3) -> None:
        self.keep = keep
        self._buffers: list[np.ndarray] = []
        self._lock = threading.Lock()

    def get(self, size: int) -> np.ndarray:
        with self._lock:
            # References: the list, the argument of getrefcount: no array of the buffer is alive.
            free = [k for k in range(len(self._buffers)) if sys.getrefcount(self._buffers[k]) <= 2]
            for k in free:
                if self._buffers[k].nbytes >= size:
                    return self._buffers[k]
            buffer = np.empty(max(size, 1), dtype=np.uint8)
            if len(self._buffers) < self.keep:
                self._buffers.append(buffer)
            elif free:  # every free one too small (kept from short partitions): the smallest makes way
                self._buffers[min(free, key=lambda k: self._buffers[k].nbytes)] = buffer
            return buffer


def read_spill(path: str, layout: Layout, buffers: SpillBuffers | None = None) -> dict[str, np.ndarray]:
    """The arrays :func:`write_spill` wrote to ``path`` (into a buffer of ``buffers``, or a new one);
    :class:`SpillLost` if the file was cut short."""
    ends = [offset + np.dtype(dtype).itemsize * int(np.prod(shape)) for _, dtype, shape, offset, _ in layout]
    size = max(ends, default=0)  # from the layout, not the file: a file cut short is caught below
    buffer = buffers.get(size) if buffers is not None else np.empty(size, dtype=np.uint8)
    view, got = memoryview(buffer)[:size], 0
    with open(path, "rb", buffering=0) as stored:
        while got < size:  # one read returns at most about 2 GiB on Linux
            chunk = stored.readinto(view[got:])
            if not chunk:
                raise SpillLost(f"the spilled partition {path} was cut short.")
            got += chunk
    return {
        name: buffer[offset : offset + np.dtype(dtype).itemsize * int(np.prod(shape))]
        .view(np.dtype(dtype))
        .reshape(shape, order=order)
        for name, dtype, shape, offset, order in layout
    }
