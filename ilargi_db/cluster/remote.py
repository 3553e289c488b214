"""Partitions held by a Dask cluster's workers: the :class:`~ilargi_db.linalg.Partitions` whose operators run
where the partitions are, so only parameters and results travel."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ilargi_db.linalg import NormalizedMatrix


class RemotePartitions(Sequence):
    """Partitions held by a cluster's workers, as Dask futures; operators run where they are."""

    resident = False

    def __init__(self, client: Any, futures: list[Any]):
        self.client, self.futures = client, futures
        self._groups: dict[Any, list[int]] | None = None  # worker -> the partitions it holds, once all are held

    def __len__(self) -> int:
        return len(self.futures)

    def __getitem__(self, k: int) -> NormalizedMatrix:  # type: ignore[override]
        return self.client.gather(self.futures[k])  # a local copy (the template; rows for k-means++)

    def each(self, fn: Callable[..., Any], *per_partition: Sequence[Any]) -> list[Any]:
        """``fn(partition, *its arguments)`` on the worker holding each partition; the results, in order.

        One task per worker, over the partitions it holds (the scheduler's cost grows with the tasks of a
        pass, not with the partitions); each returns its partitions' results apart, and the caller adds
        them in partition order. Arguments travel inside the tasks (parameters are small: d floats), not as
        scattered data: a task's inputs must survive a lost worker, and Dask can only recompute what it
        has the recipe for. A partition whose worker was lost is read again wherever Dask places it.
        """
        groups = self._groups if self._groups is not None else self._group()
        tasks = []
        for worker, ks in groups.items():
            placement = {"workers": [worker], "allow_other_workers": True} if isinstance(worker, str) else {}
            arguments = [tuple(args[k] for args in per_partition) for k in ks]
            partitions = [self.futures[k] for k in ks]
            tasks.append(self.client.submit(_each_held, fn, partitions, arguments, pure=False, **placement))
        results: list[Any] = [None] * len(self.futures)
        for ks, found in zip(groups.values(), self.client.gather(tasks)):
            for k, result in zip(ks, found):
                results[k] = result
        return results

    def _group(self) -> dict[Any, list[int]]:
        """The partitions by the worker holding each (one scheduler query). Kept once every partition is held:
        placement is a hint (a task may run elsewhere, after a lost worker), so a stale one costs a transfer,
        never a wrong result."""
        holders = self.client.who_has(self.futures)
        groups: dict[Any, list[int]] = {}
        for k, future in enumerate(self.futures):
            where = sorted(holders.get(future.key, ()))
            # A partition not computed yet (or being read again after a lost worker) is a task of its own,
            # for Dask to place: grouped, they would all land on one worker.
            groups.setdefault(where[0] if where else ("unplaced", k), []).append(k)
        if all(isinstance(worker, str) for worker in groups):
            self._groups = groups
        return groups

    def keep(self, pieces: list[Any]) -> list[Any]:
        """Each partition's slice of a vector, sent once to the worker holding that partition.

        As tasks that return their argument, not scattered data: Dask can recompute them on another worker
        if this one is lost.
        """
        holders = self.client.who_has(self.futures)
        kept = []
        for future, piece in zip(self.futures, pieces):
            where = list(holders.get(future.key, ()))  # none while a lost partition is being read again
            placement = {"workers": where, "allow_other_workers": True} if where else {}
            kept.append(self.client.submit(identity, piece, pure=False, **placement))
        return kept

    def mapped(self, f: Callable[[NormalizedMatrix], NormalizedMatrix]) -> RemotePartitions:
        return RemotePartitions(self.client, [self.client.submit(f, future) for future in self.futures])


def _each_held(fn: Callable[..., Any], partitions: list[NormalizedMatrix], arguments: list[tuple]) -> list[Any]:
    """On a worker: ``fn`` on each partition it holds, the results apart (added in order by the driver)."""
    return [fn(p, *args) for p, args in zip(partitions, arguments)]


def identity(value: Any) -> Any:
    """A task that returns its argument: data Dask can compute again elsewhere if its worker is lost."""
    return value


__all__ = ["RemotePartitions", "identity"]
