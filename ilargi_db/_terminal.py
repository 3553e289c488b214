"""Long work shows progress in a terminal and stays quiet otherwise."""

from __future__ import annotations

import sys


def in_terminal() -> bool:
    return sys.stderr.isatty()


def progress(total: int, desc: str):
    """A tqdm progress bar on stderr when it is a terminal, a silent one otherwise."""
    from tqdm import tqdm  # not tqdm.auto: in a notebook the bar is off anyway, and its widget import warns

    return tqdm(total=total, desc=desc, leave=False, disable=not in_terminal())
