"""Speed per core (issue #15): robo-ray's conversion against the decode + JPEG limit, on ONE machine in ONE run.

Run it on a quiet machine (nothing else running: the script warns when the load average says otherwise), from the
repository root with PYTHONPATH=. ; every mode writes bench/results/throughput-<name>.json and .md and prints the
.md. Three modes, one per acceptance point of issue #15:

1. Video throughput (the default mode), on a dataset or a generated one:

       python -m bench.throughput ../shared/real/g1_v21_30ep --repeat 3
       python -m bench.throughput --generate h264 --episodes 50 --frames 300 --repeat 3 --cache /tmp/robo-ray-bench
       python -m bench.throughput --generate av1 --episodes 50 --frames 300 --repeat 3 --cache /tmp/robo-ray-bench
       python -m bench.throughput ../shared/real/g1_v21_30ep --resize 224x224 --repeat 3     # the resize path

   * Limits ("ceilings"), each for 1 and 2 processes (--procs), over the MP4s of the converted episodes, every
     file decoded once with PyAV (single-threaded decoder, as in a worker), files spread over a process pool
     (biggest first), frames/s over the pool's wall time (its start-up excluded):
       decode-only                  decoding, nothing else;
       decode + JPEG (YUV planes)   the same plus `ImageEncoder.encode_frame` (robo_ray/images.py), the converter's
                                    own call: a yuv420p frame goes straight from its planes to libjpeg-turbo
                                    (range-expanded by a lookup table) without any RGB conversion;
       decode + RGB + resize + JPEG only with --resize HxW: `encode_frame` of an encoder with that resize (swscale
                                    AREA to HxW RGB, then JPEG), the converter's path when images.resize is set.
     The limit a run is held to is decode + JPEG (YUV planes), or decode + RGB + resize + JPEG with --resize.
   * `robo-ray run` in each of --modes (inprocess = no --actors; 1 = --actors 1; 2 = --actors 2), each TWICE on the
     same dataset: the first `--small` episodes (`--max-episodes`, default: half the dataset) and the first `--big`
     (default: all). MARGINAL frames/s = (frames_big - frames_small) / (wall_big - wall_small): whatever a run costs
     whatever its size (interpreter and imports, Ray's start and the actors', Discover, Validate's fixed part, the
     exit) cancels out; what is left is the conversion's cost per frame, per-unit verification on the workers
     included. Whole-command frames/s = frames_big / wall_big. Fixed s = wall_big - frames_big / marginal (the
     intercept). Every run: `--set validate.tfds_readback=false` (the tfds read-back is a fixed cost, measured by
     mode 3), `convert.max_quarantine_fraction=1.0` (g1 has 4 episodes without video),
     `validate.sample_episodes=min(50, small)` (the source comparison re-decodes first/middle/last frames of up to
     50 sampled episodes, the config's default: a fixed cost on any dataset of more than 50 episodes, so both runs
     sample the same number and it cancels out like the other fixed costs; with the default 50 on a <= 50-episode
     dataset it was counted per episode, once more in the big run; `--sample-episodes N` sets it), and
     `--set images.resize=[H,W]` with --resize.
   * Ratios with PASS/FAIL: in-process marginal / 1-process limit >= 0.9; 2-actor marginal / 2-process limit >= 0.8
     (acceptance 1); 1 actor against the 1-process limit and against in-process, 2 actors against 1 (information).

2. Many short episodes (acceptance 2: one Ray actor costs at most 1.3x in-process per episode):

       python -m bench.throughput --short-episodes 20000 --steps 20 --repeat 3 --cache /tmp/robo-ray-bench

   A state-only LeRobot v3.0 dataset of N x steps (bench/gen_state_only.py: one data file, one row group per
   episode, as lerobot writes; ~10 s for 20,000), converted in-process and with --actors 1 (--modes), each with N/2
   (`--max-episodes`) and N episodes; marginal ms/episode = (wall_N - wall_N/2) / (N/2) and the ratio
   1 actor / in-process (PASS when <= 1.3).

3. Start-up of a 1-episode run (acceptance 3):

       python -m bench.throughput --startup --runs 3 --cache /tmp/robo-ray-bench

   A 1-episode dataset (`python -m tests.fixtures.lerobot_gen OUT --version v3.0 --episodes 20 --codec h264
   --cameras 1`: 20 frames 64x48), `robo-ray run` with the default config: in-process without the tfds read-back
   (PASS under 2 s), in-process with it (PASS when it adds no more than `import tensorflow, tensorflow_datasets`
   takes in a fresh interpreter, measured in the same run: the read-back child imports them while the
   conversion runs), --actors 2 without the read-back (PASS under 10 s) and with it (also held to 10 s); each --runs
   times, the whole command's wall time (interpreter start to exit), median and every run, and the CPU seconds of
   its whole process tree (bench/cpu_tree.py: a cgroup, so Ray's daemons and workers count). Beside them, the floor
   of any 1-unit Ray run on this machine (bench/ray_floor.py: `ray.init` as robo-ray starts its own instance, then
   a 1-row Ray Data actor pool; and with one plain actor instead): `--actors 2` without read-back / the Ray Data
   floor is held to <= STARTUP_OVER_FLOOR (robo-ray's own share of a Ray run's start-up).

Every timed command runs alone, one after the other: first one untimed warm-up run of each kind (in-process, Ray;
--startup: one untimed round), so that no timed run is the first to read Ray's and robo-ray's files from disk; then
the modes and sizes interleaved, --repeat times, keeping the best (lowest) wall of each: interference only ever adds
time. Outputs go to a fresh folder per run (--workdir, default a temp dir), deleted once its ledger is read. Exit
code 1 when a run failed (its row says FAILED, the .json has the stderr tail); a FAIL verdict is a result (exit 0).

Expected time on a quiet 2-core machine (estimated from the previous bench's numbers): g1 with --repeat 3 ~10 min
(--resize ~13 min); generated H.264 ~17 min and AV1 ~20 min, plus generating 50 x 300 x 2 cameras once (a few
minutes); --short-episodes 20000 --repeat 3 ~6 min; --startup --runs 3 ~3 min.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench.cpu_tree import CpuTree

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
       "TF_CPP_MIN_LOG_LEVEL": "3", "TF_ENABLE_ONEDNN_OPTS": "0", "SVT_LOG": "1"}
MODE_LABEL = {"inprocess": "in-process", "1": "Ray, 1 actor", "2": "Ray, 2 actors"}
RUN_TIMEOUT_S = 3600


def _mode_label(mode: str) -> str:
    return MODE_LABEL.get(mode, f"Ray, {mode} actors")


def _procs_for(mode: str) -> int:
    return 1 if mode == "inprocess" else int(mode)


# ------------------------------------------------------------------------------------------------- limits
def _warm(_: int) -> int:
    """Imports in a pool worker before the clock starts (and holds it a moment so every worker gets one)."""
    import av  # noqa: F401
    import simplejpeg  # noqa: F401

    import robo_ray.images  # noqa: F401
    time.sleep(0.3)
    return os.getpid()


def _decode_file(path: str, quality: int | None, resize: tuple[int, int] | None) -> dict[str, Any]:
    """Decode every frame of `path` (single-threaded decoder, thread_type SLICE, as robo_ray/video.py with
    decoder_threads 1); with `quality`, also `ImageEncoder(jpeg, quality, resize).encode_frame(frame)` per frame.
    Returns frames and, for the first frame, its pixel format and whether the YUV-plane path applies."""
    import av

    from robo_ray.images import ImageEncoder, _yuv_passthrough_ok

    enc = ImageEncoder("jpeg", quality, resize) if quality else None
    n, first, error = 0, None, None
    try:
        with av.open(path) as c:
            s = c.streams.video[0]
            s.thread_type = "SLICE"
            s.codec_context.thread_count = 1
            for frame in c.decode(s):
                if first is None:
                    first = {"format": frame.format.name, "size": f"{frame.width}x{frame.height}",
                             "colorspace": int(frame.colorspace), "color_range": int(frame.color_range),
                             "yuv_planes_path": bool(_yuv_passthrough_ok(frame)) and not resize}
                if enc is not None:
                    enc.encode_frame(frame)
                n += 1
    except Exception as exc:  # noqa: BLE001 - a broken file: count what decoded, say so
        error = f"{path}: {type(exc).__name__}: {exc}"
    return {"frames": n, "first": first, "error": error}


def ceiling(files: list[str], procs: int, quality: int | None = None,
            resize: tuple[int, int] | None = None) -> dict[str, Any]:
    """Every file once, `procs` at a time (biggest first); frames/s over the wall, the pool's start excluded."""
    fn = functools.partial(_decode_file, quality=quality, resize=resize)
    order = sorted(files, key=lambda f: -os.path.getsize(f))
    with ProcessPoolExecutor(max_workers=procs) as pool:
        list(pool.map(_warm, range(procs)))
        t0 = time.perf_counter()
        parts = list(pool.map(fn, order))
        dt = time.perf_counter() - t0
    frames = sum(p["frames"] for p in parts)
    return {"processes": procs, "frames": frames, "seconds": dt, "fps": frames / dt if dt > 0 else None,
            "first_frame": next((p["first"] for p in parts if p["first"]), None),
            "errors": [p["error"] for p in parts if p["error"]]}


# ------------------------------------------------------------------------------------------------- robo-ray runs
class PeakRss(threading.Thread):
    """Peak RSS (VmHWM, kept by the kernel: sampling once a second misses nothing) of the command's process and
    of each Ray unit actor (ray::UnitActor) under it. Once a second, so the sampler costs next to no CPU."""

    def __init__(self, pid: int, period: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.driver = 0
        self.actors: dict[int, int] = {}
        self.stop = threading.Event()

    @staticmethod
    def _hwm(pid: int) -> int:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def run(self) -> None:
        import psutil

        while not self.stop.is_set():
            self.driver = max(self.driver, self._hwm(self.pid))
            try:
                children = psutil.Process(self.pid).children(recursive=True)
            except psutil.Error:
                return
            for p in children:
                if p.pid not in self.actors:  # a Ray worker is `ray::IDLE` until it becomes an actor: look again
                    try:
                        if "UnitMapper" not in " ".join(p.cmdline()[:1]):
                            continue
                    except psutil.Error:
                        continue
                self.actors[p.pid] = max(self.actors.get(p.pid, 0), self._hwm(p.pid))
            self.stop.wait(self.period)


def robo_run(src: str, dst: Path, mode: str, max_episodes: int | None = None, sets: list[str] | None = None,
             timeout: float = RUN_TIMEOUT_S) -> dict[str, Any]:
    """One `robo-ray run SRC DST` (fresh DST, deleted afterwards), timed from the interpreter's start to its exit.
    mode: inprocess (no --actors) or an actor count. Returns wall seconds, episodes / steps / frames written
    (ledger.json; frames = steps x video cameras), output bytes and peak RSS; `error` when it failed."""
    shutil.rmtree(dst, ignore_errors=True)
    cmd = [sys.executable, "-m", "robo_ray.cli", "run", src, str(dst)]
    if mode != "inprocess":
        cmd += ["--actors", str(int(mode))]
    if max_episodes:
        cmd += ["--max-episodes", str(max_episodes)]
    for s in sets or []:
        cmd += ["--set", s]
    log_out, log_err = dst.with_name(dst.name + ".stdout"), dst.with_name(dst.name + ".stderr")
    with open(log_out, "w") as fo, open(log_err, "w") as fe:
        t0, epoch0 = time.perf_counter(), time.time()
        tree = CpuTree("run")
        proc = subprocess.Popen(tree.wrap(cmd), stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, cwd=REPO, env=ENV,
                                start_new_session=True)
        rss = PeakRss(proc.pid)
        rss.start()
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            code = None
        wall = time.perf_counter() - t0
        rss.stop.set()
    res: dict[str, Any] = {"mode": mode, "max_episodes": max_episodes, "wall_seconds": wall, "exit_code": code,
                           "cpu_tree_seconds": tree.seconds(),
                           "command": " ".join(cmd),
                           "peak_rss_mb_driver": round(rss.driver / 2**20),
                           "peak_rss_mb_per_actor": sorted(round(v / 2**20) for v in rss.actors.values())}
    try:
        if code is None:
            raise RuntimeError(f"timed out after {timeout:.0f} s")
        if code != 0:
            raise RuntimeError(f"exit code {code}")
        ledger = json.loads((dst / "ledger.json").read_text())
        inv = json.loads((dst / "inventory.json").read_text())
        marks = json.loads((dst / "logs" / "timings.json").read_text()).get("marks", {})
    except (OSError, ValueError, RuntimeError) as exc:
        tail = log_err.read_text(errors="replace")[-1500:] if log_err.exists() else ""
        res["error"] = f"{exc}; stderr tail:\n{tail}"
        shutil.rmtree(dst, ignore_errors=True)
        return res
    cams = sum(1 for f in inv["features"].values() if f.get("source") == "video")
    eps = [e for sh in ledger["shards"] for e in sh["episodes"]]
    steps = sum(int(s) for _, s in eps)
    first, last = marks.get("first_unit_started"), marks.get("last_unit_committed")
    res["marks_s"] = {k: round(v - epoch0, 3) for k, v in sorted(marks.items(), key=lambda kv: kv[1])}
    res["window_seconds"] = last - first if first is not None and last is not None else None
    res.update({"episodes": len(eps), "steps": steps, "video_cameras": cams, "frames": steps * max(cams, 1),
                "quarantined": sum(len(sh.get("quarantined", [])) for sh in ledger["shards"]),
                "units": len(ledger["shards"]),  # a unit's main file and its other files (LeRobot's MP4s)
                "output_bytes": sum(sh["num_bytes"] + sum(int(f["num_bytes"]) for f in sh.get("files", []))
                                    for sh in ledger["shards"])})
    shutil.rmtree(dst, ignore_errors=True)
    for p in (log_out, log_err):
        p.unlink(missing_ok=True)
    return res


def warm_up(src: str, work: Path, modes: list[str], episodes: int | None, sets: list[str], timeout: float) -> None:
    """One untimed run of each kind (in-process, Ray) first, so that no timed run is the first to read Ray's,
    robo-ray's (and the source's) files from disk: a cold first run would pad one wall and skew its marginal."""
    kinds = [m for m in ("inprocess",) if m in modes] + [m for m in modes if m != "inprocess"][:1]
    for m in kinds:
        r = robo_run(src, work / f"warm-up-{m}", m, episodes, sets, timeout)
        if "error" in r:
            print(f"  warm-up run ({_mode_label(m)}) failed: {r['error'][:500]}", file=sys.stderr)


def small_and_big(src: str, work: Path, modes: list[str], small: int, big: int | None, total: int,
                  sets: list[str], args: argparse.Namespace, unit: str) -> dict[str, dict[str, Any]]:
    """Every mode on the first `small` and the first `big` (None = all `total`) episodes, --repeat times (after
    the warm-up, the modes and sizes interleaved); per mode the best run of each size, every wall, and the marginal
    rate of `unit` (frames or episodes) per second."""
    if not args.no_warm_up:
        warm_up(src, work, modes, min(2 if unit == "frames" else 100, small), sets, args.timeout)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {m: {"small": [], "big": []} for m in modes}
    for rep in range(args.repeat):
        for m in modes:
            for size, k in (("small", small), ("big", big)):
                r = robo_run(src, work / f"out-{m}-{size}-{rep}", m, k, sets, args.timeout)
                runs[m][size].append(r)
                print(f"  {_mode_label(m)}, {k or total} episodes: "
                      + (f"{r['wall_seconds']:.1f} s, {r[unit]} {unit}" if "error" not in r
                         else f"FAILED: {r['error'][:300]}"), file=sys.stderr)
    out = {}
    for m in modes:
        s, b = best(runs[m]["small"]), best(runs[m]["big"])
        out[m] = {"small": s, "big": b, "small_all_walls": _walls(runs[m]["small"]),
                  "big_all_walls": _walls(runs[m]["big"]), "marginal": marginal(s, b, unit),
                  # Ray's start, the actors', Discover, Validate and the exit are outside the window (their noise
                  # too); the end of the conversion (the last unit alone) is inside
                  "window_marginal": marginal(best(runs[m]["small"], "window_seconds"),
                                              best(runs[m]["big"], "window_seconds"), unit, "window_seconds")["rate"],
                  "errors": [r["error"] for r in runs[m]["small"] + runs[m]["big"] if "error" in r]}
    return out


def _kill_group(proc: subprocess.Popen) -> None:
    """Only this command's own session (start_new_session): the CLI and the Ray processes it started."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def best(runs: list[dict[str, Any]], seconds: str = "wall_seconds") -> dict[str, Any] | None:
    """The run with the lowest `seconds` (the wall, or window_seconds: the conversion window of
    logs/timings.json, first_unit_started -> last_unit_committed) among the successful ones that have it."""
    ok = [r for r in runs if "error" not in r and r.get(seconds) is not None]
    return min(ok, key=lambda r: r[seconds]) if ok else None


def marginal(small: dict[str, Any] | None, big: dict[str, Any] | None, key: str,
             seconds: str = "wall_seconds") -> dict[str, Any]:
    """(big[key] - small[key]) / (big[seconds] - small[seconds]) and the intercept (the run's fixed cost)."""
    if small is None or big is None:
        return {"rate": None, "why": "a run failed"}
    dn, dt = big[key] - small[key], big[seconds] - small[seconds]
    if dn <= 0 or dt <= 0:
        label = seconds.removesuffix("_seconds")
        return {"rate": None, "why": f"no difference to measure ({key} {dn:+}, {label} {dt:+.2f} s): the runs differ "
                                     "by less than the noise; more episodes between --small and --big, or --repeat"}
    rate = dn / dt
    return {"rate": rate, "delta": dn, "delta_seconds": dt, "fixed_seconds": big[seconds] - big[key] / rate}


# ------------------------------------------------------------------------------------------------- environment
def environment(argv: list[str]) -> dict[str, Any]:
    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True, timeout=30,
                                  check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    versions = {}
    for name in ("av", "ray", "pyarrow", "simplejpeg", "numpy"):
        try:
            versions[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001 - informational only
            versions[name] = None
    load = os.getloadavg()
    return {"cpus": os.cpu_count(), "load_average_at_start": [round(x, 2) for x in load],
            "quiet_at_start": load[0] < 0.5, "python": platform.python_version(), "machine": platform.machine(),
            "git_commit": git("rev-parse", "HEAD"), "git_dirty": bool(git("status", "--porcelain", "--", "robo_ray")),
            "versions": versions, "command": " ".join(["python -m bench.throughput", *argv]),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def warn_if_busy(env: dict[str, Any]) -> None:
    if not env["quiet_at_start"]:
        print(f"WARNING: load average {env['load_average_at_start']} at start: this machine is not quiet, the "
              "timings below are not valid results", file=sys.stderr)


def _fmt(x: Any, spec: str = ".0f") -> str:
    return "n/a" if x is None else format(x, spec)


def _verdict(value: float | None, limit: float, at_least: bool) -> str:
    if value is None:
        return "n/a"
    return "PASS" if (value >= limit if at_least else value <= limit) else "FAIL"


def _checks_md(checks: list[dict[str, Any]], op: str) -> list[str]:
    """The checks table; a numeric limit is shown as `op limit`, a text one as it is, none as (information)."""
    md = ["", "| check | value | acceptance | verdict |", "|---|---|---|---|"]
    for c in checks:
        lim = c["limit"]
        lim = "(information)" if lim is None else lim if isinstance(lim, str) else f"{op} {lim:.1f}"
        md.append(f"| {c['check']} | {_fmt(c['value'], '.2f')} | {lim} | {c['verdict'] or ''} |")
    return md


def _rows(runs: dict[str, dict[str, Any]], modes: list[str], columns: int, row: Any) -> list[str]:
    """One table row per mode: `row(mode, runs[mode], best small run, best big run)`, or the failure."""
    out = []
    for m in modes:
        r = runs[m]
        if r["small"] is None or r["big"] is None:
            out.append(f"| {_mode_label(m)} | FAILED: {'; '.join(e.splitlines()[0] for e in r['errors'])[:300]} |"
                       + " |" * (columns - 2))
        else:
            out.append(row(m, r, r["small"], r["big"]))
    return out


def _why_no_marginal(runs: dict[str, dict[str, Any]], modes: list[str]) -> list[str]:
    lines = [f"{_mode_label(m)}: no marginal, {runs[m]['marginal']['why']}." for m in modes
             if runs[m]["marginal"]["rate"] is None and runs[m]["small"] is not None and runs[m]["big"] is not None]
    return ["", *lines] if lines else []


def _rss(run: dict[str, Any]) -> str:
    return f"{run['peak_rss_mb_driver']} / {max(run['peak_rss_mb_per_actor'] or [0]) or '-'}"


def _header(title: str, env: dict[str, Any]) -> list[str]:
    busy = "" if env["quiet_at_start"] else " **NOT QUIET: timings not valid**"
    return [f"### {title}", "",
            f"{env['cpus']} CPUs, load average at start {env['load_average_at_start']}{busy}; commit "
            f"{env['git_commit'][:10]}{' (robo_ray/ modified)' if env['git_dirty'] else ''}; Python {env['python']}, "
            + ", ".join(f"{k} {v}" for k, v in env["versions"].items()) + f"; `{env['command']}`", ""]


def write_results(outdir: Path, name: str, result: dict[str, Any], md: list[str]) -> None:
    result["environment"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / f"throughput-{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (outdir / f"throughput-{name}.md").write_text("\n".join(md) + "\n")


# ------------------------------------------------------------------------------------------------- datasets
def generate(codec: str, episodes: int, frames: int, root: Path, cameras: int = 2) -> Path:
    """A LeRobot v3.0 dataset of `cameras` 640x480 cameras, 10 episodes per file (made once: reused when `root`
    already holds it)."""
    from tests.fixtures.lerobot_gen import (
        CameraSpec,
        DatasetSpec,
        write_lerobot_dataset,
    )

    out = root / f"gen_v30_{codec}_{cameras}cam_{episodes}x{frames}"
    if (out / ".complete").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    print(f"generating {out} ...", file=sys.stderr)
    names = ["observation.images.top", "observation.images.wrist", "observation.images.side"][:cameras]
    spec = DatasetSpec(version="v3.0", episode_lengths=[frames] * episodes, fps=30, episodes_per_file=10,
                       cameras=[CameraSpec(n, codec, 480, 640) for n in names])
    os.environ.setdefault("SVT_LOG", "1")
    write_lerobot_dataset(out, spec)
    (out / ".complete").write_text("")
    return out


def episode_videos(src: Path, limit: int | None) -> tuple[int, list[str]]:
    """(episodes in the dataset, the existing MP4s of its first `limit` episodes) from robo-ray's own reader."""
    from robo_ray.readers import open_reader

    refs = open_reader(str(src)).discover().refs
    files: list[str] = []
    for ref in refs[:limit] if limit else refs:
        for _, v in ref.videos:
            p = src / v.path
            if p.exists() and str(p) not in files:
                files.append(str(p))
    return len(refs), files


# ------------------------------------------------------------------------------------------------- mode 1: video
CEILINGS = (("decode_only", "decode-only"), ("decode_jpeg_yuv", "decode + JPEG (YUV planes)"),
            ("decode_rgb_resize_jpeg", "decode + RGB + resize + JPEG"))


def fixed_sample(requested: int | None, small: int) -> int:
    """validate.sample_episodes of both runs: as requested, else the config's default capped at the small run's
    episodes, so that the sampled source comparison is the same fixed cost in the small and the big run."""
    from robo_ray.config import ValidateConfig

    return requested if requested is not None else min(ValidateConfig().sample_episodes, small)


def video_bench(args: argparse.Namespace, env: dict[str, Any], work: Path) -> int:
    from robo_ray.config import JobConfig

    quality = JobConfig().images.jpeg_quality
    resize = tuple(int(x) for x in args.resize.lower().split("x")) if args.resize else None
    if args.generate:
        src = generate(args.generate, args.episodes, args.frames, Path(args.cache or work), args.cameras)
    elif args.dataset:
        src = Path(args.dataset).resolve()
    else:
        raise SystemExit("a dataset path, --generate CODEC, --short-episodes N or --startup")
    total, files = episode_videos(src, args.big)
    big = min(args.big, total) if args.big else None
    small = args.small or (big or total) // 2
    if small < 1 or small >= (big or total):
        raise SystemExit(f"--small {small} must be >= 1 and below --big ({big or total} episodes)")
    if not files:
        raise SystemExit(f"{src}: no MP4 files for the first {big or total} episodes: nothing to measure")
    modes = (args.modes or "inprocess,1,2").split(",")
    procs = [int(x) for x in args.procs.split(",")]
    name = src.name + (f"-resize{resize[0]}x{resize[1]}" if resize else "")
    sets = ["validate.tfds_readback=false", "convert.max_quarantine_fraction=1.0",
            f"validate.sample_episodes={fixed_sample(args.sample_episodes, small)}"]
    if resize:
        sets.append(f"images.resize=[{resize[0]},{resize[1]}]")
    sets += args.set or []
    result: dict[str, Any] = {"dataset": name, "source": str(src), "environment": env, "jpeg_quality": quality,
                              "resize": list(resize) if resize else None, "episodes_in_dataset": total,
                              "small_episodes": small, "big_episodes": big or total, "video_files": len(files),
                              "run_settings": sets, "repeat": args.repeat, "ceilings": {}, "runs": {}}
    kinds = [k for k in CEILINGS if k[0] != "decode_rgb_resize_jpeg" or resize]
    print(f"{name}: {len(files)} MP4s, modes {modes}, episodes {small} and {big or total} of {total}, "
          f"repeat {args.repeat}", file=sys.stderr)
    for key, label in kinds:
        for n in procs:
            trials = []
            for _ in range(args.repeat):
                trials.append(ceiling(files, n, None if key == "decode_only" else quality,
                                      resize if key == "decode_rgb_resize_jpeg" else None))
                print(f"  {label}, {n} processes: {trials[-1]['fps']:.0f} frames/s", file=sys.stderr)
            top = max(trials, key=lambda t: t["fps"] or 0)
            result["ceilings"].setdefault(key, {})[str(n)] = {**top, "all_fps": [t["fps"] for t in trials]}
    limit_key = "decode_rgb_resize_jpeg" if resize else "decode_jpeg_yuv"
    pairs = small_and_big(str(src), work, modes, small, big, total, sets, args, "frames")
    failed = False
    for m, r in pairs.items():
        marg, b_big = r["marginal"], r["big"]
        p = str(_procs_for(m))
        lim = result["ceilings"].get(limit_key, {}).get(p, {}).get("fps")
        dec = result["ceilings"].get("decode_only", {}).get(p, {}).get("fps")
        whole = b_big["frames"] / b_big["wall_seconds"] if b_big else None
        failed |= r["small"] is None or b_big is None
        result["runs"][m] = {**r, "marginal_fps": marg["rate"], "whole_command_fps": whole,
                             "limit_processes": int(p), "limit_fps": lim, "ratio_to_limit": _div(marg["rate"], lim),
                             "ratio_to_decode_only": _div(marg["rate"], dec),
                             "whole_command_ratio_to_limit": _div(whole, lim),
                             "window_marginal_fps": r["window_marginal"],
                             "window_ratio_to_limit": _div(r["window_marginal"], lim)}
    R = result["runs"]

    def marg_of(m: str) -> float | None:
        return R[m]["marginal_fps"] if m in R else None

    checks = [  # (check, the modes it needs, value, acceptance limit or None = information)
        ("in-process marginal / 1-process limit", ["inprocess"], R.get("inprocess", {}).get("ratio_to_limit"), 0.9),
        ("2 actors marginal / 2-process limit", ["2"], R.get("2", {}).get("ratio_to_limit"), 0.8),
        ("1 actor marginal / 1-process limit", ["1"], R.get("1", {}).get("ratio_to_limit"), None),
        ("1 actor marginal / in-process marginal", ["1", "inprocess"], _div(marg_of("1"), marg_of("inprocess")),
         None),
        ("2 actors marginal / 1 actor marginal", ["2", "1"], _div(marg_of("2"), marg_of("1")), None),
        ("in-process window marginal / 1-process limit", ["inprocess"],
         R.get("inprocess", {}).get("window_ratio_to_limit"), None),
        ("2 actors window marginal / 2-process limit", ["2"], R.get("2", {}).get("window_ratio_to_limit"), None),
    ]
    result["checks"] = [{"check": c, "value": v, "limit": lim, "acceptance": lim is not None,
                         "verdict": _verdict(v, lim, True) if lim is not None else None}
                        for c, need, v, lim in checks if all(m in R for m in need)]
    md = _video_md(result, kinds, procs, modes, limit_key)
    write_results(Path(args.out), name, result, md)
    print("\n".join(md))
    return 1 if failed else 0


def _walls(runs: list[dict[str, Any]]) -> list[float | None]:
    return [None if "error" in r else round(r["wall_seconds"], 3) for r in runs]


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _video_md(result: dict[str, Any], kinds: list[tuple[str, str]], procs: list[int], modes: list[str],
              limit_key: str) -> list[str]:
    env = result["environment"]
    rs = f", resize {result['resize'][0]}x{result['resize'][1]}" if result["resize"] else ""
    md = _header(f"{result['dataset']}: {result['video_files']} MP4s, JPEG q{result['jpeg_quality']}{rs}", env)
    first = next((c[str(p)]["first_frame"] for c in result["ceilings"].values() for p in procs
                  if str(p) in c and c[str(p)].get("first_frame")), None)
    if first:
        md += [f"Source frames: {first['format']} {first['size']}, colorspace {first['colorspace']}, range "
               f"{first['color_range']}; JPEG from the YUV planes: {'yes' if first['yuv_planes_path'] else 'NO'}"
               + (" (resize: always through RGB)" if result["resize"] else ""), ""]
    md += [f"Limits (frames/s; every MP4 of the converted episodes once, N processes, best of {result['repeat']}):",
           "",
           "| processes | " + " | ".join(label for _, label in kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
    for p in procs:
        md.append(f"| {p} | " + " | ".join(_fmt(result["ceilings"][k].get(str(p), {}).get("fps"))
                                          for k, _ in kinds) + " |")
    if result["video_files"] < 2 * max(procs):
        md += ["", (f"Only {result['video_files']} MP4s: a limit over {max(procs)} processes is held back by how "
                    "the files divide between them (the conversion is not: units are episodes).")]
    limit_label = dict(kinds)[limit_key]
    md += ["", (f"robo-ray run (`--max-episodes {result['small_episodes']}` and "
                f"{result['big_episodes']} of {result['episodes_in_dataset']} episodes; best wall of "
                f"{result['repeat']}; limit: {limit_label}):"), "",
           ("| mode | frames small / big | wall small / big s | marginal fps | limit fps (procs) | ratio to limit "
            "| ratio to decode-only | fixed s | whole-command fps | whole-command ratio | peak RSS driver / actor MB "
            "| bytes/frame |"), "|---" * 12 + "|"]

    def row(m: str, r: dict[str, Any], s: dict[str, Any], b: dict[str, Any]) -> str:
        return (f"| {_mode_label(m)} | {s['frames']} / {b['frames']} | {s['wall_seconds']:.2f} / "
                f"{b['wall_seconds']:.2f} | {_fmt(r['marginal_fps'])} | {_fmt(r['limit_fps'])} "
                f"({r['limit_processes']}) | {_fmt(r['ratio_to_limit'], '.2f')} | "
                f"{_fmt(r['ratio_to_decode_only'], '.2f')} | {_fmt(r['marginal'].get('fixed_seconds'), '.1f')} | "
                f"{_fmt(r['whole_command_fps'])} | {_fmt(r['whole_command_ratio_to_limit'], '.2f')} | "
                f"{_rss(b)} | {b['output_bytes'] / max(b['frames'], 1):.0f} |")

    md += _rows(result["runs"], modes, 12, row)
    md += _why_no_marginal(result["runs"], modes)
    md += _checks_md(result["checks"], ">=")
    md += ["", ("*window marginal* = the same difference over the conversion window (first unit started -> last "
                "unit committed, logs/timings.json; shortest of each size): without the noise of Ray's start-up, "
                "with the end of the conversion; information, the verdicts use the wall."),
           "", ("*marginal fps* = (frames big - frames small) / (wall big - wall small): the per-frame cost with "
                "every fixed cost removed; *fixed s* = wall big - frames big / marginal fps; *whole-command fps* = "
                "frames big / wall big (interpreter start to exit, structural + per-unit validation, no tfds "
                "read-back); *limit* = the limit with as many processes as the mode has workers (in-process and 1 "
                "actor: 1).")]
    return md


# ------------------------------------------------------------------------------------------------- mode 2: short
def short_bench(args: argparse.Namespace, env: dict[str, Any], work: Path) -> int:
    from bench.gen_state_only import generate

    n, steps = args.short_episodes, args.steps
    root = Path(args.cache or work)
    src = root / f"state_only_v30_{n}x{steps}"
    if not (src / ".complete").exists():
        shutil.rmtree(src, ignore_errors=True)
        t0 = time.perf_counter()
        generate(src, n, steps, episodes_per_row_group=1)  # one row group per episode, as lerobot writes
        (src / ".complete").write_text("")
        print(f"generated {src} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    small = args.small or n // 2
    if small < 1 or small >= n:
        raise SystemExit(f"--small {small} must be >= 1 and below {n}")
    modes = (args.modes or "inprocess,1").split(",")
    sets = ["validate.tfds_readback=false"]
    if args.sample_episodes is not None:
        sets.append(f"validate.sample_episodes={args.sample_episodes}")
    sets += args.set or []
    name = f"short_{n}x{steps}"
    result: dict[str, Any] = {"dataset": name, "source": str(src), "environment": env, "episodes": n,
                              "steps_per_episode": steps, "small_episodes": small, "run_settings": sets,
                              "repeat": args.repeat, "runs": {}}
    pairs = small_and_big(str(src), work, modes, small, None, n, sets, args, "episodes")
    failed = False
    for m, r in pairs.items():
        marg, b = r["marginal"], r["big"]
        failed |= r["small"] is None or b is None
        result["runs"][m] = {**r, "marginal_ms_per_episode": 1000 / marg["rate"] if marg["rate"] else None,
                             "whole_command_ms_per_episode": 1000 * b["wall_seconds"] / b["episodes"] if b else None}
    R = result["runs"]
    base = R.get("inprocess", {}).get("marginal_ms_per_episode")
    result["checks"] = []
    for m in modes:
        if m == "inprocess":
            continue
        v = _div(R[m]["marginal_ms_per_episode"], base)
        result["checks"].append({"check": f"{_mode_label(m)} / in-process, marginal per episode", "value": v,
                                 "limit": 1.3 if m == "1" else None, "acceptance": m == "1",
                                 "verdict": _verdict(v, 1.3, False) if m == "1" else None})
    md = _header(f"{n:,} state-only episodes x {steps} steps (LeRobot v3.0, one data file, one row group per "
                 "episode)", env)
    md += [f"robo-ray run with {small:,} (`--max-episodes`) and {n:,} episodes, best wall of {args.repeat}:", "",
           ("| mode | wall small / big s | marginal ms/episode | fixed s | whole-command ms/episode | units big "
            "| peak RSS driver / actor MB |"), "|---" * 7 + "|"]

    def row(m: str, r: dict[str, Any], s: dict[str, Any], b: dict[str, Any]) -> str:
        return (f"| {_mode_label(m)} | {s['wall_seconds']:.2f} / {b['wall_seconds']:.2f} | "
                f"{_fmt(r['marginal_ms_per_episode'], '.3f')} | {_fmt(r['marginal'].get('fixed_seconds'), '.1f')} "
                f"| {_fmt(r['whole_command_ms_per_episode'], '.3f')} | {b['units']} | {_rss(b)} |")

    md += _rows(R, modes, 7, row)
    md += _why_no_marginal(R, modes)
    md += _checks_md(result["checks"], "<=")
    md += ["", ("*marginal ms/episode* = (wall big - wall small) / (episodes big - episodes small); *fixed s* = "
                "wall big - episodes big x marginal; *whole-command ms/episode* = wall big / episodes big.")]
    write_results(Path(args.out), name, result, md)
    print("\n".join(md))
    return 1 if failed else 0


# ------------------------------------------------------------------------------------------------- mode 3: startup
# robo-ray's 1-episode `--actors 2` run against Ray's own floor on the same machine (bench/ray_floor.py)
STARTUP_OVER_FLOOR = 1.25
STARTUP_VARIANTS = (("inprocess", False, 2.0), ("inprocess", True, None), ("2", False, 10.0), ("2", True, 10.0))


def _timed(cmd: list[str], timeout: float, tree: CpuTree | None = None) -> tuple[float, int | None]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(tree.wrap(cmd) if tree else cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, cwd=REPO, env=ENV, start_new_session=True)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        code = None
    return time.perf_counter() - t0, code


def startup_bench(args: argparse.Namespace, env: dict[str, Any], work: Path) -> int:
    root = Path(args.cache or work)
    src = root / "startup_v30_h264_1cam_1x20"
    if not (src / ".complete").exists():
        shutil.rmtree(src, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "tests.fixtures.lerobot_gen", str(src), "--version", "v3.0",
                        "--episodes", "20", "--codec", "h264", "--cameras", "1"], cwd=REPO, env=ENV, check=True,
                       stdout=subprocess.DEVNULL)
        (src / ".complete").write_text("")
    # references: the interpreter + robo_ray.cli's imports (`--help`), and what the read-back child imports
    # and the floor of any 1-unit Ray run here: Ray's start + a Ray Data actor pool (or a plain actor), no robo-ray
    refs = {"cli_help": [sys.executable, "-m", "robo_ray.cli", "--help"],
            "import_tf": [sys.executable, "-c", "import tensorflow, tensorflow_datasets"],
            "ray_floor_data": [sys.executable, "-m", "bench.ray_floor", "data"],
            "ray_floor_actor": [sys.executable, "-m", "bench.ray_floor", "actor"]}
    walls: dict[str, list[float | None]] = {k: [] for k in refs}
    cpus: dict[str, list[float | None]] = {k: [] for k in refs}
    variants = {f"{m}-{'readback' if rb else 'noreadback'}": (m, rb, lim) for m, rb, lim in STARTUP_VARIANTS}
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in variants}
    for i in range(-1 if not args.no_warm_up else 0, args.runs):  # round -1: the untimed warm-up
        for k, cmd in refs.items():
            tree = CpuTree("ref")
            w, code = _timed(cmd, 600, tree if tree.ok else None)
            cpu = tree.seconds()
            if i >= 0:
                walls[k].append(w if code == 0 else None)
                cpus[k].append(cpu if code == 0 else None)
        for k, (m, rb, _) in variants.items():
            r = robo_run(str(src), work / f"out-{k}-{i}", m, None, [f"validate.tfds_readback={str(rb).lower()}"],
                         args.timeout)
            if i < 0:
                continue
            runs[k].append(r)
            print(f"  {k}: " + (f"{r['wall_seconds']:.2f} s" if "error" not in r else f"FAILED: {r['error'][:300]}"),
                  file=sys.stderr)

    def med(xs: list[float | None]) -> float | None:
        ok = [x for x in xs if x is not None]
        return statistics.median(ok) if len(ok) == len(xs) and ok else None

    result: dict[str, Any] = {"dataset": "startup", "source": str(src), "environment": env, "runs_each": args.runs,
                              "references": {k: {"walls": v, "median": med(v), "cpu_tree_seconds": cpus[k],
                                                 "cpu_median": med(cpus[k])} for k, v in walls.items()},
                              "variants": {}, "checks": []}
    failed = False
    for k, (m, rb, lim) in variants.items():
        ws = _walls(runs[k])
        failed |= any(w is None for w in ws)
        cs = [r.get("cpu_tree_seconds") for r in runs[k]]
        result["variants"][k] = {"mode": m, "tfds_readback": rb, "walls": ws, "median": med(ws), "limit_s": lim,
                                 "cpu_tree_seconds": cs, "cpu_median": med(cs),
                                 "verdict": _verdict(med(ws), lim, False) if lim else None,
                                 "errors": [r["error"] for r in runs[k] if "error" in r],
                                 "command": runs[k][0]["command"] if runs[k] else None}
    V, Rf = result["variants"], result["references"]
    extra = (V["inprocess-readback"]["median"] - V["inprocess-noreadback"]["median"]
             if V["inprocess-readback"]["median"] is not None and V["inprocess-noreadback"]["median"] is not None
             else None)
    tf = Rf["import_tf"]["median"]
    floor, ray2 = Rf["ray_floor_data"]["median"], V["2-noreadback"]["median"]
    over_floor = ray2 / floor if floor and ray2 is not None else None
    result["checks"] = [
        {"check": "in-process, no read-back: median wall s", "value": V["inprocess-noreadback"]["median"],
         "limit": "< 2 s", "verdict": V["inprocess-noreadback"]["verdict"]},
        {"check": "in-process: read-back adds (median with - median without) s", "value": extra,
         "limit": f"<= import tensorflow + tfds ({_fmt(tf, '.2f')} s)",
         "verdict": _verdict(extra, tf, False) if tf is not None else "n/a"},
        {"check": "--actors 2, no read-back: median wall s", "value": V["2-noreadback"]["median"], "limit": "< 10 s",
         "verdict": V["2-noreadback"]["verdict"]},
        {"check": "--actors 2, with read-back: median wall s", "value": V["2-readback"]["median"], "limit": "< 10 s",
         "verdict": V["2-readback"]["verdict"]},
        {"check": "--actors 2, no read-back / Ray floor (ray.init + a 1-row Ray Data actor pool, same run)",
         "value": over_floor, "limit": f"<= {STARTUP_OVER_FLOOR}",
         "verdict": _verdict(over_floor, STARTUP_OVER_FLOOR, False) if over_floor is not None else "n/a"},
    ]
    md = _header("1-episode run (LeRobot v3.0, 20 frames 64x48 H.264, 1 camera): whole-command wall", env)
    md += [f"Each {args.runs} times, interleaved; default config except validate.tfds_readback:", "",
           "| command | median s | every run s | CPU s, whole process tree (median) | limit |",
           "|---|---|---|---|---|"]
    labels = {"inprocess-noreadback": "in-process, no tfds read-back", "inprocess-readback": "in-process, read-back",
              "2-noreadback": "--actors 2, no tfds read-back", "2-readback": "--actors 2, read-back"}
    for k, v in V.items():
        lim = f"< {v['limit_s']:.0f} s" if v["limit_s"] else ""
        md.append(f"| robo-ray run, {labels[k]} | {_fmt(v['median'], '.2f')} | "
                  f"{', '.join(_fmt(w, '.2f') for w in v['walls'])} | {_fmt(v['cpu_median'], '.2f')} | {lim} |")
    ref_labels = {"cli_help": "`python -m robo_ray.cli --help`",
                  "import_tf": "`python -c 'import tensorflow, tensorflow_datasets'`",
                  "ray_floor_data": "Ray floor: `python -m bench.ray_floor data` (ray.init + 1-row Ray Data actor pool)",
                  "ray_floor_actor": "Ray floor: `python -m bench.ray_floor actor` (ray.init + 1 plain actor)"}
    for k, label in ref_labels.items():
        md.append(f"| reference: {label} | {_fmt(Rf[k]['median'], '.2f')} | "
                  f"{', '.join(_fmt(w, '.2f') for w in Rf[k]['walls'])} | {_fmt(Rf[k]['cpu_median'], '.2f')} | |")
    md += _startup_breakdown(runs.get("2-noreadback", []))
    md += _checks_md(result["checks"], "")
    write_results(Path(args.out), "startup", result, md)
    print("\n".join(md))
    return 1 if failed else 0


def _startup_breakdown(runs: list[dict[str, Any]]) -> list[str]:
    """Where a `--actors 2` run's seconds go: the median instant (s after the command started) of each mark of
    logs/timings.json, then the exit."""
    ok = [r for r in runs if "error" not in r and r.get("marks_s")]
    if not ok:
        return []
    names = list(ok[0]["marks_s"])
    md = ["", "Where `--actors 2, no tfds read-back` spends its seconds (median instant after the command started, "
          "from logs/timings.json marks):", "", "| instant | s |", "|---|---|"]
    for n in names:
        vals = [r["marks_s"][n] for r in ok if n in r["marks_s"]]
        md.append(f"| {n} | {statistics.median(vals):.2f} |")
    md.append(f"| process exit | {statistics.median(r['wall_seconds'] for r in ok):.2f} |")
    return md


# ------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", nargs="?", help="a dataset robo-ray reads (mode 1)")
    ap.add_argument("--generate", choices=("h264", "av1", "hevc"),
                    help="mode 1 on a generated LeRobot v3.0 dataset, 640x480, 10 episodes per file")
    ap.add_argument("--episodes", type=int, default=50, help="--generate: episodes (default 50)")
    ap.add_argument("--frames", type=int, default=300, help="--generate: frames per episode (default 300)")
    ap.add_argument("--cameras", type=int, default=2, help="--generate: cameras (default 2)")
    ap.add_argument("--cache", help="keep generated datasets here and reuse them (default: a temp dir, deleted)")
    ap.add_argument("--modes", help="robo-ray modes: inprocess and/or actor counts (default: inprocess,1,2; "
                                    "--short-episodes: inprocess,1)")
    ap.add_argument("--procs", default="1,2", help="process counts of the limits (default 1,2)")
    ap.add_argument("--small", type=int, help="episodes of the small run (default: half of --big, or of N)")
    ap.add_argument("--big", type=int, help="episodes of the big run (default: the whole dataset)")
    ap.add_argument("--resize", metavar="HxW", help="images.resize=[H,W] in the runs; adds the decode + RGB + "
                                                     "resize + JPEG limit, which the runs are then held to")
    ap.add_argument("--sample-episodes", type=int,
                    help="validate.sample_episodes of the runs (default: the config's 50, at most the small run's "
                         "episodes: the same fixed cost in both runs)")
    ap.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="an extra `robo-ray run --set` for every run (repeatable), e.g. convert.decode_ahead=0")
    ap.add_argument("--repeat", type=int, default=2, help="measure each limit and run this many times, keep the "
                                                          "best (default 2)")
    ap.add_argument("--short-episodes", type=int, metavar="N", help="mode 2: N short state-only episodes")
    ap.add_argument("--steps", type=int, default=20, help="--short-episodes: steps per episode (default 20)")
    ap.add_argument("--startup", action="store_true", help="mode 3: start-up of a 1-episode run")
    ap.add_argument("--runs", type=int, default=3, help="--startup: runs of each command (default 3)")
    ap.add_argument("--no-warm-up", action="store_true",
                    help="skip the untimed warm-up runs (one per kind: in-process, Ray; --startup: one round)")
    ap.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S, help="seconds per robo-ray run")
    ap.add_argument("--workdir", help="where the runs write (default: a temp dir); outputs are deleted after each")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"), help="results folder")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.runs < 1:
        ap.error("--repeat and --runs must be >= 1")
    env = environment(argv)
    warn_if_busy(env)
    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="robo-ray-tput-", dir=args.workdir) as tmp:
        work = Path(tmp)
        if args.short_episodes:
            code = short_bench(args, env, work)
        elif args.startup:
            code = startup_bench(args, env, work)
        else:
            code = video_bench(args, env, work)
    return code


if __name__ == "__main__":
    sys.exit(main())
