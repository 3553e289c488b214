"""The double's count of host<->device copies: how many, how many bytes, and the shape of each."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import NamedTuple


class Copy(NamedTuple):
    direction: str  # "to_device" or "to_host"
    shape: tuple[int, ...]
    nbytes: int
    site: str  # the innermost ilargi_db line that asked for it ("file:line function")
    pinned: bool = False  # to the device from pinned host memory (staged, may run asynchronously)
    into: tuple[int, ...] | None = None  # the shape of the device array a piece of it went into (bytes copies)


@dataclass
class Copies:
    """Host<->device copies since the last :meth:`reset` (every one the double makes is counted here)."""

    to_device: int = 0
    to_device_bytes: int = 0
    to_host: int = 0
    to_host_bytes: int = 0
    log: list[Copy] = field(default_factory=list)

    def reset(self) -> None:
        self.to_device = self.to_device_bytes = self.to_host = self.to_host_bytes = 0
        self.log.clear()

    def count(
        self, direction: str, shape: tuple[int, ...], nbytes: int, pinned: bool = False, into: tuple | None = None
    ) -> None:
        if direction == "to_device":
            self.to_device += 1
            self.to_device_bytes += nbytes
        else:
            self.to_host += 1
            self.to_host_bytes += nbytes
        self.log.append(Copy(direction, tuple(shape), int(nbytes), _site(), pinned, into))

    def largest(self, direction: str | None = None) -> int:
        """The most elements one copy moved (in ``direction``, or either way): 0 when none was made."""
        return max((_elements(c.shape) for c in self.log if direction in (None, c.direction)), default=0)

    def at_least(self, elements: int) -> list[Copy]:
        """The copies that moved ``elements`` or more (an n-vector where only parameters should move)."""
        return [c for c in self.log if _elements(c.shape) >= elements]


def _elements(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _site() -> str:
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if "ilargi_db" in name and "device_double" not in name and not name.endswith(("namespace.py", "transfer.py")):
            return f"{name.rsplit('ilargi_db', 1)[-1].lstrip('/')}:{frame.f_lineno} {frame.f_code.co_name}"
        frame = frame.f_back
    return "outside ilargi_db"


COPIES = Copies()
