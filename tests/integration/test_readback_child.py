"""The tfds read-back runs in a child process started when the run starts (issue #15): TensorFlow never enters the
process that converts and validates, and a dataset tfds cannot read still fails validation in one line."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, shared_dir

pytestmark = [pytest.mark.slow]

SCRIPT = """
import io, json, sys
from robo_ray.config import load_config
from robo_ray.stages.pipeline import run_pipeline
cfg = load_config(None, ["validate.sample_episodes=1"], **{"source.url": sys.argv[1], "target.url": sys.argv[2]})
outcome = run_pipeline(cfg, stderr=io.StringIO())
print(json.dumps({"exit": outcome.exit_code, "tf_in_process": "tensorflow" in sys.modules}))
"""


def _run(src: Path, out: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(src), str(out)], capture_output=True, text=True,
                          cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _readback(out: Path) -> dict:
    summary = json.loads((out / "diff_summary.json").read_text())
    return next(c for c in summary["checks"] if c["name"] == "tfds read-back")


def test_readback_in_a_child_process(tmp_path: Path) -> None:
    out = tmp_path / "out"
    got = _run(shared_dir() / "samples" / "lerobot_v30_av1_2cam", out)
    check = _readback(out)
    assert got == {"exit": 0, "tf_in_process": False}, got
    # the sample's 4 episodes are 4 shards; the read-back reads a sample of them and says which
    m = re.search(r"read (\d+) episodes / (\d+) steps from (\d+) of 4 shards .*expected (\d+) / (\d+)", check["detail"])
    assert check["status"] == "passed" and m and m[1] == m[4] and m[2] == m[5] and int(m[3]) >= 1, check


def test_unreadable_dataset_fails_the_readback(tmp_path: Path) -> None:
    from robo_ray.formats.rlds.readback import ReadbackProcess

    out = tmp_path / "out"
    _run(shared_dir() / "samples" / "lerobot_v30_av1_2cam", out)
    version = next((out / "rlds").glob("*/*"))
    child = ReadbackProcess()
    try:
        assert child.count(str(version), ["train"]) == (4, 420)
        info = json.loads((version / "dataset_info.json").read_text())
        info["splits"][0]["shardLengths"] = ["9"]  # tfds now expects other shards than the files hold
        (version / "dataset_info.json").write_text(json.dumps(info))
        with pytest.raises(RuntimeError) as err:
            child.count(str(version), ["train"])
        assert "Error" in str(err.value) and "\n" not in str(err.value), err.value
        with pytest.raises(RuntimeError):  # the child answers the next request after a failure
            child.count(str(tmp_path / "nothing"), ["train"])
    finally:
        child.close()
