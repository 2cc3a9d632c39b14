"""One level of list values of an Arrow array, without `pyarrow.compute`.

`ListArray.flatten()` goes through pyarrow.compute, whose first import builds every compute function's Python
wrapper and docstring (~0.08 CPU s here; pandas used to import it first, see robo_ray/arrow_pandas.py). A list
column of a parquet file (a state vector per row) only needs its values sliced by the array's offsets.
"""
from __future__ import annotations

import pyarrow as pa


def list_values(arr: pa.Array) -> pa.Array:
    """The values of the rows of a (fixed-size / large) list array, as `arr.flatten()` gives them for an array
    without null rows (a slice of an array included)."""
    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        return arr.values.slice(arr.offset * size, len(arr) * size)
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        if len(arr) == 0:
            return arr.values.slice(0, 0)
        offsets = arr.offsets
        first, last = offsets[0].as_py(), offsets[len(arr)].as_py()
        return arr.values.slice(first, last - first)
    raise TypeError(f"not a list array: {arr.type}")
