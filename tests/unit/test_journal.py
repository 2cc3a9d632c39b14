"""The journal (progress.jsonl, ledger.json, journal parts) writes O(total) bytes on an object store (#14)."""
from __future__ import annotations

import io
import json
from pathlib import Path

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFile

from robo_ray.config import load_config
from robo_ray.stages.journal import JOURNAL_DIR, read_ledger
from robo_ray.stages.pipeline import run_pipeline
from tests.fixtures.lerobot_gen import DatasetSpec, write_lerobot_dataset

JOURNAL_FILES = ("progress.jsonl", "ledger.json", f"/{JOURNAL_DIR}/")
SETS = ["validate.tfds_readback=false", "validate.sample_episodes=0"]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    spec = DatasetSpec(version="v2.1", episode_lengths=[4] * 100, cameras=[])  # a file per episode: 1 unit each
    return write_lerobot_dataset(tmp_path_factory.mktemp("journal") / "src", spec)


def _journal_bytes(source: Path, units: int, monkeypatch, name: str) -> tuple[int, dict]:
    """Bytes uploaded to the journal's objects by an in-process run of `units` units to memory://."""
    written: list[tuple[str, int]] = []
    commit = MemoryFile.commit

    def counting_commit(self: MemoryFile) -> None:
        written.append((self.path, self.getbuffer().nbytes))
        commit(self)

    monkeypatch.setattr(MemoryFile, "commit", counting_commit)
    out = f"memory://journal-{name}"
    cfg = load_config(None, [*SETS, f"plan.min_shards={units}", f"max_episodes={units}"],
                      **{"source.url": str(source), "target.url": out})
    outcome = run_pipeline(cfg, stderr=io.StringIO())
    monkeypatch.setattr(MemoryFile, "commit", commit)
    assert outcome.exit_code == 0, outcome.message
    fs, root = fsspec.core.url_to_fs(out)
    ledger = json.loads(fs.cat_file(f"{root}/ledger.json"))
    assert ledger["complete"] and len(ledger["shards"]) == units
    progress = fs.cat_file(f"{root}/progress.jsonl").decode().splitlines()
    assert sorted(json.loads(x)["episode_id"] for x in progress) == list(range(units))  # merged at the end
    assert not fs.exists(f"{root}/{JOURNAL_DIR}") or not fs.ls(f"{root}/{JOURNAL_DIR}")  # parts deleted
    return sum(n for path, n in written if any(k in path for k in JOURNAL_FILES)), ledger


def test_journal_bytes_grow_linearly(source: Path, monkeypatch) -> None:
    small, _ = _journal_bytes(source, 10, monkeypatch, "small")
    large, _ = _journal_bytes(source, 100, monkeypatch, "large")
    # linear: ~10x (fixed costs make it a bit less); rewriting progress.jsonl or ledger.json per unit gives ~100x
    assert 5 < large / small < 14, (small, large)


def test_resume_reads_the_parts_of_a_killed_run(tmp_path: Path) -> None:
    fs = fsspec.filesystem("memory")
    root = "/resume-parts"
    fs.pipe_file(f"{root}/ledger.json", json.dumps({"shards": [{"shard_index": 0, "n": "old"}],
                                                    "complete": False}).encode())
    fs.pipe_file(f"{root}/{JOURNAL_DIR}/unit-0000001.json", json.dumps(
        {"result": {"shard_index": 1, "n": "part"}, "progress": ["{}"]}).encode())
    fs.pipe_file(f"{root}/{JOURNAL_DIR}/unit-0000002.json", b'{"result": {"shard_in')  # cut by the kill
    ledger = read_ledger(fs, root)
    assert ledger is not None and [s["shard_index"] for s in ledger["shards"]] == [0, 1]
    assert read_ledger(fs, "/nothing-here") is None
