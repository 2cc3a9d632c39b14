"""robo_ray.arrow_lists.list_values equals pyarrow's flatten on every list kind, sliced or not."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from robo_ray.arrow_lists import list_values

VALUES = pa.array(np.arange(12, dtype=np.float32))
OFFSETS = np.array([0, 3, 3, 7, 12], dtype=np.int32)


def _arrays() -> list[pa.Array]:
    fixed = pa.FixedSizeListArray.from_arrays(VALUES, 3)
    lst = pa.ListArray.from_arrays(pa.array(OFFSETS), VALUES)
    large = pa.LargeListArray.from_arrays(pa.array(OFFSETS.astype(np.int64)), VALUES)
    nested = pa.FixedSizeListArray.from_arrays(pa.FixedSizeListArray.from_arrays(VALUES, 2), 2)
    out = []
    for a in (fixed, lst, large, nested):
        out += [a, a.slice(1), a.slice(1, 2), a.slice(len(a) - 1), a.slice(2, 0)]
    return out


@pytest.mark.parametrize("arr", _arrays(), ids=lambda a: f"{a.type}-{a.offset}-{len(a)}")
def test_equals_flatten(arr: pa.Array) -> None:
    got = list_values(arr)
    assert got.type == arr.flatten().type
    assert got.to_pylist() == arr.flatten().to_pylist()


def test_not_a_list() -> None:
    with pytest.raises(TypeError):
        list_values(VALUES)


def test_does_not_import_pyarrow_compute() -> None:
    """(pandas would import pyarrow.compute itself: its import is deferred first, as the CLI's run does)"""
    code = ("import sys, numpy as np, pyarrow as pa\nfrom robo_ray.arrow_pandas import defer_pandas_import\n"
            "defer_pandas_import()\nfrom robo_ray.arrow_lists import list_values\n"
            "a = pa.FixedSizeListArray.from_arrays(pa.array([1.0, 2.0, 3.0, 4.0]), 2).slice(1)\n"
            "assert list_values(a).to_pylist() == [3.0, 4.0]\n"
            "print('pyarrow.compute' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
