"""A fast generator of state-only LeRobot v3.0 datasets (many short episodes, no cameras) for the benches.

    python -m bench.gen_state_only OUT --episodes 20000 --steps 20       # seconds; the fixture generator: 930 s

The layout, columns, types and metadata are those of tests/fixtures/lerobot_gen.py for v3.0 (lerobot 0.4.x):

* data/chunk-000/file-000.parquet: observation.state (fixed_size_list<float32>[6]), action
  (fixed_size_list<float32>[4]), timestamp (float32), frame_index, episode_index, index, task_index (int64), the
  `huggingface` schema metadata; ONE ROW GROUP PER EPISODE, as lerobot writes it (our reader reads a unit's row
  groups only, so the row-group layout is part of what is measured);
* meta/episodes/chunk-000/file-000.parquet: episode_index, tasks, length, data/chunk_index, data/file_index,
  dataset_from_index, dataset_to_index, the per-episode stats/<feature>/<stat> columns (min, max, mean, std, count,
  q01..q99), meta/episodes/chunk_index, meta/episodes/file_index;
* meta/tasks.parquet (pandas, the task text as the index), meta/stats.json, meta/info.json (from the fixture's own
  `info_features` / `_base_info`, so info.json is the same as `python -m tests.fixtures.lerobot_gen` writes).

Every column is one numpy array for the whole dataset (all episodes have `steps` steps, so per-episode statistics
are reductions over axis 1 of an (episodes, steps, dims) array); the values come from one random stream (not one
seed per episode as in the fixture generator), so the numbers differ from the fixture's, not the layout.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.fixtures.lerobot_gen import (
    DEFAULT_TASK,
    QUANTILES,
    V3_DATA_PATH,
    V3_EPISODES_PATH,
    DatasetSpec,
    _base_info,
    _hf_features,
    info_features,
)

STAT_NAMES = ("min", "max", "mean", "std", "count", *QUANTILES)


def _stats(values: np.ndarray, axis: int) -> dict[str, np.ndarray]:
    """min/max/mean/std/count/quantiles along `axis` (lerobot's get_feature_stats: population std, quantiles of
    the float64 values; min/max keep an integer column's type)."""
    as_float = values.astype(np.float64)
    out = {"min": values.min(axis=axis), "max": values.max(axis=axis),
           "mean": as_float.mean(axis=axis), "std": as_float.std(axis=axis)}
    if values.dtype.kind == "f":
        out["min"], out["max"] = out["min"].astype(np.float64), out["max"].astype(np.float64)
    shape = out["mean"].shape[:-1] + (1,)
    out["count"] = np.full(shape, values.shape[axis], dtype=np.int64)
    for name, q in QUANTILES.items():
        out[name] = np.quantile(as_float, q, axis=axis)
    return out


def _list_column(values: np.ndarray) -> pa.Array:
    """(N, k) -> list<...> column (the fixture writes its stats from python lists: variable-size lists)."""
    n, k = values.shape
    return pa.ListArray.from_arrays(pa.array(np.arange(0, (n + 1) * k, k, dtype=np.int32)),
                                    pa.array(values.reshape(-1)))


def _write_json(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=4, ensure_ascii=False))


def write_state_only_v30(root: Path, episodes: int, steps: int, *, state_dim: int = 6, action_dim: int = 4,
                         fps: int = 20, seed: int = 0) -> Path:
    """Write a LeRobot v3.0 dataset of `episodes` x `steps` state-only steps under `root` (created; must not hold
    another dataset), one data file with one row group per episode. Returns `root`."""
    if episodes < 1 or steps < 1 or state_dim < 1 or action_dim < 1:
        raise ValueError("episodes, steps, state_dim and action_dim must be positive")
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"{root} is not empty")
    root.mkdir(parents=True, exist_ok=True)
    spec = DatasetSpec(version="v3.0", episode_lengths=[steps] * episodes, fps=fps, cameras=[],
                       state_dim=state_dim, action_dim=action_dim)
    feats = info_features(spec)  # observation.state, action, timestamp, frame_index, episode_index, index, task_index
    n, total = episodes, episodes * steps
    rng = np.random.default_rng(seed)
    frame_index = np.broadcast_to(np.arange(steps, dtype=np.int64), (n, steps))
    cols: dict[str, np.ndarray] = {  # (episodes, steps, dims)
        "observation.state": np.cumsum(rng.normal(0.0, 0.05, (n, steps, state_dim)), axis=1).astype(np.float32),
        "action": rng.uniform(-1.0, 1.0, (n, steps, action_dim)).astype(np.float32),
        "timestamp": (frame_index / np.float32(fps)).astype(np.float32)[..., None],
        "frame_index": frame_index[..., None],
        "episode_index": np.repeat(np.arange(n, dtype=np.int64), steps).reshape(n, steps, 1),
        "index": np.arange(total, dtype=np.int64).reshape(n, steps, 1),
        "task_index": np.zeros((n, steps, 1), dtype=np.int64),
    }
    assert list(cols) == list(feats), (list(cols), list(feats))

    arrays, fields = [], []
    for key, ft in feats.items():
        flat = cols[key].reshape(total, -1)
        arr = (pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1]) if ft["shape"] != [1]
               else pa.array(flat.reshape(-1)))
        arrays.append(arr)
        fields.append(pa.field(key, arr.type))
    meta = {"huggingface": json.dumps({"info": {"features": _hf_features(spec, feats)}})}
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=meta))
    data_path = root / V3_DATA_PATH.format(chunk_index=0, file_index=0)
    data_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, data_path, compression="snappy", use_dictionary=True, row_group_size=steps)

    starts = np.arange(n, dtype=np.int64) * steps
    ep_cols: dict[str, pa.Array] = {
        "episode_index": pa.array(np.arange(n, dtype=np.int64)),
        "tasks": pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)),
                                          pa.array([DEFAULT_TASK] * n, type=pa.string())),
        "length": pa.array(np.full(n, steps, dtype=np.int64)),
        "data/chunk_index": pa.array(np.zeros(n, dtype=np.int64)),
        "data/file_index": pa.array(np.zeros(n, dtype=np.int64)),
        "dataset_from_index": pa.array(starts),
        "dataset_to_index": pa.array(starts + steps),
    }
    stats_json: dict[str, dict[str, list]] = {}
    for key, values in cols.items():
        if key == "timestamp":  # lerobot's episode buffer holds float64 frame_index / fps
            values = (frame_index / fps)[..., None]
        for name, arr in _stats(values, axis=1).items():
            ep_cols[f"stats/{key}/{name}"] = _list_column(arr)
        glob = _stats(values.reshape(total, -1), axis=0)
        stats_json[key] = {name: np.asarray(glob[name]).tolist() for name in STAT_NAMES}
    ep_cols["meta/episodes/chunk_index"] = pa.array(np.zeros(n, dtype=np.int64))
    ep_cols["meta/episodes/file_index"] = pa.array(np.zeros(n, dtype=np.int64))
    ep_path = root / V3_EPISODES_PATH.format(chunk_index=0, file_index=0)
    ep_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(ep_cols), ep_path, compression="snappy")

    import pandas as pd

    pd.DataFrame({"task_index": [0]}, index=pd.Index([DEFAULT_TASK], name="task")).to_parquet(
        root / "meta" / "tasks.parquet")
    _write_json(root / "meta" / "stats.json", stats_json)
    info = _base_info(spec, feats, 1)
    info.update({"chunks_size": spec.chunks_size, "data_files_size_in_mb": 100, "video_files_size_in_mb": 200,
                 "fps": fps, "splits": {"train": f"0:{n}"}, "data_path": V3_DATA_PATH, "video_path": None,
                 "features": feats})
    _write_json(root / "meta" / "info.json", info)
    return root


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--episodes", type=int, default=20000)
    ap.add_argument("--steps", type=int, default=20, help="steps per episode (all alike)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        write_state_only_v30(a.out, a.episodes, a.steps, seed=a.seed)
    except FileExistsError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"wrote {a.episodes} x {a.steps} steps (LeRobot v3.0, state only, one row group per episode) to {a.out} "
          f"in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
