"""Issue #9, no hang: a read that blocks forever costs its episode (EP902, naming the file), never the run.

The stuck file is a FIFO (os.mkfifo) in place of one episode's MP4, with no writer: FFmpeg's open() blocks in C
inside PyAV. In-process (CLI subprocesses: a hang would be a TimeoutExpired, not a frozen test session) the watchdog
abandons the converting thread and a fresh one redoes the unit without the episode; on a real local Ray cluster (2
actors) the driver `ray.kill`s the stuck actor, Ray restarts it and the retried unit skips the episode. The same
for a Python-level stall: an fsspec file whose read sleeps, PyAV reading through it (the remote-file path). A
generous timeout changes nothing: byte-identical shards to a run with the watchdog off.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractFileSystem

from robo_ray.config import load_config
from robo_ray.errors import ConfigError
from robo_ray.stages.pipeline import run_pipeline
from robo_ray.watchdog import Limits
from tests.conftest import REPO, run_cli
from tests.fixtures.lerobot_gen import DatasetSpec, video_files, write_lerobot_dataset
from tests.integration.test_ray_exec import FAST, _ledger, _shards, _written_episodes, cluster  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

EPISODES = list(range(6))
STUCK = 3  # with plan.min_shards=3 the units are [0, 1] [2, 3] [4, 5]
SETS = ["plan.min_shards=3", "validate.tfds_readback=false"]
BOUND_S = 60  # "finishes well within 60 s"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """LeRobot v2.1, one 64x48 H.264 MP4 per episode, 6 episodes of 10 frames."""
    return write_lerobot_dataset(tmp_path_factory.mktemp("stuck_src") / "six",
                                 DatasetSpec(version="v2.1", episode_lengths=[10] * len(EPISODES), fps=10))


def _with_fifo(dataset: Path, tmp_path: Path) -> tuple[Path, str]:
    """A copy of the dataset whose episode STUCK MP4 is a FIFO nobody writes; returns (root, its relative path)."""
    root = tmp_path / "src"
    shutil.copytree(dataset, root)
    mp4 = next(p for p in video_files(root) if p.name == f"episode_{STUCK:06d}.mp4")
    mp4.unlink()
    os.mkfifo(mp4)
    return root, mp4.relative_to(root).as_posix()


def _sets(*extra: str) -> list[str]:
    return [arg for s in (*SETS, *extra) for arg in ("--set", s)]


def _quarantine_lines(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if x.startswith("quarantined[")]


def _shard_rows(out: Path) -> dict[int, dict]:
    return {s["shard_index"]: s for s in _ledger(out)["shards"]}


# ---- in-process ---------------------------------------------------------------------------------------------------
def test_in_process_fifo_episode_times_out_and_the_rest_converts(dataset, tmp_path):
    src, rel = _with_fifo(dataset, tmp_path)
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = run_cli("run", str(src), str(out), *_sets("convert.read_timeout_s=2"), timeout=BOUND_S)
    elapsed = time.monotonic() - t0
    assert r.returncode == 3, r.stderr[-3000:]  # one episode quarantined, over the (zero) threshold
    assert elapsed < BOUND_S
    assert "Traceback" not in r.stderr + r.stdout
    assert r.stderr.strip().splitlines() == [
        f"quarantined[EP902] episode={STUCK} file={rel}: timed out after 2 s reading {rel} (convert.read_timeout_s)"]
    assert "5 episodes / 50 steps written" in r.stdout and "validation passed" in r.stdout
    assert sorted(_written_episodes(out)) == [e for e in EPISODES if e != STUCK]
    # the unit of the stuck episode was redone without it: its shard holds episode 2, episode 3 is quarantined
    unit = _shard_rows(out)[1]
    assert unit["episodes"] == [[2, 10]] and [q["episode_index"] for q in unit["quarantined"]] == [STUCK]
    assert unit["quarantined"][0]["code"] == "EP902" and unit["quarantined"][0]["file"] == rel
    progress = [json.loads(x) for x in (out / "progress.jsonl").read_text().splitlines()]
    assert [(p["episode_id"], p["code"]) for p in progress if p["status"] == "failed"] == [(STUCK, "EP902")]
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]  # the abandoned attempt's partial shard is gone
    # --resume (with other timeouts: not part of "the same job") redoes the shard holding the timed-out episode
    fifo = src / rel
    fifo.unlink()
    shutil.copy(dataset / rel, fifo)
    cfg = load_config(None, SETS, **{"source.url": str(src), "target.url": str(out)})
    again = run_pipeline(cfg, resume=True, stderr=io.StringIO())
    assert again.exit_code == 0 and again.quarantined == [], again.message
    assert _ledger(out)["resumed_shards"] == [0, 2]
    assert sorted(_written_episodes(out)) == EPISODES


def test_in_process_unit_over_its_time_is_quarantined_whole(dataset, tmp_path):
    src, rel = _with_fifo(dataset, tmp_path)
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = run_cli("run", str(src), str(out), *_sets("convert.read_timeout_s=null", "convert.unit_timeout_s=4",
                                                  "convert.max_quarantine_fraction=0.5"), timeout=BOUND_S)
    assert time.monotonic() - t0 < BOUND_S
    assert r.returncode == 0, r.stderr[-3000:]  # 2 of 6 quarantined: within the 50% threshold
    assert "Traceback" not in r.stderr + r.stdout
    lines = _quarantine_lines(r.stderr)
    assert [x.split(" ", 2)[:2] for x in lines] == [["quarantined[EP902]", "episode=2"],
                                                     ["quarantined[EP902]", f"episode={STUCK}"]]
    for line in lines:
        assert f"unit timed out after 4 s (convert.unit_timeout_s), last reading {rel}" in line
    assert sorted(_written_episodes(out)) == [0, 1, 4, 5]
    assert _shard_rows(out)[1]["episodes"] == []


def test_generous_timeouts_change_nothing(dataset, tmp_path):
    """The watchdog (default timeouts: child process) and no watchdog (in this process) write the same bytes."""
    assert Limits.from_config(load_config(None).convert) == Limits(3600.0, 300.0)  # on by default
    shards = {}
    for label, extra in (("watched", []), ("unwatched", ["convert.unit_timeout_s=null",
                                                         "convert.read_timeout_s=null"])):
        out = tmp_path / label
        cfg = load_config(None, SETS + extra, **{"source.url": str(dataset), "target.url": str(out)})
        outcome = run_pipeline(cfg)
        assert outcome.exit_code == 0 and outcome.quarantined == [], outcome.message
        shards[label] = _shards(out)
        assert sorted(_written_episodes(out)) == EPISODES
    assert len(shards["watched"]) == 3
    assert shards["watched"] == shards["unwatched"]
    for bad in ("convert.read_timeout_s=0", "convert.unit_timeout_s=-5", "convert.read_timeout_s=soon"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            load_config(None, [bad])


class _NeverAnswers(io.RawIOBase):
    """A remote file whose every read waits (an endpoint that accepted the request and never sends)."""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return 0

    def tell(self) -> int:
        return 0

    def readinto(self, b) -> int:  # noqa: ANN001
        time.sleep(3600)
        return 0


class SleepyFS(AbstractFileSystem):
    """`sleepy:///abs/path`: the local disk seen as a remote filesystem (not LocalFileSystem, so video goes through
    file objects as it does from a bucket) whose files named in `stall` never answer a read."""

    protocol = "sleepy"
    root_marker = "/"

    def __init__(self, stall: str = "", **kwargs) -> None:  # noqa: ANN003
        super().__init__(stall=stall, **kwargs)
        self.local, self.stall = LocalFileSystem(), stall

    def ls(self, path, detail=True, **kwargs):  # noqa: ANN001, ANN003
        return self.local.ls(path, detail=detail)

    def info(self, path, **kwargs):  # noqa: ANN001, ANN003
        return self.local.info(path)

    def _open(self, path, mode="rb", **kwargs):  # noqa: ANN001, ANN003
        if self.stall and self.stall in path:
            return _NeverAnswers()
        return self.local._open(path, mode)


def test_in_process_remote_read_that_sleeps_times_out(dataset, tmp_path):
    """In this process (an fsspec protocol registered at run time), a read that sleeps inside PyAV's read callback."""
    fsspec.register_implementation(SleepyFS.protocol, SleepyFS, clobber=True)
    rel = next(p for p in video_files(dataset) if p.name == f"episode_{STUCK:06d}.mp4").relative_to(dataset).as_posix()
    out = tmp_path / "out"
    cfg = load_config(None, SETS + ["convert.read_timeout_s=2", f"source.storage_options.stall={rel}"],
                      **{"source.url": f"sleepy://{dataset}", "target.url": str(out)})
    t0 = time.monotonic()
    outcome = run_pipeline(cfg, stderr=io.StringIO())
    assert time.monotonic() - t0 < BOUND_S
    assert outcome.exit_code == 3 and outcome.validation_passed, outcome.message
    assert outcome.quarantined == [{"episode_index": STUCK, "code": "EP902", "file": rel,
                                    "reason": f"timed out after 2 s reading {rel} (convert.read_timeout_s)"}]
    assert sorted(_written_episodes(out)) == [e for e in EPISODES if e != STUCK]


# ---- Ray: 2 actors on a private local cluster ---------------------------------------------------------------------
@pytest.mark.xdist_group("ray")
def test_ray_stuck_actor_is_killed_and_the_episode_quarantined(cluster, dataset, tmp_path):  # noqa: F811
    src, rel = _with_fifo(dataset, tmp_path)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "robo_ray.cli", "run", str(src), str(out), "--actors", "2", "--address",
           cluster.gcs, *_sets("convert.read_timeout_s=3")]
    t0 = time.monotonic()
    r = subprocess.run(cmd, env=dict(cluster.env, ROBO_RAY_STATUS_INTERVAL_S="0"), cwd=REPO, capture_output=True,
                       text=True, timeout=150)
    elapsed = time.monotonic() - t0
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stderr + r.stdout
    assert _quarantine_lines(r.stderr) == [
        f"quarantined[EP902] episode={STUCK} file={rel}: timed out after 3 s reading {rel} (convert.read_timeout_s)"]
    assert sorted(_written_episodes(out)) == [e for e in EPISODES if e != STUCK]
    ledger = _ledger(out)
    # the stuck attempt was killed and retried once (skipping the episode); every other unit ran once
    assert ledger["attempts"] == {"0": 1, "1": 2, "2": 1}, ledger["attempts"]
    assert _shard_rows(out)[1]["episodes"] == [[2, 10]]
    log = (out / "logs" / "convert.log").read_text()
    assert f"unit 1: attempt 1 timed out after 3 s reading {rel}" in log and "killing its worker" in log
    print(f"ray stuck-actor run: {elapsed:.1f} s")


@pytest.mark.xdist_group("ray")
def test_ray_unit_over_its_time_is_quarantined_after_its_attempts(cluster, dataset, tmp_path):  # noqa: F811
    """Only the wall-time limit: the driver kills the actor by the attempt's start time; with one attempt allowed,
    the retry quarantines the unit (EP902) while the other actor converted the rest."""
    from robo_ray.ray_exec.executor import RayExecutor

    src, rel = _with_fifo(dataset, tmp_path)
    out = tmp_path / "out"
    cfg = load_config(None, SETS + ["convert.read_timeout_s=null", "convert.unit_timeout_s=4",
                                    "convert.max_quarantine_fraction=0.5"],
                      **{"source.url": str(src), "target.url": str(out)})
    box: dict = {}

    def job() -> None:
        try:
            box["outcome"] = run_pipeline(cfg, executor=RayExecutor(actors=2, max_attempts=1, status_interval_s=0),
                                          stderr=io.StringIO())
        except BaseException as exc:  # noqa: BLE001 - reported below
            box["error"] = exc

    t = threading.Thread(target=job, daemon=True)
    t.start()
    t.join(timeout=120)
    assert not t.is_alive(), "the run hung on the FIFO"
    assert "error" not in box, box.get("error")
    outcome = box["outcome"]
    assert outcome.exit_code == 0, outcome.message
    q = {r["episode_index"]: r for r in outcome.quarantined}
    assert sorted(q) == [2, STUCK]
    for r in q.values():
        assert r["code"] == "EP902"
        assert r["reason"].startswith("unit timed out 1 times, last: unit timed out after 4 s "
                                      f"(convert.unit_timeout_s), last reading {rel}"), r["reason"]
    assert sorted(_written_episodes(out)) == [0, 1, 4, 5]
    assert _ledger(out)["attempts"] == {"0": 1, "1": 2, "2": 1}
