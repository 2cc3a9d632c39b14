"""robo-ray inside Ray Data, training side: stream a dataset as step rows with decoded images into batches (what
a training loop consumes; `iter_torch_batches` gives the same batches as torch tensors).

    python examples/train_stream.py                         # the bundled LeRobot example
    python examples/train_stream.py s3://bucket/dataset --batch-size 64
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import ray

import robo_ray.data as rd

BUNDLED = Path(__file__).resolve().parent / "lerobot_v30_pusher"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", nargs="?", default=str(BUNDLED), help="any dataset robo-ray reads")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--address", default="local", help="Ray cluster address (default: a new local instance)")
    args = p.parse_args()

    ray.init(address=args.address, include_dashboard=False, logging_level="WARNING")
    ds = rd.read(args.source, granularity="step", decode_images=True)
    cameras = [c for c in ds.columns() if c.startswith("observation/image")]
    steps, t0 = 0, time.monotonic()
    action_sum = None
    for batch in ds.iter_batches(batch_size=args.batch_size, batch_format="numpy"):
        images = {c: batch[c].astype(np.float32) / 255.0 for c in cameras}  # (B, H, W, 3) each
        action = batch["action"]  # (B, action_dim)
        action_sum = action.sum(axis=0) if action_sum is None else action_sum + action.sum(axis=0)
        steps += len(action)  # a training step would consume `images`, `batch["observation/state"]`, `action`
    rate = steps / max(time.monotonic() - t0, 1e-9)
    print(f"{steps} steps streamed ({rate:.0f} steps/s); cameras {cameras} "
          f"{[images[c].shape[1:] for c in cameras] if steps else []}; mean action {action_sum / max(steps, 1)}")
    return 0 if steps else 1


if __name__ == "__main__":
    raise SystemExit(main())
