"""Sizes in bytes as people write them: ``"512MB"`` or ``"2 GiB"`` read, ``1536`` shown as ``'1.5 KiB'``.

The budgets callers give (the artifact store's, a training's ``memory_budget``) and DuckDB's own
``memory_limit`` setting are read here; the messages that quote a size print it here.
"""

from __future__ import annotations

import re
from typing import Any

from ilargi_db.errors import IlargiError

_UNITS = {
    "bytes": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "pib": 2**50,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "pb": 10**15,
}


def parse_bytes(text: str) -> int | None:
    """``'1.5 GiB'`` as bytes (DuckDB's way of showing a size); None when it is not a size.

    >>> parse_bytes("953.6 MiB"), parse_bytes("2 GB"), parse_bytes("unlimited")
    (999922073, 2000000000, None)
    """
    found = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", text or "")
    unit = found.group(2).lower() or "bytes" if found else ""
    if unit not in _UNITS:
        return None
    return int(float(found.group(1)) * _UNITS[unit])


def size_in_bytes(value: Any, what: str) -> int:
    """A size the caller gave (bytes, or a string such as ``"512MB"`` or ``"2 GiB"``) as bytes; refuses others.

    >>> size_in_bytes("2GB", "the budget"), size_in_bytes(1024, "the budget")
    (2000000000, 1024)
    """
    found = None
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 and value == int(value):
            found = int(value)
        elif isinstance(value, str):
            found = parse_bytes(value)
    except (OverflowError, ValueError):  # inf, nan, 1e400GB
        found = None
    if found is None:
        raise IlargiError(f"{what} must be a number of bytes or a size such as '512MB' or '2GB', got {value!r}.")
    return found


def format_bytes(n: float) -> str:
    """``1536`` as ``'1.5 KiB'``.

    >>> format_bytes(10.7 * 2**30)
    '10.7 GiB'
    """
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


__all__ = ["format_bytes", "parse_bytes", "size_in_bytes"]
