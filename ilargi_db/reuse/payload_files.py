"""The database tier's payloads: one file per artifact in a directory beside the database file.

``<database file>.ilargi/`` holds each stored artifact's bytes in the :mod:`~ilargi_db.reuse.codec` layout,
read back at the speed of the disk (or the page cache): a BLOB read back from DuckDB ran at about
250 MB/s in a new process. The database's ``ilargi.artifacts_store`` keeps the index (key, kind, sizes,
hits) and, in each row, the payload file's name and seal (:func:`stub`): an HMAC-SHA256 over the key,
the kind and the file's bytes under this user's secret (:mod:`~ilargi_db.reuse.seal`).

Nothing read from the directory is believed before its seal checks, and the bytes are hashed as they are
read into the one buffer the arrays are then views of (one pass). Against what someone could plant there:

- a file swapped, edited, truncated or grown, or copied from another database's directory under another
  key: its seal does not check (or its size is not the indexed one): a miss;
- a symlink (as the directory or a file in it), a FIFO or device, a file or directory of another user's,
  a directory others may write: not followed, not read, not written (``O_NOFOLLOW``, ``fstat`` checks,
  every file opened relative to the directory's own descriptor);
- two writers: each file is written under a unique temporary name and renamed into place (atomic), under
  a name no other write uses, so a reader sees a whole file or none.
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ilargi_db.reuse.codec import pack_parts, unpack
from ilargi_db.reuse.seal import SEAL_PREFIX, sealer

DIRECTORY_SUFFIX = ".ilargi"  # the payloads of database file x.duckdb live in x.duckdb.ilargi/
PAYLOAD_NAME = re.compile(r"[0-9a-f]{32}\.npa")  # what the store names a payload file (and nothing else)
TEMPORARY_PREFIX = ".writing-"  # a payload file being written, renamed into place once whole
READ_CHUNK = 1 << 22  # bytes read and hashed at a time: the chunk is still in cache when hashed
TAG_BYTES = 32  # an HMAC-SHA256
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def directory_of(database: str) -> Path:
    """Where the payloads of database file ``database`` live."""
    return Path(os.path.realpath(database) + DIRECTORY_SUFFIX)


def _mine(found: os.stat_result) -> bool:
    return not hasattr(os, "getuid") or found.st_uid == os.getuid()


@contextmanager
def opened_directory(database: str, create: bool = False) -> Iterator[int | None]:
    """A descriptor of ``database``'s payload directory (made, private, when ``create``); None where there is
    none, or it is not a plain directory of this user's that others cannot write (then it is left alone)."""
    path = directory_of(database)
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError:
            yield None
            return
    try:
        fd = os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW)
    except OSError:
        yield None
        return
    try:
        found = os.fstat(fd)
        usable = stat.S_ISDIR(found.st_mode) and _mine(found) and not found.st_mode & 0o022
        yield fd if usable else None
    finally:
        os.close(fd)


def usable_directory(database: str) -> bool:
    """Whether ``database``'s payload directory is absent (made when first needed) or one the store uses."""
    if not os.path.lexists(directory_of(database)):
        return True
    with opened_directory(database) as directory:
        return directory is not None


def write(directory: int, secret: bytes, key: str, kind: str, value: dict[str, Any]) -> bytes:
    """Write ``value`` as a new payload file in ``directory``; the index row's payload: :func:`stub`."""
    name = f"{secrets.token_hex(16)}.npa"
    temporary = f"{TEMPORARY_PREFIX}{name}"
    message = sealer(secret, key, kind)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in pack_parts(value):
                message.update(part)
                out.write(part)
        os.rename(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        remove(directory, [temporary])
        raise
    return stub(message.digest(), name)


def stub(tag: bytes, name: str) -> bytes:
    """What the index row holds for a payload file: the seal's version, its tag, the file's name."""
    return SEAL_PREFIX + tag + name.encode()


def file_name(row_payload: Any) -> str | None:
    """The payload file an index row names (None for anything that is not a :func:`stub`)."""
    if not isinstance(row_payload, (bytes, bytearray, memoryview)):
        return None
    head = len(SEAL_PREFIX) + TAG_BYTES
    raw = bytes(row_payload)
    name = raw[head:].decode("ascii", errors="replace")
    return name if raw.startswith(SEAL_PREFIX) and PAYLOAD_NAME.fullmatch(name) else None


def read(directory: int, secret: bytes, key: str, kind: str, row_payload: bytes, nbytes: int) -> dict | None:
    """The payload the index row ``row_payload`` seals for ``key`` and ``kind``, if its file is the one sealed
    (``nbytes`` long, hashed as it is read); None for anything else."""
    name = file_name(row_payload)
    if name is None:
        return None
    tag = bytes(row_payload)[len(SEAL_PREFIX) : len(SEAL_PREFIX) + TAG_BYTES]
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0), dir_fd=directory)
    except OSError:
        return None
    with os.fdopen(fd, "rb", buffering=0) as source:
        found = os.fstat(fd)
        if not (stat.S_ISREG(found.st_mode) and _mine(found) and found.st_size == nbytes):
            return None
        buffer = np.empty(nbytes, dtype=np.uint8)  # writable: training may clear values in place
        view = memoryview(buffer)
        message = sealer(secret, key, kind)
        at = 0
        while at < nbytes:
            n = source.readinto(view[at : at + READ_CHUNK])
            if not n:
                return None  # cut short while read
            message.update(view[at : at + n])
            at += n
    if not hmac.compare_digest(message.digest(), tag):
        return None
    return unpack(buffer)


def remove(directory: int, names: list[str]) -> None:
    """Delete these payload files (those already gone are no matter)."""
    for name in names:
        try:
            os.unlink(name, dir_fd=directory)
        except OSError:
            pass


def every_file(directory: int) -> list[str]:
    """Every payload file, whole or being written, in ``directory``."""
    return [name for name in os.listdir(directory) if PAYLOAD_NAME.fullmatch(name.removeprefix(TEMPORARY_PREFIX))]


def size_on_disk(directory: int, names: list[str]) -> int:
    """Bytes these payload files take."""
    total = 0
    for name in names:
        try:
            total += os.stat(name, dir_fd=directory, follow_symlinks=False).st_size
        except OSError:
            pass
    return total


__all__ = [
    "DIRECTORY_SUFFIX",
    "directory_of",
    "every_file",
    "file_name",
    "opened_directory",
    "read",
    "remove",
    "size_on_disk",
    "stub",
    "usable_directory",
    "write",
]
