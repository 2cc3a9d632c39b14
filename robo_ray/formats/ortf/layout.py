"""What the ORTF writer and its verifier agree on: the dataset's file names, how mapping targets become steps.parquet
columns and cameras, the Arrow schemas, chunk and episode names, `parquet_bytes` (zstd)."""
from __future__ import annotations

import io
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robo_ray.mapping import FieldMap, Mapping

ORTF_VERSION = "0.2"
MANIFEST = "meta/manifest.json"
EPISODES = "meta/episodes.parquet"
TASKS = "meta/tasks.jsonl"
STATS = "meta/stats.json"


# ---- layout: mapping targets -> ORTF columns and cameras --------------------------------------------------------


@dataclass
class Layout:
    """How mapping targets become ORTF columns and cameras."""

    columns: dict[str, str]  # tensor target -> steps.parquet column
    texts: dict[str, str]  # text target -> string column
    cameras: dict[str, FieldMap]  # camera name -> image field
    reward: bool
    discount: bool

    def field_of(self, mapping: Mapping, target: str) -> FieldMap:
        return next(f for f in mapping.steps if f.target == target)


def _name(part: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", part).strip("_") or "cam"


def plan_layout(mapping: Mapping) -> Layout:
    columns: dict[str, str] = {}
    texts: dict[str, str] = {}
    for fm in mapping.steps:
        t = fm.target
        if fm.kind == "text":
            texts[t] = t.replace("/", ".")
        elif fm.kind != "tensor":
            continue
        elif t == "observation/state":
            columns[t] = "observation.state.state"
        elif t.startswith("observation/"):
            columns[t] = "observation.state." + t[len("observation/"):].replace("/", ".")
        else:
            columns[t] = t.replace("/", ".")
    cameras: dict[str, FieldMap] = {}
    for fm in mapping.image_maps():
        base = _name(re.split(r"[./]", fm.source)[-1])
        cam, k = base, 2
        while cam in cameras:
            cam, k = f"{base}_{k}", k + 1
        cameras[cam] = fm
    d = mapping.defaults
    return Layout(columns, texts, cameras, d.reward_source is not None, d.discount_source is not None)


_ARROW = {"float32": pa.float32(), "int64": pa.int64(), "bool": pa.bool_()}


def steps_schema(mapping: Mapping, layout: Layout, task_id: bool) -> pa.Schema:
    """The schema of every steps.parquet (`task_id` only in a chunk where an episode changes task)."""
    fields = [("episode_id", pa.string()), ("step_index", pa.int64()), ("timestamp", pa.float64()),
              ("is_first", pa.bool_()), ("is_last", pa.bool_()), ("is_terminal", pa.bool_())]
    for target, col in layout.columns.items():
        fm = layout.field_of(mapping, target)
        t = _ARROW.get(fm.dtype, pa.float32())
        fields.append((col, pa.list_(t, int(np.prod(fm.shape))) if fm.shape else t))
    fields += [(col, pa.string()) for col in layout.texts.values()]
    if layout.reward:
        fields.append(("reward", pa.float32()))
    if layout.discount:
        fields.append(("discount", pa.float32()))
    fields += [(f"observation.images.{cam}.frame_index", pa.int64()) for cam in layout.cameras]
    if task_id:
        fields.append(("task_id", pa.int64()))
    return pa.schema(fields)


def episodes_schema(cameras: list[str]) -> pa.Schema:
    fields = [("episode_id", pa.string()), ("task_id", pa.int64()), ("start_step", pa.int64()),
              ("end_step", pa.int64()), ("length", pa.int64()), ("duration_seconds", pa.float64()),
              ("success", pa.bool_()), ("failure_reason", pa.string()), ("operator_notes", pa.string()),
              ("chunk_id", pa.int64()), ("recorded_at", pa.string())]
    if cameras:
        fields.append(("video_files", pa.struct([(c, pa.string()) for c in cameras])))
    fields += [("audio_file", pa.string()), ("source_metadata", pa.string())]
    return pa.schema(fields)


def chunk_name(index: int, num_units: int) -> str:
    """`chunk-NNN` (3 digits; 6 beyond 1000 chunks, as the spec says for very large datasets)."""
    return f"chunk-{index:0{3 if num_units <= 1000 else 6}d}"


def episode_id(index: int) -> str:
    """The episode's id in the output: its source episode index, zero-padded (the ORTF reader gives it back)."""
    return f"{index:06d}"


def parquet_bytes(table: pa.Table) -> bytes:
    """The bytes of an ORTF parquet file (zstd): steps.parquet and meta/episodes.parquet."""
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()
