"""Memory guard (not a test), two parts, each in one run on one machine.

1. Video (the default): peak RSS of the actor converting one long 640x480 episode, against a short one. Frames are
   spooled (memory, then an anonymous scratch file) and records are framed from chunks, so an episode's size must
   not show in the actor's memory.

       python -m bench.memory --frames 500,20000 --cache /tmp/robo-ray-bench

   Acceptance: the longest under 1.5 GB and under 1.5x the shortest.

2. Recordings (--recordings, issue #27 item 5): one episode of 1,000 steps from 4 cameras at 480x640 (3.7 GB
   decoded), an ALOHA HDF5 file (JPEG rows, tests/fixtures/aloha_gen.py) and a UMI zarr zip store (JPEG-XL chunks,
   tests/fixtures/zarr_gen.py), each converted in-process (`robo-ray run`, no --actors) to RLDS and to LeRobot v3.0
   with the default validation (the tfds read-back off: it runs in a child process of its own); the peak RSS
   (VmHWM) of the command's process.

       python -m bench.memory --recordings --steps 1000 --cache /tmp/robo-ray-bench

   Acceptance: every case under 1 GB and under a quarter of its decoded frames' size.

Each part writes its section of bench/results/memory.json (the other part's section is kept) and memory.md.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from bench.throughput import REPO, generate, robo_run

LIMIT_MB = 1536
MAX_RATIO = 1.5
SETS = ["validate.sample_episodes=0", "validate.tfds_readback=false", "convert.max_quarantine_fraction=1.0"]
REC_LIMIT_MB = 1024
REC_MAX_FRACTION = 0.25  # of the decoded frames
REC_CAMERAS, REC_HW = 4, (480, 640)
REC_TARGETS = {"rlds": [], "lerobot": []}
REC_SETS = ["validate.tfds_readback=false"]


def make_aloha(root: Path, steps: int) -> tuple[Path, list[str]]:
    from tests.fixtures import aloha_gen

    out = root / f"aloha_{REC_CAMERAS}cam_{steps}"
    if not (out / ".complete").exists():
        aloha_gen.write_episode(out / "episode_0.hdf5", 0, steps, cameras=aloha_gen.CAMERAS[:REC_CAMERAS], hw=REC_HW,
                                distinct_frames=4)
        (out / ".complete").write_text("")
    return out, []


def make_umi(root: Path, steps: int) -> tuple[Path, list[str]]:
    from tests.fixtures import zarr_gen

    out = root / f"umi_{REC_CAMERAS}cam_{steps}"
    if not (out / ".complete").exists():
        zarr_gen.write_umi_long(out / "replay_buffer.zarr.zip", steps, REC_HW, cameras=REC_CAMERAS)
        (out / ".complete").write_text("")
    return out, ["target.options.fps=60"]  # UMI's 59.94 fps: LeRobot wants an integer rate


RECORDINGS: dict[str, Callable[[Path, int], tuple[Path, list[str]]]] = {"aloha": make_aloha, "umi-zarr": make_umi}


def video(args: argparse.Namespace) -> dict[str, Any]:
    lengths = [int(x) for x in args.frames.split(",")]
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in lengths:
            src = generate(args.codec, 1, n, Path(args.cache or tmp), cameras=1)
            runs[n] = robo_run(str(src), Path(tmp) / f"out-{n}", "1", sets=SETS)
            if "error" in runs[n]:
                raise SystemExit(f"robo-ray run failed: {runs[n]['error']}")
    peak = {n: max(r["peak_rss_mb_per_actor"] or [0]) for n, r in runs.items()}
    ratio = peak[max(lengths)] / max(peak[min(lengths)], 1)
    ok = peak[max(lengths)] < LIMIT_MB and ratio < MAX_RATIO
    return {"codec": args.codec, "runs": runs, "peak_rss_mb_per_actor": peak, "ratio_longest_to_shortest": ratio,
            "limit_mb": LIMIT_MB, "max_ratio": MAX_RATIO, "within_limits": ok}


def video_md(result: dict[str, Any]) -> list[str]:
    runs, peak = result["runs"], result["peak_rss_mb_per_actor"]
    lengths = sorted(runs, key=int)
    md = [f"### Memory: one 640x480 {result['codec']} episode, 1 actor", "",
          "| frames | peak RSS/actor MB | peak RSS driver MB | whole-command fps | output MB |", "|---|---|---|---|---|"]
    for n in lengths:
        r = runs[n]
        out = r.get("output_bytes", r.get("output_bytes_per_frame", 0) * r["frames"])  # older results: per frame
        md.append(f"| {n} | {peak[n]} | {r['peak_rss_mb_driver']} | {r['frames'] / r['wall_seconds']:.0f} | "
                  f"{out / 2**20:.0f} |")
    return md + ["", f"ratio {lengths[-1]} / {lengths[0]} frames: {result['ratio_longest_to_shortest']:.2f} "
                 f"(limits: < {result['limit_mb']} MB, < {result['max_ratio']}x): "
                 f"{'ok' if result['within_limits'] else 'EXCEEDED'}"]


def recordings(args: argparse.Namespace) -> dict[str, Any]:
    decoded_mb = args.steps * REC_CAMERAS * REC_HW[0] * REC_HW[1] * 3 / 2**20
    limit = min(REC_LIMIT_MB, decoded_mb * REC_MAX_FRACTION)
    cases = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in RECORDINGS.items():
            src, lerobot_sets = make(Path(args.cache or tmp), args.steps)
            for target in REC_TARGETS:
                sets = [f"target.format={target}", *REC_SETS, *(lerobot_sets if target == "lerobot" else [])]
                r = robo_run(str(src), Path(tmp) / f"out-{name}-{target}", "inprocess", sets=sets)
                if "error" in r:
                    raise SystemExit(f"robo-ray run failed ({name} -> {target}): {r['error']}")
                cases[f"{name} -> {target}"] = r
                print(f"  {name} -> {target}: {r['peak_rss_mb_driver']} MB, {r['wall_seconds']:.0f} s", file=sys.stderr)
    ok = all(r["peak_rss_mb_driver"] < limit for r in cases.values())
    return {"steps": args.steps, "cameras": REC_CAMERAS, "hw": list(REC_HW), "decoded_mb": round(decoded_mb),
            "limit_mb": round(limit), "cases": cases, "within_limits": ok}


def recordings_md(result: dict[str, Any]) -> list[str]:
    h, w = result["hw"]
    md = [f"### Memory: one recorded episode, {result['steps']} steps x {result['cameras']} cameras {w}x{h} "
          f"({result['decoded_mb']} MB decoded), in-process", "",
          "| source -> target | peak RSS MB | wall s | output MB |", "|---|---|---|---|"]
    for name, r in result["cases"].items():
        md.append(f"| {name} | {r['peak_rss_mb_driver']} | {r['wall_seconds']:.0f} | "
                  f"{r['output_bytes'] / 2**20:.0f} |")
    return md + ["", f"limit: < {result['limit_mb']} MB (1 GB, and a quarter of the decoded frames): "
                 f"{'ok' if result['within_limits'] else 'EXCEEDED'}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", default="500,20000")
    ap.add_argument("--codec", default="h264", choices=("h264", "av1", "hevc"))
    ap.add_argument("--recordings", action="store_true", help="part 2: the recorded episodes (not the video part)")
    ap.add_argument("--steps", type=int, default=1000, help="--recordings: the episode's steps")
    ap.add_argument("--cache", help="keep generated datasets here and reuse them (default: a temp dir)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = ap.parse_args(argv)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / "memory.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    if args.recordings:
        saved["recordings"] = part = recordings(args)
    else:
        part = video(args)
        saved = {**part, **({"recordings": saved["recordings"]} if "recordings" in saved else {})}
    path.write_text(json.dumps(saved, indent=2))
    md = video_md(saved) if "runs" in saved else []
    if "recordings" in saved:
        md += ([""] if md else []) + recordings_md(saved["recordings"])
    (outdir / "memory.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if part["within_limits"] else 1


if __name__ == "__main__":
    sys.exit(main())
