"""Issue #16 acceptance 1: a 4-episode dataset converted with `--val-fraction 0.25` loads through the loading steps of
Octo's and OpenVLA's `make_dataset_from_rlds` (tests/compat/octo_openvla_read.py, in the TF 2.15 / tfds 4.9.3 venv
of test_openvla_compat.py) with robo-ray's dataset_statistics.json and train=False; the val split has one episode;
normalization uses our statistics; our statistics equal what Octo's get_dataset_statistics computes.

    pytest -m compat tests/integration/test_octo_openvla_stats.py
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.compat.venvs import clean_env
from tests.conftest import REPO, require_shared, run_cli
from tests.integration.test_openvla_compat import ensure_compat_venv

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(3600)]

SCRIPT = REPO / "tests" / "compat" / "octo_openvla_read.py"
SAMPLE = "lerobot_v30_av1_2cam"  # 4 episodes, 420 steps, action (7) + observation.state


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> tuple[dict, dict, Path]:
    src = require_shared(f"samples/{SAMPLE}")
    dst = tmp_path_factory.mktemp("octo") / "out"
    proc = run_cli("run", str(src), str(dst), "--val-fraction", "0.25")
    assert proc.returncode == 0, f"robo-ray run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    python, _ = ensure_compat_venv()
    stats_path = dst / "dataset_statistics.json"
    run = subprocess.run([str(python), str(SCRIPT), str(dst / "rlds"), SAMPLE, str(stats_path), "--proprio-key",
                          "state"], capture_output=True, text=True, env=clean_env(TF_CPP_MIN_LOG_LEVEL="2"),
                         timeout=900)
    lines = [x for x in run.stdout.splitlines() if x.strip()]
    assert lines, f"no output (exit {run.returncode}):\n{run.stderr[-4000:]}"
    out = json.loads(lines[-1])
    assert run.returncode == 0 and out["ok"], f"{out.get('error')}\n{run.stderr[-4000:]}"
    return out, json.loads(stats_path.read_text()), dst


def test_both_loaders_read_train_and_val_with_our_statistics(loaded) -> None:
    out, stats, dst = loaded
    assert out["tfds"] == "4.9.3" and out["tensorflow"].startswith("2.15.")
    assert out["splits"] == {"train": 3, "val": 1}
    log = "\n".join(p.read_text() for p in (dst / "logs").glob("*.log"))
    assert "1 of 4 episodes in val" in log
    for loader in ("octo", "openvla"):
        r = out[loader]
        assert (r["val"]["split"], r["val"]["episodes"]) == ("val", 1), (loader, r["val"])  # train=False
        assert (r["train"]["split"], r["train"]["episodes"]) == ("train", 3), (loader, r["train"])
        assert r["train"]["steps"] + r["val"]["steps"] == stats["num_transitions"] == 420
        for key in ("action", "proprio"):
            # normalized == (x - our mean) / (our std + 1e-8) on both splits ...
            assert r["train"][f"{key}_max_err"] < 1e-5 and r["val"][f"{key}_max_err"] < 1e-5, (loader, key)
            # ... and the statistics are those of all written steps: the normalized values average to 0
            total = np.add(r["train"][f"{key}_sum"], r["val"][f"{key}_sum"]) / 420
            np.testing.assert_allclose(total, 0.0, atol=1e-5, err_msg=f"{loader} {key}")
            # the train split alone is not centred exactly (val is in the statistics) but normalization moved it
            assert np.abs(np.asarray(r["train"][f"{key}_sum"]) / r["train"]["steps"]).max() < 1.0
        assert r["train"]["bounds_in_range"] and r["val"]["bounds_in_range"]


def test_statistics_equal_octos_own(loaded) -> None:
    out, stats, _ = loaded
    assert out["stats_counts"]["ours"] == out["stats_counts"]["octo"] == [420, 4]
    assert stats["robo_ray"]["action"] == ["action"] and stats["robo_ray"]["proprio"] == ["observation/state"]
    for key in ("action", "proprio"):
        diffs = out["stats_vs_octo"][key]
        for k in ("mean", "std", "min", "max"):
            assert diffs[k] <= 1e-5, (key, k, diffs[k])
        # p01/p99: our value's rank among the data is within the sketch's stated rank error of 1% / 99%
        eps = stats["robo_ray"]["quantile_rank_error"]
        for name, q in (("p01", 0.01), ("p99", 0.99)):
            for lo, hi in out["quantile_ranks"][key][name]:
                assert lo - eps <= q <= hi + eps, (key, name, lo, hi, eps)
        assert stats[key]["q01"] == stats[key]["p01"] and stats[key]["q99"] == stats[key]["p99"]
