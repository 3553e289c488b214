"""The arguments every benchmark script takes, and the command line its report shows."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def parser(
    doc: str, quick: str | None = None, child: int = 0, rows: int | None = None, repeats: int | None = None
) -> argparse.ArgumentParser:
    """A script's parser, described by the first line of its docstring ``doc``, with ``--output``.

    ``quick``: the help of ``--quick`` (a smoke run), when the script has one. ``child``: how many values the
    hidden ``--child`` takes, when the script runs its measurements in fresh processes of itself. ``rows``:
    the default of ``--rows`` (the star schema's fact rows), ``repeats`` of ``--repeats``, where they apply.
    """
    found = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    found.add_argument("--output", type=Path, help="markdown file to write the results section into")
    if quick:
        found.add_argument("--quick", action="store_true", help=quick)
    if rows:
        found.add_argument("--rows", type=int, default=rows, help="fact rows of the star schema")
    if repeats:
        found.add_argument("--repeats", type=int, default=repeats)
    if child:
        found.add_argument("--child", nargs=child, help=argparse.SUPPRESS)
    return found


def command(script: str, argv: list[str] | None) -> str:
    """How the script was run, as its report shows it: ``python benchmarks/<script> <arguments>``."""
    args = sys.argv[1:] if argv is None else argv
    return " ".join([f"python benchmarks/{Path(script).name}", *args])
