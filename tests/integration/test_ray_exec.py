"""The Ray executor on a real local Ray cluster (no mocks): actor pool, Publisher actor, bounded retries, resume,
`ray job submit`.

One cluster for the whole module: `ray start --head` on 127.0.0.1 (2 CPUs, small object store, dashboard for the
job server), started from this venv so `python` in a job entrypoint is ours. This process connects to it as a
driver; CLI subprocesses connect with `--address`; `ray job submit` goes through the dashboard. Teardown stops
exactly the processes of that cluster (found through its private --temp-dir), nothing else on the machine.

Fault hooks (test-only, see robo_ray/ray_exec/faults.py): ROBO_RAY_FAULT_DELAY_S slows every unit so a kill lands
mid-run; ROBO_RAY_FAULT_ABORT_EPISODE makes the worker os.abort() on an episode.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

import psutil  # noqa: E402
import ray  # noqa: E402

from robo_ray.config import load_config  # noqa: E402
from robo_ray.errors import OutputConflict  # noqa: E402
from robo_ray.executors.in_process import InProcessExecutor  # noqa: E402
from robo_ray.stages.pipeline import run_pipeline  # noqa: E402
from robo_ray.storage import sha256_file, url_to_fs  # noqa: E402
from tests.conftest import sigkill_when, wait_for  # noqa: E402
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset  # noqa: E402
from tests.fixtures.ray_cli import cluster_pids, free_ports, ray_start, stop_cluster  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray"), pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
WORKER_TITLE = "MapBatches(UnitMapper)"  # the process title of a Ray Data pool actor of ours
FAST = ["plan.min_shards=8", "validate.tfds_readback=false"]


# ---- cluster --------------------------------------------------------------------------------------------------
class Cluster:
    def __init__(self, gcs: str, dashboard: str, temp_dir: str, env: dict[str, str]) -> None:
        self.gcs, self.dashboard, self.temp_dir, self.env = gcs, dashboard, temp_dir, env


@pytest.fixture(scope="module")
def cluster():
    ray_cli = VENV_BIN / "ray"
    assert ray_cli.exists(), f"ray CLI not found next to {sys.executable} (ray[default] is a dependency)"
    temp_dir = f"/tmp/rrt-{uuid.uuid4().hex[:8]}"  # short: Ray puts unix sockets under it
    port, dash, agent, agent_grpc, env_agent, metrics, node_mgr, obj_mgr, client = free_ports(9)
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("RAY_ADDRESS", None)
    # loopback-only throwaway cluster: no token auth (Ray 2.60 turns it on when ~/.ray/auth_token exists, and
    # every client would then need the same token)
    env["RAY_AUTH_MODE"] = "disabled"
    for k in [k for k in env if k.startswith("ROBO_RAY_FAULT_")]:
        env.pop(k)
    cmd = ["--head", "--node-ip-address=127.0.0.1", f"--port={port}",
           "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", "--include-dashboard=true",
           f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
           f"--runtime-env-agent-port={env_agent}", f"--metrics-export-port={metrics}",
           f"--node-manager-port={node_mgr}", f"--object-manager-port={obj_mgr}", f"--ray-client-server-port={client}",
           "--num-cpus=2", f"--object-store-memory={200 * 1024 * 1024}", f"--temp-dir={temp_dir}",
           "--disable-usage-stats"]
    mp = pytest.MonkeyPatch()
    try:
        ray_start(cmd, env, temp_dir, timeout=120)
        c = Cluster(f"127.0.0.1:{port}", f"http://127.0.0.1:{dash}", temp_dir, env)
        mp.setenv("RAY_AUTH_MODE", "disabled")
        ray.init(address=c.gcs, logging_level="WARNING", log_to_driver=False)
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        mp.undo()
        stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


# ---- datasets and helpers -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    base = tmp_path_factory.mktemp("ray_src")
    v21 = write_lerobot_dataset(base / "v21_8ep", DatasetSpec(
        version="v2.1", episode_lengths=[20, 24, 18, 22, 20, 16, 25, 21], fps=20))
    # v3.0: three episodes per file and two cameras -> units of several episodes decoded from shared MP4s
    cams = [CameraSpec(key="observation.images.top", codec="h264"),
            CameraSpec(key="observation.images.wrist", codec="h264")]
    v30 = write_lerobot_dataset(base / "v30_12ep", DatasetSpec(
        version="v3.0", episode_lengths=[15, 18, 12, 20, 14, 16, 19, 13, 17, 15, 14, 16], fps=20, cameras=cams,
        episodes_per_file=3))
    return {"v21": v21, "v30": v30}  # units: v21 one per episode (8); v30 [0-2] [3-5] [6-8] [9-11]


def _cfg(src: Path, dst: Path, sets: list[str] = FAST):
    return load_config(None, sets, **{"source.url": str(src), "target.url": str(dst)})


def _shards(out: Path) -> dict[str, str]:
    """shard file name -> sha256 of every shard in the output."""
    d = next((out / "rlds").glob("*/*"))
    fs, _ = url_to_fs(str(d))
    return {p.name: sha256_file(fs, str(p)) for p in sorted(d.iterdir()) if ".tfrecord-" in p.name}


def _info(out: Path) -> dict:
    return json.loads(next((out / "rlds").glob("*/*/dataset_info.json")).read_text())


def _ledger(out: Path) -> dict:
    return json.loads((out / "ledger.json").read_text())


def _written_episodes(out: Path) -> list[int]:
    """Episode ids in the shards, read back record by record (duplicates kept)."""
    from robo_ray.formats.rlds.example import decode_example
    from robo_ray.formats.rlds.tfrecord import read_records

    ids: list[int] = []
    d = next((out / "rlds").glob("*/*"))
    for p in sorted(d.iterdir()):
        if ".tfrecord-" in p.name:
            with open(p, "rb") as f:
                for rec in read_records(f):
                    ids.append(int(decode_example(rec)["episode_metadata/episode_id"][0]))
    return ids


@pytest.fixture(scope="module")
def reference(datasets, tmp_path_factory):
    """Uninterrupted in-process runs (no Ray): the shard bytes every Ray run must reproduce."""
    refs = {}
    for key, src in datasets.items():
        out = tmp_path_factory.mktemp(f"ref_{key}")
        outcome = run_pipeline(_cfg(src, out), overwrite=True, executor=InProcessExecutor())
        assert outcome.exit_code == 0, outcome.message
        refs[key] = {"shards": _shards(out), "info": _info(out)}
    return refs


def _executor(**kw):
    from robo_ray.ray_exec.executor import RayExecutor

    kw.setdefault("status_interval_s", 0)
    return RayExecutor(**kw)


def _worker_pids(cluster: Cluster) -> list[int]:
    """Conversion actors alive in our cluster (not in any other Ray instance on this machine)."""
    out = []
    for pid in cluster_pids(cluster.temp_dir):
        try:
            if WORKER_TITLE in " ".join(psutil.Process(pid).cmdline()):
                out.append(pid)
        except psutil.Error:
            continue
    return out


_wait = wait_for


# ---- 1. actor count does not change the bytes -------------------------------------------------------------------
@pytest.mark.parametrize("key", ["v21", "v30"])
def test_two_actors_byte_identical_to_safe(cluster, datasets, reference, tmp_path, key):
    outs = {}
    for label, ex in (("safe", _executor(mode="safe")), ("two", _executor(actors=2))):
        out = tmp_path / label
        outcome = run_pipeline(_cfg(datasets[key], out), executor=ex)
        assert outcome.exit_code == 0, outcome.message
        assert outcome.validation_passed
        outs[label] = out
        assert ex.last_actor_count == (1 if label == "safe" else 2)
    safe, two = _shards(outs["safe"]), _shards(outs["two"])
    assert len(safe) > 1
    assert safe == two == reference[key]["shards"]
    # dataset_info.json: shardLengths in shard order, identical whatever the actor count
    assert _info(outs["safe"])["splits"] == _info(outs["two"])["splits"] == reference[key]["info"]["splits"]
    assert sorted(_written_episodes(outs["two"])) == list(range(12 if key == "v30" else 8))
    # the start-up instants of a Ray run, in the order they happen (logs/timings.json; bench --startup's breakdown)
    marks = json.loads((outs["two"] / "logs" / "timings.json").read_text())["marks"]
    for order in (["ray_ready", "pool_requested", "first_actor_ready", "first_unit_started", "last_unit_committed"],
                  ["ray_ready", "publisher_open", "first_unit_started"]):  # the pool starts while the Publisher opens
        assert [marks[k] for k in order] == sorted(marks[k] for k in order)


def test_mode_actor_counts():
    from robo_ray.ray_exec.executor import actors_for_mode

    assert [actors_for_mode(m, 8) for m in ("safe", "parallel-half", "parallel-max")] == [1, 4, 7]
    assert [actors_for_mode(m, 2) for m in ("safe", "parallel-half", "parallel-max")] == [1, 1, 1]
    assert actors_for_mode("safe", 2, actors=3) == 3


def test_ray_job_entrypoint_defaults_to_the_actor_pool():
    from ray_jobs.convert import build_argv

    assert build_argv(["s", "d"]) == ["run", "s", "d", "--mode", "parallel-max"]
    assert build_argv(["s", "d", "--actors", "3", "--debug"]) == ["--debug", "run", "s", "d", "--actors", "3"]
    assert build_argv(["s", "d", "--mode=safe", "--resume"]) == ["run", "s", "d", "--mode=safe", "--resume"]


# ---- 2. an actor killed mid-run ----------------------------------------------------------------------------------
class _NewUnitWatch:
    """Looks at the Publisher's attempts: `__call__` returns (unit, worker) of a unit in flight that was not begun
    at the previous look, once some unit is committed (the first look only learns what has begun)."""

    def __init__(self, pub) -> None:
        self.pub = pub
        self.seen: set[int] | None = None

    def __call__(self) -> tuple[int, str] | None:
        begun = set(ray.get(self.pub.attempt_counts.remote()))
        in_flight = ray.get(self.pub.in_flight.remote())
        before, self.seen = self.seen, begun
        new = {u: w for u, w in in_flight.items() if before is not None and u not in before}
        return max(new.items()) if new and begun - set(in_flight) else None


def test_killed_actor_job_completes_each_episode_once(cluster, datasets, reference, tmp_path, monkeypatch):
    monkeypatch.setenv("ROBO_RAY_FAULT_DELAY_S", "5")  # each unit sleeps first: the kill lands mid-unit, even loaded
    out = tmp_path / "out"
    ex = _executor(actors=2)
    box: dict = {}

    def job():
        try:
            box["outcome"] = run_pipeline(_cfg(datasets["v21"], out), executor=ex)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            box["error"] = exc

    t = threading.Thread(target=job)
    t.start()
    try:
        # SIGKILL the worker of a unit that has just begun (it sleeps 5 s first), once another unit is committed:
        # a unit seen in flight earlier may finish between the look and the kill, and a worker with no unit left
        # would then die at no cost (the CI failure of stop 34)
        _wait(lambda: (out / "ledger.json").exists() and _ledger(out)["shards"], 120, "a first committed shard")
        pub = ray.get_actor(ex.publisher_name)
        unit, worker = _wait(_NewUnitWatch(pub), 180, "a unit begun after another was committed", step=0.05)
        pid = int(worker.rsplit(":", 1)[1])
        assert pid in _worker_pids(cluster)
        os.kill(pid, signal.SIGKILL)
    finally:
        t.join(timeout=240)
    assert "error" not in box, box.get("error")
    outcome = box["outcome"]
    assert outcome.exit_code == 0, outcome.message
    assert outcome.quarantined == []
    attempts = _ledger(out)["attempts"]
    assert attempts[str(unit)] == 2, attempts  # the killed unit ran again on the restarted actor
    assert sum(attempts.values()) == len(attempts) + 1, attempts
    assert sorted(_written_episodes(out)) == list(range(8))  # every episode exactly once
    assert _shards(out) == reference["v21"]["shards"]
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]  # the killed attempt's partial file is gone


# ---- 3. SIGKILL of the driver, then --resume ----------------------------------------------------------------------
def _cli(cluster, *args: str) -> list[str]:
    cmd = [sys.executable, "-m", "robo_ray.cli", "run", *args, "--address", cluster.gcs]
    for s in FAST:
        cmd += ["--set", s]
    return cmd


def test_sigkill_driver_then_resume(cluster, datasets, reference, tmp_path):
    out = tmp_path / "out"
    env = dict(cluster.env, ROBO_RAY_FAULT_DELAY_S="2.0", ROBO_RAY_STATUS_INTERVAL_S="1")  # > ledger flush
    cmd = _cli(cluster, str(datasets["v21"]), str(out), "--actors", "2")
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sigkill_when(proc, lambda: (out / "ledger.json").exists() and len(_ledger(out)["shards"]) >= 3, 150,
                 "3 committed shards")
    # the dead driver's actors go with it; wait for them so nothing still writes into `out`
    _wait(lambda: not _worker_pids(cluster), 60, "the killed job's actors to exit", step=0.5)
    ledger = _ledger(out)
    assert not ledger["complete"]
    dataset_dir = next((out / "rlds").glob("*/*"))
    stat_before = {s["filename"]: (dataset_dir / s["filename"]).stat() for s in ledger["shards"]}
    done_before = sorted(s["shard_index"] for s in ledger["shards"])
    assert 3 <= len(done_before) < 8

    r = subprocess.run(_cli(cluster, str(datasets["v21"]), str(out), "--actors", "2", "--resume"),
                       env=cluster.env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    final = _ledger(out)
    assert final["complete"] and final["resumed_shards"] == done_before
    # only the remaining units ran: the resumed run's attempts cover exactly the units not committed before
    assert sorted(int(k) for k in final["attempts"]) == sorted(set(range(8)) - set(done_before))
    for name, st in stat_before.items():  # committed shards were not rewritten
        now = (dataset_dir / name).stat()
        assert (now.st_ino, now.st_mtime_ns) == (st.st_ino, st.st_mtime_ns), name
    assert f"resume: {len(done_before)} of 8 shards already committed" in (out / "logs" / "convert.log").read_text()
    assert _shards(out) == reference["v21"]["shards"]
    assert sorted(_written_episodes(out)) == list(range(8))


def test_resume_refuses_a_different_config(datasets, tmp_path):
    out = tmp_path / "out"
    assert run_pipeline(_cfg(datasets["v21"], out), executor=InProcessExecutor()).exit_code == 0
    other = _cfg(datasets["v21"], out, FAST + ["images.jpeg_quality=80"])
    with pytest.raises(OutputConflict, match="images.jpeg_quality"):
        run_pipeline(other, resume=True)
    outcome = run_pipeline(other, resume=True, overwrite=True)  # --overwrite: start over with the new config
    assert outcome.exit_code == 0
    assert _ledger(out)["resumed_shards"] == []
    # same config again: everything is committed, nothing converts, the commit is redone
    again = run_pipeline(other, resume=True)
    assert again.exit_code == 0 and _ledger(out)["resumed_shards"] == list(range(8))
    assert _ledger(out)["attempts"] == {}


# ---- 4. a unit that crashes its worker every time ------------------------------------------------------------------
def test_crashing_unit_is_quarantined_after_max_attempts(cluster, datasets, tmp_path, monkeypatch):
    monkeypatch.setenv("ROBO_RAY_FAULT_ABORT_EPISODE", "4")  # os.abort() in unit 1 (episodes 3, 4, 5)
    monkeypatch.setenv("ROBO_RAY_FAULT_RAISE_UNIT", "3")  # OSError in unit 3 (episodes 9, 10, 11)
    out = tmp_path / "out"
    ex = _executor(actors=2, max_attempts=2)
    # plan.min_shards=4: one unit per file of 3 episodes (8 would halve the files)
    outcome = run_pipeline(_cfg(datasets["v30"], out, ["plan.min_shards=4", "validate.tfds_readback=true"]),
                           executor=ex)
    assert outcome.exit_code == 3  # quarantine over the (zero) threshold
    assert outcome.validation_passed, outcome.message  # tfds reads the dataset, empty shards included
    q = {r["episode_index"]: r for r in outcome.quarantined}
    assert sorted(q) == [3, 4, 5, 9, 10, 11]
    for ep in (3, 4, 5):
        assert q[ep]["code"] == "EP900"
        assert "worker crashed 2 times" in q[ep]["reason"] and "episodes 3, 4, 5" in q[ep]["reason"]
    for ep in (9, 10, 11):
        assert q[ep]["code"] == "EP901"
        assert "failed 2 times" in q[ep]["reason"] and "injected storage failure" in q[ep]["reason"]
    led = _ledger(out)
    assert led["attempts"]["1"] == 3 and led["attempts"]["3"] == 3  # 2 attempts + the one that quarantines
    empty = sorted(s["shard_index"] for s in led["shards"] if s["quarantined"])
    assert empty == [1, 3] and all(s["episodes"] == [] for s in led["shards"] if s["quarantined"])
    assert sorted(_written_episodes(out)) == [0, 1, 2, 6, 7, 8]
    ref_out = tmp_path / "ref"  # the same 4-unit plan, in-process and without faults
    assert run_pipeline(_cfg(datasets["v30"], ref_out, ["plan.min_shards=4", "validate.tfds_readback=false"]),
                        executor=InProcessExecutor()).exit_code == 0
    ref, got = _shards(ref_out), _shards(out)
    same = [k for k in ref if "-00001-of-" not in k and "-00003-of-" not in k]
    assert len(same) == 2
    assert [got[k] for k in same] == [ref[k] for k in same]
    progress = [json.loads(x) for x in (out / "progress.jsonl").read_text().splitlines()]
    assert sorted(p["episode_id"] for p in progress if p["status"] == "failed") == [3, 4, 5, 9, 10, 11]


# ---- 5. ray job submit ---------------------------------------------------------------------------------------------
def test_ray_job_submit(cluster, datasets, reference, tmp_path):
    out = tmp_path / "job_out"
    env = dict(cluster.env, RAY_ADDRESS=cluster.dashboard)
    sid = f"robo-ray-test-{uuid.uuid4().hex[:8]}"
    runtime_env = json.dumps({"env_vars": {"ROBO_RAY_STATUS_INTERVAL_S": "2"}})
    cmd = [str(VENV_BIN / "ray"), "job", "submit", "--no-wait", "--submission-id", sid, "--working-dir", str(ROOT),
           "--runtime-env-json", runtime_env, "--",
           "python", "-m", "ray_jobs.convert", str(datasets["v21"]), str(out), "--actors", "2",
           "--set", "plan.min_shards=8"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr

    def status():
        s = subprocess.run([str(VENV_BIN / "ray"), "job", "status", sid], env=env, capture_output=True, text=True,
                           timeout=60)
        text = (s.stdout + s.stderr).lower()  # "Job '<id>' succeeded" | "... failed" | "... was stopped"
        for word in ("succeeded", "failed", "stopped"):
            if f"job '{sid}' {word}" in text or f"job '{sid}' was {word}" in text:
                return word.upper()
        return None

    final = _wait(status, 240, f"job {sid} to finish", step=2)
    logs = subprocess.run([str(VENV_BIN / "ray"), "job", "logs", sid], env=env, capture_output=True, text=True,
                          timeout=60).stdout
    assert final == "SUCCEEDED", logs[-4000:]
    assert "robo-ray [" in logs and "8/8 shards" in logs  # the one-line status in the job logs
    assert "validation passed" in logs
    assert _ledger(out)["complete"]
    summary = json.loads((out / "diff_summary.json").read_text())
    assert summary["passed"] is True
    assert any(c["name"].startswith("tfds") and c["status"] == "passed" for c in summary["checks"]), summary["checks"]
    assert _shards(out) == reference["v21"]["shards"]
