"""`robo-ray validate` on a finished output: a modified, removed or emptied shard is named, exit 3."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from robo_ray.formats.rlds.tfrecord import frame_record, read_records
from tests.conftest import run_cli
from tests.fixtures.lerobot_gen import DatasetSpec, write_lerobot_dataset


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tamper")
    src = write_lerobot_dataset(root / "src", DatasetSpec(version="v3.0", episode_lengths=[8, 9, 10, 11],
                                                          episodes_per_file=1))
    proc = run_cli("run", str(src), str(root / "out"), "--set", "validate.tfds_readback=false")
    assert proc.returncode == 0, proc.stderr
    assert run_cli("validate", str(root / "out"), "--no-tfds").returncode == 0
    return root / "out"


def _shards(out: Path) -> list[Path]:
    return sorted((out / "rlds/src/1.0.0").glob("src-train.tfrecord-*"))


def _copy(out: Path, tmp_path: Path) -> Path:
    import shutil

    dst = tmp_path / "copy"
    shutil.copytree(out, dst)
    return dst


def test_modified_shard_is_named(converted: Path, tmp_path: Path) -> None:
    out = _copy(converted, tmp_path)
    shard = _shards(out)[1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    proc = run_cli("validate", str(out), "--no-tfds")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert shard.name in proc.stderr and "Traceback" not in proc.stderr
    assert "FAILED" in (out / "validation_report.md").read_text()


def test_removed_shard_is_named(converted: Path, tmp_path: Path) -> None:
    out = _copy(converted, tmp_path)
    shard = _shards(out)[2]
    shard.unlink()
    proc = run_cli("validate", str(out), "--no-tfds")
    assert proc.returncode == 3
    assert f"missing shard files: {shard.name}" in proc.stderr


def test_dropped_episode_is_named(converted: Path, tmp_path: Path) -> None:
    """Re-frame a shard without its episode (CRCs valid, shardLengths fixed): the lost episode is named."""
    out = _copy(converted, tmp_path)
    shard = _shards(out)[0]
    with open(shard, "rb") as f:
        records = list(read_records(f))
    shard.write_bytes(b"".join(frame_record(r) for r in records[1:]))
    info_path = out / "rlds/src/1.0.0/dataset_info.json"
    info = json.loads(info_path.read_text())
    info["splits"][0]["shardLengths"][0] = str(len(records) - 1)
    info_path.write_text(json.dumps(info))
    proc = run_cli("validate", str(out), "--no-tfds")
    assert proc.returncode == 3
    assert "missing from output and not quarantined: [0]" in proc.stderr
