"""LeRobot v3.0 on the per-unit verification contract (issue #14: LeRobotWriter.verify_unit / verify,
robo_ray/formats/lerobot/verify.py).

* during a run each unit is re-read once, by the worker that wrote it, right after its commit; the Publisher merges
  the workers' checks and re-reads no unit file at the end, except the two parquet files of each unit finalize
  renumbered after its re-read (hashed again: the run's checksums are the files' true digests);
* a unit file changed after its commit (data parquet, MP4, meta/episodes part) is caught by that re-read;
* `robo-ray validate DST` (every unit re-read by verify_unit) passes on the output and names a changed data parquet,
  a flipped byte in an MP4, a removed MP4 and an edited meta/episodes part, exit 3;
* on Ray (`--actors 2`) the checks come from the actors and the output is the in-process one.

The source (LeRobot v2.1, one H.264 camera, an episode that changes task, episode 1's video deleted so that it is
quarantined and the units after it are renumbered, task ids included) is planned as 3 units."""
from __future__ import annotations

import hashlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from robo_ray.config import load_config
from robo_ray.formats.lerobot.verify import LeRobotVerifier
from robo_ray.formats.lerobot.writer import LeRobotWriter
from robo_ray.stages.pipeline import run_pipeline
from robo_ray.stages.check_records import UnitCheck
from robo_ray.writers.base import Writer
from tests.conftest import UnitCheckSpy, run_cli
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset

pytestmark = pytest.mark.timeout(600)

TOP = "observation.images.top"
TASKS = [["pick"], ["place"], ["wipe", "pick"], ["place"], ["stack"], ["wipe"]]
SPEC = DatasetSpec(version="v2.1", episode_lengths=[9, 8, 11, 7, 10, 6], fps=15, tasks_per_episode=TASKS,
                   with_reward_done=True, cameras=[CameraSpec(TOP, "h264")])
SETS = ["target.format=lerobot", "plan.min_shards=3", "validate.tfds_readback=false",
        "convert.max_quarantine_fraction=0.5"]
N_UNITS = 3


def _cli_sets() -> list[str]:
    return [x for s in SETS if not s.startswith("target.format") for x in ("--set", s)]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = write_lerobot_dataset(tmp_path_factory.mktemp("unit_verify_lerobot") / "src", SPEC)
    (src / "videos/chunk-000" / TOP / "episode_000001.mp4").unlink()  # episode 1 quarantined (EP101)
    return src


@pytest.fixture(scope="module")
def converted(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("unit_verify_lerobot_out") / "out"
    proc = run_cli("run", str(source), str(out), "--to", "lerobot", *_cli_sets())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _run(source: Path, out: Path) -> tuple[int, str]:
    cfg = load_config(None, SETS, **{"source.url": str(source), "target.url": str(out)})
    err = io.StringIO()
    outcome = run_pipeline(cfg, stderr=err)
    return outcome.exit_code, err.getvalue()


def _ledger(out: Path) -> dict:
    return json.loads((out / "ledger.json").read_text())


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(out: Path) -> dict[str, str]:
    """sha256 of every file of the LeRobot dataset (data/, meta/, videos/), by relative name."""
    return {str(p.relative_to(out)): _sha(p) for top in ("data", "meta", "videos")
            for p in sorted((out / top).rglob("*")) if p.is_file()}


def _unit_files(out: Path) -> dict[str, str]:
    return {n: d for n, d in _files(out).items() if not n.startswith("meta/") or n.startswith("meta/episodes/")}


# ---- tampering -----------------------------------------------------------------------------------------------------
def _change_a_value(path: Path) -> None:
    """Add 1 to one next.reward value (row 1: not a compared sample step) and re-write the file, readable."""
    table = pq.read_table(path)
    col = table["next.reward"].to_numpy().copy()
    col[1] += np.float32(1.0)
    i = table.schema.get_field_index("next.reward")
    pq.write_table(table.set_column(i, table.schema.field(i), pa.array(col, type=pa.float32())), path)


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _edit_episode_row(path: Path) -> None:
    """One episode one step longer in meta/episodes (its row range moved with it: consistent on its own)."""
    table = pq.read_table(path)
    rows = table.to_pylist()
    rows[0]["length"] += 1
    rows[0]["dataset_to_index"] += 1
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)


def _unit_file(shard: dict, kind: str) -> str:
    if kind == "data":
        return shard["filename"]
    prefix = "meta/episodes/" if kind == "meta" else "videos/"
    return next(f["name"] for f in shard["files"] if f["name"].startswith(prefix))


TAMPER = {"data": _change_a_value, "mp4": _flip_a_byte, "meta": _edit_episode_row}


# ---- (a) one check per unit, made by its worker ----------------------------------------------------------------
def test_run_checks_each_unit_once_on_its_worker(source: Path, tmp_path: Path, monkeypatch) -> None:
    assert LeRobotWriter.verify_unit is not Writer.verify_unit  # the writer verifies per unit
    spy = UnitCheckSpy(monkeypatch, LeRobotWriter, LeRobotVerifier)
    calls, checks, re_reads = spy.calls, spy.checks, spy.re_reads
    renumbered: list[int] = []
    check_renumbered = LeRobotVerifier._check_renumbered

    def counted_renumbered(self, res, result):
        renumbered.append(result.shard_index)
        return check_renumbered(self, res, result)

    monkeypatch.setattr(LeRobotVerifier, "_check_renumbered", counted_renumbered)
    out = tmp_path / "out"
    code, err = _run(source, out)
    assert code == 0, err[-3000:]

    ledger = _ledger(out)
    units = [s["shard_index"] for s in ledger["shards"]]
    assert units == list(range(N_UNITS)), units
    assert sorted(u for u, _, _ in calls) == units, calls  # exactly one re-read per unit
    assert all(worker and not at_finish for _, worker, at_finish in calls), calls  # by the converter, not at finish
    assert sorted(re_reads) == units, re_reads  # nothing re-reads a unit outside verify_unit
    assert all(isinstance(c, UnitCheck) and c.episode_steps and not c.failures for c in checks), checks
    assert sum(c.counts["videos"] for c in checks) == N_UNITS and all(c.stats for c in checks)  # type: ignore
    log = (out / "logs/convert.log").read_text()
    assert f"verify: {N_UNITS} units re-read by the workers that wrote them, 0 re-read at the end" in log

    # the units after the quarantined episode were renumbered by finalize after their re-read: only their two
    # parquet files are hashed again, and the run's checksums are every file's true digest
    moved = [s for s in ledger["shards"] if s["extra"].get("renumbered_from")]
    assert [s["shard_index"] for s in moved] == [1, 2] and sorted(renumbered) == [1, 2], renumbered
    for s in moved:
        assert set(s["extra"]["renumbered_from"]) == {s["filename"], _unit_file(s, "meta")}
        assert s["extra"]["renumbered_from"][s["filename"]] != s["sha256"]
    summary = json.loads((out / "diff_summary.json").read_text())
    assert summary["passed"] and summary["episodes_written"] == len(TASKS) - 1
    names = {c["name"] for c in summary["checks"]}
    assert {"data", "episodes metadata", "videos", "checksums", "renumbered units", "numbering", "task ids",
            "sample low-dim", "sample images", "paired reader", "unique episodes", "no stray files"} <= names
    files = _unit_files(out)
    assert {n: summary["shard_sha256"].get(n) for n in files} == files
    stats = json.loads((out / "dataset_statistics.json").read_text())
    assert stats["num_transitions"] == sum(n for k, n in enumerate(SPEC.episode_lengths) if k != 1)
    assert stats["action"]["mean"] and "observation/state" in stats["features"]  # merged from the unit checks


# ---- (b) a unit file changed after its commit: its worker's re-read names it -----------------------------------
@pytest.mark.parametrize("kind", sorted(TAMPER))
def test_a_unit_changed_after_its_commit_is_caught(source: Path, tmp_path: Path, monkeypatch, kind: str) -> None:
    verify_unit = LeRobotWriter.verify_unit
    changed: list[str] = []

    def tamper_then_verify(self, result, ctx):
        if result.shard_index == 0:  # committed, not yet re-read: change one of its files on disk
            name = _unit_file(result.to_dict(), kind)
            TAMPER[kind](Path(self.dataset_dir) / name)
            changed.append(name)
        return verify_unit(self, result, ctx)

    monkeypatch.setattr(LeRobotWriter, "verify_unit", tamper_then_verify)
    out = tmp_path / "out"
    code, err = _run(source, out)
    assert code == 3 and len(changed) == 1, err[-3000:]
    name = changed[0]
    assert f"validation: checksum {name}: " in err and "modified after conversion" in err, err[-3000:]
    assert "Traceback" not in err
    summary = json.loads((out / "diff_summary.json").read_text())
    assert not summary["passed"]


# ---- (c) robo-ray validate on an existing output ---------------------------------------------------------------
def _failures(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("validation failed")]


def test_validate_passes_on_the_output(converted: Path, tmp_path: Path) -> None:
    out = tmp_path / "copy"
    shutil.copytree(converted, out)
    proc = run_cli("validate", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert f"validation passed: {len(TASKS) - 1} episodes" in proc.stdout
    report = (out / "validation_report.md").read_text()
    for check in ("data", "videos", "episodes metadata", "checksums", "sample images", "paired reader"):
        assert f"| {check} | ✅ |" in report, report


@pytest.mark.parametrize("case", ["data-renumbered", "data-first", "mp4", "meta", "removed-mp4"])
def test_validate_names_the_tampered_file(converted: Path, tmp_path: Path, case: str) -> None:
    out = tmp_path / "copy"
    shutil.copytree(converted, out)
    shards = _ledger(out)["shards"]
    shard = shards[2] if case == "data-renumbered" else shards[0]
    kind = case.split("-")[0] if case != "removed-mp4" else "mp4"
    name = _unit_file(shard, kind)
    if case == "removed-mp4":
        (out / name).unlink()
    else:
        TAMPER[kind](out / name)
    proc = run_cli("validate", str(out))
    assert proc.returncode == 3, proc.stdout + proc.stderr[-3000:]
    lines = _failures(proc.stderr)
    assert lines and any(name in ln for ln in lines), proc.stderr[-3000:]
    if case == "removed-mp4":
        assert any(ln.startswith("validation failed: files present: missing unit files: ") for ln in lines)
    else:
        assert any(f"checksum {name}:" in ln and "modified after conversion" in ln for ln in lines), lines
    assert "Traceback" not in proc.stderr
    assert "FAILED" in (out / "validation_report.md").read_text()


# ---- (d) on Ray: the checks come from the actors -----------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_two_actors_send_their_checks(source: Path, converted: Path, tmp_path: Path) -> None:
    out = tmp_path / "ray"
    env = {"RAY_AUTH_MODE": "disabled"}
    proc = run_cli("run", str(source), str(out), "--to", "lerobot", "--actors", "2", *_cli_sets(), env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    log = (out / "logs/convert.log").read_text()
    assert f"verify: {N_UNITS} units re-read by the workers that wrote them, 0 re-read at the end" in log, log
    assert _files(out) == _files(converted)
    summary = json.loads((out / "diff_summary.json").read_text())
    assert summary["passed"] and {n: summary["shard_sha256"].get(n) for n in _unit_files(out)} == _unit_files(out)
    # the validation pass as Ray tasks names a tampered file too
    name = _unit_file(_ledger(out)["shards"][1], "mp4")
    _flip_a_byte(out / name)
    proc = run_cli("validate", str(out), "--actors", "2", env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr[-3000:]
    assert any(f"checksum {name}:" in ln for ln in _failures(proc.stderr)), proc.stderr[-3000:]
