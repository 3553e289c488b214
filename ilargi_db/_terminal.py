"""Long work shows progress in a terminal and stays quiet otherwise."""

from __future__ import annotations

import sys


def in_terminal() -> bool:
    return sys.stderr.isatty()


def progress(total: int, desc: str, show: bool | None = None, leave: bool = False):
    """A tqdm progress bar on stderr; ``show=None`` shows it only when stderr is a terminal."""
    from tqdm import tqdm  # not tqdm.auto: in a notebook the bar is off anyway, and its widget import warns

    return tqdm(total=total, desc=desc, leave=leave, disable=not (in_terminal() if show is None else show))
