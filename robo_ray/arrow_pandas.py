"""Keep pyarrow from importing pandas in a process that never hands it a pandas object (the in-process CLI run).

pyarrow asks "is pandas there?" on its first `pa.array(...)` (its lazy pandas shim) and its first
`Array.to_numpy()` (Arrow C++'s once-only import of pandas' NaT / NA, `InitPandasStaticData`), and that question
imports pandas: ~0.45 CPU s here, 12% of a whole LeRobot v2.1 -> v3.0 copy run (bench/lerobot_copy.py)
and 4% of an RLDS -> LeRobot conversion, for nothing: robo-ray builds and reads Arrow arrays from numpy only. Both
ask once, without raising, and remember the answer; a call that needs pandas (`to_pandas`, `Table.from_pandas`)
asks the shim again, raising, and imports it then. `defer_pandas_import` makes those first, silent questions
answer "no" (`import pandas` refused during two tiny conversions), so pandas is imported only by a call that
really uses it (pandas' NaT / NA are then not recognised as nulls in Python sequences: robo-ray never builds
arrays from pandas objects).

Only for a process robo-ray owns (the console script's in-process run): in a process that converts pandas objects
with pyarrow (Ray Data, a user's script) the shim would not recognise a Series until the first raising call.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pyarrow as pa


class _NoPandas:
    """A meta path finder that refuses `pandas` (sys.modules["pandas"] = None is not enough: Cython's import returns
    the None it finds there)."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas":
            raise ModuleNotFoundError("pandas hidden from pyarrow's first check", name="pandas")


def defer_pandas_import() -> bool:
    """Answer pyarrow's silent "have pandas?" with no; True when done, False when pandas is already imported (then
    nothing changes)."""
    if "pandas" in sys.modules:
        return False
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)  # type: ignore[arg-type]
    try:
        pa.array(np.zeros(1, dtype=np.int8)).to_numpy()  # the shim's first attempt, Arrow C++'s once-only one
        pa.array([0])  # (its sequence inference asks through the same once-only import)
    finally:
        sys.meta_path.remove(finder)  # type: ignore[arg-type]
    return "pandas" not in sys.modules
