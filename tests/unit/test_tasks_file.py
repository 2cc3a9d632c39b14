"""meta/tasks.parquet written and read without pandas, compared with pandas itself (what lerobot uses)."""
from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from robo_ray.formats.lerobot.tasks_file import read_tasks, tasks_parquet

TASKS = ["pick up the red cube", "", "put it in the bowl \u00e9\u4e2d", "pick up the red cube "]


def _pandas_bytes(tasks: list[str]) -> bytes:
    """What lerobot writes: its DataFrame with the task strings as the index."""
    df = pd.DataFrame({"task_index": np.arange(len(tasks), dtype=np.int64)}, index=pd.Index(tasks, name="task"))
    buf = io.BytesIO()
    df.to_parquet(buf)
    return buf.getvalue()


@pytest.mark.parametrize("tasks", [TASKS, ["one"], []])
def test_pandas_reads_our_file_as_it_reads_lerobots(tasks: list[str]) -> None:
    ours = pd.read_parquet(io.BytesIO(tasks_parquet(tasks)))
    theirs = pd.read_parquet(io.BytesIO(_pandas_bytes(tasks)))
    assert ours.index.name == "task" and list(ours.index) == tasks
    assert list(ours.columns) == ["task_index"] and ours["task_index"].dtype == np.int64
    pd.testing.assert_frame_equal(ours, theirs, check_index_type=False)
    if tasks:  # lerobot's lookup: the task string -> its index
        assert int(ours.loc[tasks[-1]]["task_index"]) == len(tasks) - 1


@pytest.mark.parametrize("make", [tasks_parquet, _pandas_bytes])
def test_read_tasks_sees_what_pandas_sees(make) -> None:
    tf = read_tasks(make(TASKS))
    assert (tf.index_name, tf.tasks, tf.task_index) == ("task", TASKS, [0, 1, 2, 3])


def test_a_file_without_the_index_metadata_has_no_task_index() -> None:
    """A task column that is not the pandas index (what `df.reset_index().to_parquet()` writes) is not lerobot's
    layout: read_tasks names no index, so the validation check fails."""
    df = pd.DataFrame({"task_index": [0, 1], "task": ["a", "b"]})
    buf = io.BytesIO()
    df.to_parquet(buf)
    tf = read_tasks(buf.getvalue())
    assert tf.index_name is None and tf.tasks == []
    tf = read_tasks(tasks_parquet(["a", "b"]))
    assert tf.index_name == "task"


def test_writing_and_reading_import_no_pandas() -> None:
    """Once pyarrow's first pandas check is answered (robo_ray.arrow_pandas), neither side imports pandas."""
    code = ("import sys; from robo_ray.arrow_pandas import defer_pandas_import; assert defer_pandas_import(); "
            "from robo_ray.formats.lerobot.tasks_file import read_tasks, tasks_parquet; "
            "t = read_tasks(tasks_parquet(['a', 'b'])); assert t.tasks == ['a', 'b']; "
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
