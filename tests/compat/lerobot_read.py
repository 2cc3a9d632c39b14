#!/usr/bin/env python3
"""Load a local LeRobot v3.0 dataset with the real lerobot 0.6.1 (`LeRobotDataset`), or check it with lerobot-doctor.

Standalone on purpose: runs in the lerobot venv (tests/compat/requirements-lerobot.txt, Python 3.12) and imports only
lerobot / torch / numpy / the standard library -- never robo_ray. The Hub is never contacted: HF_HUB_OFFLINE=1 and a
dead HF_ENDPOINT are set before lerobot is imported, so a dataset that lerobot finds incomplete on disk (it would
otherwise silently try to download the rest) fails with an error instead.

    python tests/compat/lerobot_read.py ROOT --out OUT [--frames first,middle,last] [--backend pyav]
                                        [--all-frames] [--doctor]

read mode (default): LeRobotDataset(repo_id="local/<dir name>", root=ROOT, return_uint8=True) and then `ds[i]` (which
  decodes the video frame nearest to from_timestamp + timestamp and raises FrameTimestampError when it is 1e-4 s or
  more away) for the chosen frames of every episode. OUT.json gets:
    ok, lerobot, video_backend, num_episodes, num_frames, fps, codebase_version, features (info.json's),
    tasks ({task_index: task}), episodes [{episode_index, length, tasks, dataset_from_index, dataset_to_index}],
    samples [{episode_index, frame_index, index, which, timestamp, task, task_index,
              values {feature: {"dtype", "shape", "value"}}, cameras {feature: npz key}}],
    checked_frames (how many ds[i] calls succeeded)
  depth_keys, depth_output_unit, depth_stats (meta/stats.json as lerobot loads it, per depth key),
  OUT.npz gets every sampled camera frame as uint8 HWC under the key "<index>/<camera feature>" (depth cameras:
  float32 millimetres HW1, as `ds[i]` returns them), and every sampled
  numeric value (with its own dtype) under "<index>/<feature>". --all-frames also calls ds[i] on every frame (values
  not stored) so any timestamp violation anywhere fails the run.
doctor mode (--doctor): runs `lerobot-doctor check ROOT --json` and writes its report (version, overall_severity,
  checks [{name, severity, messages [{severity, message}]}], summary) to OUT.json, with "ok" = no check FAILed.

stdout gets exactly one line of JSON: the summary ({"ok": true, "json": ..., "npz": ..., ...}) or
{"ok": false, "stage": "load" | "getitem" | "doctor", "error_type": ..., "error": ...}; lerobot's logging goes to
stderr. Exit code 0 = ok, 1 = lerobot (or lerobot-doctor) rejected the dataset, 2 = usage.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

# Never the Hub (set before any HF import): offline mode makes snapshot_download / HfApi raise at once, and the
# endpoint points at a closed local port in case some code path ignores offline mode.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_ENDPOINT", "http://127.0.0.1:9")

WHICH = ("first", "middle", "last")


def _log(msg: str) -> None:
    print(f"[lerobot_read] {msg}", file=sys.stderr, flush=True)


def _frame_positions(length: int, which: list[str]) -> list[tuple[str, int]]:
    pos = {"first": 0, "middle": length // 2, "last": length - 1}
    out: list[tuple[str, int]] = []
    for w in which:
        if w.isdigit():
            if int(w) < length:
                out.append((w, int(w)))
        elif (w, pos[w]) not in out and all(p != pos[w] for _, p in out):
            out.append((w, pos[w]))
    return out


def _jsonable_feature(ft: dict) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in ft.items()}


def _value(x):
    """A numeric ds[i] entry as (dtype, shape, exact Python value): float32 -> float is exact, repr round-trips."""
    import numpy as np
    import torch

    if isinstance(x, torch.Tensor):
        arr = x.numpy()
    else:
        arr = np.asarray(x)
    return arr, {"dtype": str(arr.dtype), "shape": list(arr.shape), "value": arr.tolist()}


def read(root: Path, out: Path, which: list[str], backend: str | None, all_frames: bool, tolerance: float) -> dict:
    import numpy as np
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    stage = "load"
    t0 = time.monotonic()
    try:
        ds = LeRobotDataset(repo_id=f"local/{root.name}", root=root, video_backend=backend, return_uint8=True,
                            tolerance_s=tolerance)
    except Exception as e:
        return _failure(stage, e)
    meta = ds.meta
    load_s = time.monotonic() - t0
    video_keys = list(meta.video_keys)
    image_keys = list(meta.image_keys)
    depth_keys = list(getattr(meta, "depth_keys", []))
    episodes = []
    for ep in meta.episodes or []:  # datasets.Dataset rows without the stats/ columns; None if total_episodes=0
        episodes.append({"episode_index": int(ep["episode_index"]), "length": int(ep["length"]),
                         "tasks": list(ep["tasks"]), "dataset_from_index": int(ep["dataset_from_index"]),
                         "dataset_to_index": int(ep["dataset_to_index"])})
    tasks = {int(row.task_index): str(name) for name, row in meta.tasks.iterrows()} if meta.tasks is not None else {}
    summary = {
        "ok": True, "lerobot": _version("lerobot"), "video_backend": ds._video_backend,
        "num_episodes": ds.num_episodes, "num_frames": ds.num_frames, "len": len(ds), "fps": ds.fps,
        "fps_type": type(ds.fps).__name__, "codebase_version": meta.info.codebase_version,
        "features": {k: _jsonable_feature(v) for k, v in meta.features.items()},
        "video_keys": video_keys, "image_keys": image_keys, "tasks": tasks, "episodes": episodes,
        "stats_keys": sorted(meta.stats) if meta.stats else [], "samples": [], "checked_frames": 0,
        "depth_keys": depth_keys, "depth_output_unit": getattr(ds, "depth_output_unit", None),
        "depth_stats": {k: {s: np.asarray(v).tolist() for s, v in (meta.stats or {}).get(k, {}).items()}
                        for k in depth_keys},
    }
    arrays: dict[str, np.ndarray] = {}
    stage = "getitem"
    i = -1
    try:
        for ep in episodes:
            for label, frame_index in _frame_positions(ep["length"], which):
                i = ep["dataset_from_index"] + frame_index
                item = ds[i]
                summary["checked_frames"] += 1
                sample = {"episode_index": int(item["episode_index"]), "frame_index": int(item["frame_index"]),
                          "index": int(item["index"]), "which": label, "timestamp": float(item["timestamp"]),
                          "task": item["task"], "task_index": int(item["task_index"]), "values": {}, "cameras": {}}
                for key, val in item.items():
                    if key in ("task",):
                        continue
                    if key in depth_keys:  # float32 millimetres (depth_output_unit "mm"), (1, H, W): kept as is
                        arrays[f"{i}/{key}"] = np.ascontiguousarray(val.numpy().transpose(1, 2, 0))
                        sample["cameras"][key] = f"{i}/{key}"
                    elif key in video_keys or key in image_keys:
                        arr = val.numpy()
                        if arr.dtype != np.uint8:  # image features come back float32 in [0, 1] (ToTensor)
                            arr = np.clip(np.rint(arr * 255.0), 0, 255).astype(np.uint8)
                        arrays[f"{i}/{key}"] = np.ascontiguousarray(arr.transpose(1, 2, 0))  # CHW -> HWC
                        sample["cameras"][key] = f"{i}/{key}"
                    elif isinstance(val, str):
                        sample["values"][key] = {"dtype": "str", "shape": [], "value": val}
                    elif isinstance(val, list):  # lerobot 0.6's language columns: the frame's rows (dicts)
                        sample["values"][key] = {"dtype": "language", "shape": [len(val)], "value": val}
                    else:
                        arr, sample["values"][key] = _value(val)
                        arrays[f"{i}/{key}"] = arr
                summary["samples"].append(sample)
        if all_frames:
            for i in range(len(ds)):
                ds[i]
                summary["checked_frames"] += 1
    except Exception as e:
        return _failure(stage, e, index=i, checked_frames=summary["checked_frames"])
    summary["seconds"] = {"load": round(load_s, 3), "total": round(time.monotonic() - t0, 3)}
    out_json, out_npz = out.with_suffix(".json"), out.with_suffix(".npz")
    np.savez(out_npz, **arrays)
    summary["npz"] = str(out_npz)
    out_json.write_text(json.dumps(summary, indent=1))
    return {"ok": True, "json": str(out_json), "npz": str(out_npz), "num_episodes": summary["num_episodes"],
            "num_frames": summary["num_frames"], "checked_frames": summary["checked_frames"],
            "video_backend": summary["video_backend"], "seconds": summary["seconds"]}


def doctor(root: Path, out: Path) -> dict:
    exe = Path(sys.executable).parent / "lerobot-doctor"
    cmd = [str(exe) if exe.exists() else "lerobot-doctor", "check", str(root), "--json"]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=1800)
    sys.stderr.write(proc.stderr)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"ok": False, "stage": "doctor", "error_type": "NoReport",
                "error": f"exit {proc.returncode}: {(proc.stdout + proc.stderr)[-4000:]}"}
    report["ok"] = report.get("overall_severity") != "FAIL"
    report["exit_code"] = proc.returncode
    out_json = out.with_suffix(".json")
    out_json.write_text(json.dumps(report, indent=1))
    failed = [c["name"] for c in report["checks"] if c["severity"] == "FAIL"]
    warned = [c["name"] for c in report["checks"] if c["severity"] == "WARN"]
    return {"ok": report["ok"], "json": str(out_json), "overall_severity": report["overall_severity"],
            "failed": failed, "warned": warned, "summary": report.get("summary"),
            "lerobot_doctor": report.get("version")}


def _failure(stage: str, e: Exception, **extra) -> dict:
    traceback.print_exc()
    return {"ok": False, "stage": stage, "error_type": type(e).__name__, "error": str(e)[:4000], **extra}


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", type=Path, help="the dataset folder (meta/info.json inside)")
    p.add_argument("--out", type=Path, required=True, help="OUT(.json|.npz): both files are written next to it")
    p.add_argument("--frames", default="first,middle,last",
                   help="which frames of each episode to return: first, middle, last and/or frame numbers")
    p.add_argument("--backend", choices=["pyav", "torchcodec"], default=None,
                   help="video decoder; default: lerobot's choice (torchcodec when it loads, else pyav)")
    p.add_argument("--tolerance-s", type=float, default=1e-4, help="LeRobotDataset's tolerance_s (default 1e-4)")
    p.add_argument("--all-frames", action="store_true", help="also call ds[i] on every frame of the dataset")
    p.add_argument("--doctor", action="store_true", help="run lerobot-doctor instead of LeRobotDataset")
    p.add_argument("--keep-cache", action="store_true",
                   help="use the usual HF datasets cache (default: a fresh one, deleted at exit: datasets caches "
                        "parquet->arrow conversions and could serve a rewritten file from the cache)")
    args = p.parse_args(argv)
    if not (args.root / "meta" / "info.json").is_file():
        print(json.dumps({"ok": False, "stage": "usage", "error": f"no meta/info.json under {args.root}"}))
        return 2
    which = [w.strip() for w in args.frames.split(",") if w.strip()]
    if not which or any(w not in WHICH and not w.isdigit() for w in which):
        print(json.dumps({"ok": False, "stage": "usage", "error": f"--frames: {args.frames!r}"}))
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    cache = None
    if not args.keep_cache:
        cache = tempfile.mkdtemp(prefix="lerobot_read_hf_")
        os.environ["HF_DATASETS_CACHE"] = cache
    try:
        if args.doctor:
            result = doctor(args.root.resolve(), args.out)
        else:
            result = read(args.root.resolve(), args.out, which, args.backend, args.all_frames, args.tolerance_s)
    finally:
        if cache:
            shutil.rmtree(cache, ignore_errors=True)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
