"""Per-unit verification against the whole-dataset verify (issue #14), not a test: on an existing output, every
unit through `Writer.verify_unit` (timed, one after the other, in this process) and then the dataset-level
`Writer.verify` merging those checks; a writer without `verify_unit` (an older tree on PYTHONPATH) runs its
whole-dataset verify once instead.

    python -m bench.unit_verify OUT                        # this tree
    PYTHONPATH=/path/to/older/tree python -m bench.unit_verify OUT

The sampled source comparison follows the output's job.json (validate.sample_episodes); the loader's read-back
(tfds) is off."""
from __future__ import annotations

import argparse
import time

from robo_ray.cli import _load_output
from robo_ray.stages.check_records import UnitChecks, ValidationResult
from robo_ray.stages.validate import Validator, run_unit_check
from robo_ray.writers.base import Writer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dst", help="a finished robo-ray output folder")
    args = ap.parse_args(argv)
    out = _load_output(args.dst)
    cfg, writer = out["cfg"], out["writer"]
    ctx = Validator(writer, out["inv"], out["reader"], out["ledger"], cfg.validate_.sample_episodes,
                    cfg.validate_.min_psnr_db, loader_readback=False,
                    readback_shards=cfg.validate_.readback_shards).ctx
    res = ValidationResult()
    if type(writer).verify_unit is Writer.verify_unit:
        t0 = time.monotonic()
        writer.verify(ctx, res)
        print(f"whole-dataset verify: {time.monotonic() - t0:.2f} s, passed={res.passed}")
        return 0 if res.passed else 3
    merged = UnitChecks(writer.mapping)
    total = 0.0
    for r in ctx.results():
        check = run_unit_check(writer, r, ctx)
        if check is not None:
            merged.add(check)
            total += check.seconds
            print(f"unit {r.shard_index}: {len(r.episodes)} episodes / {sum(n for _, n in r.episodes)} steps: "
                  f"verify_unit {check.seconds:.2f} s")
    ctx.unit_checks = merged
    t0 = time.monotonic()
    writer.verify(ctx, res)
    print(f"verify_unit in all: {total:.2f} s; dataset-level verify: {time.monotonic() - t0:.2f} s, "
          f"passed={res.passed}")
    return 0 if res.passed else 3


if __name__ == "__main__":
    raise SystemExit(main())
