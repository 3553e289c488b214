"""Where a partitioned matrix's partitions are, and how its operators reach them.

:class:`Partitions` is what :class:`~ilargi_db.linalg.PartitionedMatrix` asks of its partitions; each
place they can be implements it: :class:`ResidentPartitions` (all in memory), :class:`PartitionSource`
(made on demand, never all in memory: a streamed matrix) and ``cluster.RemotePartitions`` (held by a Dask
cluster's workers).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

from ilargi_db.backend import Backend, get_backend
from ilargi_db.backend.transfer import NO_FENCE, Fence
from ilargi_db.linalg.normalized_matrix import NormalizedMatrix


@runtime_checkable
class Partitions(Protocol):
    """The row partitions of a matrix, wherever they are held."""

    @property
    def resident(self) -> bool:
        """Whether every partition is held here at once (else: read on every pass, or held elsewhere)."""
        ...

    def __len__(self) -> int: ...

    def __getitem__(self, k: int) -> NormalizedMatrix:
        """A local copy of partition ``k``."""
        ...

    def __iter__(self) -> Iterator[NormalizedMatrix]: ...

    def each(self, fn: Callable[..., Any], *per_partition: Sequence[Any]) -> list[Any]:
        """``fn(partition k, per_partition[0][k], ...)`` for every partition where it is held; results in order."""
        ...

    def keep(self, pieces: list[Any]) -> list[Any]:
        """Each partition's slice of a vector (``pieces[k]``), kept where partition ``k`` is held."""
        ...

    def mapped(self, f: Callable[[NormalizedMatrix], NormalizedMatrix]) -> Partitions:
        """The partitions with an element-wise ``f`` applied, where they are held."""
        ...


def _each_here(
    partitions: Iterable[NormalizedMatrix], fn: Callable[..., Any], per_partition: tuple[Sequence[Any], ...]
) -> list[Any]:
    """``fn(partition, *its arguments)`` for every partition, here and in order."""
    return [fn(p, *(args[k] for args in per_partition)) for k, p in enumerate(partitions)]


class ResidentPartitions(Sequence):
    """Partitions held in memory, all at once: operators run on them here."""

    resident = True

    def __init__(self, partitions: Iterable[NormalizedMatrix]):
        self.items = list(partitions)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, k: int) -> NormalizedMatrix:  # type: ignore[override]
        return self.items[k]

    def __iter__(self) -> Iterator[NormalizedMatrix]:
        return iter(self.items)

    def each(self, fn: Callable[..., Any], *per_partition: Sequence[Any]) -> list[Any]:
        return _each_here(self.items, fn, per_partition)

    def keep(self, pieces: list[Any]) -> list[Any]:
        return pieces  # views of the vector, beside partitions that are here too

    def mapped(self, f: Callable[[NormalizedMatrix], NormalizedMatrix]) -> ResidentPartitions:
        return ResidentPartitions(f(p) for p in self.items)


PREFETCH = True  # read the next partition while the current one computes (benchmarks switch it off)


@functools.cache
def _prefetcher() -> ThreadPoolExecutor:
    """The one thread that reads partitions ahead, for every pass of every stream in the process.

    One thread, kept: malloc gives each new thread a heap of its own (up to 8 per core) and keeps what is
    freed there, so a new prefetching thread on every pass grew the process by a partition's buffers per pass
    (about 90 MiB over 13 passes at an 18.6 MiB budget). Reads of concurrent streams take turns on it.
    """
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="ilargi-prefetch")


if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads: it starts its own
    os.register_at_fork(after_in_child=_prefetcher.cache_clear)


class PartitionSource(Sequence):
    """Partitions made on demand by ``make(k)``, never all in memory: a streamed matrix's partitions.

    Iterating reads the next partition on a background thread while the caller computes on the current
    one (``prefetch``), so at most two are held at a time; every pass reads them again. On a device
    backend the thread builds it on a copy stream of its own (``backend.transfers.staging``): its uploads
    overlap the current partition's kernels, and the caller's stream waits for them before computing on it.
    """

    resident = False

    def __init__(
        self,
        make: Callable[[int], NormalizedMatrix],
        n: int,
        prefetch: bool | None = None,
        backend: Backend | str = "numpy",
    ):
        self.make, self.n, self.backend = make, int(n), get_backend(backend)
        self.prefetch = PREFETCH if prefetch is None else prefetch
        self.reads = 0  # partitions read so far (what a pass costs, for tests and benchmarks)
        self.bytes_read = 0  # their bytes (NormalizedMatrix.nbytes each): what the passes moved

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, k: int) -> NormalizedMatrix:  # type: ignore[override]
        if not 0 <= k < self.n:
            raise IndexError(k)
        self.reads += 1
        part = self.make(k)
        self.bytes_read += part.nbytes
        return part

    def __iter__(self) -> Generator[NormalizedMatrix, None, None]:
        if not self.prefetch or self.n < 2:
            for k in range(self.n):
                yield self[k]
            return
        pool = _prefetcher()
        pending = pool.submit(self._staged, 0, NO_FENCE)
        try:
            for k in range(self.n):
                current, fence = pending.result()
                # Partition k+1's copies may take the device memory of partition k-1, whose work is all
                # enqueued by now: they wait for it (on the device), and overlap partition k's.
                done = self.backend.transfers.fence()
                pending = pool.submit(self._staged, k + 1, done) if k + 1 < self.n else None
                fence.wait()  # this thread's stream after the partition's copies (on the device: no host wait)
                yield current
        finally:  # a pass left early (an error, an interruption): let the read in flight finish first
            if pending is not None and not pending.cancel():
                pending.exception()

    def _staged(self, k: int, after: Fence) -> tuple[NormalizedMatrix, Fence]:
        """Partition ``k`` built on this (prefetching) thread's copy stream after ``after``, and the fence its
        copies end at."""
        with self.backend.transfers.staging(after) as fences:
            part = self[k]
        return part, fences[0]

    def each(self, fn: Callable[..., Any], *per_partition: Sequence[Any]) -> list[Any]:
        """``fn`` on each partition as it is read (the next one read meanwhile)."""
        passing = iter(self)
        try:
            return _each_here(passing, fn, per_partition)
        finally:  # a pass left early (an error, an interruption) waits for its prefetch before going on up
            passing.close()

    def keep(self, pieces: list[Any]) -> list[Any]:
        return pieces  # views of the vector: the partitions come here to be computed on

    def mapped(self, f: Callable[[NormalizedMatrix], NormalizedMatrix]) -> PartitionSource:
        """The partitions with an element-wise ``f`` applied as each is read."""
        return PartitionSource(lambda k: f(self.make(k)), self.n, self.prefetch, self.backend)


__all__ = ["PartitionSource", "Partitions", "ResidentPartitions"]
