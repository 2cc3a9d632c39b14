"""robo-ray inside Ray Data: read a LeRobot dataset (a local folder or s3://...), drop the episodes shorter than N
steps, rescale one action dimension, write RLDS (validated, with the reports `robo-ray run` writes).

    python examples/filter_and_rescale.py                                   # the bundled example, -> ./filtered_rlds
    python examples/filter_and_rescale.py s3://bucket/my_lerobot out/ --min-length 50 --action-dim 6 --scale 0.5

S3 credentials and endpoint come from the usual AWS environment variables (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL...).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import ray
from ray.data.expressions import col

import robo_ray.data as rd

BUNDLED = Path(__file__).resolve().parent / "lerobot_v30_pusher"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", nargs="?", default=str(BUNDLED), help="LeRobot dataset (default: the bundled example)")
    p.add_argument("dest", nargs="?", default="filtered_rlds", help="output folder or URL")
    p.add_argument("--min-length", type=int, default=100, help="drop episodes with fewer steps")
    p.add_argument("--action-dim", type=int, default=0, help="the action dimension to rescale")
    p.add_argument("--scale", type=float, default=0.5)
    p.add_argument("--address", default="local", help="Ray cluster address (default: a new local instance)")
    args = p.parse_args()

    ray.init(address=args.address, include_dashboard=False, logging_level="WARNING")
    ds = rd.read(args.source)  # one row an episode: "action" is a (T, 7) float32 array, cameras are JPEG frames

    def rescale(row: dict) -> dict:
        action = row["action"].copy()
        action[:, args.action_dim] *= np.float32(args.scale)
        row["action"] = action
        return row

    kept = ds.filter(expr=col("length") >= args.min_length).map(rescale)  # an Arrow predicate: no Python per row
    outcome = rd.write(kept, args.dest, name="pusher_filtered", overwrite=True)
    print(outcome.message)
    print(f"report: {outcome.out_url}/final_report.md")
    return outcome.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
