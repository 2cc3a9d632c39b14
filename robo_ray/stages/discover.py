"""Discover: inventory.json + episode_index.csv (pipeline_stages.md, stage A). Metadata only, no video decode."""
from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone
from typing import Any, Iterator

from robo_ray.readers.base import Inventory
from robo_ray.storage import join, write_chunks_atomic, write_text_atomic


def inventory_dict(inv: Inventory) -> dict[str, Any]:
    return {
        "dataset_name": inv.dataset_name,
        "dataset_root": inv.dataset_root,
        "source_format": inv.source_format,
        f"{inv.source_format}_version": inv.source_version,  # the spec's `lerobot_version`, for any source
        "source_version": inv.source_version,
        "detected_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "episodes_count": inv.episodes_count,
        "total_steps": inv.total_steps,
        "features": {
            k: {"dtype": f.dtype if f.kind == "tensor" else f.kind,
                "shape": list(f.declared_shape or f.shape),
                "shape_hwc": list(f.shape) if f.kind in ("image", "video") else None,
                "source": "video" if f.kind == "video" else inv.step_storage,
                "codec": f.codec}
            for k, f in inv.features.items()},
        "metadata": {"robot_type": inv.robot_type, "fps": inv.fps, "tasks": inv.tasks},
        "declared": inv.declared,
        "findings": [f.to_dict() for f in inv.findings],
    }


CSV_CHUNK_ROWS = 8192


def episode_index_rows(inv: Inventory, chunk_rows: int = CSV_CHUNK_ROWS) -> Iterator[str]:
    """episode_index.csv in pieces of `chunk_rows` rows (the header first)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["episode_id", "episode_index", "start_idx", "end_idx", "length", "task", "data_path", "video_path"])
    start = 0
    for k, r in enumerate(inv.refs, 1):
        s = r.global_from if r.global_from is not None else start
        e = r.global_to if r.global_to is not None else s + r.length
        w.writerow([f"ep_{r.episode_index:06d}", r.episode_index, s, e, r.length, "|".join(r.tasks), r.data_path,
                    ";".join(v.path for _, v in r.videos)])
        start = e
        if k % chunk_rows == 0:
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue()


def episode_index_csv(inv: Inventory) -> str:
    return "".join(episode_index_rows(inv))


def write_discover_outputs(fs, out_root: str, inv: Inventory) -> None:
    write_text_atomic(fs, join(out_root, "inventory.json"), json.dumps(inventory_dict(inv), indent=2))
    write_chunks_atomic(fs, join(out_root, "episode_index.csv"), episode_index_rows(inv))


def summarize(inv: Inventory) -> str:
    """A short human summary (also used by --dry-run)."""
    cams = [f"{k} ({f.codec or f.kind}, {f.shape[1]}x{f.shape[0]})" for k, f in inv.features.items()
            if f.kind in ("video", "image")]
    lines = [f"{inv.source_format} {inv.source_version}: {inv.episodes_count} episodes, {inv.total_steps} frames, "
             f"{inv.fps:g} fps", f"cameras: {', '.join(cams) or 'none'}"]
    for f in inv.findings:
        lines.append(f.line())
    return "\n".join(lines)
