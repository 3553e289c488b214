"""Arrow values to and from NumPy through their buffers (metadata/arrow_blocks.py): the same values, types and
NULLs as pyarrow's own conversions, which import pandas."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ilargi_db.metadata.arrow_blocks import arrow_to_numpy, filled_integers, numpy_to_arrow, string_array

TYPES = [pa.float64(), pa.float32(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint64(), pa.bool_()]


@st.composite
def arrow_values(draw):
    kind = draw(st.sampled_from(TYPES))
    n = draw(st.integers(0, 40))
    if kind == pa.bool_():
        values = draw(st.lists(st.booleans() | st.none(), min_size=n, max_size=n))
    elif pa.types.is_floating(kind):
        values = draw(st.lists(st.floats(width=32, allow_nan=False) | st.none(), min_size=n, max_size=n))
    else:
        low = 0 if pa.types.is_unsigned_integer(kind) else -100
        values = draw(st.lists(st.integers(low, 100) | st.none(), min_size=n, max_size=n))
    array = pa.array(values, type=kind)
    start = draw(st.integers(0, n))
    return array.slice(start, draw(st.integers(0, n - start)))  # an offset into the buffers too


@settings(max_examples=200, deadline=None)
@given(arrow_values(), st.integers(1, 3))
def test_arrow_to_numpy_gives_what_pyarrow_gives(array, chunks):
    if array.type == pa.bool_() and array.null_count:
        return  # pyarrow gives objects there; ilargi_db never reads NULL booleans this way
    expected = array.to_numpy(zero_copy_only=False)
    got = arrow_to_numpy(array)
    assert got.dtype == expected.dtype and np.array_equal(got, expected, equal_nan=True)
    chunked = pa.chunked_array([array] * chunks, type=array.type)
    assert np.array_equal(arrow_to_numpy(chunked), chunked.to_numpy(), equal_nan=True)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-5, 5) | st.none(), max_size=30), st.integers(-2, 9))
def test_filled_integers_are_fill_null(values, fill):
    array = pa.array(values, type=pa.int32())
    assert np.array_equal(filled_integers(array, fill), array.fill_null(fill).to_numpy().astype(np.int64))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text() | st.none(), max_size=20))
def test_string_array_is_pyarrows(values):
    assert string_array(values).equals(pa.array(values, type=pa.string()))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2**31), max_size=30), st.sampled_from([np.int64, np.int32, np.float64, np.bool_]))
def test_numpy_to_arrow_is_pyarrows(values, dtype):
    array = np.asarray(values).astype(dtype)
    assert numpy_to_arrow(array).equals(pa.array(array))
    assert numpy_to_arrow(array[::2]).equals(pa.array(array[::2]))  # not contiguous


@pytest.mark.parametrize(
    "values",
    [
        np.zeros((2, 3)),  # 2-D: its first values would pass for the array
        np.array(["2020-01-01", "2021-06-01"], dtype="datetime64[D]"),  # 8-byte days read as 4-byte dates
        np.array([1, 2], dtype=">i8"),  # big-endian bytes read as little-endian
    ],
)
def test_numpy_to_arrow_refuses_what_its_buffer_would_misread(values):
    with pytest.raises(TypeError, match="1-D array of numbers or booleans"):
        numpy_to_arrow(values)
