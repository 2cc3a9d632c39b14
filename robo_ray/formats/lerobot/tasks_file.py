"""meta/tasks.parquet: the task strings as the pandas index "task" and their `task_index`, written and read with
pyarrow alone (importing pandas costs ~0.45 CPU s of a run; see robo_ray/arrow_pandas.py).

lerobot writes the file with `pd.DataFrame({"task_index": ...}, index=pd.Index(tasks, name="task")).to_parquet()`
and reads it with `pd.read_parquet`: what makes "task" the index is the schema's `pandas` metadata
(`index_columns`), which is what is written here, in the layout pandas 2 writes (string columns as `unicode` /
`object`; pandas 3 reads that layout too). tests/unit/test_tasks_file.py compares both ways with pandas itself.
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

INDEX = "task"


def _pandas_metadata() -> bytes:
    def column(name: str, pandas_type: str, numpy_type: str) -> dict[str, object]:
        return {"name": name, "field_name": name, "pandas_type": pandas_type, "numpy_type": numpy_type,
                "metadata": None}

    return json.dumps({
        "index_columns": [INDEX],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                            "metadata": {"encoding": "UTF-8"}}],
        "columns": [column("task_index", "int64", "int64"), column(INDEX, "unicode", "object")],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
    }).encode()


def tasks_parquet(tasks: list[str]) -> bytes:
    """The file's bytes for `tasks` in task_index order."""
    schema = pa.schema([("task_index", pa.int64()), (INDEX, pa.string())], metadata={b"pandas": _pandas_metadata()})
    table = pa.table([pa.array(np.arange(len(tasks), dtype=np.int64)), pa.array(tasks, type=pa.string())],
                     schema=schema)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


@dataclass(frozen=True)
class TasksFile:
    """What `pd.read_parquet` would make of the file: the index's name, the index (task strings), task_index."""

    index_name: str | None
    tasks: list[str]
    task_index: list[int]


def read_tasks(data: bytes) -> TasksFile:
    """Read the file as pandas would index it (the metadata's index column), without pandas."""
    table = pq.ParquetFile(io.BytesIO(data)).read()
    meta = table.schema.pandas_metadata or {}
    index_cols = [c for c in meta.get("index_columns", []) if isinstance(c, str)]  # a RangeIndex is a dict
    name = index_cols[0] if len(index_cols) == 1 and index_cols[0] in table.column_names else None
    tasks = [str(t) for t in table[name].to_pylist()] if name else []
    index = table["task_index"].to_pylist() if "task_index" in table.column_names else []
    return TasksFile(index_name=name, tasks=tasks, task_index=index)
