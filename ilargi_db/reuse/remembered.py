"""What one DuckDB release always answers, computed once for this user rather than once per process.

A new process repeating a job would otherwise spend some 30-60 ms asking a fresh DuckDB database what
no data changes: the list of its built-in functions and which are consistent (the fingerprint's purity
check), and how it describes the store's own tables (telling them from a user's). Each answer is kept in
the user's cache directory, keyed by the DuckDB release and the question, sealed like the artifacts
(:mod:`~ilargi_db.reuse.seal`, under the same secret): a file that this user's processes did not write,
or that was edited, is not believed and the answer is computed again. Where no secret can be kept
safely, nothing is remembered.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
from collections.abc import Callable
from typing import Any

import duckdb

from ilargi_db.reuse.seal import artifact_secret, seal, unseal
from ilargi_db.user_cache import cache_dir

KIND = "remembered"  # the seal's kind of these files (never an artifact's)
LARGEST = 4 << 20  # bytes: an answer is a few hundred kB at most; a larger file is not read
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def remembered(question: str, answer: Callable[[], Any]) -> Any:
    """``answer()`` (a JSON value) as this DuckDB release gave it before for ``question``; asked and kept
    when no sealed answer is there."""
    secret = artifact_secret()
    if secret is None:
        return answer()
    key = hashlib.blake2b(json.dumps([duckdb.__version__, question]).encode(), digest_size=16).hexdigest()
    path = cache_dir().absolute() / f"duckdb-{key}.json"
    found = _read(path, secret, key)
    if found is not None:
        return found[0]
    value = answer()
    _write(path, seal(secret, key, KIND, json.dumps(value).encode()))
    return value


def _read(path: os.PathLike, secret: bytes, key: str) -> tuple[Any] | None:
    """``(value,)`` sealed in ``path`` for ``key``; None for anything else (missing, not a private regular file
    of this user's, too large, not sealed, edited)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as source:
        found = os.fstat(fd)
        mine = not hasattr(os, "getuid") or found.st_uid == os.getuid()
        if not (stat.S_ISREG(found.st_mode) and mine and found.st_size <= LARGEST):
            return None
        sealed = source.read(LARGEST + 1)
    payload = unseal(secret, key, KIND, sealed)
    if payload is None:
        return None
    try:
        return (json.loads(payload),)
    except ValueError:
        return None


def _write(path: os.PathLike, sealed: bytes) -> None:
    """Put ``sealed`` at ``path`` whole (a temporary file renamed into place); nothing if it cannot be."""
    temporary = f"{os.fspath(path)}.{secrets.token_hex(8)}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(sealed)
        os.replace(temporary, path)
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass


__all__ = ["remembered"]
