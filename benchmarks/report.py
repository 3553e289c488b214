"""What every benchmark script shares: writing its own section of docs/benchmarks.md."""

from __future__ import annotations

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
