"""Per-unit verification (issue #14): each unit is re-read once, by the worker that wrote it, right after its commit;
the Publisher merges the small checks and never re-reads the shards; `robo-ray validate` re-reads every unit (in a
loop, or as Ray tasks with --actors); the tfds read-back reads a named sample of shards; the report scans only the
shards of its sampled episodes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from robo_ray.config import load_config
from robo_ray.formats.rlds.reader import RldsReader
from robo_ray.formats.rlds.writer import RldsWriter
from robo_ray.stages.pipeline import run_pipeline
from tests.conftest import REPO, run_cli
from tests.fixtures.lerobot_gen import DatasetSpec, write_lerobot_dataset

LENGTHS = [6, 7, 8, 9, 10, 11]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("unit-verify")
    return write_lerobot_dataset(root / "src", DatasetSpec(version="v3.0", episode_lengths=LENGTHS, cameras=[]))


def _config(src: Path, out: Path | str, *sets: str):
    return load_config(None, [*sets, "plan.max_unit_episodes=1"], **{"source.url": str(src), "target.url": str(out)})


def _shards(out: Path) -> list[Path]:
    return sorted((out / "rlds/src/1.0.0").glob("src-train.tfrecord-*"))


@pytest.fixture(scope="module")
def converted(source: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("unit-verify-out") / "out"
    outcome = run_pipeline(_config(source, out, "validate.tfds_readback=false"), stderr=open(os.devnull, "w"))
    assert outcome.exit_code == 0 and outcome.validation_passed, outcome.message
    return out


def test_each_unit_is_reread_once_by_the_converter(source: Path, tmp_path: Path, monkeypatch) -> None:
    calls: list[tuple[str, int]] = []
    original = RldsWriter.verify_unit

    def counted(self, result, ctx):
        import traceback

        where = "converter" if any(f.name == "convert" and f.filename.endswith("stages/convert.py")
                                   for f in traceback.extract_stack()) else "elsewhere"
        calls.append((where, result.shard_index))
        return original(self, result, ctx)

    monkeypatch.setattr(RldsWriter, "verify_unit", counted)
    out = tmp_path / "out"
    outcome = run_pipeline(_config(source, out, "validate.tfds_readback=false"), stderr=open(os.devnull, "w"))
    assert outcome.exit_code == 0, outcome.message
    assert sorted(calls) == [("converter", i) for i in range(len(LENGTHS))]  # none by the Publisher at the end
    report = (out / "validation_report.md").read_text()
    for check in ("shards present", "unique episodes", "sample low-dim", "checksums", "nan/inf",
                  "discovered = written + quarantined"):
        assert f"| {check} | ✅ |" in report
    stats = json.loads((out / "dataset_statistics.json").read_text())
    assert stats["num_transitions"] == sum(LENGTHS) and stats["action"]["mean"]  # merged from the unit checks


@pytest.mark.parametrize("damage", ["flip", "append"])
def test_the_workers_check_catches_a_shard_changed_after_its_commit(source: Path, tmp_path: Path, monkeypatch,
                                                                    damage: str) -> None:
    """The worker does not hash a shard it has just written again (its records' CRCs and its size stand for the
    digest): one bit flipped, or bytes added, between the commit and that check still fail validation, naming
    the shard, and the digest the ledger keeps is the one taken while writing."""
    from robo_ray.formats.rlds.writer import ShardSink

    original = ShardSink.commit
    damaged: list[str] = []

    def commit_then_damage(self):
        res = original(self)
        if res.shard_index == 2:
            path = Path(self.final_path)
            data = bytearray(path.read_bytes())
            if damage == "flip":
                data[len(data) // 2] ^= 0x01
            else:
                data += b"\0" * 16
            path.write_bytes(bytes(data))
            damaged.append(path.name)
        return res

    monkeypatch.setattr(ShardSink, "commit", commit_then_damage)
    out = tmp_path / "out"
    outcome = run_pipeline(_config(source, out, "validate.tfds_readback=false"), stderr=open(os.devnull, "w"))
    assert damaged and outcome.exit_code != 0 and not outcome.validation_passed
    report = (out / "validation_report.md").read_text()
    assert damaged[0] in report
    ledger = json.loads((out / "ledger.json").read_text())
    written = {s["filename"]: s["sha256"] for s in ledger["shards"]}
    intact = [p for p in _shards(out) if p.name != damaged[0]]
    assert intact and all(written[p.name] == sha256_of(p) for p in intact)


def sha256_of(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_validate_rereads_every_unit_and_names_a_tampered_shard(converted: Path, tmp_path: Path) -> None:
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(converted, out)
    proc = run_cli("validate", str(out), "--no-tfds")
    assert proc.returncode == 0, proc.stderr
    shard = _shards(out)[3]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    for extra in ([], ["--actors", "2"]):  # in a loop here, and as Ray tasks
        proc = run_cli("validate", str(out), "--no-tfds", *extra)
        assert proc.returncode == 3, proc.stdout + proc.stderr
        assert shard.name in proc.stderr and "Traceback" not in proc.stderr


def test_readback_reads_a_named_sample_of_shards(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    outcome = run_pipeline(_config(source, out, "validate.readback_shards=2"), stderr=open(os.devnull, "w"))
    assert outcome.exit_code == 0, outcome.message
    names = [p.name for p in _shards(out)]
    row = next(line for line in (out / "validation_report.md").read_text().splitlines()
               if line.startswith("| tfds read-back |"))
    assert "| ✅ |" in row
    want_steps = LENGTHS[0] + LENGTHS[-1]  # first and last shard: one episode each
    assert f"read 2 episodes / {want_steps} steps from 2 of {len(names)} shards ({names[0]}, {names[-1]})" in row


def test_discover_spread_scans_only_the_sampled_shards(converted: Path, monkeypatch) -> None:
    url = str(converted / "rlds/src/1.0.0")
    full = RldsReader(url).discover()
    scanned: list[str] = []
    original = RldsReader._scan_shard

    def spy(self, rel, declared):
        scanned.append(rel)
        return original(self, rel, declared)

    monkeypatch.setattr(RldsReader, "_scan_shard", spy)
    inv, positions = RldsReader(url).discover_spread(3)
    assert inv.episodes_count == len(full.refs) == len(LENGTHS)
    assert inv.refs == [full.refs[j] for j in positions] and positions == [0, 2, 5]
    assert sorted(scanned) == sorted({full.refs[j].data_path for j in positions})  # 3 of 6 shards


def test_ray_run_leaves_no_process_behind(source: Path, tmp_path: Path) -> None:
    """The CLI ends its own Ray instance by killing its process tree (no 2-3 s ray.shutdown): nothing survives it,
    not even the agents the raylet starts (they do not inherit the driver's environment: found by their open
    files, under this run's own RAY_TMPDIR)."""
    import shutil
    import tempfile

    ray_tmp = tempfile.mkdtemp(prefix="rr", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    try:
        proc = subprocess.run([sys.executable, "-m", "robo_ray.cli", "run", str(source), str(tmp_path / "out"),
                               "--actors", "2", "--set", "validate.tfds_readback=false"], capture_output=True,
                              text=True, env={**os.environ, "RAY_TMPDIR": ray_tmp}, timeout=600, cwd=REPO)
        assert proc.returncode == 0, proc.stderr

        def ours() -> list[str]:
            found = []
            for p in psutil.process_iter(["name"]):
                try:
                    if p.status() != psutil.STATUS_ZOMBIE and any(f.path.startswith(ray_tmp)
                                                                  for f in p.open_files()):
                        found.append(f"{p.pid} {p.info['name']}")
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            return found

        deadline = time.monotonic() + 2.0
        while ours() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not ours(), f"processes of the run still alive after its exit: {ours()}"
    finally:
        for p in psutil.process_iter():  # a failed run: do not leave its processes to the next tests
            try:
                if any(f.path.startswith(ray_tmp) for f in p.open_files()):
                    p.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_remote_readback_copies_only_the_sample(source: Path, monkeypatch) -> None:
    """An object-store output is not copied whole for the tfds read-back: only the sampled shards are fetched."""
    import fsspec

    fetched: list[str] = []
    fs_cls = type(fsspec.filesystem("memory"))
    original = fs_cls.get

    def spy(self, rpath, lpath, *args, **kwargs):
        fetched.append(str(rpath))
        return original(self, rpath, lpath, *args, **kwargs)

    monkeypatch.setattr(fs_cls, "get", spy)
    out = f"memory://unit-verify-{os.getpid()}/out"
    outcome = run_pipeline(_config(source, out, "validate.readback_shards=1"), stderr=open(os.devnull, "w"))
    assert outcome.exit_code == 0, outcome.message
    report = fsspec.open(f"{out}/validation_report.md", "rt").open().read()
    row = next(line for line in report.splitlines() if line.startswith("| tfds read-back |"))
    assert "| ✅ |" in row and f"from 1 of {len(LENGTHS)} shards" in row
    shards = [p for p in fetched if ".tfrecord-" in p]
    assert len(shards) == 1 and shards[0].endswith("-00000-of-00006"), fetched
