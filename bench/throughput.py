"""Throughput against the decode limit (not a test): in one run on one machine, measure

  (a) the decode-only ceiling: every source MP4 decoded with PyAV (single-threaded decoder, as in an actor),
      spread over N processes for each N in --actors; and the same plus the JPEG encoding robo-ray does
      (quality 95), the floor of any conversion to RLDS images, to show what robo-ray itself adds;
  (b) a full `robo-ray run` with each actor count (Ray actor pool; validation reduced to structural checks),

and print frames/s for each, the ratio (b)/(a) at equal N, the scaling of (b) from 1 to N actors, peak RSS per
actor and output bytes per frame. Results go to bench/results/throughput-<dataset>.json and .md.

    python -m bench.throughput ../shared/real/g1_v21_30ep --actors 1,2
    python -m bench.throughput --generate h264 --episodes 50 --frames 300 --actors 1,2
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import av
import psutil

REPO = Path(__file__).resolve().parent.parent


def _decode_file(path: str, jpeg_quality: int | None = None) -> int:
    """Decode every frame (single-threaded decoder, as in an actor); with `jpeg_quality`, also the JPEG encoding
    robo-ray does (no Ray, no parquet, no record writing): the floor of any conversion to RLDS images."""
    from robo_ray.images import ImageEncoder

    enc = ImageEncoder("jpeg", jpeg_quality) if jpeg_quality else None
    n = 0
    with av.open(path) as c:
        s = c.streams.video[0]
        s.thread_type = "SLICE"
        s.codec_context.thread_count = 1
        for frame in c.decode(s):
            if enc is not None:
                enc.encode_frame(frame)
            n += 1
    return n


def decode_ceiling(files: list[str], procs: int, encode: bool = False) -> dict[str, float]:
    """Decode (and JPEG-encode when `encode`) every file once, `procs` files at a time; frames/s over the wall."""
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=procs) as pool:
        fn = functools.partial(_decode_file, jpeg_quality=95 if encode else None)
        frames = sum(pool.map(fn, sorted(files, key=lambda f: -os.path.getsize(f))))
    dt = time.perf_counter() - t0
    return {"processes": procs, "frames": frames, "seconds": dt, "fps": frames / dt}


class RssSampler(threading.Thread):
    """Peak RSS of each Ray actor process (ray::MapWorker / UnitWorker) under a command's process tree."""

    def __init__(self, pid: int, period: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.peak: dict[int, int] = {}
        self.driver_peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                root = psutil.Process(self.pid)
                self.driver_peak = max(self.driver_peak, root.memory_info().rss)
                procs = root.children(recursive=True)
            except psutil.NoSuchProcess:
                return
            for p in procs:
                try:
                    name = " ".join(p.cmdline()[:1])
                    if "MapWorker" in name or "UnitWorker" in name:
                        self.peak[p.pid] = max(self.peak.get(p.pid, 0), p.memory_info().rss)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            time.sleep(self.period)


def full_run(src: str, actors: int, workdir: Path) -> dict[str, Any]:
    out = workdir / f"out-{actors}"
    cmd = [sys.executable, "-m", "robo_ray.cli", "run", src, str(out), "--actors", str(actors), "--overwrite",
           "--set", "validate.sample_episodes=0", "--set", "validate.tfds_readback=false",
           "--set", "convert.max_quarantine_fraction=1.0"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    sampler = RssSampler(proc.pid)
    sampler.start()
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    sampler.stop.set()
    if proc.returncode != 0:
        raise SystemExit(f"robo-ray run failed ({proc.returncode}):\n{stderr[-2000:]}")
    ledger = json.loads((out / "ledger.json").read_text())
    frames_steps = sum(s for sh in ledger["shards"] for _, s in sh["episodes"])
    nbytes = sum(sh["num_bytes"] for sh in ledger["shards"])
    inv = json.loads((out / "inventory.json").read_text())
    cams = sum(1 for f in inv["features"].values() if f["source"] == "video")
    frames = frames_steps * max(cams, 1)
    convert_s = _convert_seconds(out) or wall
    steady_s = _steady_seconds(out) or convert_s
    return {"actors": actors, "frames": frames, "wall_seconds": wall, "convert_seconds": convert_s,
            "steady_seconds": steady_s, "fps": frames / convert_s, "fps_wall": frames / wall,
            "fps_steady": frames / steady_s,
            "peak_rss_mb_per_actor": sorted(round(v / 2**20) for v in sampler.peak.values()),
            "peak_rss_mb_driver": round(sampler.driver_peak / 2**20),
            "output_bytes_per_frame": nbytes / max(frames, 1)}


def _convert_seconds(out: Path) -> float | None:
    """From the first to the last shard line of logs/convert.log (excludes Ray start-up and validation)."""
    from datetime import datetime

    log = out / "logs" / "convert.log"
    if not log.exists():
        return None
    stamps = []
    for line in log.read_text().splitlines():
        if " plan: " in line or " shard " in line:
            stamps.append(datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%SZ"))
    return (stamps[-1] - stamps[0]).total_seconds() if len(stamps) >= 2 else None


def _steady_seconds(out: Path) -> float | None:
    """From the first unit's start to the last unit's end (progress.jsonl, 1 s resolution): conversion once the
    actors are up, without Ray's actor start-up (a fixed cost per run, whatever the dataset's size)."""
    from datetime import datetime

    path = out / "progress.jsonl"
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    starts = [r["started_at"] for r in rows if r.get("started_at")]
    ends = [r["completed_at"] for r in rows if r.get("completed_at")]
    if not starts or not ends:
        return None
    t = lambda x: datetime.strptime(x, "%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    return max(1.0, (max(map(t, ends)) - min(map(t, starts))).total_seconds())


def video_files(src: Path) -> list[str]:
    return [str(p) for p in sorted(src.rglob("*.mp4"))]


def generate(codec: str, episodes: int, frames: int, root: Path, cameras: int = 2) -> Path:
    """A LeRobot v3.0 dataset of `cameras` 640x480 cameras (made once: reused when `root` already holds it)."""
    sys.path.insert(0, str(REPO))
    from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset

    out = root / f"gen_v30_{codec}_{cameras}cam_{episodes}x{frames}"
    if (out / ".complete").exists():
        return out
    names = ["observation.images.top", "observation.images.wrist", "observation.images.side"][:cameras]
    spec = DatasetSpec(version="v3.0", episode_lengths=[frames] * episodes, fps=30, episodes_per_file=10,
                       cameras=[CameraSpec(n, codec, 480, 640) for n in names])
    write_lerobot_dataset(out, spec)
    (out / ".complete").write_text("")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", nargs="?")
    ap.add_argument("--generate", choices=("h264", "av1", "hevc"))
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--actors", default="1,2")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    ap.add_argument("--cache", help="keep generated datasets here and reuse them (default: a temp dir)")
    args = ap.parse_args(argv)
    actor_counts = [int(x) for x in args.actors.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        src = (generate(args.generate, args.episodes, args.frames, Path(args.cache or tmp)) if args.generate
               else Path(args.dataset))
        files = video_files(src)
        ceiling = {n: decode_ceiling(files, n) for n in actor_counts}
        with_jpeg = {n: decode_ceiling(files, n, encode=True) for n in actor_counts}
        runs = {n: full_run(str(src), n, work) for n in actor_counts}
    name = src.name
    result = {"dataset": name, "cpus": os.cpu_count(), "decode_only": ceiling, "decode_and_jpeg": with_jpeg,
              "robo_ray": runs,
              "ratio_to_ceiling": {n: runs[n]["fps"] / ceiling[n]["fps"] for n in actor_counts},
              "ratio_to_decode_and_jpeg": {n: runs[n]["fps"] / with_jpeg[n]["fps"] for n in actor_counts},
              "scaling_vs_1_actor": {n: runs[n]["fps"] / runs[actor_counts[0]]["fps"] for n in actor_counts},
              "steady_ratio_to_ceiling": {n: runs[n]["fps_steady"] / ceiling[n]["fps"] for n in actor_counts},
              "steady_scaling_vs_1_actor": {n: runs[n]["fps_steady"] / runs[actor_counts[0]]["fps_steady"]
                                            for n in actor_counts}}
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / f"throughput-{name}.json").write_text(json.dumps(result, indent=2))
    md = [f"### {name} ({os.cpu_count()} CPUs)", "",
          "| actors | decode-only fps | decode+JPEG fps | robo-ray fps | ratio to decode | ratio to decode+JPEG "
          "| scaling | peak RSS/actor MB | bytes/frame |",
          "|---|---|---|---|---|---|---|---|---|"]
    for n in actor_counts:
        r = runs[n]
        md.append(f"| {n} | {ceiling[n]['fps']:.0f} | {with_jpeg[n]['fps']:.0f} | {r['fps']:.0f} | "
                  f"{result['ratio_to_ceiling'][n]:.2f} | {result['ratio_to_decode_and_jpeg'][n]:.2f} | "
                  f"{result['scaling_vs_1_actor'][n]:.2f} | {max(r['peak_rss_mb_per_actor'] or [0])} | "
                  f"{r['output_bytes_per_frame']:.0f} |")
    md += ["", "| actors | whole command fps | conversion fps | steady fps (actors up) | steady ratio to decode "
           "| steady scaling |", "|---|---|---|---|---|---|"]
    for n in actor_counts:
        r = runs[n]
        md.append(f"| {n} | {r['fps_wall']:.0f} | {r['fps']:.0f} | {r['fps_steady']:.0f} | "
                  f"{result['steady_ratio_to_ceiling'][n]:.2f} | {result['steady_scaling_vs_1_actor'][n]:.2f} |")
    (outdir / f"throughput-{name}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
