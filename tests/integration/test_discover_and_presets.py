"""Discover findings on real defective metadata, the demo command, and the configs/ presets."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.conftest import REPO, load_rlds, run_cli


def test_discover_reports_declared_vs_actual(shared: Path, tmp_path: Path) -> None:
    proc = run_cli("discover", str(shared / "real/rerun-apple_storage-v30"), str(tmp_path / "d"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "total_frames=14983 but the episode lengths sum to 899" in proc.stdout
    assert "splits cover 50 episodes but the episode index lists 3" in proc.stdout
    inv = json.loads((tmp_path / "d/inventory.json").read_text())
    assert inv["episodes_count"] == 3 and inv["total_steps"] == 899
    assert inv["lerobot_version"] == "v3.0"
    codes = {f["code"]: f for f in inv["findings"]}
    assert codes["D102"]["expected"] == 14983 and codes["D102"]["actual"] == 899
    rows = (tmp_path / "d/episode_index.csv").read_text().splitlines()
    assert rows[0] == "episode_id,episode_index,start_idx,end_idx,length,task,data_path,video_path"
    assert rows[1].split(",")[:5] == ["ep_000000", "0", "0", "299", "299"]
    assert rows[3].split(",")[2:5] == ["599", "899", "300"]


def test_demo_command(tmp_path: Path) -> None:
    proc = run_cli("demo", str(tmp_path / "demo"))
    assert proc.returncode == 0, proc.stderr
    assert "builder_from_directory" in proc.stdout
    assert len(load_rlds(tmp_path / "demo/rlds/lerobot_v30_pusher/1.0.0")) == 4


def test_oxe_preset_resizes(tmp_path: Path) -> None:
    src = REPO / "examples/lerobot_v30_pusher"
    proc = run_cli("run", str(src), str(tmp_path / "o"), "--config", str(REPO / "configs/oxe.yaml"),
                   "--max-episodes", "2")
    assert proc.returncode == 0, proc.stderr
    eps = load_rlds(tmp_path / "o/rlds/lerobot_v30_pusher/1.0.0")
    assert len(eps) == 2
    assert eps[0]["steps"]["observation/image_top"].shape[1:] == (256, 256, 3)
    assert "resize 96x128->256x256" in (tmp_path / "o/mapping.md").read_text()


def test_lossless_preset_is_exact(tmp_path: Path) -> None:
    src = REPO / "examples/lerobot_v30_pusher"
    proc = run_cli("run", str(src), str(tmp_path / "o"), "--config", str(REPO / "configs/lossless.yaml"),
                   "--max-episodes", "1")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "o/diff_summary.json").read_text())
    assert summary["psnr_db"]["min"] == 99.0  # PNG of the decoded frame: identical to PyAV's decode
    ep = load_rlds(tmp_path / "o/rlds/lerobot_v30_pusher/1.0.0")[0]
    assert ep["steps"]["observation/image_side"].dtype == np.uint8


def test_statistics_match_numpy_over_the_source(shared: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    src = shared / "samples/lerobot_v30_av1_2cam"
    proc = run_cli("run", str(src), str(tmp_path / "o"), "--set", "validate.tfds_readback=false")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "o/dataset_statistics.json").read_text())
    stats, eps = doc["features"], doc["robo_ray"]["quantile_rank_error"]
    table = pq.read_table(src / "data/chunk-000/file-000.parquet")
    for src_key, key, group in (("observation.state", "observation/state", "proprio"), ("action", "action", "action")):
        a = np.stack(table[src_key].to_numpy(zero_copy_only=False)).astype(np.float32).astype(np.float64)
        s = stats[key]
        assert s["count"] == len(a) == 420
        np.testing.assert_allclose(s["mean"], a.mean(0), rtol=1e-12)
        np.testing.assert_allclose(s["std"], a.std(0), rtol=1e-12)
        np.testing.assert_array_equal(s["min"], a.min(0))
        np.testing.assert_array_equal(s["max"], a.max(0))
        for name, q in (("q01", 0.01), ("q99", 0.99)):  # a data value whose rank is q within the sketch's bound
            lo, hi = (a < np.asarray(s[name])).mean(0), (a <= np.asarray(s[name])).mean(0)
            assert np.all(lo - eps <= q) and np.all(q <= hi + eps), (key, name, lo, hi)
        # the loaders' layout at the top level: the mapping's action / state feature, p01/p99 = q01/q99
        assert {k: doc[group][k] for k in ("mean", "std", "min", "max", "q01", "q99")} == \
            {k: s[k] for k in ("mean", "std", "min", "max", "q01", "q99")}
        assert (doc[group]["p01"], doc[group]["p99"]) == (s["q01"], s["q99"])
    assert (doc["num_transitions"], doc["num_trajectories"]) == (420, 4)
    info = json.loads((tmp_path / "o/rlds/lerobot_v30_av1_2cam/1.0.0/dataset_info.json").read_text())
    assert "statistics" not in json.dumps(info).lower()
