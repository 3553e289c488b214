"""Refuse training values that double precision cannot learn from: inf, and magnitudes whose squares overflow.

Training sums squares and products of values (Gram matrices, squared
distances, losses). A value beyond :data:`LARGEST_MAGNITUDE` overflows there
and surfaces much later as NaN, or as a model of NaNs. Both strategies check
the values they read (only the rows the join uses), and refuse with the column's
name, the value and what to do. NaN is a missing value, like NULL, and passes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ilargi_db.errors import IlargiError
from ilargi_db.metadata.arrow_blocks import arrow_to_numpy
from ilargi_db.metadata.di_metadata import DIMetadata

# Its square summed over 10^8 rows (1e308) still fits a double (1.8e308).
LARGEST_MAGNITUDE = 1e150


def _out_of_range(values: np.ndarray, axis: int | None = None) -> np.ndarray:
    """Per column (or overall), whether some value is inf or beyond the largest magnitude (NaN ignored)."""
    if values.shape[0] == 0:
        return np.zeros(values.shape[1:] if axis == 0 else (), dtype=bool)
    high = np.fmax.reduce(values, axis=axis)  # fmax skips NaN and allocates no |values| temporary
    low = np.fmin.reduce(values, axis=axis)
    return (high > LARGEST_MAGNITUDE) | (low < -LARGEST_MAGNITUDE)


def check_values(values: np.ndarray, name: str, what: str = "feature", uses: np.ndarray | None = None) -> None:
    """Raise :class:`IlargiError` if ``values`` (one column) hold inf or a magnitude beyond 1e150.

    ``uses[i]`` is how many training rows value ``i`` stands for (a dimension row
    joined several times); the message counts training rows.
    """
    values = np.asarray(values, dtype=np.float64)
    if not _out_of_range(values):
        return
    bad = np.abs(values) > LARGEST_MAGNITUDE
    worst = values[bad][np.argmax(np.abs(values[bad]))]
    rows = int(np.count_nonzero(bad) if uses is None else uses[bad].sum())
    where = f"in {rows} row{'s' if rows > 1 else ''}"
    if np.isinf(worst):
        raise IlargiError(
            f"{what} {name!r} holds {worst} {where}: ilargi_db trains and evaluates on finite numbers. Leave those "
            "rows out (WHERE isfinite(...)) or replace the value in the query."
        )
    raise IlargiError(
        f"{what} {name!r} holds {worst:.6g} {where}: beyond +-1e150, a value's square overflows double precision "
        "in the sums of squares that training computes. Scale the column in the query (e.g. divide it by a power "
        "of ten) or leave those rows out."
    )


def check_metadata_values(meta: DIMetadata, target_name: str | None = None) -> None:
    """Check every numeric value the join uses, the fill of empty rows, and the target."""
    for block in meta.blocks:
        for j in np.flatnonzero(_out_of_range(block.data, axis=0)):
            # Rows no output row takes do not count (they never appear in the training matrix).
            uses = np.bincount(block.indicator[block.indicator >= 0], minlength=block.n_source_rows)
            check_values(block.data[uses > 0, j], meta.feature_names[block.columns[j]], uses=uses[uses > 0])
        empty = np.count_nonzero(block.indicator == -1)
        if empty:
            for j, value in enumerate(block.fill):
                check_values(np.array([value]), meta.feature_names[block.columns[j]], uses=np.array([empty]))
    if target_name is not None and meta.target is not None:
        check_values(meta.target, target_name, "target")


def check_table_values(
    table: pa.Table, names: list[str], categorical: list[bool], target: np.ndarray | None, target_name: str | None
) -> None:
    """Check the numeric feature columns of a materialized join (in feature order) and its target."""
    for j, (name, flag) in enumerate(zip(names, categorical)):
        if flag:
            continue
        for chunk in table.column(j).chunks:
            check_values(arrow_to_numpy(chunk), name)  # a view when the chunk has no NULLs
    if target is not None and target_name is not None:
        check_values(target, target_name, "target")
