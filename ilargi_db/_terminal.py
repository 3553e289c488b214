"""Long work shows progress in a terminal and stays quiet otherwise; every step is a point to stop at."""

from __future__ import annotations

import functools
import sys


def in_terminal() -> bool:
    return sys.stderr.isatty()


@functools.cache
def _bar_class() -> type:
    from tqdm import tqdm  # not tqdm.auto: in a notebook the bar is off anyway, and its widget import warns

    from ilargi_db.interruption import check_interrupted

    class Progress(tqdm):
        """tqdm whose ``update()`` stops the job when it was interrupted (shown or not)."""

        def update(self, n: float = 1) -> bool | None:
            check_interrupted()
            return super().update(n)

    return Progress


class QuietProgress:
    """The bar's interface where none is shown: each ``update()`` is still a point to stop at, and tqdm (some
    15 ms to import) is not imported for a bar nobody sees."""

    def __init__(self, total: int, desc: str) -> None:
        self.total, self.desc, self.n = total, desc, 0

    def update(self, n: float = 1) -> None:
        from ilargi_db.interruption import check_interrupted

        check_interrupted()
        self.n += n

    def set_description(self, desc: str) -> None:
        self.desc = desc

    def close(self) -> None:
        pass

    def __enter__(self) -> QuietProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def progress(total: int, desc: str, show: bool | None = None, leave: bool = False):
    """A tqdm progress bar on stderr; ``show=None`` shows it only when stderr is a terminal (otherwise a
    :class:`QuietProgress`).

    ``update()`` raises :class:`~ilargi_db.interruption.TrainingInterrupted` once the job was asked to stop: the
    training loops need no check of their own.
    """
    if not (in_terminal() if show is None else show):
        return QuietProgress(total, desc)
    return _bar_class()(total=total, desc=desc, leave=leave)
