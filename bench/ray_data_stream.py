"""Streaming memory of `robo_ray.data.read(..., granularity="step", decode_images=True).iter_batches()` (issue #29;
not a test): one generated LeRobot v3.0 dataset of N episodes and one of 2N, each larger decoded than the object
store the run is given, streamed in a fresh process each; the peak RSS (driver + every process Ray started for
it, summed, sampled every 0.2 s) of the 2N run over the N run must be <= 1.2.

    python -m bench.ray_data_stream --episodes 12 --steps 200 --object-store-mb 100

Writes bench/results/ray_data_stream.json and .md.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_RATIO = 1.2


def generate(root: Path, episodes: int, steps: int, height: int, width: int) -> Path:
    sys.path.insert(0, str(REPO))
    from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset

    return write_lerobot_dataset(root, DatasetSpec(
        version="v3.0", episode_lengths=[steps] * episodes, episodes_per_file=4, cameras=[
            CameraSpec("observation.images.top", height=height, width=width),
            CameraSpec("observation.images.side", height=height, width=width)]))


def stream(src: str, object_store_mb: int, batch_size: int) -> dict:
    """In this (fresh) process: stream the step rows, sampling the RSS of this process tree meanwhile."""
    import psutil
    import ray

    import robo_ray.data as rd

    peak = {"tree": 0, "driver": 0}
    done = threading.Event()

    def sample() -> None:
        me = psutil.Process()
        while not done.is_set():
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            peak["tree"] = max(peak["tree"], total)
            peak["driver"] = max(peak["driver"], me.memory_info().rss)
            time.sleep(0.2)

    ray.init(address="local", num_cpus=2, object_store_memory=object_store_mb << 20, include_dashboard=False,
             logging_level="WARNING", log_to_driver=False)
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    t0 = time.monotonic()
    steps = decoded = 0
    for batch in rd.read(src, granularity="step", decode_images=True).iter_batches(batch_size=batch_size):
        steps += len(batch["step"])
        decoded += sum(v.nbytes for k, v in batch.items() if k.startswith("observation/image"))
    wall = time.monotonic() - t0
    done.set()
    t.join()
    ray.shutdown()
    return {"steps": steps, "decoded_mb": decoded / 2**20, "wall_s": wall, "peak_tree_mb": peak["tree"] / 2**20,
            "peak_driver_mb": peak["driver"] / 2**20, "object_store_mb": object_store_mb}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=12)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--height", type=int, default=240)
    ap.add_argument("--width", type=int, default=320)
    ap.add_argument("--object-store-mb", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    ap.add_argument("--cache", help="keep the generated datasets here and reuse them (default: a temp dir)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(stream(args.child, args.object_store_mb, args.batch_size)))
        return 0
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in (args.episodes, 2 * args.episodes):
            src = Path(args.cache or tmp) / f"stream_{n}x{args.steps}_{args.height}x{args.width}"
            if not (src / "meta" / "info.json").exists():
                generate(src, n, args.steps, args.height, args.width)
            env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO)}
            out = subprocess.run([sys.executable, "-m", "bench.ray_data_stream", "--child", str(src),
                                  "--object-store-mb", str(args.object_store_mb), "--batch-size",
                                  str(args.batch_size)], capture_output=True, text=True, env=env, cwd=REPO)
            if out.returncode:
                raise SystemExit(out.stderr[-3000:])
            runs[n] = json.loads(out.stdout.strip().splitlines()[-1])
    small, big = runs[args.episodes], runs[2 * args.episodes]
    ratio = big["peak_tree_mb"] / small["peak_tree_mb"]
    ok = ratio <= MAX_RATIO and big["decoded_mb"] > args.object_store_mb
    result = {"runs": runs, "ratio_2x": ratio, "max_ratio": MAX_RATIO, "ok": ok,
              "frame": [args.height, args.width], "steps_per_episode": args.steps}
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "ray_data_stream.json").write_text(json.dumps(result, indent=2))
    md = [f"### Streaming step rows with decoded images (2 cameras {args.height}x{args.width}, {args.steps} steps an "
          f"episode, object store {args.object_store_mb} MB, 2 CPUs)", "",
          "| episodes | steps | decoded MB | wall s | peak RSS driver MB | peak RSS driver + Ray processes MB |",
          "|---|---|---|---|---|---|"]
    md += [f"| {n} | {r['steps']} | {r['decoded_mb']:.0f} | {r['wall_s']:.1f} | {r['peak_driver_mb']:.0f} | "
           f"{r['peak_tree_mb']:.0f} |" for n, r in runs.items()]
    md += ["", f"peak ratio at 2x the episodes: {ratio:.2f} (limit {MAX_RATIO}): {'ok' if ok else 'EXCEEDED'}"]
    (outdir / "ray_data_stream.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
