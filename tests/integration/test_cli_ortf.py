"""`robo-ray run SRC DST --to ortf`: the ORTF writer from the CLI; a bad episode is quarantined, not fatal."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from tests.conftest import run_cli
from tests.fixtures.lerobot_gen import DatasetSpec, corrupt_video, write_lerobot_dataset


def test_to_ortf_quarantines_and_round_trips(tmp_path: Path) -> None:
    src = write_lerobot_dataset(tmp_path / "src", DatasetSpec(version="v2.1", episode_lengths=[6, 7, 8]))
    corrupt_video(src / "videos/chunk-000/observation.images.top/episode_000001.mp4", "delete")
    proc = run_cli("run", str(src), str(tmp_path / "ortf"), "--to", "ortf")
    assert proc.returncode == 3, proc.stderr
    assert "quarantined[EP101] episode=1" in proc.stderr and "episode_000001.mp4" in proc.stderr
    manifest = json.loads((tmp_path / "ortf/meta/manifest.json").read_text())
    assert manifest["ortf_version"].startswith("0.2")
    eps = pq.read_table(tmp_path / "ortf/meta/episodes.parquet").to_pydict()
    assert eps["episode_id"] == ["000000", "000002"] and eps["length"] == [6, 8]
    back = run_cli("run", str(tmp_path / "ortf"), str(tmp_path / "rlds"), "--set", "validate.tfds_readback=false")
    assert back.returncode == 0, back.stderr
    summary = json.loads((tmp_path / "rlds/diff_summary.json").read_text())
    assert summary["steps_written"] == 14
