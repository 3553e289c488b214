"""A benchmark's section of ``docs/benchmarks.md``: written in place, opened by the command that made it."""

from __future__ import annotations

import time
from pathlib import Path


def write_section(path: Path, name: str, section: str) -> None:
    """Replace the section between ``<!-- name:start -->`` and ``<!-- name:end -->`` in ``path``, or append it.

    The rest of the file (hand-written notes included) is left as it is.
    """
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = f"{start}\n{section}{end}\n"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) + 1 :]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def publish(lines: list[str], output: Path | None, name: str) -> None:
    """Print the section of ``lines``; given ``output`` (a script's ``--output``), write it there as ``name``."""
    section = "\n".join(lines) + "\n"
    print(section)
    if output:
        write_section(Path(output), name, section)


def now() -> str:
    """The date and minute a report is written, as the reports show it."""
    return time.strftime("%Y-%m-%d %H:%M")


def ran(command: str, seconds: float, *details: str, minutes: bool = False) -> str:
    """``Command: `...` (12 s wall time, 2026-01-01 10:00, details...)``: how a section's figures were made."""
    wall = f"{seconds / 60:.0f} min" if minutes else f"{seconds:.0f} s"
    return f"Command: `{command}` ({', '.join([f'{wall} wall time', now(), *details])})"
