"""The README's Ray Data examples (examples/filter_and_rescale.py, examples/train_stream.py) run as written on the
bundled LeRobot example, each in its own process with its own local Ray instance, and do what they say: the kept
episodes are exactly the long ones, with action[0] halved; the stream yields every step of the dataset."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
import numpy as np
import pytest

from tests.conftest import all_episodes

REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "examples" / "lerobot_v30_pusher"

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray_data")]




def _example(name: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    return subprocess.run([sys.executable, str(REPO / "examples" / name), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)


def test_filter_and_rescale_keeps_the_long_episodes_with_action_0_halved(tmp_path: Path) -> None:
    source = all_episodes(str(BUNDLED))
    lengths = sorted(e.length for e in source)
    min_length = lengths[len(lengths) // 2]  # about half of them go
    kept = [e for e in source if e.length >= min_length]
    assert 0 < len(kept) < len(source), lengths
    out = tmp_path / "filtered"
    r = _example("filter_and_rescale.py", str(BUNDLED), str(out), "--min-length", str(min_length))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert (out / "final_report.md").is_file() and "validation passed" in r.stdout, r.stdout[-2000:]
    written = all_episodes(str(out / "rlds" / "pusher_filtered" / "1.0.0"))
    assert [e.length for e in written] == [e.length for e in kept]
    for src, got in zip(kept, written):
        want = np.asarray(src.columns["action"], dtype=np.float32).copy()
        want[:, 0] *= np.float32(0.5)
        np.testing.assert_array_equal(np.asarray(got.columns["action"], dtype=np.float32), want)


def test_train_stream_yields_every_step_with_decoded_images() -> None:
    source = all_episodes(str(BUNDLED))
    r = _example("train_stream.py", str(BUNDLED), "--batch-size", "16")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    m = re.search(r"^(\d+) steps streamed .*cameras \[(.*?)\] \[(.*?)\]", r.stdout, re.M)
    assert m, r.stdout[-2000:]
    assert int(m.group(1)) == sum(e.length for e in source)
    cameras = [c for c in m.group(2).split(",") if c.strip()]
    shapes = re.findall(r"\((\d+), (\d+), 3\)", m.group(3))  # each camera's batches: (H, W, 3) decoded pixels
    assert cameras and len(shapes) == len(cameras), m.group(0)
