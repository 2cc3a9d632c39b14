"""ORTF v0.2 writer (no other tool writes ORTF): any source robo-ray reads (LeRobot, Minari, ORTF) -> an ORTF
dataset that the ORTF reader validates (../specs/ortf_v0.2.txt).

The episode goes through the same default mapping and `UnitConverter.convert_episode` as an RLDS conversion (so
the flags, reward, discount and instruction are exactly what RLDS would get), images losslessly as PNG; then it is
laid out as ORTF: `data/chunk-NNN/steps.parquet` (observation tensors as `observation.state.<component>`,
`action`, boundary flags, `reward`/`discount` when the source has them, `task_id` per step when an episode changes
task), one MP4 per camera and episode (H.264; `lossless=True` uses libx264rgb at crf 0, so frames decode to the
very source pixels; 16-bit depth uses FFV1 gray16le), `meta/episodes.parquet`, `meta/tasks.jsonl`,
`meta/manifest.json` and `meta/stats.json`.

Python API: `write_ortf(source_url, out_url, ...) -> OrtfWriteResult`.
"""
from __future__ import annotations

import io
import json
import os
import re
import tempfile
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any, Iterable

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robo_ray.episode import QuarantineRecord
from robo_ray.errors import DestinationNotEmpty, EpisodeError
from robo_ray.images import decode_image
from robo_ray.mapping import FieldMap, ImageOptions, Mapping, default_mapping
from robo_ray.readers import open_reader
from robo_ray.stages.convert import ConvertOptions, UnitConverter, spooled_steps
from robo_ray.spool import BytesSpool, spool_for
from robo_ray.storage import is_empty_dir, is_local, join, url_to_fs, write_bytes_atomic, write_text_atomic

ORTF_VERSION = "0.2"
DEFAULT_FPS = 10.0


@dataclass
class OrtfWriteResult:
    out_url: str
    episodes: int
    steps: int
    cameras: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    quarantined: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Layout:
    """How mapping targets become ORTF columns and cameras."""

    columns: dict[str, str]  # RLDS target -> steps.parquet column
    cameras: dict[str, FieldMap]  # camera name -> image field
    reward: bool
    discount: bool


def _name(part: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", part).strip("_") or "cam"


def plan_layout(mapping: Mapping) -> _Layout:
    columns: dict[str, str] = {}
    for fm in mapping.steps:
        if fm.kind != "tensor":
            continue
        t = fm.target
        if t == "observation/state":
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
    return _Layout(columns, cameras, d.reward_source is not None, d.discount_source is not None)


def _list_array(arr: np.ndarray) -> pa.Array:
    """(T, ...) -> fixed_size_list column (flattened per step), or a plain column for scalars."""
    if arr.ndim == 1:
        return pa.array(arr)
    flat = arr.reshape(len(arr), -1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])


def encode_video(path: str, frames: Iterable[np.ndarray], fps: float, depth: bool, lossless: bool,
                 crf: int = 18) -> int:
    """Frames -> MP4 with pts k in time base 1/fps (frame k at k/fps). Returns the frame count."""
    rate = Fraction(fps).limit_denominator(1001)
    n = 0
    with av.open(path, "w", format="mp4") as c:
        stream = None
        for arr in frames:
            if stream is None:
                h, w = arr.shape[:2]
                if depth:
                    stream = c.add_stream("ffv1", rate=rate)
                    stream.pix_fmt = "gray16le"
                elif lossless or h % 2 or w % 2:
                    stream = c.add_stream("libx264rgb", rate=rate)
                    stream.pix_fmt = "rgb24"
                    stream.options = {"crf": "0" if lossless else str(crf), "preset": "veryfast", "g": "2",
                                      "bf": "0"}
                else:
                    stream = c.add_stream("libx264", rate=rate)
                    stream.pix_fmt = "yuv420p"
                    stream.options = {"crf": str(crf), "preset": "veryfast", "g": "2", "bf": "0"}
                stream.width, stream.height = w, h
                stream.time_base = 1 / rate
            if depth:
                frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(arr.reshape(arr.shape[:2]), dtype="<u2"),
                                                   format="gray16le")
            else:
                frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(arr[:, :, :3]), format="rgb24")
            frame.pts = n
            for p in stream.encode(frame):
                c.mux(p)
            n += 1
        if stream is not None:
            for p in stream.encode():
                c.mux(p)
    return n


class _Out:
    """Writes files under the output root through fsspec (MP4s go through a local temp file)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None) -> None:
        self.fs, self.root = url_to_fs(url, storage_options)
        self.files: list[str] = []

    def put_bytes(self, rel: str, data: bytes) -> None:
        write_bytes_atomic(self.fs, join(self.root, rel), data)
        self.files.append(rel)

    def put_text(self, rel: str, text: str) -> None:
        write_text_atomic(self.fs, join(self.root, rel), text)
        self.files.append(rel)

    def put_parquet(self, rel: str, table: pa.Table) -> None:
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        self.put_bytes(rel, buf.getvalue())

    def new_spool(self) -> BytesSpool:
        return spool_for(self.fs, self.root)

    def put_video(self, rel: str, frames: Iterable[np.ndarray], fps: float, depth: bool, lossless: bool,
                  crf: int) -> int:
        dest = join(self.root, rel)
        if is_local(self.fs):
            os.makedirs(os.path.dirname(dest), exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".mp4", dir=os.path.dirname(dest) if is_local(self.fs) else None)
        os.close(fd)
        try:
            n = encode_video(tmp, frames, fps, depth, lossless, crf)
            if is_local(self.fs):
                os.replace(tmp, dest)
            else:
                self.fs.put_file(tmp, dest)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        self.files.append(rel)
        return n


def write_ortf(source_url: str, out_url: str, *, source_format: str | None = None,
               storage_options: dict[str, Any] | None = None, out_storage_options: dict[str, Any] | None = None,
               max_episodes: int | None = None, fps: float | None = None, lossless: bool = False, crf: int = 18,
               chunk_size: int = 1000, name: str | None = None, overwrite: bool = False,
               created_at: str | None = None) -> OrtfWriteResult:
    """Convert a source dataset to ORTF v0.2 at `out_url` (which must be empty unless `overwrite`)."""
    out = _Out(out_url, out_storage_options)
    if not is_empty_dir(out.fs, out.root):
        if not overwrite:
            raise DestinationNotEmpty(f"destination {out_url} is not empty (use overwrite=True)")
        out.fs.rm(out.root, recursive=True)
    reader = open_reader(source_url, source_format, storage_options)
    inv = reader.discover()
    refs = inv.refs[:max_episodes] if max_episodes else inv.refs
    mapping = default_mapping(inv, ImageOptions(encoding="png"))
    mapping.check_against(inv.features)
    layout = plan_layout(mapping)
    rate = float(fps or inv.fps or DEFAULT_FPS)
    # the converter's own target is never written (episodes come back through convert_episode); long camera
    # spools spill inside the destination when it is local (the system temp dir otherwise)
    conv = UnitConverter(source_url, source_format, mapping, out_url,
                         ConvertOptions(source_storage_options=storage_options or {}), reader=reader)
    try:
        result = _write(conv, refs, mapping, layout, out, rate, lossless, crf, chunk_size)
    finally:
        conv.close()
    _write_meta(out, inv, mapping, layout, result, rate, name, created_at, lossless)
    return OrtfWriteResult(out_url, result["episodes"], result["steps"], list(layout.cameras), out.files,
                           result["quarantined"])


def _write(conv: UnitConverter, refs: list, mapping: Mapping, layout: _Layout, out: _Out, fps: float,
           lossless: bool, crf: int, chunk_size: int) -> dict[str, Any]:
    tasks: list[str] = []
    chunks: dict[int, list[pa.Table]] = {}
    rows: list[dict[str, Any]] = []
    per_step_tasks = False
    shapes: dict[str, list[int]] = {}
    stats: dict[str, list[np.ndarray]] = {}
    start = 0
    quarantined: list[dict[str, Any]] = []
    for ref in refs:
        with spooled_steps() as steps:
            try:
                meta = conv.convert_episode(ref, steps, out.new_spool)
            except EpisodeError as exc:  # nothing lost silently: recorded and reported, the rest converts
                rec = QuarantineRecord(ref.episode_index, exc.code, str(exc), ref.data_path)
                quarantined.append(rec.to_dict())
                continue
            n = len(steps["is_first"])
            chunk = ref.episode_index // chunk_size
            ep_id = f"{ref.episode_index:06d}"
            lang = [b.decode("utf-8") for b in steps["language_instruction"]]
            for t in lang:
                if t not in tasks:
                    tasks.append(t)
            task_ids = np.array([tasks.index(t) for t in lang], dtype=np.int64)
            per_step_tasks |= len(set(lang)) > 1
            cols: dict[str, pa.Array] = {
                "episode_id": pa.array([ep_id] * n), "step_index": pa.array(np.arange(n, dtype=np.int64)),
                "timestamp": pa.array(np.arange(n, dtype=np.float64) / fps),
                "is_first": pa.array(steps["is_first"]), "is_last": pa.array(steps["is_last"]),
                "is_terminal": pa.array(steps["is_terminal"])}
            for target, col in layout.columns.items():
                arr = np.asarray(steps[target])
                fm = next(f for f in mapping.steps if f.target == target)
                arr = arr.reshape((n, *fm.shape))
                cols[col] = _list_array(arr)
                shapes[col] = list(fm.shape)
                if arr.dtype.kind == "f":
                    stats.setdefault(col, []).append(arr.reshape(n, -1))
            if layout.reward:
                cols["reward"] = pa.array(np.asarray(steps["reward"], np.float32))
            if layout.discount:
                cols["discount"] = pa.array(np.asarray(steps["discount"], np.float32))
            video_files: dict[str, str] = {}
            for cam, fm in layout.cameras.items():
                cols[f"observation.images.{cam}.frame_index"] = pa.array(np.arange(n, dtype=np.int64))
                rel = f"videos/{cam}/chunk-{chunk:03d}/episode_{ref.episode_index:06d}.mp4"
                depth = fm.dtype == "uint16"
                frames = (_decode_png(b, depth, fm.shape[2]) for b in steps[fm.target])
                if out.put_video(rel, frames, fps, depth, lossless, crf) != n:
                    raise RuntimeError(f"{rel}: frame count differs from the {n} steps")
                video_files[cam] = rel
            cols["task_id"] = pa.array(task_ids)
            chunks.setdefault(chunk, []).append(pa.table(cols))
            rows.append({"episode_id": ep_id, "task_id": int(task_ids[0]) if n else 0, "start_step": start,
                         "end_step": start + n, "length": n, "duration_seconds": n / fps, "success": None,
                         "failure_reason": None, "operator_notes": "", "chunk_id": chunk, "recorded_at": None,
                         "video_files": video_files or None, "audio_file": None,
                         "source_metadata": json.dumps(meta, sort_keys=True, default=str)})
            start += n
    for chunk, tables in sorted(chunks.items()):
        table = pa.concat_tables(tables)
        if not per_step_tasks:
            table = table.drop_columns(["task_id"])
        out.put_parquet(f"data/chunk-{chunk:03d}/steps.parquet", table)
    ep_table = pa.Table.from_pylist(rows, schema=_episodes_schema(list(layout.cameras)))
    out.put_parquet("meta/episodes.parquet", ep_table)
    out.put_text("meta/tasks.jsonl", "".join(json.dumps({"task_id": i, "type": f"task_{i}", "instruction": t,
                                                         "description": t}) + "\n" for i, t in enumerate(tasks)))
    stat_json = {}
    for col, parts in stats.items():
        a = np.concatenate(parts).astype(np.float64)
        stat_json[col] = {"mean": a.mean(0).tolist(), "std": a.std(0).tolist(), "min": a.min(0).tolist(),
                          "max": a.max(0).tolist(), "count": int(a.shape[0])}
    out.put_text("meta/stats.json", json.dumps(stat_json, indent=2))
    return {"episodes": len(rows), "steps": start, "shapes": shapes, "quarantined": quarantined}


def _decode_png(data: bytes, depth: bool, channels: int) -> np.ndarray:
    if depth:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as im:
            return np.asarray(im).astype(np.uint16)
    arr = decode_image(data, 3)
    return arr


def _episodes_schema(cameras: list[str]) -> pa.Schema:
    fields = [("episode_id", pa.string()), ("task_id", pa.int64()), ("start_step", pa.int64()),
              ("end_step", pa.int64()), ("length", pa.int64()), ("duration_seconds", pa.float64()),
              ("success", pa.bool_()), ("failure_reason", pa.string()), ("operator_notes", pa.string()),
              ("chunk_id", pa.int64()), ("recorded_at", pa.string())]
    if cameras:
        fields.append(("video_files", pa.struct([(c, pa.string()) for c in cameras])))
    fields += [("audio_file", pa.string()), ("source_metadata", pa.string())]
    return pa.schema(fields)


def _write_meta(out: _Out, inv: Any, mapping: Mapping, layout: _Layout, result: dict[str, Any], fps: float,
                name: str | None, created_at: str | None, lossless: bool) -> None:
    shapes = result["shapes"]
    action_dim = int(np.prod(shapes.get("action", [0]) or [1])) if "action" in shapes else 0
    state = {col[len("observation.state."):]: {"dim": int(np.prod(shape or [1])), "units": "unknown"}
             for col, shape in shapes.items() if col.startswith("observation.state.")}
    sensors, images = [], {}
    for cam, fm in layout.cameras.items():
        h, w = fm.shape[:2]
        depth = fm.dtype == "uint16"
        sensor = {"name": f"{cam}_depth" if depth else f"{cam}_rgb", "type": "depth_camera" if depth else "camera",
                  "mount": "unknown", "resolution": {"width": w, "height": h}, "fps": fps,
                  "encoding": "ffv1" if depth else "h264"}
        if depth:
            sensor.update({"bit_depth": 16, "depth_units": "millimeters"})
        sensors.append(sensor)
        images[cam] = sensor["name"]
    title = name or inv.dataset_name
    manifest = {
        "ortf_version": ORTF_VERSION,
        "dataset_id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"robo-ray:{inv.source_format}:{title}")),
        "name": title,
        "description": f"Converted by robo-ray from {inv.source_format} {inv.source_version}",
        "created_at": created_at or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "license": "unknown",
        "robot": {"id": inv.robot_type or "unknown", "name": inv.robot_type or "unknown", "type": "unknown",
                  "dof": action_dim, "joints": []},
        "action_space": {"type": "unknown", "frame": "unknown", "control_frequency_hz": fps,
                         "dimensions": [{"name": f"a{i}", "index": i, "type": "continuous", "units": "unknown"}
                                        for i in range(action_dim)]},
        "observation_space": {"state": state, "images": images},
        "sensors": sensors,
        "frames": {"world": {"type": "fixed", "convention": "z_up", "description": "unknown source frame"}},
        "collection": {"operator": "unknown", "interface": "converted by robo-ray",
                       "source_format": f"{inv.source_format} {inv.source_version}"},
        "statistics": {"total_episodes": result["episodes"], "total_steps": result["steps"],
                       "total_duration_hours": result["steps"] / fps / 3600.0},
        "timestamp_reference": "episode_start",
        "sync_tolerance_ms": round(500.0 / fps, 3),
        "video_lossless": lossless,
    }
    out.put_text("meta/manifest.json", json.dumps(manifest, indent=2))
