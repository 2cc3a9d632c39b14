"""Scale-out (issue #14), not a test: `robo-ray run` on state-only LeRobot v3.0 datasets of 2,000 / 20,000 / 200,000
episodes in one run on one machine, in-process and with 2 Ray actors; and the journal's bytes for 10 vs 1,000 units.

    python -m bench.scale                                   # 2000,20000,200000 x 5 steps; inprocess,ray2; journal
    python -m bench.scale --episodes 2000,20000 --length 20 --modes ray2 --work /tmp/robo-ray-scale --no-journal
    python -m bench.scale --journal-only --journal-units 10,1000

For each size the dataset is generated once (bench/gen_state_only.py, cached under --work), then
`python -m robo_ray.cli run SRC DST --overwrite [--actors 2]` runs as a subprocess (default config) while a thread
samples every --sample s the process tree under it: the peak RSS (the kernel's high-water mark, VmHWM, read while
the process lives; at least the largest RSS sampled) of the driver (the subprocess), of the Publisher (the process
whose command line holds "Publisher": Ray titles an actor's process `ray::Publisher...`; in-process the driver is
the Publisher) and of the largest unit actor (`ray::UnitActor`). Per-stage wall times come from the run's
logs/timings.json (robo_ray/stages/timings.py): discover, plan, convert (the PublishSpec made .. the last unit
committed), finalize, verify, publish; "start" is the process start to the first stamp (imports, lock, Ray start
in the background), "exit" the last stamp to the process's exit; "tail" = exit - last unit committed, also as a
fraction of the whole command's wall (issue #14: <= 15% with 2 actors on 20,000 episodes).

The journal section runs the pipeline in this process to memory:// (no tfds read-back) on the first
--journal-units episodes of the smallest dataset with `plan.max_unit_episodes=1` (one unit per episode) and counts
the bytes uploaded to progress.jsonl, ledger.json and journal/ parts: linear growth = the same bytes per unit.

Writes bench/results/scale.json and scale.md (or --json / --md) and prints the tables. Memory acceptance: the
driver's and the Publisher's peak RSS at the largest size at most 1.3x their value at the second largest.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
STAGES = ("discover", "plan", "convert", "finalize", "verify", "publish")
MODES = {"inprocess": [], "ray1": ["--actors", "1"], "ray2": ["--actors", "2"]}
MAX_RSS_RATIO = 1.3
MAX_TAIL = 0.15  # issue #14: with 2 actors on 20,000 episodes, exit - last unit committed <= 15% of the wall


def dataset(work: Path, episodes: int, length: int) -> Path:
    """The generated source (made once, kept under `work`)."""
    from bench.gen_state_only import generate

    src = work / f"state_v30_{episodes}x{length}"
    if not (src / ".complete").exists():
        shutil.rmtree(src, ignore_errors=True)
        t0 = time.perf_counter()
        generate(src, episodes, length)
        (src / ".complete").write_text("")
        print(f"generated {episodes} x {length} steps in {time.perf_counter() - t0:.1f}s: {src}", flush=True)
    return src


def _hwm(pid: int) -> int:
    """The process's peak RSS so far (VmHWM, bytes); 0 when unreadable."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class TreeSampler(threading.Thread):
    """Peak RSS of the driver, the Publisher actor and each unit actor under the driver's process tree."""

    def __init__(self, pid: int, period: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.driver = 0
        self.publisher: dict[int, int] = {}
        self.actors: dict[int, int] = {}
        self.titles: list[str] | None = None  # the tree's command lines once, while a unit actor converts
        self.stop = threading.Event()

    def _peak(self, p: psutil.Process) -> int:
        return max(_hwm(p.pid), p.memory_info().rss)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                root = psutil.Process(self.pid)
                self.driver = max(self.driver, self._peak(root))
                procs = root.children(recursive=True)
            except psutil.NoSuchProcess:
                return
            seen = []
            for p in procs:
                try:
                    cmd = " ".join(p.cmdline())
                    seen.append(f"{p.pid} {cmd[:100]}")
                    if "Publisher" in cmd:
                        self.publisher[p.pid] = max(self.publisher.get(p.pid, 0), self._peak(p))
                    elif "UnitMapper" in cmd:
                        self.actors[p.pid] = max(self.actors.get(p.pid, 0), self._peak(p))
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            if self.titles is None and any("UnitMapper" in s and ".submit" in s for s in seen):
                self.titles = seen
            self.stop.wait(self.period)


def run_once(src: Path, out: Path, mode: str, sample: float, extra: list[str]) -> dict[str, Any]:
    """One `robo-ray run` as a subprocess: wall, stages, tail, peak RSS."""
    cmd = [sys.executable, "-m", "robo_ray.cli", "run", str(src), str(out), "--overwrite", *MODES[mode]]
    for s in extra:
        cmd += ["--set", s]
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_AUTH_MODE="disabled", ROBO_RAY_STATUS_INTERVAL_S="0")
    t_start = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    sampler = TreeSampler(proc.pid, sample)
    sampler.start()
    stdout, stderr = proc.communicate()
    t_exit = time.time()
    sampler.stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"robo-ray run failed ({proc.returncode}): {' '.join(cmd)}\n{stdout[-2000:]}\n"
                         f"{stderr[-3000:]}")
    t = json.loads((out / "logs" / "timings.json").read_text())
    stages = {s: t["stages"][s]["seconds"] for s in STAGES if s in t["stages"]}
    first = min(v["start"] for v in t["stages"].values())
    last = max(v["end"] for v in t["stages"].values())
    wall = t_exit - t_start
    committed = t["marks"].get("last_unit_committed")
    tail = t_exit - committed if committed else None
    mb = lambda b: round(b / 2**20)  # noqa: E731
    publisher = mb(max(sampler.publisher.values())) if sampler.publisher else None
    return {"mode": mode, "command": " ".join(["robo-ray", *cmd[3:]]), "wall_s": round(wall, 2),
            "start_s": round(first - t_start, 2), "stages_s": stages, "exit_s": round(t_exit - last, 2),
            "tail_s": round(tail, 2) if tail is not None else None,
            "tail_fraction": round(tail / wall, 3) if tail is not None else None,
            "peak_rss_mb": {"driver": mb(sampler.driver),
                            "publisher": publisher if mode != "inprocess" else mb(sampler.driver),
                            "unit_actor": mb(max(sampler.actors.values())) if sampler.actors else None,
                            "unit_actors": sorted(mb(v) for v in sampler.actors.values())},
            "process_titles": sampler.titles, "message": stdout.strip().splitlines()[0] if stdout.strip() else ""}


def journal_bytes(src: Path, units: int) -> dict[str, Any]:
    """Bytes uploaded to the journal (progress.jsonl, ledger.json, journal/ parts) by an in-process run of `units`
    one-episode units to memory://."""
    import fsspec
    from fsspec.implementations.memory import MemoryFile

    from robo_ray.config import load_config
    from robo_ray.stages.journal import JOURNAL_DIR
    from robo_ray.stages.pipeline import run_pipeline

    names = ("/progress.jsonl", "/ledger.json", f"/{JOURNAL_DIR}/")
    written: list[tuple[str, int]] = []
    commit = MemoryFile.commit

    def counting_commit(self: MemoryFile) -> None:
        written.append((self.path, self.getbuffer().nbytes))
        commit(self)

    out = f"memory://bench-journal-{units}"
    cfg = load_config(None, ["validate.tfds_readback=false", "validate.sample_episodes=0", f"max_episodes={units}",
                             "plan.max_unit_episodes=1", f"plan.min_shards={units}"],
                      **{"source.url": str(src), "target.url": out})
    MemoryFile.commit = counting_commit  # type: ignore[method-assign]
    t0 = time.perf_counter()
    try:
        outcome = run_pipeline(cfg, stderr=io.StringIO())
    finally:
        MemoryFile.commit = commit  # type: ignore[method-assign]
    fs, root = fsspec.core.url_to_fs(out)
    ledger = json.loads(fs.cat_file(f"{root}/ledger.json"))
    fs.rm(root, recursive=True)
    if outcome.exit_code != 0 or len(ledger["shards"]) != units:
        raise SystemExit(f"journal run with {units} units failed: {outcome.message}")
    by = {n.strip("/"): sum(b for p, b in written if n in p) for n in names}
    total = sum(by.values())
    return {"units": units, "bytes": total, "bytes_per_unit": round(total / units, 1), "by_file": by,
            "objects_written": sum(1 for p, _ in written if any(n in p for n in names)),
            "seconds": round(time.perf_counter() - t0, 1)}


def tables(result: dict[str, Any]) -> list[str]:
    runs = result["runs"]
    md = [f"### Scale-out: state-only LeRobot v3.0, {result['length']} steps per episode, to RLDS "
          f"({result['cpus']} CPUs)", "",
          "| episodes | mode | whole command s | start | " + " | ".join(STAGES) + " | exit | tail s (share) "
          "| peak RSS MB driver | Publisher | one unit actor |",
          "|---|---|---|---|" + "---|" * len(STAGES) + "---|---|---|---|---|"]
    for r in runs:
        st = " | ".join(f"{r['stages_s'].get(s, 0):.1f}" for s in STAGES)
        tail = f"{r['tail_s']:.1f} ({r['tail_fraction']:.0%})" if r["tail_s"] is not None else "-"
        rss = r["peak_rss_mb"]
        pub = f"{rss['publisher']}" + (" (= driver)" if r["mode"] == "inprocess" else "")
        md.append(f"| {r['episodes']:,} | {r['mode']} | {r['wall_s']:.1f} | {r['start_s']:.1f} | {st} | "
                  f"{r['exit_s']:.1f} | {tail} | {rss['driver']} | {pub} | {rss['unit_actor'] or '-'} |")
    if result.get("ratios"):
        md += ["", f"Peak RSS at {result['largest']:,} / at {result['second']:,} episodes (limit {MAX_RSS_RATIO}x):",
               "", "| mode | process | MB at smaller | MB at larger | ratio | limit | verdict |",
               "|---|---|---|---|---|---|---|"]
        for row in result["ratios"]:
            md.append(f"| {row['mode']} | {row['process']} | {row['smaller_mb']} | {row['larger_mb']} | "
                      f"{row['ratio']:.2f} | {MAX_RSS_RATIO} | {'PASS' if row['pass'] else 'FAIL'} |")
    tails = [r for r in runs if r["mode"] == "ray2" and r["episodes"] == 20000 and r["tail_fraction"] is not None]
    for r in tails:
        verdict = "PASS" if r["tail_fraction"] <= MAX_TAIL else "FAIL"
        md += ["", f"Tail with 2 actors on 20,000 episodes: {r['tail_s']:.1f} s of {r['wall_s']:.1f} s = "
               f"{r['tail_fraction']:.0%} (limit {MAX_TAIL:.0%}): {verdict}"]
    if result.get("journal"):
        j = result["journal"]
        md += ["", "Journal bytes on memory:// (one unit per episode; progress.jsonl + ledger.json + journal/ parts):",
               "", "| units | bytes | bytes per unit | objects written | progress.jsonl | ledger.json | journal/ |",
               "|---|---|---|---|---|---|---|"]
        for row in j["runs"]:
            b = row["by_file"]
            md.append(f"| {row['units']:,} | {row['bytes']:,} | {row['bytes_per_unit']:.0f} | {row['objects_written']} "
                      f"| {b['progress.jsonl']:,} | {b['ledger.json']:,} | {b[j['parts_key']]:,} |")
        md += ["", f"bytes per unit at {j['runs'][-1]['units']:,} / at {j['runs'][0]['units']:,} units: "
               f"{j['per_unit_ratio']:.2f} (linear: about 1; rewriting the journal per unit: about "
               f"{j['runs'][-1]['units'] / j['runs'][0]['units']:.0f})"]
    return md


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", default="2000,20000,200000", help="comma-separated dataset sizes")
    ap.add_argument("--length", type=int, default=5, help="steps per episode")
    ap.add_argument("--modes", default="inprocess,ray2", help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--work", default="/tmp/robo-ray-scale", help="generated datasets (kept) and outputs (removed)")
    ap.add_argument("--sample", type=float, default=0.1, help="RSS sampling period, seconds")
    ap.add_argument("--set", action="append", default=[], help="extra config KEY=VALUE for every run")
    ap.add_argument("--journal-units", default="10,1000")
    ap.add_argument("--no-journal", action="store_true")
    ap.add_argument("--journal-only", action="store_true")
    ap.add_argument("--json", default=str(RESULTS / "scale.json"))
    ap.add_argument("--md", default=str(RESULTS / "scale.md"))
    a = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    sizes = [int(x) for x in a.episodes.split(",") if x.strip()]
    modes = [m for m in a.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        ap.error(f"unknown modes {unknown}; known: {', '.join(MODES)}")
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"length": a.length, "cpus": os.cpu_count(), "sizes": sizes, "modes": modes,
                              "extra_config": a.set, "runs": []}
    if not a.journal_only:
        for n in sizes:
            src = dataset(work, n, a.length)
            for mode in modes:
                out = work / f"out-{n}-{mode}"
                r = run_once(src, out, mode, a.sample, a.set)
                shutil.rmtree(out, ignore_errors=True)
                r["episodes"] = n
                result["runs"].append(r)
                print(f"{n} episodes, {mode}: {r['wall_s']:.1f} s, stages {r['stages_s']}, tail {r['tail_s']} s, "
                      f"peak RSS MB {r['peak_rss_mb']}", flush=True)
        if len(sizes) >= 2:
            big, second = sorted(sizes)[-1], sorted(sizes)[-2]
            result["largest"], result["second"] = big, second
            result["ratios"] = []
            for mode in modes:
                at = {r["episodes"]: r["peak_rss_mb"] for r in result["runs"] if r["mode"] == mode}
                for proc in ("driver", "publisher"):
                    if mode == "inprocess" and proc == "publisher":
                        continue  # the driver is the Publisher
                    lo, hi = at[second][proc], at[big][proc]
                    if lo and hi:
                        result["ratios"].append({"mode": mode, "process": proc, "smaller_mb": lo, "larger_mb": hi,
                                                 "ratio": hi / lo, "pass": hi / lo <= MAX_RSS_RATIO})
    if not a.no_journal:
        units = [int(x) for x in a.journal_units.split(",")]
        src = dataset(work, max(max(units), min(sizes)), a.length)
        runs = [journal_bytes(src, u) for u in units]
        result["journal"] = {"runs": runs, "parts_key": "journal",
                             "per_unit_ratio": runs[-1]["bytes_per_unit"] / runs[0]["bytes_per_unit"]}
    md = tables(result)
    for path, text in ((a.json, json.dumps(result, indent=2)), (a.md, "\n".join(md) + "\n")):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    print("\n".join(md))
    titles = next((r["process_titles"] for r in result["runs"] if r.get("process_titles")), None)
    if titles:
        print("\nprocess tree of the first Ray run, once a unit actor was converting:")
        print("\n".join(f"  {t}" for t in titles))
    ok = all(r["pass"] for r in result.get("ratios", []))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
