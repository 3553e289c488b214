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


def progress(total: int, desc: str, show: bool | None = None, leave: bool = False):
    """A tqdm progress bar on stderr; ``show=None`` shows it only when stderr is a terminal.

    ``update()`` raises :class:`~ilargi_db.interruption.TrainingInterrupted` once the job was asked to stop: the
    training loops need no check of their own.
    """
    bar = _bar_class()
    return bar(total=total, desc=desc, leave=leave, disable=not (in_terminal() if show is None else show))
