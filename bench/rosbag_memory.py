"""Memory of the ROS bag reader (not a test): peak RSS of `robo-ray run` (in-process) on one bag holding a raw rgb8
480x640 camera at 10 Hz (plus JointState and a command), for a short and a long episode, to RLDS and LeRobot v3.0.

    python -m bench.rosbag_memory --frames 30,600 --targets rlds,lerobot

The bag is written and the run made each in a fresh process, and the peak is sampled from /proc (psutil, every
20 ms): `ru_maxrss` of a child started by a parent that held more memory reports the parent's high-water mark
(Linux keeps it across fork + exec). Writes bench/results/rosbag_memory.json and .md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent


def peak_of(argv: list[str]) -> tuple[int, int, float]:
    """(exit code, peak RSS MB, seconds) of a command, its RSS sampled every 20 ms."""
    start = time.time()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ps, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            peak = max(peak, ps.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.02)
    return proc.wait(), peak >> 20, time.time() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", default="30,600")
    ap.add_argument("--targets", default="rlds,lerobot")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(x) for x in args.frames.split(",")]:
            bag = Path(tmp) / f"bags{n}" / "episode_0"
            code = (f"from pathlib import Path; from tests.fixtures.rosbag_gen import write_camera_bag; "
                    f"write_camera_bag(Path({str(bag)!r}), {n})")
            subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
            for target in args.targets.split(","):
                rc, peak, secs = peak_of([sys.executable, "-m", "robo_ray.cli", "run", str(bag.parent),
                                          str(Path(tmp) / f"out-{n}-{target}"), "--to", target, "--fps", "10",
                                          "--set", "validate.tfds_readback=false"])
                rows.append({"frames": n, "target": target, "exit_code": rc, "peak_rss_mb": peak,
                             "decoded_mb": n * 480 * 640 * 3 >> 20, "seconds": round(secs, 1)})
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "rosbag_memory.json").write_text(json.dumps(rows, indent=2))
    md = ["### Memory: one ROS bag episode, raw rgb8 480x640 at 10 Hz, in-process", "",
          "| frames | target | decoded MB | peak RSS MB | exit | s |", "|---|---|---|---|---|---|"]
    md += [f"| {r['frames']} | {r['target']} | {r['decoded_mb']} | {r['peak_rss_mb']} | {r['exit_code']} | "
           f"{r['seconds']} |" for r in rows]
    (outdir / "rosbag_memory.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if all(r["exit_code"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
