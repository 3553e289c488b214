"""The artifact codec: a payload (a dict of NumPy arrays, Arrow arrays and JSON values) as stored bytes, and back.

An uncompressed NumPy ``.npz`` archive, never a pickle: each NumPy array a member, each Arrow array an
Arrow IPC stream in a member, the JSON values one member. An int64 array whose values fit int32 (row
positions and rowids, mostly) is stored as int32 and read back as int64: half the bytes to write, and
DuckDB holds a multiple of a BLOB's size in memory while it inserts one. Reading refuses what :func:`pack` would not
write (a compressed member, members larger than the payload), reads with ``allow_pickle=False``, and
validates every Arrow array in full.
"""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import numpy as np
import pyarrow as pa


def pack(value: dict[str, Any]) -> bytes:
    """A dict of arrays, Arrow arrays and JSON values as one ``.npz`` archive."""
    arrays: dict[str, np.ndarray] = {}
    plain: dict[str, Any] = {}
    for name, item in value.items():
        if isinstance(item, np.ndarray) and _fits_int32(item):
            arrays[f"w:{name}"] = item.astype(np.int32)
        elif isinstance(item, np.ndarray):
            arrays[f"n:{name}"] = item
        elif isinstance(item, (pa.Array, pa.ChunkedArray)):
            chunked = item if isinstance(item, pa.ChunkedArray) else pa.chunked_array([item])
            sink = io.BytesIO()
            table = pa.table({"v": chunked})
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            arrays[f"a:{name}"] = np.frombuffer(sink.getvalue(), dtype=np.uint8)
        else:
            plain[name] = item
    arrays["j:"] = np.frombuffer(json.dumps(plain).encode(), dtype=np.uint8)
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def _fits_int32(array: np.ndarray) -> bool:
    """Whether ``array`` is int64 with every value in int32's range (then stored narrowed)."""
    if array.dtype != np.int64 or array.size == 0:
        return False
    info = np.iinfo(np.int32)
    return bool(info.min <= array.min() and array.max() <= info.max)


def unpack(payload: bytes) -> dict[str, Any]:
    """The dict :func:`pack` archived (``allow_pickle=False``: no object arrays, no code).

    Refuses (``ValueError``) an archive :func:`pack` would not write: a compressed member or one larger
    than the payload (a small zip must not expand to gigabytes), and Arrow arrays that fail full validation.
    """
    with zipfile.ZipFile(io.BytesIO(payload)) as archive:
        members = archive.infolist()
        if any(m.compress_type != zipfile.ZIP_STORED for m in members) or sum(m.file_size for m in members) > len(
            payload
        ):
            raise ValueError("not an archive ilargi_db writes (compressed, or larger than its payload)")
    value: dict[str, Any] = {}
    with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
        for name in archive.files:
            kind, _, key = name.partition(":")
            data = archive[name]
            if kind == "n":
                value[key] = data
            elif kind == "w":
                if data.dtype != np.int32:
                    raise ValueError("not an archive ilargi_db writes (a narrowed array that is not int32)")
                value[key] = data.astype(np.int64)
            elif kind == "a":
                with pa.ipc.open_stream(data.tobytes()) as reader:
                    table = reader.read_all()
                table.validate(full=True)
                value[key] = table.column("v").combine_chunks()
            else:
                value.update(json.loads(data.tobytes().decode()))
    return value


__all__ = ["pack", "unpack"]
