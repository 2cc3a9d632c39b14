"""LeRobot v2.1 -> v3.0 with copied video against lerobot 0.6.1's own converter (not a test; issue #28 item 1).

In one run on one machine, on the same v2.1 dataset (>= 10,000 steps; built once with tests/fixtures/lerobot_gen.py
and cached under --cache: --episodes x --frames, two cameras --size, H.264 and AV1 as lerobot writes them, g=2):

  (a) lerobot 0.6.1's `convert_dataset_v21_to_v30.convert_dataset(repo_id, root=COPY, push_to_hub=False)` in the
      lerobot venv (tests/compat/venvs.py), on a hard-linked copy of the dataset (it converts in place): the call
      alone (after `import lerobot`) and the whole process (Python + import + call);
  (b) `robo-ray run SRC OUT --to lerobot` in-process, then with `--actors N` (Ray), validation as bench.any_to_any
      runs it (`validate.sample_episodes=0`: the per-unit re-read still decodes first / middle / last of every
      episode): the whole command and its conversion (job.json to the last unit's commit);
  (c) the limits of the copy path on the same bytes: reading every file of the source (data parquet + MP4s, from
      the page cache after the runs above), and demuxing every packet of every MP4 with PyAV (no decode);
  (d) robo-ray's floor for this command: a fresh Python importing what an in-process LeRobot run imports (IMPORTS),
      plus demuxing every packet and decoding, with PyAV alone, the frames the copy checks (the group of pictures
      of the first / middle / last frame and the statistics keyframes of every episode camera, the same picks as
      robo_ray.formats.lerobot.video_copy) and converting them to RGB. The sum bounds how far the whole command
      can get below lerobot's process with these checks on this machine.

frames = steps x cameras. Every measurement is taken --repeat times and the fastest kept (lerobot's process and
robo-ray in-process: the one with the least CPU time, the measure they are compared by).

    python -m bench.lerobot_copy --cache /tmp/robo-ray-bench

Results: bench/results/lerobot_copy-<name>.json and .md.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import av

from bench.any_to_any import _children_cpu, robo_ray_run
from bench.throughput import environment

REPO = Path(__file__).resolve().parent.parent
CAMERAS = (("observation.images.top", "h264"), ("observation.images.wrist", "av1"))
# what an in-process `robo-ray run SRC OUT --to lerobot` imports (the libraries and robo-ray's modules of the run)
IMPORTS = ("import numpy, av, pyarrow.parquet, robo_ray.cli, robo_ray.stages.pipeline, robo_ray.stages.validate, "
           "robo_ray.stages.report_html, robo_ray.formats.lerobot.reader, robo_ray.formats.lerobot.writer")
LEROBOT_CONVERT = """
import json, logging, sys, time
t0 = time.perf_counter()
from lerobot.scripts.convert_dataset_v21_to_v30 import convert_dataset
t1, c1 = time.perf_counter(), time.process_time()
logging.disable(logging.CRITICAL)
convert_dataset("local/bench", root=sys.argv[1], push_to_hub=False)
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"import_seconds": t1 - t0, "convert_seconds": t2 - t1, "convert_cpu_seconds": c2 - c1}))
"""


def build_source(cache: Path, episodes: int, frames: int, height: int, width: int) -> Path:
    """The v2.1 dataset (made once: reused when `cache` already holds it)."""
    from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset

    out = cache / f"lerobot_v21_2cam_{episodes}x{frames}_{height}x{width}"
    if (out / ".complete").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    print(f"generating {out} ...", file=sys.stderr)
    os.environ.setdefault("SVT_LOG", "1")
    spec = DatasetSpec(version="v2.1", episode_lengths=[frames] * episodes, fps=30,
                       cameras=[CameraSpec(k, c, height, width) for k, c in CAMERAS])
    write_lerobot_dataset(out, spec)
    (out / ".complete").write_text("")
    return out


def lerobot_convert(src: Path, work: Path, python: Path) -> dict[str, Any]:
    """lerobot's converter on a hard-linked copy of `src` (it moves folders, never rewrites the source files)."""
    root = work / "lerobot" / "bench"
    shutil.rmtree(root.parent, ignore_errors=True)
    root.parent.mkdir(parents=True)
    subprocess.run(["cp", "-al", str(src), str(root)], check=True)
    (root / ".complete").unlink(missing_ok=True)
    from tests.compat.venvs import clean_env

    t0, cpu0 = time.perf_counter(), _children_cpu()
    proc = subprocess.run([str(python), "-c", LEROBOT_CONVERT, str(root)], capture_output=True, text=True,
                          env=clean_env(SVT_LOG="1"), timeout=3600, check=False)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    if proc.returncode != 0:
        raise SystemExit(f"lerobot's converter failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0", info["codebase_version"]
    return {**out, "process_seconds": wall, "process_cpu_seconds": cpu}


def read_limit(src: Path) -> dict[str, Any]:
    """Reading every byte of the source's files (data + videos), and demuxing every MP4 packet."""
    files = sorted(p for p in src.rglob("*") if p.is_file() and p.suffix in (".parquet", ".mp4"))
    t0, c0 = time.perf_counter(), time.process_time()
    total = 0
    for p in files:
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
    read_s, read_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    packets = 0
    for p in files:
        if p.suffix == ".mp4":
            with av.open(str(p)) as c:
                packets += sum(1 for k in c.demux(c.streams.video[0]) if k.dts is not None)
    return {"bytes": total, "read_seconds": read_s, "read_cpu_seconds": read_cpu, "packets": packets,
            "demux_seconds": time.perf_counter() - t0, "demux_cpu_seconds": time.process_time() - c0}


def import_floor(repeat: int = 3) -> dict[str, Any]:
    """A fresh Python importing IMPORTS (compiled bytecode): the least-CPU of `repeat` runs."""
    runs = []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), _children_cpu()
        subprocess.run([sys.executable, "-c", IMPORTS], cwd=REPO, check=True)
        runs.append({"seconds": time.perf_counter() - t0, "cpu_seconds": _children_cpu() - c0})
    return _best(runs, "cpu_seconds")


def checked_decode_floor(src: Path) -> dict[str, Any]:
    """Demux every packet of every MP4 and decode (PyAV, one thread) the frames the copy checks, to RGB."""
    from robo_ray.formats.lerobot.video_copy import STATS_KEYFRAMES, _wanted

    assert STATS_KEYFRAMES > 0
    rgb = av.video.reformatter.VideoReformatter()  # one swscale context (to_ndarray(format=) makes one a frame)
    t0, c0 = time.perf_counter(), time.process_time()
    decoded = 0
    for p in sorted(src.rglob("*.mp4")):
        with av.open(str(p)) as c:
            s = c.streams.video[0]
            ticks = int(1 / (s.guessed_rate * s.time_base))
            packets = [k for k in c.demux(s) if k.dts is not None]
            base = packets[0].pts
            rel = [(k.pts - base, bool(k.is_keyframe)) for k in packets]
            checks, stats = _wanted(rel, len(rel), ticks, True)
            gop, gops, frames_in = -1, [], {}
            for r, key in rel:
                gop += key or gop < 0
                gops.append(gop)
                frames_in.setdefault(gop, set()).add(r // ticks)
            whole = {g for g, fr in frames_in.items() if fr & checks}
            cc = s.codec_context
            cc.thread_count = 1
            for k, pk in enumerate(packets):
                if gops[k] in whole or (rel[k][1] and rel[k][0] // ticks in stats):
                    for f in cc.decode(pk):
                        rgb.reformat(f, format="rgb24").to_ndarray()
                        decoded += 1
            for f in cc.decode(None):
                rgb.reformat(f, format="rgb24").to_ndarray()
                decoded += 1
    return {"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0, "decoded": decoded}


def _best(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    return min(runs, key=lambda r: r[key])


def markdown(res: dict[str, Any]) -> list[str]:
    f, s = res["frames"], res["steps"]
    le, lim = res["lerobot"], res["limits"]
    rows = [("lerobot 0.6.1 convert_dataset (the call)", le["convert_seconds"], le["convert_cpu_seconds"]),
            ("lerobot 0.6.1 convert_dataset (process: import + call)", le["process_seconds"],
             le["process_cpu_seconds"])]
    for r in res["robo_ray"]:
        cpu = r["cpu_seconds_reaped"] if r["workers"] == 1 and r["mode"] == "in-process" else None
        rows += [(f"robo-ray {r['mode']}: whole command", r["wall_seconds"], cpu),
                 (f"robo-ray {r['mode']}: conversion (job.json -> last commit)", r["convert_seconds"], None)]
    rows += [("limit: read every source byte", lim["read_seconds"], lim["read_cpu_seconds"]),
             ("limit: demux every MP4 packet (PyAV)", lim["demux_seconds"], lim["demux_cpu_seconds"])]
    fl = res.get("floor")
    if fl:
        imp, dec = fl["imports"], fl["checked_decode"]
        rows += [("floor: a fresh Python importing what a run imports", imp["seconds"], imp["cpu_seconds"]),
                 (f"floor: demux + decode the {dec['decoded']} frames the copy checks, to RGB (PyAV)",
                  dec["seconds"], dec["cpu_seconds"]),
                 ("floor: the two together", imp["seconds"] + dec["seconds"],
                  imp["cpu_seconds"] + dec["cpu_seconds"])]
    env = res["environment"]
    md = [f"# LeRobot v2.1 -> v3.0, copied video: {res['name']}", "",
          f"{res['episodes']} episodes x {res['frames_per_episode']} steps = {s} steps, {len(CAMERAS)} cameras "
          f"({', '.join(c for _, c in CAMERAS)}, {res['size']}) = {f} frames; {lim['bytes'] / 1e6:.1f} MB of "
          f"source files. Machine: {env['cpus']} CPUs, load {env['load_average_at_start']} at start, "
          f"{env.get('load_average_at_end')} at end (a shared machine: CPU seconds are the steadier measure). "
          f"Command: `{res['command']}`.", "",
          "| what | wall s | frames/s (wall) | CPU s | frames per CPU s |", "|---|---:|---:|---:|---:|"]
    for name, sec, cpu in rows:
        md.append(f"| {name} | {sec:.2f} | {f / sec:,.0f} | " + (f"{cpu:.2f} | {f / cpu:,.0f} |" if cpu else "- | - |"))
    inproc = res["robo_ray"][0]
    md += ["", f"robo-ray in-process (whole command) against lerobot's converter process: "
           f"{le['process_seconds'] / inproc['wall_seconds']:.1f}x by wall time, "
           f"{le['process_cpu_seconds'] / inproc['cpu_seconds_reaped']:.1f}x by CPU time; against lerobot's call "
           f"alone: {le['convert_seconds'] / inproc['wall_seconds']:.2f}x (wall), "
           f"{le['convert_cpu_seconds'] / inproc['cpu_seconds_reaped']:.2f}x (CPU). robo-ray's conversion "
           f"(job.json -> last commit) against the read limit: {lim['read_seconds'] / inproc['convert_seconds']:.3f}; "
           f"against the demux limit: {lim['demux_seconds'] / inproc['convert_seconds']:.2f}.",
           "", "robo-ray's video copy line: " + res["copy_line"]]
    if fl:
        floor_cpu = fl["imports"]["cpu_seconds"] + fl["checked_decode"]["cpu_seconds"]
        md += ["", f"robo-ray's floor (imports + demux + the checked frames' decode: {floor_cpu:.2f} CPU s) bounds the "
               f"whole command's ratio to lerobot's converter process at {le['process_cpu_seconds'] / floor_cpu:.1f}x "
               f"by CPU time on this machine, before any parquet, muxing, unit re-read, validation or report; the "
               f"whole command spends {inproc['cpu_seconds_reaped'] - floor_cpu:.2f} CPU s beyond it."]
    return md


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", type=Path, default=Path("/tmp/robo-ray-bench"))
    p.add_argument("--episodes", type=int, default=40)
    p.add_argument("--frames", type=int, default=250)
    p.add_argument("--size", default="240x320", help="HxW of each camera")
    p.add_argument("--actors", default="2", help="comma-separated actor counts for the Ray runs")
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args(argv)
    env = environment(argv or sys.argv[1:])
    env["command"] = " ".join(["python -m bench.lerobot_copy", *(argv or sys.argv[1:])])
    h, w = (int(x) for x in args.size.split("x"))
    src = build_source(args.cache, args.episodes, args.frames, h, w)
    work = args.cache / "work-lerobot-copy"
    work.mkdir(parents=True, exist_ok=True)
    from tests.compat.venvs import ensure_lerobot_venv

    python = ensure_lerobot_venv(log=True)
    # robo-ray runs from compiled bytecode, as an installed package does (the lerobot venv's site-packages are
    # compiled): with PYTHONDONTWRITEBYTECODE=1 (this project's shells) every run compiled robo-ray's modules again
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "robo_ray")], check=True)
    env["bytecode"] = "robo_ray compiled (compileall) before the runs"
    le_runs, rr_runs = [], {"in": []}
    actors = [int(a) for a in args.actors.split(",") if a]
    for a in actors:
        rr_runs[str(a)] = []
    for _ in range(args.repeat):
        le_runs.append(lerobot_convert(src, work, python))
        rr_runs["in"].append(robo_ray_run(src, 30, "av1", None, work))
        for a in actors:
            rr_runs[str(a)].append(robo_ray_run(src, 30, "av1", a, work))
    line = next((x for x in (work / "out-inproc" / "validation_report.md").read_text().splitlines()
                 if x.startswith("| video copy |")), "")
    steps = args.episodes * args.frames
    res = {"name": f"{args.episodes}x{args.frames}_{args.size}", "episodes": args.episodes,
           "frames_per_episode": args.frames, "steps": steps, "frames": steps * len(CAMERAS), "size": args.size,
           # the CPU-compared rows keep their least-CPU run (wall times swing with the shared machine's load)
           "lerobot": _best(le_runs, "process_cpu_seconds"),
           "robo_ray": [_best(rr_runs["in"], "cpu_seconds_reaped")] + [_best(rr_runs[str(a)], "wall_seconds")
                                                                for a in actors],
           "limits": read_limit(src),
           "floor": {"imports": import_floor(), "checked_decode": checked_decode_floor(src)}, "copy_line": line, "command": env["command"], "environment": env}
    res["environment"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    outdir = REPO / "bench" / "results"
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / f"lerobot_copy-{res['name']}.json").write_text(json.dumps(res, indent=2) + "\n")
    md = markdown(res)
    (outdir / f"lerobot_copy-{res['name']}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
