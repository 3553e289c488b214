"""Sealing stored artifacts: what this user's processes wrote, and nothing else, is believed.

Each payload stored in a database file carries an HMAC-SHA256 over its key, its kind and its bytes, under
a secret kept outside every database file (:func:`artifact_secret`, in the user's cache directory). A
payload that another user's process wrote, that was copied under another key, or that was edited is a
miss, never decoded.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import threading
from pathlib import Path
from typing import Any

from ilargi_db.user_cache import cache_dir

SEAL_PREFIX = b"ilargi-hmac-sha256:"  # the seal's version: a payload without it is a miss
SECRET_FILE = "artifact_secret"  # random bytes in the user's cache directory, readable by the user alone
SECRET_BYTES = 32
_SECRET_LOCK = threading.Lock()


def secret_path(directory: str | os.PathLike | None = None) -> Path:
    """Where the secret is kept: in the user's cache directory (``directory`` instead, given one)."""
    return cache_dir(directory).absolute() / SECRET_FILE


def artifact_secret(directory: str | os.PathLike | None = None) -> bytes | None:
    """The secret sealing this user's artifacts (made on first use); None where it cannot be kept safely.

    It lives outside every database file, so a file that someone else wrote (or edited) cannot carry
    payloads this process accepts. Only a regular file of 32 bytes, owned by this user and readable by no
    one else, is believed. Without one the database tier is off: nothing is loaded or stored.
    """
    path = secret_path(directory)
    with _SECRET_LOCK:
        found = _read_secret(path)
        if found is not None or path.exists() or path.is_symlink():
            return found
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:  # another process made it first
            return _read_secret(path)
        except OSError:
            return None
        with os.fdopen(fd, "wb") as out:
            out.write(secrets.token_bytes(SECRET_BYTES))
        return _read_secret(path)


def _read_secret(path: Any) -> bytes | None:
    """The secret at ``path`` if it is one this user alone could have written; None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        found = os.fstat(fd)
        mine = not hasattr(os, "getuid") or found.st_uid == os.getuid()
        if not stat.S_ISREG(found.st_mode) or not mine or found.st_mode & 0o077:
            return None  # a directory, a FIFO, another user's file or one others may write: not a secret
        secret = os.read(fd, SECRET_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return secret if len(secret) == SECRET_BYTES else None


def seal(secret: bytes, key: str, kind: str, payload: bytes) -> bytes:
    """``payload`` with an HMAC over its key, its kind and its bytes in front."""
    return SEAL_PREFIX + _mac(secret, key, kind, payload) + payload


def unseal(secret: bytes, key: str, kind: str, sealed: bytes) -> bytes | None:
    """The payload :func:`seal` sealed for ``key`` and ``kind`` with ``secret``; None for anything else."""
    head = len(SEAL_PREFIX) + hashlib.sha256().digest_size
    if len(sealed) < head or not sealed.startswith(SEAL_PREFIX):
        return None
    payload = sealed[head:]
    if not hmac.compare_digest(sealed[len(SEAL_PREFIX) : head], _mac(secret, key, kind, payload)):
        return None
    return payload


def sealer(secret: bytes, key: str, kind: str) -> Any:
    """An HMAC-SHA256 over ``key`` and ``kind`` to which the payload's bytes are fed as they are written or
    read (one pass over them: a file is hashed while it is read, never read twice)."""
    message = hmac.new(secret, digestmod=hashlib.sha256)
    for part in (key.encode(), kind.encode()):
        message.update(len(part).to_bytes(8, "little") + part)
    return message


def _mac(secret: bytes, key: str, kind: str, payload: bytes) -> bytes:
    message = sealer(secret, key, kind)
    message.update(payload)
    return message.digest()


__all__ = [
    "SEAL_PREFIX",
    "SECRET_BYTES",
    "SECRET_FILE",
    "artifact_secret",
    "seal",
    "sealer",
    "secret_path",
    "unseal",
]
