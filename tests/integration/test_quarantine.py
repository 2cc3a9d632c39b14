"""Bad episodes are quarantined, never fatal, and never silently dropped: one stderr line naming the file and the
episode, the rest converts, exit code 3 (or 0 under a threshold that allows it)."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import load_rlds, run_cli
from tests.fixtures.lerobot_gen import DatasetSpec, corrupt_video, write_lerobot_dataset


def _spec(version: str) -> DatasetSpec:
    return DatasetSpec(version=version, episode_lengths=[12, 10, 14, 9])


def _video(root: Path, version: str, ep: int) -> Path:
    if version == "v3.0":
        return root / "videos/observation.images.top/chunk-000/file-000.mp4"
    return root / f"videos/chunk-000/observation.images.top/episode_{ep:06d}.mp4"


@pytest.mark.parametrize("mode,code", [("delete", "EP101"), ("zero", "EP102"), ("truncate", "EP10")])
def test_broken_mp4_is_quarantined(mode: str, code: str, tmp_path: Path) -> None:
    src = write_lerobot_dataset(tmp_path / "src", _spec("v2.1"))
    corrupt_video(_video(src, "v2.1", 2), mode)
    proc = run_cli("run", str(src), str(tmp_path / "out"), "--set", "validate.tfds_readback=false")
    assert proc.returncode == 3, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("quarantined[")]
    assert len(lines) == 1 and "episode=2" in lines[0] and "episode_000002.mp4" in lines[0], proc.stderr
    assert code in lines[0]
    assert "Traceback" not in proc.stderr
    ledger = json.loads((tmp_path / "out/ledger.json").read_text())
    written = sorted(e[0] for s in ledger["shards"] for e in s["episodes"])
    assert written == [0, 1, 3]
    report = (tmp_path / "out/final_report.md").read_text()
    assert "Quarantined Episodes" in report and "episode_000002.mp4" in report


def test_truncated_v30_file_quarantines_only_the_episodes_it_cannot_serve(tmp_path: Path) -> None:
    src = write_lerobot_dataset(tmp_path / "src", _spec("v3.0"))
    corrupt_video(_video(src, "v3.0", 0), "truncate")
    proc = run_cli("run", str(src), str(tmp_path / "out"), "--set", "validate.tfds_readback=false")
    assert proc.returncode == 3
    q = [ln for ln in proc.stderr.splitlines() if ln.startswith("quarantined[")]
    written = json.loads((tmp_path / "out/diff_summary.json").read_text())["episode_steps"]
    # every episode is either written with its full length or quarantined, and at least the tail is lost
    assert len(q) >= 1 and len(q) + len(written) == 4
    lengths = [12, 10, 14, 9]
    assert all(lengths[int(k)] == v for k, v in written.items())


def test_frame_count_mismatch_is_quarantined(tmp_path: Path) -> None:
    """Parquet has one row more than the MP4 has frames."""
    src = write_lerobot_dataset(tmp_path / "src", _spec("v2.1"))
    p = src / "data/chunk-000/episode_000001.parquet"
    t = pq.read_table(p)
    extra = t.slice(t.num_rows - 1, 1)
    cols = {n: extra[n] for n in t.column_names}
    cols["frame_index"] = pa.array([t.num_rows], pa.int64())
    cols["timestamp"] = pa.array([t.num_rows / 20], pa.float32())
    t2 = pa.concat_tables([t, pa.table(cols, schema=t.schema)])
    pq.write_table(t2, p)
    lines = (src / "meta/episodes.jsonl").read_text().splitlines()
    e = json.loads(lines[1])
    e["length"] += 1
    lines[1] = json.dumps(e)
    (src / "meta/episodes.jsonl").write_text("\n".join(lines) + "\n")
    proc = run_cli("run", str(src), str(tmp_path / "out"), "--set", "validate.tfds_readback=false")
    assert proc.returncode == 3
    q = [ln for ln in proc.stderr.splitlines() if ln.startswith("quarantined[")]
    assert len(q) == 1 and "EP103" in q[0] and "episode=1" in q[0] and "11 steps" in q[0], q


def test_threshold_allows_quarantine(tmp_path: Path) -> None:
    src = write_lerobot_dataset(tmp_path / "src", _spec("v2.1"))
    corrupt_video(_video(src, "v2.1", 3), "delete")
    proc = run_cli("run", str(src), str(tmp_path / "out"), "--set", "convert.max_quarantine_fraction=0.5")
    assert proc.returncode == 0, proc.stderr
    assert "quarantined[EP101] episode=3" in proc.stderr
    assert len(load_rlds(tmp_path / "out/rlds/src/1.0.0")) == 3


def test_nan_action_policy(tmp_path: Path) -> None:
    src = write_lerobot_dataset(tmp_path / "src", _spec("v2.1"))
    p = src / "data/chunk-000/episode_000000.parquet"
    t = pq.read_table(p)
    rows = t["action"].to_pylist()
    rows[5][1] = float("nan")
    t = t.set_column(t.column_names.index("action"), "action", pa.array(rows, t.schema.field("action").type))
    pq.write_table(t, p)
    proc = run_cli("run", str(src), str(tmp_path / "q"), "--set", "validate.tfds_readback=false")
    assert proc.returncode == 3 and "quarantined[EP203] episode=0" in proc.stderr
    assert "step 5" in proc.stderr
    proc = run_cli("run", str(src), str(tmp_path / "a"), "--set", "convert.nan_policy=allow",
                   "--set", "validate.tfds_readback=false")
    assert proc.returncode == 0, proc.stderr  # allowed through, and Validate reports it without failing
    assert "NaN/Inf values: 1 (allowed" in (tmp_path / "a/validation_report.md").read_text()
    proc = run_cli("run", str(src), str(tmp_path / "f"), "--set", "convert.nan_policy=fail",
                   "--set", "validate.tfds_readback=false")
    assert proc.returncode == 3 and "EP203" in proc.stderr
