"""A fast generator of big state-only LeRobot v3.0 datasets (no cameras), for the scale-out bench.

    python -m bench.gen_state_only OUT --episodes 200000 --length 5            # 1M steps, a few seconds
    python -m bench.gen_state_only OUT --episodes 2000 --length 20 --tasks 4 --episodes-per-file 500

Same layout, columns, types and metadata as tests/fixtures/lerobot_gen.py (and lerobot 0.4.x) write for v3.0:
data/chunk-XXX/file-XXX.parquet (observation.state, action, timestamp, frame_index, episode_index, index,
task_index; the `huggingface` schema metadata), meta/episodes/chunk-000/file-000.parquet (episode_index, tasks,
length, data/chunk_index, data/file_index, dataset_from_index, dataset_to_index, per-episode stats/<key>/<stat>
columns, meta/episodes/chunk_index, meta/episodes/file_index), meta/tasks.parquet, meta/stats.json, meta/info.json.
Every column is built as one numpy array for the whole dataset (every episode has the same length, so per-episode
statistics are reductions over axis 1 of an (episodes, length, dims) array): the fixture generator builds one arrow
table and runs the statistics once per episode (930 s for 20,000 x 20 steps).

Differences from the fixture generator, on purpose: the values come from one random stream for the whole dataset
(not one seed per episode), and data files are written in row groups of whole episodes, about `ROW_GROUP_ROWS`
rows each, rather than one row group per episode as lerobot HEAD does (`--episodes-per-row-group 1` does that too:
200,000 row groups make a parquet footer of ~100 MB).
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.fixtures.lerobot_gen import (DEFAULT_TASK, QUANTILES, V3_DATA_PATH, V3_EPISODES_PATH, DatasetSpec,
                                        _base_info, _hf_features, info_features)

ROW_GROUP_ROWS = 100_000
STAT_NAMES = ("min", "max", "mean", "std", "count", *QUANTILES)


def task_names(n: int) -> list[str]:
    """`n` distinct task strings, the first the fixtures' default."""
    return [DEFAULT_TASK] + [f"{DEFAULT_TASK} {i}" for i in range(1, n)]


def _list_column(values: np.ndarray) -> pa.Array:
    """(N, k) -> list<element> column (lerobot's per-episode stats are variable-size lists, not fixed-size)."""
    n, k = values.shape
    offsets = pa.array(np.arange(0, (n + 1) * k, k, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(values.reshape(-1)))


def _episode_stats(values: np.ndarray, integer: bool) -> dict[str, np.ndarray]:
    """Per-episode statistics of an (N, L, D) array, each (N, D): as lerobot's get_feature_stats on one episode
    (min/max keep the column's type, quantiles of the float64 values, count = L)."""
    st = {"min": values.min(axis=1), "max": values.max(axis=1),
          "mean": values.mean(axis=1, dtype=np.float64), "std": values.std(axis=1, dtype=np.float64),
          "count": np.full((values.shape[0], 1), values.shape[1], dtype=np.int64)}
    if not integer:
        st["min"], st["max"] = st["min"].astype(np.float64), st["max"].astype(np.float64)
    as_float = values.astype(np.float64)
    for name, q in QUANTILES.items():
        st[name] = np.quantile(as_float, q, axis=1)
    return st


def _global_stats(flat: np.ndarray, integer: bool) -> dict[str, list]:
    """meta/stats.json entry of an (S, D) column (scalar columns: D = 1, 1-element lists as lerobot writes)."""
    st: dict[str, np.ndarray] = {"min": flat.min(axis=0), "max": flat.max(axis=0),
                                 "mean": flat.mean(axis=0, dtype=np.float64), "std": flat.std(axis=0, dtype=np.float64),
                                 "count": np.array([flat.shape[0]])}
    as_float = flat.astype(np.float64)
    for name, q in QUANTILES.items():
        st[name] = np.quantile(as_float, q, axis=0)
    if not integer:
        st["min"], st["max"] = st["min"].astype(np.float64), st["max"].astype(np.float64)
    return {n: np.asarray(st[n]).tolist() for n in STAT_NAMES}


def generate(root: pathlib.Path, episodes: int, length: int, *, state_dim: int = 6, action_dim: int = 4,
             fps: int = 20, tasks: int = 1, episodes_per_file: int = 0, episodes_per_row_group: int = 0,
             chunks_size: int = 1000, seed: int = 0) -> pathlib.Path:
    """Write the dataset under `root` (created; must not hold another dataset). Returns `root`.
    `episodes_per_file` / `episodes_per_row_group`: 0 = one data file / row groups of about ROW_GROUP_ROWS rows."""
    if episodes < 1 or length < 1 or tasks < 1 or state_dim < 1 or action_dim < 1:
        raise ValueError("episodes, length, tasks, state_dim and action_dim must be positive")
    root = pathlib.Path(root)
    root.mkdir(parents=True, exist_ok=True)
    spec = DatasetSpec(version="v3.0", episode_lengths=[length] * episodes, fps=fps, cameras=[],
                       state_dim=state_dim, action_dim=action_dim, chunks_size=chunks_size,
                       episodes_per_file=episodes_per_file)
    feats = info_features(spec)
    names = task_names(tasks)
    n, steps = episodes, episodes * length
    rng = np.random.default_rng(seed)
    # per-step columns, (N, L, D) views of flat (S, D) arrays
    state = np.cumsum(rng.normal(0.0, 0.05, (n, length, state_dim)), axis=1).astype(np.float32)
    action = rng.uniform(-1.0, 1.0, (n, length, action_dim)).astype(np.float32)
    ep_task = np.arange(n, dtype=np.int64) % tasks
    frame_index = np.broadcast_to(np.arange(length, dtype=np.int64), (n, length))
    columns: dict[str, np.ndarray] = {
        "observation.state": state,
        "action": action,
        "timestamp": (frame_index / np.float32(fps)).astype(np.float32)[..., None],
        "frame_index": frame_index[..., None],
        "episode_index": np.repeat(np.arange(n, dtype=np.int64), length).reshape(n, length, 1),
        "index": np.arange(steps, dtype=np.int64).reshape(n, length, 1),
        "task_index": np.repeat(ep_task, length).reshape(n, length, 1),
    }

    # data files: episodes_per_file episodes each (0 = one file), files_per_chunk = chunks_size
    per_file = episodes_per_file or n
    hf_meta = {"huggingface": json.dumps({"info": {"features": _hf_features(spec, feats)}})}
    file_of_ep = np.arange(n) // per_file
    for file_no in range(math.ceil(n / per_file)):
        lo, hi = file_no * per_file, min(n, (file_no + 1) * per_file)
        chunk, file_idx = divmod(file_no, chunks_size)
        arrays, fields = [], []
        for key, ft in feats.items():
            block = columns[key][lo:hi].reshape((hi - lo) * length, -1)
            if ft["shape"] != [1]:
                arr = pa.FixedSizeListArray.from_arrays(pa.array(block.reshape(-1)), block.shape[1])
            else:
                arr = pa.array(block.reshape(-1))
            arrays.append(arr)
            fields.append(pa.field(key, arr.type))
        table = pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=hf_meta))
        path = root / V3_DATA_PATH.format(chunk_index=chunk, file_index=file_idx)
        path.parent.mkdir(parents=True, exist_ok=True)
        per_group = episodes_per_row_group or max(1, ROW_GROUP_ROWS // length)
        pq.write_table(table, path, compression="snappy", row_group_size=per_group * length)

    # meta/episodes: location columns, then per-episode stats (lerobot's order)
    chunk_of_ep, fidx_of_ep = np.divmod(file_of_ep, chunks_size)
    starts = np.arange(n, dtype=np.int64) * length
    task_lists = pa.DictionaryArray.from_arrays(pa.array(ep_task.astype(np.int32)), pa.array(names)).cast(pa.string())
    ep_cols: dict[str, pa.Array] = {
        "episode_index": pa.array(np.arange(n, dtype=np.int64)),
        "tasks": pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)), task_lists),
        "length": pa.array(np.full(n, length, dtype=np.int64)),
        "data/chunk_index": pa.array(chunk_of_ep.astype(np.int64)),
        "data/file_index": pa.array(fidx_of_ep.astype(np.int64)),
        "dataset_from_index": pa.array(starts),
        "dataset_to_index": pa.array(starts + length),
    }
    stats_json: dict[str, dict[str, list]] = {}
    for key, values in columns.items():
        integer = values.dtype.kind in "iu"
        if key == "timestamp":  # lerobot's episode buffer holds float64 frame_index / fps
            values = (frame_index / fps)[..., None]
        for name, arr in _episode_stats(values, integer).items():
            ep_cols[f"stats/{key}/{name}"] = _list_column(arr)
        stats_json[key] = _global_stats(values.reshape(steps, -1), integer)
    ep_cols["meta/episodes/chunk_index"] = pa.array(np.zeros(n, dtype=np.int64))
    ep_cols["meta/episodes/file_index"] = pa.array(np.zeros(n, dtype=np.int64))
    ep_path = root / V3_EPISODES_PATH.format(chunk_index=0, file_index=0)
    ep_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(ep_cols), ep_path, compression="snappy")

    # meta/tasks.parquet as lerobot writes it (pandas, the task text as the index), meta/stats.json, info.json
    import pandas as pd

    pd.DataFrame({"task_index": list(range(tasks))}, index=pd.Index(names, name="task")).to_parquet(
        root / "meta" / "tasks.parquet")
    _write_json(root / "meta" / "stats.json", stats_json)
    info = _base_info(spec, feats, tasks)
    info.update({"chunks_size": chunks_size, "data_files_size_in_mb": 100, "video_files_size_in_mb": 200,
                 "fps": fps, "splits": {"train": f"0:{n}"}, "data_path": V3_DATA_PATH, "video_path": None,
                 "features": feats})
    _write_json(root / "meta" / "info.json", info)  # video_path null: no videos, as lerobot writes it
    return root


def _write_json(path: pathlib.Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=4, ensure_ascii=False))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--length", type=int, default=5, help="steps per episode (all episodes alike)")
    ap.add_argument("--state-dim", type=int, default=6)
    ap.add_argument("--action-dim", type=int, default=4)
    ap.add_argument("--fps", type=int, default=20)
    ap.add_argument("--tasks", type=int, default=1, help="distinct task strings (episode i gets task i %% N)")
    ap.add_argument("--episodes-per-file", type=int, default=0, help="episodes per data file (0 = one file)")
    ap.add_argument("--episodes-per-row-group", type=int, default=0,
                    help=f"episodes per parquet row group (0 = about {ROW_GROUP_ROWS} rows; 1 = as lerobot HEAD)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.out.exists() and any(a.out.iterdir()):
        print(f"{a.out} is not empty", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    generate(a.out, a.episodes, a.length, state_dim=a.state_dim, action_dim=a.action_dim, fps=a.fps,
             tasks=a.tasks, episodes_per_file=a.episodes_per_file,
             episodes_per_row_group=a.episodes_per_row_group, seed=a.seed)
    print(f"wrote {a.episodes} x {a.length} steps (LeRobot v3.0, state only) to {a.out} "
          f"in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
