"""ORTF on the per-unit verification contract (OrtfWriter.verify_unit / verify, robo_ray/formats/ortf/verify.py).

* during a run each chunk is re-read once, by the worker that wrote it, right after its commit; the Publisher does
  not re-read the chunks' files at the end (it merges the workers' checks), and a chunk finalize rewrote after its
  re-read (per-step task ids renumbered) keeps a true digest in the run's checksums;
* `robo-ray validate DST` (a validation pass over an existing output: every chunk re-read by verify_unit) names a
  steps.parquet whose value was changed (re-written readable) and a removed video, exit 3.

The source (LeRobot v3.0, one H.264 camera, one episode that changes task) is cut into chunks of 2 episodes."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from robo_ray.config import load_config
from robo_ray.formats.ortf.verify import OrtfVerifier
from robo_ray.formats.ortf.writer import OrtfWriter
from robo_ray.stages.pipeline import run_pipeline
from tests.conftest import UnitCheckSpy, run_cli
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset

pytestmark = pytest.mark.timeout(300)

SETS = ["target.options.chunk_size=2", "target.options.created_at=2025-01-01T00:00:00Z"]
TASKS = [["pick"], ["place"], ["wipe", "pick"], ["place"], ["wipe"]]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_lerobot_dataset(tmp_path_factory.mktemp("unit_verify_ortf") / "src", DatasetSpec(
        version="v3.0", episode_lengths=[7, 6, 8, 6, 7], fps=20, episodes_per_file=5, tasks_per_episode=TASKS,
        cameras=[CameraSpec("observation.images.top")]))


@pytest.fixture(scope="module")
def converted(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("unit_verify_ortf_out") / "out"
    sets = [x for s in SETS for x in ("--set", s)]
    proc = run_cli("run", str(source), str(out), "--to", "ortf", *sets)
    assert proc.returncode == 0, proc.stderr
    return out


def _ledger(out: Path) -> dict:
    return json.loads((out / "ledger.json").read_text())


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_run_checks_each_unit_once_on_its_worker(source: Path, tmp_path: Path, monkeypatch) -> None:
    spy = UnitCheckSpy(monkeypatch, OrtfWriter, OrtfVerifier)
    calls, re_reads = spy.calls, spy.re_reads
    out = tmp_path / "out"
    cfg = load_config(None, ["target.format=ortf", *SETS], **{"source.url": str(source), "target.url": str(out)})
    outcome = run_pipeline(cfg)
    assert outcome.exit_code == 0 and outcome.validation_passed, outcome.message

    units = [s["shard_index"] for s in _ledger(out)["shards"]]
    assert len(units) >= 3, units
    assert sorted(u for u, _, _ in calls) == units, calls  # exactly one re-read per unit
    assert all(worker and not at_finish for _, worker, at_finish in calls), calls  # by the converter, not at finish
    assert sorted(re_reads) == units, re_reads  # nothing re-reads a chunk outside verify_unit

    summary = json.loads((out / "diff_summary.json").read_text())
    assert summary["passed"] and summary["episodes_written"] == len(TASKS)
    names = {c["name"] for c in summary["checks"]}
    assert {"checksums", "videos", "sample low-dim", "sample images", "ortf read-back", "unique episodes"} <= names
    assert all(c["status"] == "passed" for c in summary["checks"]), summary["checks"]  # none skipped
    # the chunk finalize renumbered after its worker's re-read: re-hashed, so the run's digests are the files'
    renumbered = [s for s in _ledger(out)["shards"] if s["extra"].get("renumbered_from")]
    assert len(renumbered) == 1 and renumbered[0]["extra"]["renumbered_from"] != renumbered[0]["sha256"]
    files = {str(p.relative_to(out)): _sha(p) for top in ("data", "videos") for p in (out / top).rglob("*")
             if p.is_file()}
    assert {n: summary["shard_sha256"].get(n) for n in files} == files


def _change_a_value(path: Path) -> None:
    """Add 1 to one action value (step 1 of the chunk's first episode: not a compared sample step) and re-write
    the file, readable, with the writer's compression."""
    table = pq.read_table(path)
    i = table.schema.get_field_index("action")
    col = table["action"].combine_chunks()
    flat = (col.flatten() if pa.types.is_fixed_size_list(col.type) else col).to_numpy().copy()
    per = col.type.list_size if pa.types.is_fixed_size_list(col.type) else 1
    flat[per] += np.float32(1.0)
    arr = pa.array(flat, type=pa.float32())
    new = pa.FixedSizeListArray.from_arrays(arr, per) if pa.types.is_fixed_size_list(col.type) else arr
    pq.write_table(table.set_column(i, table.schema.field(i), new), path, compression="zstd")
    assert pq.read_table(path).num_rows == table.num_rows


def _failures(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("validation failed")]


@pytest.mark.parametrize("which", ["first", "renumbered"])
def test_validate_names_a_changed_steps_parquet(converted: Path, tmp_path: Path, which: str) -> None:
    out = tmp_path / "copy"
    shutil.copytree(converted, out)
    assert run_cli("validate", str(out)).returncode == 0
    shards = _ledger(out)["shards"]
    shard = shards[0] if which == "first" else next(s for s in shards if s["extra"].get("renumbered_from"))
    name = shard["filename"]
    _change_a_value(out / name)
    proc = run_cli("validate", str(out))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = _failures(proc.stderr)
    assert any(f"file {name}:" in ln and "modified after conversion" in ln for ln in lines), proc.stderr
    assert "Traceback" not in proc.stderr
    assert "FAILED" in (out / "validation_report.md").read_text()
    readback = next(c for c in json.loads((out / "diff_summary.json").read_text())["checks"]
                    if c["name"] == "ortf read-back")
    assert readback["status"] == "skipped" and "damaged files" in readback["detail"], readback  # not "passed"


def test_validate_names_a_removed_video(converted: Path, tmp_path: Path) -> None:
    out = tmp_path / "copy"
    shutil.copytree(converted, out)
    shard = _ledger(out)["shards"][1]
    name = shard["files"][-1]["name"]
    assert name.endswith(".mp4")
    (out / name).unlink()
    proc = run_cli("validate", str(out))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = _failures(proc.stderr)
    assert len(lines) == 1 and f"file {name}: missing" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
