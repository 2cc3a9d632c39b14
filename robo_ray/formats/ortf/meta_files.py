"""The ORTF meta/ files from the units' results: meta/episodes.parquet, meta/tasks.jsonl (`task_table`),
meta/stats.json (the units' sums merged) and meta/manifest.json. Pure: verify rebuilds them to find edits."""
from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from robo_ray.formats.ortf.layout import (EPISODES, MANIFEST, ORTF_VERSION, STATS, TASKS, episode_id,
                                          episodes_schema, parquet_bytes)
from robo_ray.readers.base import Inventory
from robo_ray.writers.base import UnitResult

if TYPE_CHECKING:
    from robo_ray.formats.ortf.writer import OrtfWriter


def task_table(results: list[UnitResult], inv: Inventory) -> list[str]:
    """Global task ids: the reader's tasks first, then tasks first seen at write time, in episode order."""
    table = list(dict.fromkeys(inv.tasks))
    seen = set(table)
    for r in results:
        for row in r.extra.get("episodes", []):
            for t in row["tasks"]:
                if t not in seen:
                    seen.add(t)
                    table.append(t)
    return table


def build_meta(w: "OrtfWriter", results: list[UnitResult], inv: Inventory) -> dict[str, bytes]:
    """meta/ files from the unit results (pure: verify rebuilds them to find edits). Manifest last."""
    results = sorted(results, key=lambda r: r.shard_index)
    fps = w.fps(inv)
    tasks = task_table(results, inv)
    ids = {t: i for i, t in enumerate(tasks)}
    cams = list(w.layout.cameras)
    rows: list[dict[str, Any]] = []
    start = 0
    for r in results:
        for row in r.extra.get("episodes", []):
            n = int(row["length"])
            rows.append({"episode_id": episode_id(int(row["index"])),
                         "task_id": ids[row["tasks"][0]] if row["tasks"] else None,
                         "start_step": start, "end_step": start + n, "length": n, "duration_seconds": n / fps,
                         "success": None, "failure_reason": None, "operator_notes": "", "chunk_id": r.shard_index,
                         "recorded_at": None, "video_files": row["videos"] or None, "audio_file": None,
                         "source_metadata": row["meta"]})
            start += n
    if not cams:
        for row in rows:
            row.pop("video_files")
    out = {EPISODES: parquet_bytes(pa.Table.from_pylist(rows, schema=episodes_schema(cams))),
           TASKS: "".join(json.dumps({"task_id": i, "type": f"task_{i}", "instruction": t, "description": t})
                          + "\n" for i, t in enumerate(tasks)).encode(),
           STATS: json.dumps(merged_stats(w, results), indent=2).encode()}
    out[MANIFEST] = json.dumps(manifest(w, inv, len(rows), start, fps), indent=2).encode()
    return out


def merged_stats(w: "OrtfWriter", results: list[UnitResult]) -> dict[str, Any]:
    merged: dict[str, dict[str, Any]] = {}
    for r in results:
        for col, s in r.extra.get("stats", {}).items():
            m = merged.get(col)
            arrs = {k: np.asarray(s[k], np.float64) for k in ("sum", "sumsq", "min", "max")}
            if m is None:
                merged[col] = {"count": int(s["count"]), **arrs}
            else:
                m["count"] += int(s["count"])
                m["sum"], m["sumsq"] = m["sum"] + arrs["sum"], m["sumsq"] + arrs["sumsq"]
                m["min"], m["max"] = np.minimum(m["min"], arrs["min"]), np.maximum(m["max"], arrs["max"])
    out: dict[str, Any] = {}
    for col in w.layout.columns.values():
        m = merged.get(col)
        if m is None or not m["count"]:
            continue
        mean = m["sum"] / m["count"]
        std = np.sqrt(np.maximum(m["sumsq"] / m["count"] - mean * mean, 0.0))
        out[col] = {"mean": mean.tolist(), "std": std.tolist(), "min": m["min"].tolist(),
                    "max": m["max"].tolist(), "count": int(m["count"])}
    return out


def manifest(w: "OrtfWriter", inv: Inventory, episodes: int, steps: int, fps: float) -> dict[str, Any]:
    shapes = {col: w.layout.field_of(w.mapping, t).shape for t, col in w.layout.columns.items()}
    action_dim = int(np.prod(shapes["action"] or [1])) if "action" in shapes else 0
    state = {col[len("observation.state."):]: {"dim": int(np.prod(shape or [1])), "units": "unknown"}
             for col, shape in shapes.items() if col.startswith("observation.state.")}
    sensors, images = [], {}
    for cam, fm in w.layout.cameras.items():
        height, width = fm.shape[:2]
        depth = fm.dtype == "uint16"
        sensor = {"name": f"{cam}_depth" if depth else f"{cam}_rgb",
                  "type": "depth_camera" if depth else "camera", "mount": "unknown",
                  "resolution": {"width": width, "height": height}, "fps": fps, "encoding": "ffv1" if depth else "h264"}
        if depth:
            sensor.update({"bit_depth": 16, "depth_units": "millimeters"})
        sensors.append(sensor)
        images[cam] = sensor["name"]
    title = w.options.name or inv.dataset_name
    return {
        "ortf_version": ORTF_VERSION,
        "dataset_id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"robo-ray:{inv.source_format}:{title}")),
        "name": title,
        "description": f"Converted by robo-ray from {inv.source_format} {inv.source_version}",
        "created_at": w.options.created_at or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
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
        "statistics": {"total_episodes": episodes, "total_steps": steps,
                       "total_duration_hours": steps / fps / 3600.0},
        "timestamp_reference": "episode_start",
        "sync_tolerance_ms": round(500.0 / fps, 3),
        "video_lossless": w.options.lossless,
    }
