#!/usr/bin/env python3
"""Write a reference LeRobot v3.0 dataset with lerobot 0.6.1's OWN writer, from frames given in an .npz.

Standalone on purpose: runs in the lerobot venv (tests/compat/requirements-lerobot.txt, Python 3.12) and imports
only lerobot / numpy / the standard library -- never robo_ray. Purpose: encode the very frames robo-ray encodes, with
lerobot's code path (LeRobotDataset.create + add_frame + save_episode + finalize) and lerobot's encoder defaults
(libsvtav1, yuv420p, g=2, crf=30, preset=12), so a test can compare PSNR and file layout with ours.

    python tests/compat/lerobot_reference.py INPUT.npz ROOT [--vcodec h264 --crf 23 --g 2 --preset ...]
                                             [--streaming] [--images] [--repo-id local/reference]

INPUT.npz (np.savez, no pickles):
  fps                      scalar (int; a float is passed through as is, to see what lerobot does with it)
  robot_type               optional 0-d string
  features                 optional 0-d JSON string: the LeRobot features dict to use verbatim (else inferred)
  ep000/task               (T,) strings (the task of each frame) or a 0-d string (one task for the episode)
  ep000/<feature key>      (T, ...) array per feature, e.g. ep000/observation.state (T, D) float32,
                           ep000/action (T, A) float32, ep000/observation.images.top (T, H, W, 3) uint8
  ep001/...                episodes are ep000, ep001, ... in order; every episode has the same features
Feature inference (when no `features` key): a uint8 array (T, H, W, 3|1) is a camera -> dtype "video" ("image" with
--images), shape [H, W, C], names ["height", "width", "channels"]; a (T,) array -> shape [1]; (T, *S) -> shape S;
a string array (T,) -> dtype "string"; dtype is the array's dtype name (float32, float64, int64, bool, ...).

stdout gets one line of JSON: {"ok": true, "root": ..., "seconds": ..., "files": {relpath: bytes}, "info": {...}}
or {"ok": false, "stage": ..., "error_type": ..., "error": ...}; lerobot's logging goes to stderr.
Exit code 0 = written, 1 = lerobot refused or failed, 2 = usage.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

# Never the Hub: every huggingface_hub call fails at once instead of downloading (set before any HF import).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_ENDPOINT", "http://127.0.0.1:9")
os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints a banner per encoder otherwise

import numpy as np


def _log(msg: str) -> None:
    print(f"[lerobot_reference] {msg}", file=sys.stderr, flush=True)


def _episodes(npz) -> list[str]:
    prefixes = sorted({k.split("/", 1)[0] for k in npz.files if k.startswith("ep") and "/" in k})
    if not prefixes:
        raise SystemExit("usage: the .npz holds no ep000/... arrays")
    return prefixes


def infer_features(npz, ep: str, images: bool) -> dict:
    features: dict[str, dict] = {}
    for key in sorted(k for k in npz.files if k.startswith(ep + "/")):
        name = key.split("/", 1)[1]
        if name == "task":
            continue
        arr = npz[key]
        if arr.dtype == np.uint8 and arr.ndim == 4 and arr.shape[-1] in (1, 3):
            features[name] = {"dtype": "image" if images else "video", "shape": list(arr.shape[1:]),
                              "names": ["height", "width", "channels"]}
        elif arr.dtype.kind == "U":
            features[name] = {"dtype": "string", "shape": [1], "names": None}
        else:
            shape = [1] if arr.ndim == 1 else list(arr.shape[1:])
            names = None if shape == [1] else [f"{name.rsplit('.', 1)[-1]}_{i}" for i in range(int(np.prod(shape)))]
            features[name] = {"dtype": arr.dtype.name, "shape": shape, "names": names if len(shape) == 1 else None}
    return features


def frame_value(ft: dict, column: np.ndarray, t: int):
    """What add_frame wants for one frame: an ndarray of exactly the feature's dtype and shape (or a str)."""
    if ft["dtype"] == "string":
        return str(column[t])
    if ft["dtype"] in ("image", "video"):
        return np.ascontiguousarray(column[t])
    if tuple(ft["shape"]) == (1,) and column.ndim == 1:
        return column[t:t + 1].copy()
    return np.ascontiguousarray(column[t])


def encoder_config(args):
    if not any(v is not None for v in (args.vcodec, args.pix_fmt, args.crf, args.g, args.preset)):
        return None  # lerobot's own defaults (rgb_encoder_defaults())
    from lerobot.configs.video import RGBEncoderConfig

    kwargs = {k: v for k, v in (("vcodec", args.vcodec), ("pix_fmt", args.pix_fmt), ("crf", args.crf),
                                ("g", args.g), ("preset", args.preset)) if v is not None}
    return RGBEncoderConfig(**kwargs)


def write(args) -> dict:
    npz = np.load(args.input, allow_pickle=False)
    fps_raw = npz["fps"].item()
    fps = int(fps_raw) if float(fps_raw).is_integer() and not args.keep_float_fps else fps_raw
    eps = _episodes(npz)
    if "features" in npz.files:
        features = json.loads(str(npz["features"].item()))
    else:
        features = infer_features(npz, eps[0], args.images)
    robot_type = str(npz["robot_type"].item()) if "robot_type" in npz.files else None
    _log(f"{len(eps)} episodes at fps={fps!r}; features: {json.dumps(features)}")

    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    t0 = time.monotonic()
    ds = LeRobotDataset.create(
        repo_id=args.repo_id, fps=fps, features=features, root=args.root, robot_type=robot_type,
        use_videos=any(ft["dtype"] == "video" for ft in features.values()),
        rgb_encoder=encoder_config(args), streaming_encoding=args.streaming,
        encoder_threads=args.encoder_threads, data_files_size_in_mb=args.data_files_size_in_mb,
        video_files_size_in_mb=args.video_files_size_in_mb,
    )
    for ep in eps:
        columns = {name: npz[f"{ep}/{name}"] for name in features if f"{ep}/{name}" in npz.files}
        missing = sorted(set(features) - set(columns))
        if missing:
            raise SystemExit(f"usage: {ep} lacks {missing}")
        lengths = {len(c) for c in columns.values()}
        if len(lengths) != 1:
            raise SystemExit(f"usage: {ep} has columns of different lengths {lengths}")
        n = lengths.pop()
        task = npz[f"{ep}/task"]
        tasks = [str(task.item())] * n if task.ndim == 0 else [str(x) for x in task]
        for t in range(n):
            frame = {name: frame_value(features[name], col, t) for name, col in columns.items()}
            frame["task"] = tasks[t]
            ds.add_frame(frame)
        ds.save_episode(parallel_encoding=not args.serial_encoding)
        _log(f"{ep}: {n} frames saved")
    ds.finalize()
    seconds = time.monotonic() - t0
    root = Path(args.root)
    files = {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}
    info = json.loads((root / "meta" / "info.json").read_text())
    return {"ok": True, "root": str(root), "seconds": round(seconds, 3), "episodes": len(eps), "files": files,
            "info": info, "lerobot": _version()}


def _version() -> str:
    from importlib.metadata import version

    return version("lerobot")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("input", help="the .npz of frames (see the module docstring)")
    p.add_argument("root", help="dataset folder to create (must not exist)")
    p.add_argument("--repo-id", default="local/reference", help="lerobot's repo_id (never looked up)")
    p.add_argument("--images", action="store_true", help="store cameras as dtype image (PNG in parquet), not video")
    p.add_argument("--vcodec", help="lerobot default libsvtav1 (h264, hevc, libaom-av1 also accepted)")
    p.add_argument("--pix-fmt", help="lerobot default yuv420p")
    p.add_argument("--crf", type=int, help="lerobot default 30")
    p.add_argument("--g", type=int, help="GOP size, lerobot default 2")
    p.add_argument("--preset", help="lerobot default 12 for libsvtav1")
    p.add_argument("--encoder-threads", type=int, help="lerobot default None (the codec decides)")
    p.add_argument("--streaming", action="store_true",
                   help="streaming_encoding=True (frames go straight to the encoder, no PNG round trip)")
    p.add_argument("--serial-encoding", action="store_true", help="save_episode(parallel_encoding=False)")
    p.add_argument("--data-files-size-in-mb", type=int, help="lerobot default 100 (a new data file past it)")
    p.add_argument("--video-files-size-in-mb", type=int, help="lerobot default 200 (a new MP4 past it)")
    p.add_argument("--keep-float-fps", action="store_true", help="pass an integral float fps (30.0) as a float")
    args = p.parse_args(argv)
    if Path(args.root).exists():
        print(json.dumps({"ok": False, "stage": "usage", "error": f"{args.root} exists"}))
        return 2
    try:
        result = write(args)
    except SystemExit as e:
        print(json.dumps({"ok": False, "stage": "usage", "error": str(e)}))
        return 2
    except Exception as e:  # lerobot refused the input: report it as data, the caller asserts on it
        traceback.print_exc()
        print(json.dumps({"ok": False, "stage": "write", "error_type": type(e).__name__, "error": str(e)[:4000]}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
