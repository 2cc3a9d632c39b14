"""meta/tasks.parquet, meta/stats.json, meta/modality.json (GR00T's) and meta/info.json of a LeRobot dataset, from
its (renumbered) units' results."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from robo_ray.formats.lerobot.depth import video_info as depth_video_info
from robo_ray.formats.lerobot.layout import Feature
from robo_ray.formats.lerobot.paths import BOOKKEEPING, CODEBASE_VERSION, DATA_PATH, INFO, STATS, TASKS, VIDEO_PATH
from robo_ray.formats.lerobot.stats import Agg, image_stats, merge_aggs, merge_image_json, stats_json
from robo_ray.formats.lerobot.tasks_file import tasks_parquet
from robo_ray.formats.lerobot.trainer_meta import MODALITY, modality_json
from robo_ray.formats.lerobot.unit_copies import copied_camera_info
from robo_ray.readers.base import Inventory
from robo_ray.writers.base import UnitResult

if TYPE_CHECKING:
    from robo_ray.formats.lerobot.writer import LeRobotWriter


def build_meta(w: "LeRobotWriter", results: list[UnitResult], inv: Inventory | None, tasks: dict[str, int],
               episodes: int, frames: int) -> dict[str, bytes]:
    """tasks.parquet, stats.json, modality.json, info.json from the (renumbered) unit results."""
    names = sorted(tasks, key=tasks.__getitem__)
    merged: dict[str, dict[str, np.ndarray]] = {}
    for f in w.layout.features:
        parts = [r.extra["stats"][f.key] for r in results if (r.extra or {}).get("stats", {}).get(f.key)]
        if not parts:
            continue
        if f.kind == "video" and not f.depth:
            merged[f.key] = image_stats(merge_image_json(parts))  # type: ignore[arg-type]
        elif f.numeric or f.depth:  # depth: episode stats merged as lerobot aggregates them (mm)
            agg = merge_aggs([Agg.from_json(p) for p in parts])
            if agg is not None:
                merged[f.key] = agg.finish()
    info = info_json(w, inv, episodes, frames, len(names), results)
    return {TASKS: tasks_parquet(names), STATS: json.dumps(stats_json(merged), indent=2).encode(),
            MODALITY: json.dumps(modality_json(w.layout, w.mapping), indent=4).encode(),
            INFO: json.dumps(info, indent=4).encode()}


def info_json(w: "LeRobotWriter", inv: Inventory | None, episodes: int, frames: int, tasks: int,
              results: list[UnitResult] | None = None) -> dict[str, Any]:
    """meta/info.json: the totals, the options, the splits and every feature with its `names`."""
    feats: dict[str, Any] = {}
    for f in w.layout.features:
        d: dict[str, Any] = {"dtype": f.dtype, "shape": list(f.shape), "names": names_of(f, inv)}
        if f.kind == "video" and f.depth:
            s = w.settings
            d["info"] = depth_video_info(f.shape[0], f.shape[1], s.fps, s.g, s.crf, w.depth_quant)
        elif f.kind == "video":
            d["info"] = copied_camera_info(w.settings.info(f.shape[0], f.shape[1]), f.key, results or [])
        feats[f.key] = d
    o = w.options
    robot = o.robot_type or (inv.robot_type if inv is not None else None)
    return {"codebase_version": CODEBASE_VERSION, "robot_type": robot, "total_episodes": episodes,
            "total_frames": frames, "total_tasks": tasks, "chunks_size": o.chunks_size,
            "data_files_size_in_mb": o.data_files_size_in_mb, "video_files_size_in_mb": o.video_files_size_in_mb,
            "fps": w.fps, "splits": episode_splits(results or [], inv, episodes), "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if w.layout.cameras else None, "features": feats}


def names_of(f: Feature, inv: Inventory | None) -> Any:
    """`names` of a feature in info.json: the source's when they fit, else generated per component."""
    if f.kind == "video":
        return ["height", "width", "channels"]
    if f.kind in ("string", "language", "reward", "discount", "done") or f.key in BOOKKEEPING or \
            f.scalar and f.kind != "action":
        return None
    if len(f.shape) != 1:
        return None
    src = source_names(inv, f.sources[0]) if inv is not None and len(f.sources) == 1 else None
    if src is not None and len(src) == f.shape[0]:
        return src
    if f.kind == "action":
        out: list[str] = []
        for target, size in zip(f.targets, f.sizes):
            base = target[len("action/"):].replace("/", ".") if target.startswith("action/") else target
            out += [base] if size == 1 and len(f.targets) > 1 else [f"{base}_{i}" for i in range(size)]
        return out
    base = f.key.rsplit(".", 1)[-1]
    return [f"{base}_{i}" for i in range(f.shape[0])]


def episode_splits(results: list[UnitResult], inv: Inventory | None, episodes: int) -> dict[str, str]:
    """info.json `splits` ({name: "from:to"}, lerobot's episode ranges) from the source split of each written
    episode, when every split's episodes are one contiguous run of the output (an RLDS source lists them split
    by split); else (or without splits) everything is `train`."""
    split_of = {r.episode_index: r.split for r in (inv.refs if inv is not None else [])}
    order = [split_of.get(int(e["source"])) or "train" for r in sorted(results, key=lambda r: r.shard_index)
             if r.filename for e in (r.extra or {}).get("episodes") or []]
    runs: dict[str, list[int]] = {}  # split -> [first, last + 1]
    for pos, split in enumerate(order):
        if split in runs and runs[split][1] != pos:
            return {"train": f"0:{episodes}"}  # a split in several runs: lerobot's ranges cannot say it
        runs.setdefault(split, [pos, pos])[1] = pos + 1
    if len(runs) <= 1 or len(order) != episodes:
        return {"train": f"0:{episodes}"}
    return {split: f"{a}:{b}" for split, (a, b) in runs.items()}


def source_names(inv: Inventory, source: str) -> list[str] | None:
    feat = inv.features.get(source)
    names = feat.names if feat is not None else None
    if isinstance(names, dict):  # legacy {"motors": [...]}
        names = next(iter(names.values()), None)
    if isinstance(names, (list, tuple)) and names and all(isinstance(x, str) for x in names):
        return list(names)
    return None
