"""Issue #14, "a multi-node test": a Ray cluster of 2 nodes on this machine, S3 (moto) -> S3 with 2 actors.

One cluster for the module: `ray start --head` (dashboard: the state API) plus a second node joined with
`ray start --address=...`, each with its own --temp-dir, ports and 4 logical CPUs: Ray's default (hybrid)
scheduling packs two 1-CPU actors on one node until half its CPUs are taken, so only the pool's SPREAD strategy puts
them on different nodes (with 2 CPUs per node the default spreads them too, and (a) would not notice its loss). Both nodes get the S3 endpoint and credentials and this
worktree on PYTHONPATH in their environment, as a real cluster's nodes get them from their own environment. The
CLI connects with `--address` (what the README's "Several nodes" section shows). Teardown stops exactly the
processes of this cluster (found through its private temp dirs, which share a prefix), never `ray stop`.

Checks: (a) the run's two pool actors (Ray Data's MapWorker of UnitMapper) were placed on the two nodes and
their unit calls ran on both (Ray's
state API); (b) every file of the dataset folder, downloaded from S3, has the sha256 of an in-process run (no Ray)
of the same job; (c) validation passed (exit 0); (d) a local destination on this 2-node cluster is refused in one
line (RR205, exit 2, nothing written) and accepted with --shared-destination.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, run_cli, wait_for
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset
from tests.fixtures.servers import s3_server  # noqa: F401 - fixture
from tests.fixtures.ray_cli import cluster_pids, free_ports, ray_start, stop_cluster

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray"), pytest.mark.timeout(900)]

VENV_BIN = Path(sys.executable).parent
SRC_BUCKET, OUT_BUCKET = "multi-src", "multi-out"
SRC = f"s3://{SRC_BUCKET}/in/v30_8ep"
SETS = ["--set", "plan.min_shards=4", "--set", "validate.tfds_readback=false"]
POOL_ACTOR = "MapBatches(UnitMapper)"  # Ray Data's pool actor class (MapWorker(...)) and its unit calls (.submit)
RUN_TIMEOUT_S = 480  # a conversion on 2 Ray nodes of a loaded 2-core machine


class Cluster:
    def __init__(self, gcs: str, dashboard: str, temp_dir: str, env: dict[str, str]) -> None:
        self.gcs, self.dashboard, self.temp_dir, self.env = gcs, dashboard, temp_dir, env

    def alive_nodes(self) -> set[str]:
        from ray.util.state import list_nodes

        return {n.node_id for n in list_nodes(address=self.dashboard, timeout=30) if n.state == "ALIVE"}

    def unit_actors(self) -> list[Any]:
        from ray.util.state import list_actors

        return [a for a in list_actors(address=self.dashboard, limit=1000, timeout=30)
                if POOL_ACTOR in (a.class_name or "")]

    def run_unit_tasks(self, job_id: str) -> list[Any]:
        from ray.util.state import list_tasks

        return [t for t in list_tasks(address=self.dashboard, filters=[("job_id", "=", job_id)], limit=1000,
                                      timeout=30)
                if POOL_ACTOR in (t.func_or_class_name or "") and t.func_or_class_name.endswith(".submit")]


def _node_env(s3_env: dict[str, str]) -> dict[str, str]:
    """What the nodes' processes (raylets, actors) and the CLI run with: this venv and worktree, the S3 server."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "ROBO_RAY_FAULT_")) and k != "RAY_ADDRESS"}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env["RAY_AUTH_MODE"] = "disabled"  # loopback-only throwaway cluster (Ray 2.60 token auth, docs/NOTES.md)
    env["ROBO_RAY_STATUS_INTERVAL_S"] = "0"
    env.update(s3_env)
    return env


@pytest.fixture(scope="module")
def cluster(s3_server):  # noqa: F811
    assert (VENV_BIN / "ray").exists(), f"ray CLI not found next to {sys.executable} (ray[default] is a dependency)"
    temp_dir = f"/tmp/rrm-{uuid.uuid4().hex[:8]}"  # short: Ray puts unix sockets under it; the worker's adds "w"
    ports = free_ports(15)
    port, dash = ports[0], ports[1]
    env = _node_env(s3_server.env())
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=4", f"--object-store-memory={100 * 1024 * 1024}",
              "--disable-usage-stats"]

    def node_ports(p: list[int]) -> list[str]:
        return [f"--dashboard-agent-listen-port={p[0]}", f"--dashboard-agent-grpc-port={p[1]}",
                f"--runtime-env-agent-port={p[2]}", f"--metrics-export-port={p[3]}", f"--node-manager-port={p[4]}",
                f"--object-manager-port={p[5]}"]

    mp = pytest.MonkeyPatch()
    try:
        ray_start(["--head", f"--port={port}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
                   "--include-dashboard=true", f"--ray-client-server-port={ports[2]}", f"--temp-dir={temp_dir}",
                   *node_ports(ports[3:9]), *common], env, temp_dir, cwd=REPO)
        ray_start([f"--address=127.0.0.1:{port}", f"--temp-dir={temp_dir}w", *node_ports(ports[9:15]), *common],
                  env, f"{temp_dir}w", cwd=REPO)
        mp.setenv("RAY_AUTH_MODE", "disabled")
        c = Cluster(f"127.0.0.1:{port}", f"http://127.0.0.1:{dash}", temp_dir, env)
        wait_for(lambda: _quiet(lambda: len(c.alive_nodes()) == 2), 180, "2 alive nodes in the state API", step=2)
        yield c
    finally:
        mp.undo()
        for _ in range(3):  # a process spawned while the first pass ran is found by the next
            stop_cluster(temp_dir)
            if not cluster_pids(temp_dir):
                break
            time.sleep(1)
        assert not cluster_pids(temp_dir), "processes of the test's cluster survived its teardown"
        shutil.rmtree(temp_dir, ignore_errors=True)
        shutil.rmtree(f"{temp_dir}w", ignore_errors=True)


def _quiet(fn) -> Any:
    """fn(), or None while the dashboard is not answering yet."""
    try:
        return fn()
    except Exception:  # noqa: BLE001 - polled again
        return None


# ---- the source on S3, the in-process reference, the 2-node run ------------------------------------------------
@pytest.fixture(scope="module")
def source(s3_server, tmp_path_factory):  # noqa: F811
    """LeRobot v3.0, 8 episodes with 2 cameras, 2 episodes per file -> 4 units, on S3."""
    cams = [CameraSpec(key="observation.images.top", codec="h264"),
            CameraSpec(key="observation.images.wrist", codec="h264")]
    local = write_lerobot_dataset(tmp_path_factory.mktemp("multi_src") / "v30_8ep", DatasetSpec(
        version="v3.0", episode_lengths=[12, 15, 11, 14, 13, 12, 16, 10], fps=20, cameras=cams,
        episodes_per_file=2))
    s3_server.make_bucket(SRC_BUCKET)
    s3_server.make_bucket(OUT_BUCKET)
    s3_server.fs().put(str(local), f"{SRC_BUCKET}/in/", recursive=True)
    return SRC


def _dataset_sha256(s3_server, prefix: str, dest: Path) -> dict[str, str]:  # noqa: F811
    """Download an output from S3; relative path -> sha256 of every file under its dataset folder."""
    fs = s3_server.fs()
    fs.get(f"{OUT_BUCKET}/{prefix}/", f"{dest}/", recursive=True)
    root = next((dest / "rlds").glob("*/*"))
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def reference(s3_server, source, cluster, tmp_path_factory):  # noqa: F811
    """The same job in-process (no Ray, one machine): the bytes the 2-node run must reproduce."""
    r = run_cli("run", source, f"s3://{OUT_BUCKET}/ref", *SETS, env=cluster.env, timeout=RUN_TIMEOUT_S)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return _dataset_sha256(s3_server, "ref", tmp_path_factory.mktemp("ref_out"))


@pytest.fixture(scope="module")
def multi(s3_server, source, cluster, tmp_path_factory):  # noqa: F811
    """S3 -> S3 on the 2-node cluster with 2 actors; Ray's records of the run's actors and their calls."""
    before = {a.actor_id for a in cluster.unit_actors()}
    r = run_cli("run", source, f"s3://{OUT_BUCKET}/multi", "--address", cluster.gcs, "--actors", "2", *SETS,
                env=cluster.env, timeout=RUN_TIMEOUT_S)
    actors = [a for a in cluster.unit_actors() if a.actor_id not in before]
    jobs = {a.job_id for a in actors}
    tasks = _tasks_on_nodes(cluster, next(iter(jobs)), {a.node_id for a in actors}) if len(jobs) == 1 else []
    out = tmp_path_factory.mktemp("multi_out")
    files = _dataset_sha256(s3_server, "multi", out) if r.returncode == 0 else {}
    return {"result": r, "actors": actors, "jobs": jobs, "tasks": tasks, "files": files, "out": out}


def _tasks_on_nodes(cluster: Cluster, job_id: str, nodes: set[str], timeout_s: float = 60) -> list[Any]:
    """The job's `run_unit` calls, asked again (task events reach the GCS about once a second) until they name
    `nodes` or `timeout_s` passes; the test judges what they show."""
    t0 = time.monotonic()
    while True:
        tasks = cluster.run_unit_tasks(job_id)
        if {t.node_id for t in tasks if t.node_id} >= nodes or time.monotonic() - t0 > timeout_s:
            return tasks
        time.sleep(2)


# ---- (a) actors on different nodes -------------------------------------------------------------------------------
def test_two_actors_ran_on_two_nodes(cluster, multi):
    r = multi["result"]
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    nodes = cluster.alive_nodes()
    assert len(nodes) == 2
    assert len(multi["jobs"]) == 1 and len(multi["actors"]) == 2, multi["actors"]
    assert {a.node_id for a in multi["actors"]} == nodes  # placed one per node (SPREAD)
    ran_on = {t.node_id for t in multi["tasks"] if t.node_id}
    assert ran_on == nodes, multi["tasks"]  # and both converted units there
    assert {t.actor_id for t in multi["tasks"]} == {a.actor_id for a in multi["actors"]}


# ---- (b) + (c) the same bytes as in-process; validation passed ----------------------------------------------------
def test_output_identical_to_in_process_run(multi, reference):
    r = multi["result"]
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "validation passed" in r.stdout
    assert "2 actor(s)" in (multi["out"] / "final_report.md").read_text()
    assert sum(".tfrecord-" in name for name in multi["files"]) == 4
    assert {"dataset_info.json", "features.json"} <= set(multi["files"])
    assert multi["files"] == reference  # every file of the dataset folder, by sha256


# ---- (d) a local destination on 2 nodes: refused in one line, accepted when declared shared -------------------------
def test_local_destination_refused_unless_shared(cluster, source, tmp_path):
    dst = tmp_path / "local_out"
    r = run_cli("run", source, str(dst), "--address", cluster.gcs, "--actors", "2", *SETS, env=cluster.env,
                timeout=RUN_TIMEOUT_S)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2, r.stdout[-3000:] + r.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error[RR205]: "), r.stderr[-3000:]
    assert str(dst) in lines[0] and "2 nodes" in lines[0] and "--shared-destination" in lines[0]
    assert not dst.exists()  # refused before anything was written

    r = run_cli("run", source, str(dst), "--address", cluster.gcs, "--actors", "2", "--shared-destination",
                "--max-episodes", "4", *SETS, env=cluster.env, timeout=RUN_TIMEOUT_S)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "validation passed" in r.stdout
    shards = list(dst.glob("rlds/*/*/*.tfrecord-*"))
    assert len(shards) == 4, shards  # plan.min_shards=4: 4 episodes, 4 units
