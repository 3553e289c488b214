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


def column_to_numpy(column: pa.ChunkedArray) -> np.ndarray:
    """One column as a 1-D array: a view when it is one null-free chunk, else one copy."""
    if column.num_chunks == 1:
        return column.chunk(0).to_numpy(zero_copy_only=False)
    return column.to_numpy()


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
            values = chunk.to_numpy(zero_copy_only=False)
            block[offset : offset + len(values), j] = values
            offset += len(values)
    return block
