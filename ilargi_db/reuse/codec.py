"""The artifact codec: a payload (a dict of NumPy arrays, Arrow arrays and JSON values) as raw bytes, and back.

The layout is made to be read back at the disk's speed: a short header, then every array's bytes as they
are in memory, each at a 64-byte aligned offset, so decoding makes views into the buffer that was read
(no copy, no archive to parse). Never a pickle: the header is JSON, each NumPy member names a plain dtype
(booleans, integers, floats), and each Arrow array is an Arrow IPC stream validated in full when read.

    magic (8 bytes) | header length (8 bytes, little-endian) | header (JSON) | members, 64-byte aligned

Reading refuses (``ValueError``) anything :func:`pack_parts` would not write: another magic, a header
that is not JSON of this shape, a dtype not in :data:`PLAIN_KINDS`, a member outside the buffer.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

MAGIC = b"ILARGIA\x01"  # the layout's version: another one is refused
ALIGN = 64  # every member starts at a multiple of this (cache lines; any dtype's alignment)
PLAIN_KINDS = "biuf"  # NumPy dtype kinds a payload may hold: bool, signed, unsigned, float (no objects)


def _padding(size: int) -> bytes:
    return b"\0" * (-size % ALIGN)


def pack_parts(value: dict[str, Any]) -> list[memoryview]:
    """``value`` as the buffers to write one after the other (the arrays' own memory, not copied)."""
    arrays, arrow, plain = [], [], {}
    members: list[memoryview] = []
    offset = 0

    def place(data: memoryview) -> int:
        nonlocal offset
        start = offset
        members.append(data)
        pad = _padding(data.nbytes)
        if pad:
            members.append(memoryview(pad))
        offset += data.nbytes + len(pad)
        return start

    for name, item in value.items():
        if isinstance(item, np.ndarray) and item.dtype.kind in PLAIN_KINDS:
            # A column-major matrix (a block the kernels read column by column) is kept column-major.
            fortran = item.ndim > 1 and item.flags.f_contiguous and not item.flags.c_contiguous
            contiguous = np.ascontiguousarray(item.T if fortran else item)
            at = place(memoryview(contiguous).cast("B"))
            arrays.append([name, contiguous.dtype.str, list(item.shape), at, "F" if fortran else "C"])
        elif isinstance(item, (pa.Array, pa.ChunkedArray)):
            chunked = item if isinstance(item, pa.ChunkedArray) else pa.chunked_array([item])
            table = pa.table({"v": chunked})
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            stream = memoryview(sink.getvalue())
            arrow.append([name, place(stream), stream.nbytes])
        elif isinstance(item, np.ndarray):
            raise TypeError(f"an artifact's array {name!r} of dtype {item.dtype} is not plain data")
        else:
            plain[name] = item
    header = json.dumps({"arrays": arrays, "arrow": arrow, "plain": plain}).encode()
    start = len(MAGIC) + 8 + len(header)
    head = MAGIC + len(header).to_bytes(8, "little") + header + _padding(start)
    return [memoryview(head), *members]


def pack(value: dict[str, Any]) -> bytes:
    """``value`` as one bytes object (:func:`pack_parts` joined)."""
    return b"".join(pack_parts(value))


def unpack(buffer: bytes | bytearray | memoryview | np.ndarray) -> dict[str, Any]:
    """The dict :func:`pack` wrote, its arrays views into ``buffer`` (writable where ``buffer`` is)."""
    raw = np.frombuffer(buffer, dtype=np.uint8) if not isinstance(buffer, np.ndarray) else buffer.view(np.uint8)
    if raw.size < len(MAGIC) + 8 or raw[: len(MAGIC)].tobytes() != MAGIC:
        raise ValueError("not a payload ilargi_db writes (another magic)")
    length = int.from_bytes(raw[len(MAGIC) : len(MAGIC) + 8].tobytes(), "little")
    start = len(MAGIC) + 8 + length
    if start > raw.size:
        raise ValueError("not a payload ilargi_db writes (a header longer than the payload)")
    header = json.loads(raw[len(MAGIC) + 8 : start].tobytes().decode())
    body = raw[start + (-start % ALIGN) :]
    value: dict[str, Any] = dict(header["plain"])
    for name, dtype_text, shape, offset, order in header["arrays"]:
        dtype = np.dtype(dtype_text)
        if dtype.kind not in PLAIN_KINDS or dtype.hasobject:
            raise ValueError(f"not a payload ilargi_db writes (member {name!r} of dtype {dtype})")
        if not all(isinstance(n, int) and n >= 0 for n in shape) or order not in ("C", "F"):
            raise ValueError(f"not a payload ilargi_db writes (member {name!r} of shape {shape}, order {order})")
        flat = _member(body, offset, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize).view(dtype)
        value[name] = flat.reshape(shape) if order == "C" else flat.reshape(shape[::-1]).T
    for name, offset, nbytes in header["arrow"]:
        with pa.ipc.open_stream(pa.py_buffer(_member(body, offset, nbytes))) as reader:
            table = reader.read_all()
        table.validate(full=True)
        value[name] = table.column("v").combine_chunks()
    return value


def _member(body: np.ndarray, offset: Any, nbytes: int) -> np.ndarray:
    """Bytes ``[offset, offset + nbytes)`` of ``body``, refused unless they lie inside it."""
    if not (isinstance(offset, int) and 0 <= offset and offset % ALIGN == 0 and 0 <= nbytes <= body.size - offset):
        raise ValueError("not a payload ilargi_db writes (a member outside the payload)")
    return body[offset : offset + nbytes]


__all__ = ["ALIGN", "MAGIC", "PLAIN_KINDS", "pack", "pack_parts", "unpack"]
