"""Issue 4, acceptance 4: edit mapping.yaml (rename a key, drop a camera, switch JPEG to PNG), rerun with
--mapping: the output and mapping.md follow."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import REPO, load_rlds, run_cli

SRC = REPO / "examples/lerobot_v30_pusher"


def _features(version_dir: Path) -> dict:
    f = json.loads((version_dir / "features.json").read_text())
    return f["featuresDict"]["features"]["steps"]["sequence"]["feature"]["featuresDict"]["features"]


def test_edited_mapping_changes_the_output(tmp_path: Path) -> None:
    first = run_cli("run", str(SRC), str(tmp_path / "a"), "--max-episodes", "1", "--set", "validate.tfds_readback=false")
    assert first.returncode == 0, first.stderr
    mapping = yaml.safe_load((tmp_path / "a/mapping.yaml").read_text())
    steps = mapping["steps"]
    for fm in steps:
        if fm["target"] == "observation/state":
            fm["target"] = "observation/joint_state"
    mapping["steps"] = [fm for fm in steps if fm["source"] != "observation.images.side"]
    mapping["images"]["encoding"] = "png"
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(mapping))

    proc = run_cli("run", str(SRC), str(tmp_path / "b"), "--max-episodes", "1", "--mapping", str(edited))
    assert proc.returncode == 0, proc.stderr
    vdir = tmp_path / "b/rlds/lerobot_v30_pusher/1.0.0"
    obs = _features(vdir)["observation"]["featuresDict"]["features"]
    assert set(obs) == {"joint_state", "image_top"}
    assert obs["image_top"]["image"]["encodingFormat"] == "png"
    ep = load_rlds(vdir)[0]
    assert "observation/joint_state" in ep["steps"] and "observation/image_side" not in ep["steps"]
    md = (tmp_path / "b/mapping.md").read_text()
    assert "observation/joint_state" in md
    assert "observation.images.side | not in mapping.yaml (removed by the user)" in md
    assert "encode PNG (lossless)" in md and "JPEG" not in md.split("## Images")[0]
    # the lossless PNG of the decoded frame equals PyAV's decode exactly
    summary = json.loads((tmp_path / "b/diff_summary.json").read_text())
    assert summary["psnr_db"]["min"] == 99.0


def test_invalid_mapping_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset_name: x\nsteps:\n- {source: nope, target: action, kind: tensor, dtype: float32, shape: [7]}\n")
    proc = run_cli("run", str(SRC), str(tmp_path / "o"), "--mapping", str(bad))
    assert proc.returncode == 2 and "source feature 'nope' does not exist" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
