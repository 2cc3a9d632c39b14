"""Actor-pool scaling: the same units converted with 1, 2, ... Ray actors, in one process on one Ray instance.

    python -m bench.scaling                                 # ../shared/real/g1_v21_30ep (AV1 640x480), 1 vs 2 actors
    python -m bench.scaling --dataset generate              # a generated 640x480 H.264 LeRobot v2.1 dataset
    python -m bench.scaling --dataset PATH --actors 1,2,4 --max-episodes 10 --json bench/results/scaling.json

Measures the Convert stage only (read parquet + decode video + JPEG encode + write shards, through
`RayExecutor.run`: Ray Dataset of units -> map_batches actor pool); discover/plan happen once up front and
Validate is not run. Each actor count gets a fresh output directory and a fresh actor pool; "wall" includes the
pool's start-up (actor processes importing PyAV etc.), "steady" counts from the first finished shard. The shard
sha256s of every run are compared: they must be identical whatever the actor count.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATASET = ROOT.parent / "shared" / "real" / "g1_v21_30ep"


def generate_dataset(dst: Path, episodes: int, length: int) -> Path:
    sys.path.insert(0, str(ROOT))
    from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset

    spec = DatasetSpec(version="v2.1", episode_lengths=[length] * episodes, fps=30,
                       cameras=[CameraSpec(key="observation.images.top", codec="h264", height=480, width=640)])
    return write_lerobot_dataset(dst, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default=str(DEFAULT_DATASET),
                    help="LeRobot dataset path/URL, or 'generate' (default: ../shared/real/g1_v21_30ep)")
    ap.add_argument("--actors", default="1,2", help="comma-separated actor counts (default 1,2)")
    ap.add_argument("--max-episodes", type=int, default=None)
    ap.add_argument("--min-shards", type=int, default=16, help="plan at least this many units (default 16)")
    ap.add_argument("--gen-episodes", type=int, default=12)
    ap.add_argument("--gen-length", type=int, default=150)
    ap.add_argument("--address", default=None, help="Ray address (default: a new in-process instance)")
    ap.add_argument("--json", dest="json_out", help="also write the results as JSON here")
    a = ap.parse_args(argv)

    from robo_ray.config import load_config
    from robo_ray.ray_exec.executor import RayExecutor
    from robo_ray.readers import open_reader
    from robo_ray.stages.convert import ConvertOptions
    from robo_ray.executors.base import JobSpec
    from robo_ray.stages.target_setup import resolve_mapping
    from robo_ray.stages.plan import plan_units

    work = Path(tempfile.mkdtemp(prefix="robo-ray-bench-"))
    try:
        src = a.dataset
        if src == "generate":
            t = time.perf_counter()
            src = str(generate_dataset(work / "src", a.gen_episodes, a.gen_length))
            print(f"generated {a.gen_episodes} x {a.gen_length} frames 640x480 H.264 in {time.perf_counter() - t:.1f}s")
        elif not Path(src).exists() and "://" not in src:
            print(f"dataset not found: {src} (use --dataset generate)", file=sys.stderr)
            return 2
        cfg = load_config(None, [f"plan.min_shards={a.min_shards}"], **{"source.url": src})
        reader = open_reader(src, None)
        inv = reader.discover()
        if a.max_episodes:
            inv.refs = inv.refs[:a.max_episodes]
        mapping = resolve_mapping(cfg, inv)
        units = plan_units(inv.refs, inv.features, cfg.plan.target_shard_mb, cfg.plan.min_shards)
        cams = {k: f"{f.shape[1]}x{f.shape[0]} {f.codec or ''}".strip()
                for k, f in inv.features.items() if f.kind == "video"}
        print(f"dataset {src}: {len(inv.refs)} episodes, {sum(r.length for r in inv.refs)} frames, cameras {cams}; "
              f"{len(units)} units")
        options = ConvertOptions(decoder_threads=cfg.convert.decoder_threads)
        rows = []
        shas: dict[int, dict[str, str]] = {}
        counts = [int(x) for x in a.actors.split(",") if x.strip()]
        for n in counts:
            out = work / f"out_{n}"
            job = JobSpec(src, None, mapping.model_dump_json(), str(out), options)
            ex = RayExecutor(actors=n, address=a.address, status_interval_s=0)
            ex.connect()
            t0 = time.perf_counter()
            first = None
            frames = frames_after_first = 0
            quarantined = 0
            shas[n] = {}
            for res in ex.run(units, job):
                steps = sum(s for _, s in res.episodes)
                frames += steps
                quarantined += len(res.quarantined)
                shas[n][res.filename] = res.sha256
                if first is None:
                    first = time.perf_counter()
                else:
                    frames_after_first += steps
            wall = time.perf_counter() - t0
            steady = (time.perf_counter() - first) if first else 0.0
            row = {"actors": n, "cluster_cpus": ex._cluster_cpus, "units": len(units), "frames": frames,
                   "quarantined_episodes": quarantined, "wall_s": round(wall, 2),
                   "frames_per_s": round(frames / wall, 1) if wall else 0.0,
                   "steady_frames_per_s": round(frames_after_first / steady, 1) if steady else 0.0}
            rows.append(row)
            print(f"actors={n}: {frames} frames in {wall:.1f}s -> {row['frames_per_s']} frames/s "
                  f"(steady {row['steady_frames_per_s']} frames/s after the first shard; "
                  f"{quarantined} episodes quarantined)", flush=True)
            shutil.rmtree(out, ignore_errors=True)
        base = rows[0]["frames_per_s"] or 1.0
        identical = all(shas[n] == shas[counts[0]] for n in counts)
        print("\n| actors | frames | wall s | frames/s | steady frames/s | speed-up |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['actors']} | {r['frames']} | {r['wall_s']} | {r['frames_per_s']} | "
                  f"{r['steady_frames_per_s']} | {r['frames_per_s'] / base:.2f}x |")
        print(f"\nshards byte-identical across actor counts: {identical}; host CPUs: {os.cpu_count()}")
        if a.json_out:
            Path(a.json_out).parent.mkdir(parents=True, exist_ok=True)
            Path(a.json_out).write_text(json.dumps({"dataset": src, "rows": rows, "identical": identical},
                                                   indent=2))
        return 0 if identical else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
