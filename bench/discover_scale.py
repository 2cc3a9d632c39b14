"""Discover at DROID scale (issue #26 part 4), not a test: the driver's whole Discover of a generated RLDS dataset of
many shards on a moto S3 server, and its share of a whole run.

    python -m bench.discover_scale --shards 200                          # a first try
    python -m bench.discover_scale                                       # 2,000 shards x 45 episodes (DROID's 92k/2048)
    python -m bench.discover_scale --shards 2000 --latency-ms 20 --blocks 65536,512 --work /tmp/robo-ray-discover
    python -m bench.discover_scale --skip-conversion                     # the conversion cost measured last

1. Generates (cached under --work) an RLDS dataset of --shards TFRecord shards x --episodes-per-shard tiny episodes
   (--steps steps of observation/state float32[8] + action float32[7], the RLDS step fields, a per-step text of
   --pad-bytes / steps bytes so each record is about 1 KiB), laid out by robo-ray's own RLDS writer code: the
   Mapping -> features.json / dataset_info.json of formats/rlds/schema.py, shard names from `shard_filename`, each
   episode framed by `frame_record(encode_example(episode_features(...)))`. No tfds, no TensorFlow.
2. Uploads it to a moto S3 server (tests/fixtures/servers.py `start_s3`) run in a child process, so the bench's own
   CPU seconds are the client's; --latency-ms delays every GET there (the fixture's fault injector) to stand for a
   real object store's first-byte latency (moto on loopback answers in ~1 ms, S3 in ~10-30 ms).
3. Times `open_reader(url).discover()` on s3:// (wall, this process's CPU, the server's CPU) once per scan block
   size in --blocks: 65536 is SCAN_BLOCK_REMOTE, what robo-ray uses (a shard of tiny records is then one or two
   ranged GETs); 512 makes every record cost its own ranged GET, as DROID's records of megabytes do (their headers
   are read in one 64 KiB block each): the request pattern of the real dataset without its bytes. The server
   counts the requests (ranged GETs, HEADs, listings).
4. The conversion cost per episode: `robo-ray run --to rlds --mode in-process` of a real dataset (--real, default
   ../shared/real/g1_v21_30ep; tfds read-back off), its logs/timings.json convert seconds / converted episodes,
   and Discover's share of a run of --droid-episodes such episodes on 1, 16 and 128 actors:
   discover / (discover + episodes x seconds per episode / actors).

Writes bench/results/discover_scale.json and .md (or --json / --md) and prints the table. The machine may be
loaded: every time is reported as wall and CPU seconds.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
NAME = "droid_scale"
DROID_EPISODES, DROID_SHARDS = 92_000, 2_048
ACTORS = (1, 16, 128)
BUCKET = "discover-bench"


# ---- the dataset ------------------------------------------------------------------------------------------------
def _mapping() -> Any:
    from robo_ray.mapping import FieldMap, Mapping

    return Mapping(dataset_name=NAME, steps=[
        FieldMap(source="observation.state", target="observation/state", kind="tensor", dtype="float32", shape=[8]),
        FieldMap(source="action", target="action", kind="tensor", dtype="float32", shape=[7]),
        FieldMap(source="note", target="observation/note", kind="text", dtype="string", shape=[])])


def _episode_record(index: int, steps: int, pad: int, rng: np.random.Generator) -> bytes:
    """One framed TFRecord record: the episode as the RLDS writer lays it out (`episode_features`)."""
    from robo_ray.formats.rlds.example import encode_example
    from robo_ray.formats.rlds.tfrecord import frame_record
    from robo_ray.formats.rlds.writer import episode_features

    first, last = np.zeros(steps, np.bool_), np.zeros(steps, np.bool_)
    first[0], last[-1] = True, True
    note = b"x" * max(pad // steps, 0)
    step_values = {
        "observation/state": rng.normal(size=(steps, 8)).astype(np.float32),
        "observation/note": [note] * steps,
        "action": rng.normal(size=(steps, 7)).astype(np.float32),
        "reward": last.astype(np.float32), "discount": np.ones(steps, np.float32),
        "is_first": first, "is_last": last, "is_terminal": last,
        "language_instruction": [b"pick up the block"] * steps}
    meta = {"episode_id": index, "file_path": f"raw/episode_{index}.h5"}
    return frame_record(encode_example(episode_features(step_values, meta)))


def version_dir(work: Path, shards: int, per_shard: int, steps: int, pad: int) -> Path:
    return work / f"rlds-{shards}x{per_shard}x{steps}-pad{pad}" / NAME / "1.0.0"


def generate(work: Path, shards: int, per_shard: int, steps: int, pad: int) -> Path:
    """The version folder of the dataset (cached: dataset_info.json is written last)."""
    from robo_ray.formats.rlds.schema import dataset_info_json, features_json, shard_filename

    root = version_dir(work, shards, per_shard, steps, pad)
    if (root / "dataset_info.json").exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    total = 0
    for s in range(shards):
        data = b"".join(_episode_record(s * per_shard + e, steps, pad, rng) for e in range(per_shard))
        (root / shard_filename(NAME, "train", s, shards)).write_bytes(data)
        total += len(data)
    mapping = _mapping()
    (root / "features.json").write_text(json.dumps(features_json(mapping), indent=2, sort_keys=True))
    info = dataset_info_json(mapping, [("train", [per_shard] * shards, total)], "discover_scale bench")
    (root / "dataset_info.json").write_text(json.dumps(info, indent=2, sort_keys=True))
    return root


# ---- the S3 server, in a child process ----------------------------------------------------------------------------
def _serve_s3(conn: Any, latency_ms: float) -> None:
    """Child: moto S3 (tests/fixtures/servers.py), every GET delayed `latency_ms`; answers "requests" (the
    requests served since the last ask, by kind) and "stop" on `conn`."""
    sys.path.insert(0, str(REPO))
    from tests.fixtures.servers import FaultRule, start_s3

    s3 = start_s3()
    if latency_ms:
        s3.faults.add(FaultRule(("GET",), "/", "delay", delay_s=latency_ms / 1000))
    conn.send(s3.endpoint)
    while True:
        cmd = conn.recv()
        if cmd == "requests":
            with s3.faults.lock:
                done = list(s3.faults.requests)
                s3.faults.requests.clear()
            conn.send(dict(Counter(_kind(m, p, r) for m, p, r in done)))
        elif cmd == "stop":
            s3.stop()
            conn.send("stopped")
            return


def _kind(method: str, path: str, range_header: str) -> str:
    if method == "GET" and range_header:
        return "ranged GET"
    if method == "GET" and path.rstrip("/").count("/") <= 1:
        return "listing"
    return method


class S3Child:
    """The moto server process: its endpoint, request counts and CPU seconds."""

    def __init__(self, latency_ms: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve_s3, args=(child, latency_ms), daemon=True)
        self.proc.start()
        self.endpoint = self.conn.recv()

    def storage_options(self) -> dict[str, Any]:
        from tests.fixtures.servers import REGION, S3_KEY, S3_SECRET

        return {"key": S3_KEY, "secret": S3_SECRET,
                "client_kwargs": {"endpoint_url": self.endpoint, "region_name": REGION}}

    def requests(self) -> dict[str, int]:
        self.conn.send("requests")
        return self.conn.recv()

    def cpu_s(self) -> float:
        import psutil

        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    def stop(self) -> None:
        self.conn.send("stop")
        self.conn.recv()
        self.proc.join(timeout=30)


def upload(s3: S3Child, root: Path) -> tuple[str, float]:
    """The s3:// URL of the dataset's version folder, and the upload's seconds."""
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3.storage_options())
    if not fs.exists(BUCKET):
        fs.call_s3("create_bucket", Bucket=BUCKET)
    prefix = f"{BUCKET}/{root.parent.parent.name}/{NAME}/1.0.0"
    t0 = time.monotonic()
    fs.put([str(p) for p in sorted(root.iterdir())], [f"{prefix}/{p.name}" for p in sorted(root.iterdir())])
    return f"s3://{prefix}", time.monotonic() - t0


# ---- measurements -------------------------------------------------------------------------------------------------
def time_discover(url: str, s3: S3Child, block: int) -> dict[str, Any]:
    """`open_reader(url).discover()` with the scan block `block`: wall / CPU seconds of opening the reader and of
    Discover, the server's CPU and the requests it served."""
    from robo_ray.formats.rlds import reader as rlds_reader
    from robo_ray.readers import open_reader

    s3.requests()
    server0, w0, c0 = s3.cpu_s(), time.monotonic(), time.process_time()
    reader = open_reader(url, storage_options=s3.storage_options())
    w1, c1 = time.monotonic(), time.process_time()
    reader._block = block  # the bench's knob: what one ranged GET of the scan covers
    inv = reader.discover()
    w2, c2 = time.monotonic(), time.process_time()
    requests = s3.requests()
    errors = [f for f in inv.findings if f.level == "error"]
    return {"block": block, "scan_threads": rlds_reader.SCAN_THREADS, "episodes": inv.episodes_count,
            "total_steps": inv.total_steps, "error_findings": len(errors),
            "open_wall_s": round(w1 - w0, 2), "open_cpu_s": round(c1 - c0, 2),
            "discover_wall_s": round(w2 - w1, 2), "discover_cpu_s": round(c2 - c1, 2),
            "server_cpu_s": round(s3.cpu_s() - server0, 2), "requests": requests,
            "requests_total": sum(requests.values())}


def conversion_cost(work: Path, real: Path) -> dict[str, Any]:
    """Seconds per converted episode on one worker: an in-process RLDS conversion of `real` (tfds read-back off),
    from its logs/timings.json."""
    out = work / f"convert-{real.name}"
    cmd = [sys.executable, "-m", "robo_ray.cli", "run", str(real), str(out), "--to", "rlds", "--mode", "in-process",
           "--overwrite", "--set", "validate.tfds_readback=false"]
    env = dict(os.environ, PYTHONPATH=str(REPO), ROBO_RAY_STATUS_INTERVAL_S="0")
    t0, c0 = time.monotonic(), os.times()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)
    wall, c1 = time.monotonic() - t0, os.times()
    if proc.returncode not in (0, 3):  # 3: some episodes quarantined (g1_v21_30ep has 4 without their video)
        raise SystemExit(f"robo-ray run failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    timings = json.loads((out / "logs" / "timings.json").read_text())
    stages = {k: round(v["seconds"], 2) for k, v in timings["stages"].items()}
    info = json.loads(next((out / "rlds").rglob("dataset_info.json")).read_text())
    converted = sum(int(n) for s in info["splits"] for n in s["shardLengths"])
    cost = {"dataset": real.name, "command": "robo-ray " + " ".join(cmd[3:]), "episodes_converted": converted,
            "stages_s": stages, "wall_s": round(wall, 2),
            "cpu_s": round((c1.children_user - c0.children_user) + (c1.children_system - c0.children_system), 2),
            "convert_s_per_episode": round(stages["convert"] / converted, 4)}
    cost["cpu_s_per_episode"] = round(cost["cpu_s"] / converted, 4)
    _cost_file(work, real).write_text(json.dumps(cost, indent=2) + "\n")
    return cost


def _cost_file(work: Path, real: Path) -> Path:
    return work / f"conversion-{real.name}.json"


def shares(discover_s: float, per_episode_s: float, episodes: int) -> dict[int, dict[str, float]]:
    """Discover's share of Discover + conversion, per number of actors."""
    out = {}
    for actors in ACTORS:
        convert = episodes * per_episode_s / actors
        out[actors] = {"convert_s": round(convert, 1), "share": round(discover_s / (discover_s + convert), 4)}
    return out


def estimates(run: dict[str, Any], conv: dict[str, Any], scale: float, episodes: int,
              latency_ms: float) -> list[dict[str, Any]]:
    """Discover's share at DROID scale, three ways: wall against wall on this (loaded) machine; the driver's CPU
    against the conversion's CPU (an idle machine, a store answering at once); and the driver's CPU or the time
    `latency_ms` per request takes over SCAN_THREADS connections, whichever is longer, against the conversion's
    CPU (an object store's latency)."""
    cpu = run["discover_cpu_s"] * scale
    waits = run["requests_total"] * scale * latency_ms / 1000 / run["scan_threads"]
    rows = [("wall / wall (this machine)", run["discover_wall_s"] * scale, conv["convert_s_per_episode"]),
            ("CPU / CPU", cpu, conv["cpu_s_per_episode"]),
            (f"max(CPU, {latency_ms:g} ms x requests / {run['scan_threads']}) / CPU", max(cpu, waits),
             conv["cpu_s_per_episode"])]
    return [{"block": run["block"], "basis": basis, "discover_s": round(d, 1), "by_actors": shares(d, per, episodes)}
            for basis, d, per in rows]


# ---- report -------------------------------------------------------------------------------------------------------
def markdown(result: dict[str, Any]) -> str:
    g, conv = result["dataset"], result["conversion"]
    lines = [f"### Discover of {g['shards']} RLDS shards x {g['episodes_per_shard']} episodes on moto S3",
             "", f"`{result['command']}`; {result['machine']}", "",
             f"Dataset: {g['episodes']} episodes of {g['steps']} steps, {g['bytes'] / 2**20:.0f} MB "
             f"({g['record_bytes']} bytes a record); generated in {g['generate_s'] or '(cached)'} s, uploaded in "
             f"{g['upload_s']} s; GET latency added by the server: {result['latency_ms']} ms.", "",
             "| scan block | reader open wall / CPU s | Discover wall / CPU s | server CPU s | requests | "
             "ranged GETs | per shard |", "|---|---|---|---|---|---|---|"]
    for r in result["discover"]:
        lines.append(f"| {r['block']} | {r['open_wall_s']} / {r['open_cpu_s']} | {r['discover_wall_s']} / "
                     f"{r['discover_cpu_s']} | {r['server_cpu_s']} | {r['requests_total']} | "
                     f"{r['requests'].get('ranged GET', 0)} | {r['requests_total'] / g['shards']:.1f} |")
    lines += ["", f"Conversion cost: {conv['dataset']} to RLDS in-process: {conv['episodes_converted']} episodes, "
              f"convert {conv['stages_s'].get('convert')} s wall -> **{conv['convert_s_per_episode']} s per episode "
              f"per actor** (whole command {conv['wall_s']} s wall, {conv['cpu_s']} s CPU -> "
              f"**{conv['cpu_s_per_episode']} CPU s per episode**).", "",
              f"Discover's share of a run of {result['droid_episodes']} such episodes "
              f"(scaled to {DROID_SHARDS} shards: Discover x {DROID_SHARDS}/{g['shards']}):", "",
              "| scan block | Discover / conversion basis | Discover s (scaled) | "
              + " | ".join(f"{a} actor(s): convert s / share" for a in ACTORS) + " |",
              "|---|---|---|" + "---|" * len(ACTORS)]
    for r in result["shares"]:
        lines.append(f"| {r['block']} | {r['basis']} | {r['discover_s']} | " + " | ".join(
            f"{r['by_actors'][a]['convert_s']} / {100 * r['by_actors'][a]['share']:.1f}%" for a in ACTORS) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.discover_scale", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=2000)
    ap.add_argument("--episodes-per-shard", type=int, default=45)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--pad-bytes", type=int, default=640, help="per-episode text bytes (record size)")
    ap.add_argument("--blocks", default="65536,512", help="scan block sizes to time, comma-separated")
    ap.add_argument("--latency-ms", type=float, default=0.0, help="delay of every GET at the server")
    ap.add_argument("--s3-latency-ms", type=float, default=20.0, help="an object store's latency per request, for "
                    "the estimate (not applied)")
    ap.add_argument("--real", default=str(REPO.parent / "shared" / "real" / "g1_v21_30ep"))
    ap.add_argument("--droid-episodes", type=int, default=DROID_EPISODES)
    ap.add_argument("--skip-conversion", action="store_true", help="reuse the conversion cost measured last in --work")
    ap.add_argument("--work", default="/tmp/robo-ray-discover")
    ap.add_argument("--json", default=str(RESULTS / "discover_scale.json"))
    ap.add_argument("--md", default=str(RESULTS / "discover_scale.md"))
    args = ap.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)

    t0 = time.monotonic()
    cached = (version_dir(work, args.shards, args.episodes_per_shard, args.steps, args.pad_bytes)
              / "dataset_info.json").exists()
    root = generate(work, args.shards, args.episodes_per_shard, args.steps, args.pad_bytes)
    generate_s = None if cached else round(time.monotonic() - t0, 1)
    size = sum(p.stat().st_size for p in root.iterdir())
    s3 = S3Child(args.latency_ms)
    try:
        url, upload_s = upload(s3, root)
        runs = [time_discover(url, s3, int(b)) for b in args.blocks.split(",")]
    finally:
        s3.stop()
    cost_file = _cost_file(work, Path(args.real))
    conv = json.loads(cost_file.read_text()) if args.skip_conversion and cost_file.exists() else \
        conversion_cost(work, Path(args.real))
    episodes = args.shards * args.episodes_per_shard
    scale = DROID_SHARDS / args.shards
    result = {
        "command": " ".join(["python -m bench.discover_scale", *(argv if argv is not None else sys.argv[1:])]),
        "machine": f"{os.cpu_count()} CPUs, load average at the end {[round(x, 2) for x in os.getloadavg()]}",
        "latency_ms": args.latency_ms, "droid_episodes": args.droid_episodes,
        "dataset": {"shards": args.shards, "episodes_per_shard": args.episodes_per_shard, "episodes": episodes,
                    "steps": args.steps, "bytes": size, "record_bytes": round(size / episodes),
                    "generate_s": generate_s, "upload_s": round(upload_s, 1)},
        "discover": runs, "conversion": conv,
        "shares": [row for r in runs for row in estimates(r, conv, scale, args.droid_episodes, args.s3_latency_ms)]}
    text = markdown(result)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    Path(args.md).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
