"""robo_ray.arrow_pandas: pyarrow's numpy conversions stop importing pandas; calls that need pandas still work."""
from __future__ import annotations

import subprocess
import sys

import pytest

PRELUDE = "import sys, numpy as np, pyarrow as pa\nfrom robo_ray.arrow_pandas import defer_pandas_import\n"


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", PRELUDE + code], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.parametrize("op", ["pa.array(np.arange(3))", "pa.array(np.arange(3)).to_numpy()",
                                "pa.chunked_array([pa.array(np.arange(3))] * 2).to_numpy()",
                                "pa.array(['a', None, 'b'])", "pa.array([1.5, None]).to_pylist()"])
def test_conversions_import_pandas_only_without_the_deferral(op: str) -> None:
    assert _run(f"{op}\nprint('pandas' in sys.modules)") == "True"  # pyarrow's own behaviour: the reason for this
    assert _run(f"assert defer_pandas_import()\n{op}\nprint('pandas' in sys.modules)") == "False"


def test_to_pandas_still_imports_and_converts() -> None:
    out = _run("defer_pandas_import()\n"
               "t = pa.table({'x': pa.array(np.arange(3)), 'd': pa.array(np.array(['2020-01-02'] * 3, "
               "dtype='datetime64[ns]'))})\n"
               "df = t.to_pandas()\nimport pandas as pd\n"
               "print(list(df['x']), str(df['d'].dtype), pa.array(pd.Series([1, 2])).type, 'pandas' in sys.modules)")
    assert out == "[0, 1, 2] datetime64[ns] int64 True"


def test_nothing_changes_once_pandas_is_imported() -> None:
    assert _run("import pandas\nprint(defer_pandas_import())") == "False"
