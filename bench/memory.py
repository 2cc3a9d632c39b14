"""Memory guard (not a test): peak RSS of the actor converting one long 640x480 episode, against a short one, in
one run on one machine. Frames are spooled (memory, then an anonymous scratch file) and records are framed from
chunks, so an episode's size must not show in the actor's memory.

    python -m bench.memory --frames 500,20000 --cache /tmp/robo-ray-bench

Prints and writes bench/results/memory.json and memory.md: peak RSS per actor and of the driver, for each length,
and the ratio of the longest to the shortest (acceptance: under 1.5 GB and under 1.5x).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from bench.throughput import REPO, generate, robo_run

LIMIT_MB = 1536
MAX_RATIO = 1.5
SETS = ["validate.sample_episodes=0", "validate.tfds_readback=false", "convert.max_quarantine_fraction=1.0"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", default="500,20000")
    ap.add_argument("--codec", default="h264", choices=("h264", "av1", "hevc"))
    ap.add_argument("--cache", help="keep generated datasets here and reuse them (default: a temp dir)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = ap.parse_args(argv)
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
    result = {"codec": args.codec, "runs": runs, "peak_rss_mb_per_actor": peak, "ratio_longest_to_shortest": ratio,
              "limit_mb": LIMIT_MB, "max_ratio": MAX_RATIO, "within_limits": ok}
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "memory.json").write_text(json.dumps(result, indent=2))
    md = [f"### Memory: one 640x480 {args.codec} episode, 1 actor", "",
          "| frames | peak RSS/actor MB | peak RSS driver MB | whole-command fps | output MB |", "|---|---|---|---|---|"]
    for n, r in runs.items():
        md.append(f"| {n} | {peak[n]} | {r['peak_rss_mb_driver']} | {r['frames'] / r['wall_seconds']:.0f} | "
                  f"{r['output_bytes'] / 2**20:.0f} |")
    md += ["", f"ratio {max(lengths)} / {min(lengths)} frames: {ratio:.2f} "
           f"(limits: < {LIMIT_MB} MB, < {MAX_RATIO}x): {'ok' if ok else 'EXCEEDED'}"]
    (outdir / "memory.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
