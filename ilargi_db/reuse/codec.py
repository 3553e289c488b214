"""The artifact codec: a payload (a dict of NumPy arrays, Arrow arrays and JSON values) as stored bytes, and back.

An uncompressed NumPy ``.npz`` archive, never a pickle: each NumPy array a member, each Arrow array an
Arrow IPC stream in a member, the JSON values one member. Reading refuses what :func:`pack` would not
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
        if isinstance(item, np.ndarray):
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
            elif kind == "a":
                with pa.ipc.open_stream(data.tobytes()) as reader:
                    table = reader.read_all()
                table.validate(full=True)
                value[key] = table.column("v").combine_chunks()
            else:
                value.update(json.loads(data.tobytes().decode()))
    return value


__all__ = ["pack", "unpack"]
