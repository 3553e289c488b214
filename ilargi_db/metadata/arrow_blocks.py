"""From DuckDB results to Arrow to NumPy, copying only where a copy is needed.

See docs/architecture.md ("Where copies happen").
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from ilargi_db.errors import IlargiError


def fetch_arrow(con: duckdb.DuckDBPyConnection, sql: str, *, what: str, params: list | None = None) -> pa.Table:
    """Run ``sql`` (``params``: the values of its ``?``) and return its result as an Arrow table."""
    try:
        relation = con.sql(sql, params=params) if params else con.sql(sql)
        if hasattr(relation, "to_arrow_table"):
            return relation.to_arrow_table()
        return relation.fetch_arrow_table()  # pragma: no cover - DuckDB < 1.4
    except duckdb.Error as err:
        raise IlargiError(f"DuckDB failed while computing {what}: {str(err).strip()}") from None


def arrow_to_numpy(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Arrow values as a 1-D NumPy array, as pyarrow's ``to_numpy(zero_copy_only=False)`` gives them: a view of
    one null-free chunk of numbers, else one copy; NULL numbers NaN (integers with NULLs as DOUBLE).

    Numbers and booleans are read from their buffers here: pyarrow's ``to_numpy`` imports pandas on first use
    (0.25 s in a new process, more than a small training's read). Other types go through pyarrow.
    """
    if isinstance(values, pa.ChunkedArray):
        if values.num_chunks == 1:
            return arrow_to_numpy(values.chunk(0))
        if values.num_chunks == 0:
            return np.empty(0, dtype=_NUMPY_TYPES.get(values.type, np.float64))
        return np.concatenate([arrow_to_numpy(chunk) for chunk in values.chunks])
    if values.type == pa.bool_() and values.null_count == 0:
        return _bitmap(values, 1)
    dtype = _NUMPY_TYPES.get(values.type)
    if dtype is None:
        return values.to_numpy(zero_copy_only=False)
    data = _values(values, dtype)
    return data if values.null_count == 0 else np.where(_bitmap(values, 0), data, np.nan)


def _bitmap(values: pa.Array, buffer: int) -> np.ndarray:
    """Buffer ``buffer`` of ``values`` (0: validity, 1: a boolean's data), a bit per value, as booleans."""
    bits = np.frombuffer(values.buffers()[buffer], dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little", count=values.offset + len(values))[values.offset :].astype(bool)


def _values(values: pa.Array, dtype: np.dtype) -> np.ndarray:
    """The data buffer of fixed-width ``values`` as a read-only view (NULL slots hold whatever the buffer has)."""
    start = values.offset * np.dtype(dtype).itemsize
    return np.frombuffer(values.buffers()[1], dtype=dtype, count=len(values), offset=start)


_NUMPY_TYPES = {
    pa.float64(): np.float64,
    pa.float32(): np.float32,
    **{
        getattr(pa, f"{sign}int{bits}")(): np.dtype(f"{sign}int{bits}")
        for sign in ("", "u")
        for bits in (8, 16, 32, 64)
    },
}


def filled_integers(values: pa.Array | pa.ChunkedArray, fill: int) -> np.ndarray:
    """Integer Arrow values (codes, positions) as int64, NULL as ``fill``: ``fill_null`` with a Python number
    would build an Arrow scalar, which imports pandas."""
    if isinstance(values, pa.ChunkedArray):
        parts = [filled_integers(chunk, fill) for chunk in values.chunks]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    dtype = _NUMPY_TYPES.get(values.type)
    if dtype is None or np.dtype(dtype).kind not in "iu":
        raise TypeError(f"filled_integers reads integers, not {values.type}")
    data = _values(values, dtype).astype(np.int64)
    return data if values.null_count == 0 else np.where(_bitmap(values, 0), data, fill)


def numpy_to_arrow(values: np.ndarray) -> pa.Array:
    """A 1-D NumPy array of numbers or booleans as an Arrow array without NULLs, made from its buffer (``pa.array``
    imports pandas). Anything else (2-D, dates, another byte order) is refused: its buffer would read wrongly."""
    values = np.ascontiguousarray(values)
    if values.ndim != 1 or values.dtype.kind not in "biuf" or not values.dtype.isnative:
        raise TypeError(f"numpy_to_arrow takes a 1-D array of numbers or booleans, not {values.ndim}-D {values.dtype}")
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def string_array(values: list[str | None] | tuple[str | None, ...]) -> pa.Array:
    """Text as an Arrow string array (None as NULL), made from its UTF-8 bytes (``pa.array`` imports pandas)."""
    encoded = [b"" if v is None else v.encode("utf-8") for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    nulls = np.array([v is None for v in values], dtype=np.bool_)
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if nulls.any() else None
    data = pa.py_buffer(b"".join(encoded))
    return pa.Array.from_buffers(pa.string(), len(encoded), [validity, pa.py_buffer(offsets), data], int(nulls.sum()))


def column_to_numpy(column: pa.ChunkedArray) -> np.ndarray:
    """One column as a 1-D array: a view when it is one null-free chunk, else one copy."""
    return arrow_to_numpy(column)


def arrow_to_block(table: pa.Table, names: list[str], dtype: np.dtype = np.float64) -> np.ndarray:
    """Stack Arrow columns into one column-major (Fortran-order) 2-D block.

    Each null-free chunk is read through a zero-copy NumPy view and written once
    into its place in the block: building the block is the only copy. NULLs
    become NaN (a NULL stored in a source is a missing value).
    """
    block = np.empty((table.num_rows, len(names)), dtype=dtype, order="F")
    for j, name in enumerate(names):
        offset = 0
        for chunk in table.column(name).chunks:
            values = arrow_to_numpy(chunk)
            block[offset : offset + len(values), j] = values
            offset += len(values)
    return block
