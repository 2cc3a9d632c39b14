"""Depth through LeRobot v3.0 with the REAL lerobot 0.6.1 (issue #28 item 2), in its venv (tests/compat/venvs.py):

0. `DepthQuant.quantize` / `dequantize` give lerobot's own numbers (`quantize_depth` / `dequantize_depth`, numpy
   path) for every uint16 value, with lerobot's default, linear and near-range settings;
1. a ROS bag with a 16UC1 depth camera (mcap_ros2's writer) -> robo-ray's LeRobot target: lerobot's
   `LeRobotDataset` finds the depth key (`meta.depth_keys`), `ds[i]` succeeds on every frame, and the first / middle /
   last frame of every episode it returns (float32 mm) equals robo-ray's dequantize(quantize(source)) (to 1 mm on a
   few codes: _SAME_CODES) and lies within `DepthQuant.bound` of the source; meta/stats.json's depth entry is
   (1, 1, 1) millimetres within the source's range; lerobot-doctor: no FAIL.
2. lerobot 0.6.1 itself writes a depth dataset (tests/compat/lerobot_depth_write.py: near, far, 0 = no depth and a
   pixel beyond depth_max) -> robo-ray's RLDS target: features.json declares a uint16 PNG image, and every frame read
   back from the TFRecords equals what lerobot's `ds[i]` returns for it (PNG is lossless; to 1 mm on a few codes:
   _SAME_CODES), and lies within the bound of the millimetres lerobot was given.

    pytest -m compat tests/integration/test_lerobot_depth.py
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from robo_ray.formats.lerobot.depth import DepthQuant
from tests.compat.venvs import COMPAT, clean_env, lerobot_read, run_json_script
from tests.conformance.writer_cases import _rosbag_depth, canonical_views
from tests.conftest import run_cli

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(1800),
              pytest.mark.xdist_group("lerobot_env")]

SETS = ["--set", "validate.tfds_readback=false"]
# _SAME_CODES: lerobot's two dequantizers disagree by 1 mm on 3 of the 4096 codes (the numpy path multiplies in
# float64, ds[i]'s torch path in float32; exp differs in the last bit); robo-ray matches the numpy path exactly
# (tests/unit/test_lerobot_depth.py), so ds[i] is within 1 mm of it and equal on nearly every pixel.
QUANT = DepthQuant()  # lerobot's defaults: 0.01 .. 10 m, shift 3.5 m, log


def _read(python: Path, root: Path, tmp: Path, *args: str) -> tuple[dict, dict[str, np.ndarray]]:
    proc, s = lerobot_read(root, tmp / f"read-{root.name}", *args, python=python)
    assert proc.returncode == 0 and s["ok"], f"lerobot could not read {root}: {s}\n{proc.stderr[-4000:]}"
    summary = json.loads(Path(s["json"]).read_text())
    with np.load(s["npz"]) as z:
        return summary, {k: z[k] for k in z.files}


def _within(got: np.ndarray, src: np.ndarray) -> tuple[float, int]:
    """(largest |got - src| in mm, pixels beyond QUANT.bound(src))."""
    err = np.abs(got.astype(np.float64).reshape(src.shape) - src.astype(np.float64))
    return float(err.max()), int((err > QUANT.bound(src)).sum())


_LEROBOT_QUANT = """
import sys, numpy as np
from lerobot.datasets.depth_utils import quantize_depth, dequantize_depth
mm = np.arange(65536, dtype=np.uint16).reshape(256, 256)
out = {}
for name, kw in (("log", {}), ("linear", {"use_log": False}), ("near", dict(depth_min=0.2, depth_max=4.0, shift=0.5))):
    q = quantize_depth(mm, video_backend=None, **kw)
    out[name + "/q"], out[name + "/mm"] = q, dequantize_depth(q, output_tensor=False, **kw)[0]
np.savez(sys.argv[1], **out)
"""


def test_quantizer_is_lerobots(lerobot_python, tmp_path):
    """quantize / dequantize give lerobot's numbers (its numpy path) for all 65,536 uint16 values, three settings."""
    npz = tmp_path / "lerobot_quant.npz"
    proc = subprocess.run([str(lerobot_python), "-c", _LEROBOT_QUANT, str(npz)], capture_output=True, text=True,
                          env=clean_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    mm = np.arange(65536, dtype=np.uint16).reshape(256, 256)
    quants = {"log": QUANT, "linear": DepthQuant(use_log=False), "near": DepthQuant(0.2, 4.0, 0.5, True)}
    with np.load(npz) as z:
        for name, q in quants.items():
            codes = q.quantize(mm)
            assert np.array_equal(codes, z[name + "/q"]), f"{name}: {int((codes != z[name + '/q']).sum())} codes"
            back = q.dequantize(z[name + "/q"])
            assert np.array_equal(back, z[name + "/mm"]), f"{name}: {int((back != z[name + '/mm']).sum())} values"


def test_robo_ray_depth_loads_in_lerobot(lerobot_python, tmp_path):
    src = _rosbag_depth(tmp_path)
    out = tmp_path / "lerobot"
    r = run_cli("run", str(src), str(out), "--to", "lerobot", *SETS)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    key = "observation.images.depth"
    info = json.loads((out / "meta" / "info.json").read_text())["features"][key]
    assert info["shape"] == [32, 48, 1] and info["info"]["is_depth_map"] is True, info
    assert info["info"]["video.pix_fmt"] == "gray12le" and info["info"]["video.codec"] == "hevc", info

    summary, arrays = _read(lerobot_python, out, tmp_path, "--all-frames")
    assert summary["depth_keys"] == [key] and summary["depth_output_unit"] == "mm", summary["depth_keys"]
    assert summary["checked_frames"] == summary["num_frames"] + 3 * summary["num_episodes"]
    source = {v.index: v.cameras["observation/depth"] for v in canonical_views(str(src), None)}
    assert len(source) == summary["num_episodes"] == 2
    worst, compared = 0.0, 0
    for s in summary["samples"]:
        want = source[s["episode_index"]][s["frame_index"]]
        got = arrays[s["cameras"][key]]
        assert got.dtype == np.float32 and got.shape == want.shape, (got.dtype, got.shape, want.shape)
        ours = QUANT.dequantize(QUANT.quantize(want)).astype(np.float32)
        assert np.abs(got - ours).max() <= 1 and (got == ours).mean() > 0.99, s["index"]  # see _SAME_CODES
        err, beyond = _within(got, want)
        assert beyond == 0, f"frame {s['index']}: {beyond} pixels beyond the quantization bound (max err {err} mm)"
        worst, compared = max(worst, err), compared + 1
    assert compared == 6 and worst > 0, (compared, worst)  # lossy, but within the bound
    print(f"depth: {compared} frames from lerobot, largest error {worst:.0f} mm", file=sys.stderr)
    st = summary["depth_stats"][key]
    every = np.concatenate([f.reshape(-1) for frames in source.values() for f in frames])
    assert np.asarray(st["mean"]).shape == (1, 1, 1), st
    assert every.min() <= st["min"][0][0][0] <= st["max"][0][0][0] <= every.max(), (st, every.min(), every.max())
    proc, d = lerobot_read(out, tmp_path / "doctor", "--doctor", python=lerobot_python)
    assert d["ok"], f"lerobot-doctor FAILed {out}: {d}"


def test_lerobot_depth_to_rlds(lerobot_python, tmp_path):
    root, given_npz = tmp_path / "lerobot-src", tmp_path / "given.npz"
    proc, s = run_json_script(lerobot_python, COMPAT / "lerobot_depth_write.py", root, "--out", given_npz)
    assert proc.returncode == 0 and s["ok"], f"lerobot could not write the depth dataset: {s}\n{proc.stderr[-4000:]}"
    key = s["key"]
    summary, arrays = _read(lerobot_python, root, tmp_path)
    assert summary["depth_keys"] == [key]
    with np.load(given_npz) as z:
        given = {k: z[k] for k in z.files}

    out = tmp_path / "rlds"
    r = run_cli("run", str(root), str(out), "--to", "rlds", *SETS)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    features = next(out.glob("rlds/*/*/features.json"))
    text = json.dumps(json.loads(features.read_text()))
    assert '"dtype": "uint16", "encodingFormat": "png"' in text, text[:2000]
    back = {v.index: v.cameras for v in canonical_views(str(features.parent), "rlds")}
    assert sorted(back) == [0, 1]
    (cam,) = [c for c, frames in back[0].items() if frames[0].dtype == np.uint16]
    for smp in summary["samples"]:
        e, t = smp["episode_index"], smp["frame_index"]
        got = back[e][cam][t]
        from_lerobot = arrays[smp["cameras"][key]]
        diff = np.abs(got.astype(np.float32) - from_lerobot)
        assert diff.max() <= 1 and (diff == 0).mean() > 0.99, f"episode {e} frame {t}: RLDS vs lerobot's ds[i]: " \
                                                               f"{int((diff > 0).sum())} pixels differ (_SAME_CODES)"
        err, beyond = _within(got, given[f"{e}/{t}"])
        assert beyond == 0, f"episode {e} frame {t}: {beyond} pixels beyond the bound (max err {err} mm)"
    first = back[0][cam][0]
    assert first[0, 0, 0] == 10 and first[-1, -1, 0] == 10_000, "0 -> depth_min (10 mm), 12 m -> depth_max (10 m)"
