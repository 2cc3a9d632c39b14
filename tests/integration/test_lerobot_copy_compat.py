"""Copied video loads in the REAL lerobot 0.6.1 (issue #28 item 1), in its own venv (tests/compat/venvs.py):
../shared/samples/lerobot_v21_h264_1cam (v2.1, H.264) and lerobot_v30_av1_2cam (v3.0, AV1) -> LeRobot v3.0 with the
source's packets copied: `LeRobotDataset` loads, `ds[i]` succeeds on every frame (its 1e-4 s lookup at
from_timestamp + timestamp), the frames lerobot returns at first / middle / last of every episode are bit-identical
to the source's frames at the same step, and lerobot-doctor reports no FAIL.

    pytest -m compat tests/integration/test_lerobot_copy_compat.py
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from robo_ray.readers import open_reader
from robo_ray.stages.source_frames import source_frames
from tests.compat.venvs import lerobot_read
from tests.integration.test_lerobot_copy import run, video_summaries

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(1800),
              pytest.mark.xdist_group("lerobot_env")]


@pytest.mark.parametrize("sample", ["lerobot_v21_h264_1cam", "lerobot_v30_av1_2cam"])
def test_copied_video_loads_bit_identical_in_lerobot(lerobot_python, shared, tmp_path, sample):
    src, out = shared / "samples" / sample, tmp_path / "out"
    code, err = run(src, out)
    assert code == 0, err
    assert all(v["mode"] == "copy" for unit in video_summaries(out) for v in unit.values())
    proc, s = lerobot_read(out, tmp_path / "read", "--all-frames", python=lerobot_python)
    assert proc.returncode == 0 and s["ok"], f"lerobot could not read {out}: {s}\n{proc.stderr[-4000:]}"
    summary = json.loads(Path(s["json"]).read_text())
    reader = open_reader(str(src))
    inv = reader.discover()
    assert summary["num_episodes"] == len(inv.refs) and summary["num_frames"] == inv.total_steps
    assert summary["checked_frames"] == inv.total_steps + 3 * len(inv.refs)
    cams = [k for k, f in reader.features.items() if f.kind == "video"]
    compared = 0
    with np.load(s["npz"]) as z:
        for smp in summary["samples"]:
            ep = reader.load_episode(inv.refs[smp["episode_index"]])
            for cam in cams:
                want = source_frames(reader, ep, cam, [smp["frame_index"]])[0]
                assert np.array_equal(z[f"{smp['index']}/{cam}"], want), (smp, cam)
                compared += 1
    assert compared == 3 * len(inv.refs) * len(cams)
    proc, d = lerobot_read(out, tmp_path / "doctor", "--doctor", python=lerobot_python)
    assert d["ok"], f"lerobot-doctor FAILed {out}: {d}"
