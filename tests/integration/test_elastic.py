"""Issue #26: elastic on Ray, on real local Ray clusters (no mocks of Ray).

1. Autoscaling: Ray's fake multi-node autoscaler (`RAY_FAKE_CLUSTER=1 ray start --head --num-cpus=0
   --autoscaling-config=FILE`, provider `fake_multinode`): a head of 0 CPUs and one worker type of 1 CPU, 0..2
   nodes. A conversion with `--max-actors 2` starts on a cluster without a single CPU; its resource ask makes the
   autoscaler add both nodes, Ray Data's pool grows onto them, units are converted on both, and the output equals
   the in-process run's bytes, for every target.
2. Node loss: `ray.cluster_utils.Cluster` (head 0 CPU + 2 workers of 1 CPU). One worker node is removed
   (`allow_graceful=False`) after the first episode is journaled; a replacement joins 20 s later (or none: the
   remaining node finishes). The job exits 0 with the in-process run's bytes, every episode once.
3. Driver loss under `ray job submit`: the first job's driver is killed mid-run, a second job with `--resume`
   finishes with the same bytes.

Every conversion runs as a user runs it: the `robo-ray` CLI (or `ray_jobs.convert`) in a subprocess that joins
the cluster with `--address`. Units sleep a little first (test-only fault plan `ROBO_RAY_FAULT_DELAY_S`), so the
cluster changes land while units are in flight even on a fast machine.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli, wait_for
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset
from tests.fixtures.ray_cli import free_ports, ray_start, start_with_retry, stop_cluster

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray"), pytest.mark.timeout(600)]

VENV_BIN = Path(sys.executable).parent
TARGETS = ("rlds", "lerobot", "ortf")
SETS = ["plan.min_shards=6", "validate.tfds_readback=false", "target.options.created_at=2025-01-01T00:00:00Z"]
# the files a run writes beside its dataset (reports, journal, logs): everything else is the dataset
RUN_FILES = {"inventory.json", "episode_index.csv", "mapping.md", "mapping.yaml", "progress.jsonl", "ledger.json",
             "validation_report.md", "diff_summary.json", "final_report.md", "logs", "job.json", "commit.json",
             "dataset_statistics.json", "norm_stats.json", "report.html", "timings.json", "run.lock", ".robo-ray"}


def _sets(target: str) -> list[str]:
    out: list[str] = []
    for s in SETS:
        if s.startswith("target.options.created_at") and target != "ortf":
            continue
        out += ["--set", s]
    return out


def dataset_files(out: Path) -> dict[str, str]:
    """sha256 of every file of the written dataset (not the run's reports and journal), by relative path."""
    files = {}
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out)
        if p.is_file() and rel.parts[0] not in RUN_FILES:
            files[str(rel)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return files


def written_episode_counts(out: Path) -> tuple[int, int]:
    """(episodes written, episodes quarantined) from the run's journal: each episode exactly once."""
    rows = [json.loads(x) for x in (out / "progress.jsonl").read_text().splitlines() if x.strip()]
    done = [r["episode_id"] for r in rows if r["status"] == "completed"]
    assert len(done) == len(set(done)), f"an episode was journaled twice: {sorted(done)}"
    return len(done), sum(1 for r in rows if r["status"] != "completed")


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """LeRobot v2.1, 6 episodes with an H.264 camera (real PyAV decoding on the actors)."""
    return write_lerobot_dataset(tmp_path_factory.mktemp("elastic") / "src", DatasetSpec(
        version="v2.1", episode_lengths=[30, 26, 34, 28, 32, 24], fps=10,
        cameras=[CameraSpec("observation.images.top")]))


@pytest.fixture(scope="module")
def reference(source, tmp_path_factory) -> dict[str, dict[str, str]]:
    """The in-process runs (no Ray), one per target: the bytes every cluster run must reproduce."""
    refs = {}
    for target in TARGETS:
        out = tmp_path_factory.mktemp(f"ref_{target}") / "out"
        proc = run_cli("run", str(source), str(out), "--to", target, *_sets(target))
        assert proc.returncode == 0, proc.stderr[-3000:]
        refs[target] = dataset_files(out)
        assert refs[target], f"no dataset files under {out}"
    return refs


def _cluster_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROBO_RAY_FAULT_") and k != "RAY_ADDRESS"}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env["RAY_AUTH_MODE"] = "disabled"  # loopback-only throwaway clusters (docs/NOTES.md)
    env.update(extra)
    return env


def _convert(address: str, source: Path, out: Path, target: str, *extra: str, env: dict[str, str],
             timeout: float = 420) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "robo_ray.cli", "run", str(source), str(out), "--to", target, "--address", address,
           "--shared-destination", *extra, *_sets(target)]
    return subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen, timeout: float = 420) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"conversion did not finish in {timeout} s:\n{out[-4000:]}")
    assert proc.returncode == 0, out[-4000:]
    return out


def _report_usage(out: Path) -> tuple[int, int]:
    """(actors, nodes) that converted units, as the final report says."""
    text = (out / "final_report.md").read_text()
    m = re.search(r"(\d+) actor\(s\) on (\d+) node\(s\) converted units", text)
    assert m, f"final_report.md does not say what the pool used:\n{text[:2000]}"
    return int(m.group(1)), int(m.group(2))


# ---- 1. the fake multi-node autoscaler ------------------------------------------------------------------------------
FAKE_CONFIG = """\
cluster_name: robo-ray-elastic-test
max_workers: 2
idle_timeout_minutes: 0.25  # a node idles until Ray Data's pool grows onto it
upscaling_speed: 2.0
provider:
  type: fake_multinode
  use_node_id_as_ip: true
  disable_node_updaters: true
  disable_launch_config_check: true
  launch_multiple: true  # the fake provider otherwise starts one node per launch, whatever the count asked
  gcs_address: "127.0.0.1:{port}"
available_node_types:
  ray.head.default:
    resources: {{CPU: 0}}
    node_config: {{}}
    max_workers: 0
  ray.worker.cpu:
    resources: {{CPU: 1, object_store_memory: 100000000}}
    node_config: {{}}
    min_workers: 0
    max_workers: 2
head_node_type: ray.head.default
auth: {{}}
docker: {{}}
file_mounts: {{}}
cluster_synced_files: []
file_mounts_sync_continuously: false
rsync_exclude: []
rsync_filter: []
initialization_commands: []
setup_commands: []
head_setup_commands: []
worker_setup_commands: []
head_start_ray_commands: []
worker_start_ray_commands: []
"""


class FakeCluster:
    def __init__(self, address: str, temp_dir: str, env: dict[str, str]) -> None:
        self.address, self.temp_dir, self.env = address, temp_dir, env

    def worker_cpus(self) -> float:
        """CPUs of the alive worker nodes (the head has none)."""
        code = ("import ray, json; ray.init(address=%r, logging_level='ERROR', log_to_driver=False); "
                "print('CPUS=' + json.dumps(ray.cluster_resources().get('CPU', 0)))" % self.address)
        r = subprocess.run([sys.executable, "-c", code], env=self.env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        # the autoscaler's event lines ("(autoscaler +0s) Resized to 0 CPUs.") may come after ours on stdout
        return float(next(x for x in r.stdout.splitlines() if x.startswith("CPUS="))[5:])


@pytest.fixture
def fake_cluster(tmp_path_factory):
    """A new fake-autoscaler cluster per test: each conversion starts on a head without a worker node (waiting for
    the previous run's nodes to idle out depended on Ray Data's autoscaling coordinator letting go of them)."""
    temp_dir = f"/tmp/rrf-{uuid.uuid4().hex[:8]}"
    port, node_mgr, obj_mgr, client, metrics, agent, agent_grpc, env_agent = free_ports(8)
    config = tmp_path_factory.mktemp("fake_autoscaler") / "autoscaler.yaml"
    config.write_text(FAKE_CONFIG.format(port=port))
    env = _cluster_env(RAY_FAKE_CLUSTER="1")
    ray_start(["--head", "--num-cpus=0", f"--autoscaling-config={config}", "--node-ip-address=127.0.0.1",
               f"--port={port}", f"--temp-dir={temp_dir}", "--include-dashboard=false",
               f"--node-manager-port={node_mgr}", f"--object-manager-port={obj_mgr}",
               f"--ray-client-server-port={client}", f"--metrics-export-port={metrics}",
               f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
               f"--runtime-env-agent-port={env_agent}", "--disable-usage-stats"], env, temp_dir, cwd=REPO)
    try:
        yield FakeCluster(f"127.0.0.1:{port}", temp_dir, env)
    finally:
        stop_cluster(temp_dir)


@pytest.mark.parametrize("target", TARGETS)
def test_autoscaler_adds_both_nodes_and_the_output_is_the_in_process_bytes(fake_cluster, source, reference,
                                                                            target, tmp_path):
    assert fake_cluster.worker_cpus() == 0  # a head without a worker node: the job must make the autoscaler add both
    out = tmp_path / "out"
    # 6 units of >= 6 s each: the pool has work left when the autoscaler's nodes join (~10-30 s here, loaded)
    env = dict(fake_cluster.env, ROBO_RAY_FAULT_DELAY_S="6.0")
    log = _finish(_convert(fake_cluster.address, source, out, target, "--max-actors", "2", env=env))
    assert dataset_files(out) == reference[target]
    assert written_episode_counts(out) == (6, 0)
    actors, nodes = _report_usage(out)
    assert nodes == 2 and actors >= 2, f"the pool did not grow onto both new nodes ({actors} actors, {nodes} nodes)"
    assert "validation passed" in log


# ---- 2. a worker node lost mid-run -----------------------------------------------------------------------------------
@pytest.fixture
def node_cluster(monkeypatch):
    """Head of 0 CPUs + 2 worker nodes of 1 CPU, started by Ray's own test cluster utility in this process."""
    from ray.cluster_utils import Cluster

    for key, value in _cluster_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    temp_dir = f"/tmp/rrn-{uuid.uuid4().hex[:8]}"  # names every process of this cluster (a retried start's cleanup)

    def start():
        cluster = Cluster(initialize_head=True, connect=False, head_node_args={
            "num_cpus": 0, "include_dashboard": True, "dashboard_host": "127.0.0.1", "temp_dir": temp_dir})
        try:
            workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
            cluster.wait_for_nodes()
        except BaseException:
            cluster.shutdown()
            raise
        return cluster, workers

    cluster, workers = start_with_retry(start, lambda: stop_cluster(temp_dir))
    try:
        yield cluster, workers
    finally:
        cluster.shutdown()
        stop_cluster(temp_dir)


def _first_episode_journaled(out: Path) -> bool:
    path = out / "progress.jsonl"
    return path.exists() and any(x.strip() for x in path.read_text().splitlines())


@pytest.mark.parametrize("target,replacement", [("rlds", True), ("lerobot", True), ("ortf", True),
                                                ("lerobot", False)])
def test_node_lost_mid_run_costs_only_its_units(node_cluster, source, reference, target, replacement, tmp_path):
    cluster, workers = node_cluster
    out = tmp_path / "out"
    env = _cluster_env(ROBO_RAY_FAULT_DELAY_S="3.0")
    proc = _convert(cluster.address, source, out, target, "--actors", "2", env=env)
    box: dict[str, str] = {}
    reader = threading.Thread(target=lambda: box.update(log=_finish(proc)))
    reader.start()
    wait_for(lambda: _first_episode_journaled(out) or proc.poll() is not None, 240, "the first journaled episode",
             step=0.2)
    assert proc.poll() is None, "the job ended before a node could be removed"
    lost_at = time.monotonic()
    cluster.remove_node(workers[1], allow_graceful=False)
    if replacement:
        time.sleep(max(0.0, 20 - (time.monotonic() - lost_at)))
        if proc.poll() is None:
            cluster.add_node(num_cpus=1)
    reader.join(timeout=480)
    assert "log" in box, "the conversion failed or hung after the node was lost"
    assert dataset_files(out) == reference[target]
    assert written_episode_counts(out) == (6, 0)
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["complete"]
    assert sorted(ledger["attempts"]) == sorted(str(u) for u in range(len(ledger["attempts"])))


# ---- 3. the driver lost under `ray job submit`, then --resume ------------------------------------------------------
def test_ray_job_driver_killed_then_resume_gives_the_same_bytes(node_cluster, source, reference, tmp_path):
    cluster, _ = node_cluster
    out = tmp_path / "out"
    target = "lerobot"
    env = _cluster_env()
    # the jobs talk to the cluster through its dashboard's job API
    dashboard = _dashboard_url(cluster)
    env["RAY_ADDRESS"] = dashboard
    args = ["python", "-m", "ray_jobs.convert", str(source), str(out), "--to", target, "--actors", "2",
            "--shared-destination", *_sets(target)]
    runtime_env = json.dumps({"env_vars": {"ROBO_RAY_FAULT_DELAY_S": "2.0", "PYTHONPATH": str(REPO)}})
    first = f"robo-ray-test-{uuid.uuid4().hex[:8]}"
    _submit(env, first, runtime_env, args)
    wait_for(lambda: _first_episode_journaled(out), 240, "the first job's first episode", step=0.5)
    stop = subprocess.run([str(VENV_BIN / "ray"), "job", "stop", first], env=env, capture_output=True, text=True,
                          timeout=120)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    wait_for(lambda: _job_status(env, first) in ("STOPPED", "FAILED"), 120, "the first job to stop", step=1)
    ledger = json.loads((out / "ledger.json").read_text())
    assert not ledger["complete"]

    second = f"robo-ray-test-{uuid.uuid4().hex[:8]}"
    _submit(env, second, json.dumps({"env_vars": {"PYTHONPATH": str(REPO)}}), [*args, "--resume"])
    status = wait_for(lambda: _job_status(env, second) if _job_status(env, second) != "RUNNING" else None, 300,
                      "the resumed job to finish", step=2)
    logs = subprocess.run([str(VENV_BIN / "ray"), "job", "logs", second], env=env, capture_output=True, text=True,
                          timeout=60).stdout
    assert status == "SUCCEEDED", logs[-4000:]
    assert "resume:" in (out / "logs" / "convert.log").read_text()
    assert dataset_files(out) == reference[target]
    assert written_episode_counts(out) == (6, 0)


def _dashboard_url(cluster) -> str:
    node = cluster.head_node
    url = getattr(node, "webui_url", None) or getattr(node, "_webui_url", None)
    assert url, "the test cluster's head has no dashboard (ray[default] is a dependency)"
    return url if url.startswith("http") else f"http://{url}"


def _submit(env: dict[str, str], sid: str, runtime_env: str, args: list[str]) -> None:
    cmd = [str(VENV_BIN / "ray"), "job", "submit", "--no-wait", "--submission-id", sid,
           "--runtime-env-json", runtime_env, "--", *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr


def _job_status(env: dict[str, str], sid: str) -> str | None:
    s = subprocess.run([str(VENV_BIN / "ray"), "job", "status", sid], env=env, capture_output=True, text=True,
                       timeout=60)
    text = (s.stdout + s.stderr).lower()
    for word in ("succeeded", "failed", "stopped", "running", "pending"):
        if f"job '{sid}' {word}" in text or f"job '{sid}' was {word}" in text or f"status: {word}" in text:
            return word.upper()
    return None
