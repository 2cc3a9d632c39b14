#!/usr/bin/env python3
"""Write a small LeRobot v3.0 dataset with a depth camera using the REAL lerobot 0.6.1 (`LeRobotDataset.create`,
`add_frame`, `save_episode`, `finalize`): its own quantizer and HEVC 12-bit depth encoder, its own info.json and stats.

Standalone on purpose (runs in the lerobot venv, never imports robo_ray):

    python tests/compat/lerobot_depth_write.py ROOT --out OUT.npz [--episodes 2] [--length 8] [--height 24] [--width 32]

The dataset has `observation.state` float32[2], `action` float32[2] and `observation.images.wrist_depth` (video,
(H, W, 1), info is_depth_map, uint16 millimetres given to add_frame: 0 on a corner block ("no depth"), 250..9800 mm
elsewhere, and one 12,000 mm pixel beyond depth_max). OUT.npz gets the uint16 frames given to lerobot
("<episode>/<frame>"). stdout's last line is JSON: {"ok": true, "root": ..., "npz": ...} or {"ok": false, ...}.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_ENDPOINT", "http://127.0.0.1:9")

KEY = "observation.images.wrist_depth"


def depth_frame(ep: int, t: int, h: int, w: int):
    import numpy as np

    y, x = np.mgrid[0:h, 0:w]
    d = 250 + (x * 9550 // max(w - 1, 1)) + 37 * y + 11 * t + 101 * ep  # near and far in one frame
    d = np.clip(d, 250, 9800)
    d[:3, :3] = 0  # no depth
    d[h - 1, w - 1] = 12_000  # beyond depth_max (10 m): lerobot clips it
    return d.astype(np.uint16)[:, :, None]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--out", required=True)
    p.add_argument("--episodes", type=int, default=2)
    p.add_argument("--length", type=int, default=8)
    p.add_argument("--height", type=int, default=24)
    p.add_argument("--width", type=int, default=32)
    a = p.parse_args(argv)
    try:
        import numpy as np
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        feats = {"observation.state": {"dtype": "float32", "shape": (2,), "names": None},
                 "action": {"dtype": "float32", "shape": (2,), "names": None},
                 KEY: {"dtype": "video", "shape": (a.height, a.width, 1), "names": ["height", "width", "channels"],
                       "info": {"is_depth_map": True}}}
        ds = LeRobotDataset.create("local/depth", fps=10, root=a.root, features=feats, use_videos=True)
        given = {}
        for e in range(a.episodes):
            for t in range(a.length):
                d = depth_frame(e, t, a.height, a.width)
                given[f"{e}/{t}"] = d
                ds.add_frame({"observation.state": np.full(2, e + t / 10, np.float32),
                              "action": np.full(2, t, np.float32), KEY: d, "task": f"reach {e}"})
            ds.save_episode()
        ds.finalize()
        np.savez(a.out, **given)
    except Exception as e:  # noqa: BLE001 - reported as JSON
        traceback.print_exc(file=sys.stderr)
        print(json.dumps({"ok": False, "error_type": type(e).__name__, "error": str(e)[:2000]}))
        return 1
    print(json.dumps({"ok": True, "root": a.root, "npz": a.out, "key": KEY}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
