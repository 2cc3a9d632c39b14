"""Issue 4: each stage as its own command, and every file of pipeline_stages.md present and correct for the
lerobot v3.0 sample (inventory fields, episode index, SHA256 in final_report.md equal to the files)."""
from __future__ import annotations

import csv
import hashlib
import json
import re
import tarfile
from pathlib import Path

from tests.conftest import run_cli

FILES = ["inventory.json", "episode_index.csv", "mapping.md", "mapping.yaml", "progress.jsonl", "ledger.json",
         "validation_report.md", "diff_summary.json", "final_report.md", "logs/convert.log", "logs/errors.log",
         "dataset_statistics.json"]


def test_stages_one_by_one(shared: Path, tmp_path: Path) -> None:
    src = shared / "samples/lerobot_v30_av1_2cam"
    out = tmp_path / "out"
    assert run_cli("discover", str(src), str(out)).returncode == 0
    inv = json.loads((out / "inventory.json").read_text())
    assert inv["lerobot_version"] == "v3.0" and inv["episodes_count"] == 4 and inv["total_steps"] == 420
    assert inv["metadata"] == {"robot_type": "mujoco_pusher_7dof", "fps": 20.0,
                               "tasks": ["Push the white puck onto the red goal."]}
    assert inv["features"]["observation.images.top"]["source"] == "video"
    assert inv["features"]["observation.state"] == {"dtype": "float32", "shape": [23], "shape_hwc": None,
                                                    "source": "parquet", "codec": None}
    rows = list(csv.DictReader((out / "episode_index.csv").open()))
    assert [(r["episode_index"], r["start_idx"], r["end_idx"], r["length"]) for r in rows] == [
        ("0", "0", "150", "150"), ("1", "150", "210", "60"), ("2", "210", "330", "120"), ("3", "330", "420", "90")]
    assert rows[1]["video_path"] == ("videos/observation.images.top/chunk-000/file-000.mp4;"
                                     "videos/observation.images.side/chunk-000/file-000.mp4")
    assert rows[0]["task"] == "Push the white puck onto the red goal."

    spec_out = tmp_path / "spec"
    assert run_cli("spec", str(src), str(spec_out)).returncode == 0
    md = (spec_out / "mapping.md").read_text()
    for heading in ("## Observation Mapping", "## Action Mapping", "## Default Values", "## Episode Metadata"):
        assert heading in md

    conv = run_cli("convert", str(src), str(tmp_path / "c"))
    assert conv.returncode == 0, conv.stderr
    assert run_cli("validate", str(tmp_path / "c")).returncode == 0
    pub = run_cli("publish", str(tmp_path / "c"), "--archive")
    assert pub.returncode == 0, pub.stderr
    c = tmp_path / "c"
    for name in FILES:
        assert (c / name).is_file(), name
    assert "shard " in (c / "logs/convert.log").read_text()  # publish kept the conversion's log
    progress = [json.loads(x) for x in (c / "progress.jsonl").read_text().splitlines()]
    assert sorted(p["episode_id"] for p in progress if p["status"] == "completed") == [0, 1, 2, 3]

    report = (c / "final_report.md").read_text()
    sums = dict(re.findall(r"^\| (\S+) \| ([0-9a-f]{64}) \|$", report, re.M))
    vdir = c / "rlds/lerobot_v30_av1_2cam/1.0.0"
    files = sorted(p.name for p in vdir.iterdir())
    assert sorted(sums) == files and len(files) >= 3
    for name, digest in sums.items():
        assert hashlib.sha256((vdir / name).read_bytes()).hexdigest() == digest
    for needle in ("**Source**", "**Source Version**: lerobot v3.0", "| Files |", "| Total Size |",
                   "| Conversion Time |", "| Mode |", "tfds.builder_from_directory"):
        assert needle in report
    with tarfile.open(c / "lerobot_v30_av1_2cam.tar.gz") as tar:
        names = tar.getnames()
    assert "lerobot_v30_av1_2cam/1.0.0/dataset_info.json" in names
