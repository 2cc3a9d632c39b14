"""robo-ray's LeRobot v3.0 output loaded by the REAL lerobot 0.6.1 (`LeRobotDataset`, `ds[i]` with its 1e-4 s frame
lookup) and checked by lerobot-doctor 0.2.0, in their own venv (tests/compat/venvs.py; built once, ~2.5 min):

1. generated v2.1 (2 cameras H.264 + AV1, reward/done, a task change inside an episode) -> AV1 output: loads,
   `ds[i]` succeeds on every frame, episode/frame counts, state/action/reward exact, the task of every sampled
   frame, first/middle/last frame of each episode >= 30 dB against the source, and not worse than lerobot's own
   encoder (tests/compat/lerobot_reference.py, same frames, same settings) by more than 1 dB; doctor: no FAIL;
2. ../shared/samples/lerobot_v21_h264_1cam (lerobot 0.3.3) -> H.264 output (`target.options.vcodec=h264`): the same;
3. ../shared/real/g1_v21_30ep -> 26 episodes, the 4 without video (0, 3, 6, 9) quarantined by name, exit 3; the
   written episodes load in lerobot with the source's values, renumbered 0..25.

    pytest -m compat tests/integration/test_lerobot_compat.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import av
import numpy as np
import pytest

from robo_ray.readers import open_reader
from tests.compat.venvs import VenvError, ensure_lerobot_venv_timed, lerobot_read, lerobot_reference
from tests.conftest import psnr, run_cli
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, expected_frame, write_lerobot_dataset

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(3600),
              pytest.mark.xdist_group("lerobot_env")]

TOP, WRIST = "observation.images.top", "observation.images.wrist"
SPEC = DatasetSpec(version="v2.1", episode_lengths=[24, 17, 30], fps=15, with_reward_done=True,
                   cameras=[CameraSpec(TOP, "h264"), CameraSpec(WRIST, "av1")],
                   tasks_per_episode=[["pick the cube"], ["pick the cube", "place the cube"], ["stack"]])
SETS = ["--set", "validate.tfds_readback=false", "--set", "plan.min_shards=2"]


@pytest.fixture(scope="module")
def lerobot_python() -> Path:
    try:
        python, seconds = ensure_lerobot_venv_timed()
    except VenvError as e:
        pytest.fail(str(e))
    print(f"lerobot venv: {'reused' if seconds is None else f'built in {seconds:.0f} s'}", file=sys.stderr)
    return python


def _convert(src: Path, out: Path, *extra: str, code: int = 0) -> None:
    r = run_cli("run", str(src), str(out), "--to", "lerobot", *SETS, *extra, timeout=1800)
    assert r.returncode == code, r.stdout[-2000:] + r.stderr[-4000:]
    return r


def _read(python: Path, root: Path, tmp: Path, *args: str) -> tuple[dict, dict[str, np.ndarray]]:
    proc, s = lerobot_read(root, tmp / f"read-{root.name}", *args, python=python)
    assert proc.returncode == 0 and s["ok"], f"lerobot could not read {root}: {s}\n{proc.stderr[-4000:]}"
    summary = json.loads(Path(s["json"]).read_text())
    with np.load(s["npz"]) as z:
        arrays = {k: z[k] for k in z.files}
    return summary, arrays


def _doctor(python: Path, root: Path, tmp: Path) -> dict:
    proc, s = lerobot_read(root, tmp / f"doctor-{root.name}", "--doctor", python=python)
    assert s["ok"], f"lerobot-doctor FAILed {root}: {s}"
    return s


def _source_map(out: Path) -> list[int]:
    ledger = json.loads((out / "ledger.json").read_text())
    return [e["source"] for s in sorted(ledger["shards"], key=lambda s: s["shard_index"])
            for e in s["extra"].get("episodes", [])]


def _check_against_source(summary: dict, arrays: dict, src: Path, out: Path, keys: tuple[str, ...]) -> None:
    """Every sampled frame's numeric values equal the source's (through robo-ray's reader of the source)."""
    reader = open_reader(str(src))
    refs = {r.episode_index: r for r in reader.discover().refs}
    sources = _source_map(out)
    assert [e["episode_index"] for e in summary["episodes"]] == list(range(len(sources)))
    cache: dict[int, object] = {}
    for s in summary["samples"]:
        src_ep = sources[s["episode_index"]]
        ep = cache.get(src_ep) or reader.load_episode(refs[src_ep])
        cache[src_ep] = ep
        k = s["frame_index"]
        assert s["task"] == ep.step_tasks[k], (s["episode_index"], k)
        for key in keys:
            got = arrays[f"{s['index']}/{key}"]
            want = ep.columns[key][k]
            assert np.array_equal(got.reshape(-1), np.asarray(want).reshape(-1)), (key, s["episode_index"], k)
        assert abs(s["timestamp"] - k / summary["fps"]) < 1e-6


def _decoded_source(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]


# ---- 1. generated v2.1, and lerobot's own encoder at the same settings --------------------------------------------
def test_generated_v21_loads_in_lerobot(lerobot_python, tmp_path):
    src = write_lerobot_dataset(tmp_path / "src", SPEC)
    out = tmp_path / "robo"
    _convert(src, out)
    summary, arrays = _read(lerobot_python, out, tmp_path, "--all-frames")
    n = sum(SPEC.episode_lengths)
    assert (summary["num_episodes"], summary["num_frames"], summary["fps"]) == (3, n, 15)
    assert summary["fps_type"] == "int" and summary["checked_frames"] == n + 9  # 3 samples x 3 + every frame
    assert sorted(summary["stats_keys"]) == sorted(summary["features"])  # stats for every feature and camera
    assert [e["tasks"] for e in summary["episodes"]] == [["pick the cube"], ["pick the cube", "place the cube"],
                                                         ["stack"]]
    _check_against_source(summary, arrays, src, out, ("observation.state", "action", "next.reward", "next.done"))
    # lerobot's own writer, fed the frames robo-ray's encoder was fed (the decoded source videos), same settings
    frames = {cam.key: [] for cam in SPEC.cameras}
    for e in range(len(SPEC.episode_lengths)):
        for cam in SPEC.cameras:
            frames[cam.key].append(_decoded_source(src / f"videos/chunk-000/{cam.key}/episode_{e:06d}.mp4"))
    npz = tmp_path / "frames.npz"
    reader = open_reader(str(src))
    payload = {"fps": np.array(SPEC.fps)}
    for e, ref in enumerate(reader.discover().refs):
        ep = reader.load_episode(ref)
        payload[f"ep{e:03d}/observation.state"] = ep.columns["observation.state"]
        payload[f"ep{e:03d}/action"] = ep.columns["action"]
        payload[f"ep{e:03d}/task"] = np.array(ep.step_tasks)
        for cam in SPEC.cameras:
            payload[f"ep{e:03d}/{cam.key}"] = np.stack(frames[cam.key][e])
    np.savez(npz, **payload)
    proc, ref = lerobot_reference(npz, tmp_path / "lerobot_ref", "--vcodec", "libsvtav1", "--crf", "30", "--g", "2",
                                  python=lerobot_python)
    assert proc.returncode == 0 and ref["ok"], f"{ref}\n{proc.stderr[-3000:]}"
    ref_summary, ref_arrays = _read(lerobot_python, tmp_path / "lerobot_ref", tmp_path)
    ours = {(s["episode_index"], s["frame_index"]): s for s in summary["samples"]}
    theirs = {(s["episode_index"], s["frame_index"]): s for s in ref_summary["samples"]}
    assert set(ours) == set(theirs)
    worst: dict[str, list[float]] = {"ours": [], "lerobot": [], "truth": []}
    for key, s in ours.items():
        e, k = key
        for cam_index, cam in enumerate(SPEC.cameras):
            mine = arrays[f"{s['index']}/{cam.key}"]
            lero = ref_arrays[f"{theirs[key]['index']}/{cam.key}"]
            given = frames[cam.key][e][k]
            truth = expected_frame(e, k, cam_index, cam.height, cam.width)
            worst["ours"].append(psnr(mine, given))
            worst["lerobot"].append(psnr(lero, given))
            worst["truth"].append(psnr(mine, truth))
    print({k: (round(min(v), 1), round(float(np.mean(v)), 1)) for k, v in worst.items()})
    assert min(worst["truth"]) >= 30.0
    assert np.mean(worst["ours"]) >= np.mean(worst["lerobot"]) - 1.0, worst
    _doctor(lerobot_python, out, tmp_path)


# ---- 2. the lerobot 0.3.3 sample, H.264 output ------------------------------------------------------------------------
def test_lerobot_v21_sample_h264_loads_in_lerobot(lerobot_python, shared, tmp_path):
    src = shared / "samples/lerobot_v21_h264_1cam"
    out = tmp_path / "robo"
    _convert(src, out, "--set", "target.options.vcodec=h264")
    info = json.loads((out / "meta/info.json").read_text())
    cam = next(k for k, v in info["features"].items() if v["dtype"] == "video")
    assert info["features"][cam]["info"]["video.codec"] == "h264"
    summary, arrays = _read(lerobot_python, out, tmp_path, "--all-frames")
    inv = open_reader(str(src)).discover()
    assert summary["num_episodes"] == len(inv.refs) and summary["num_frames"] == inv.total_steps
    assert sorted(summary["tasks"].values()) == sorted(inv.tasks)
    _check_against_source(summary, arrays, src, out, ("observation.state", "action"))
    reader = open_reader(str(src))
    refs = reader.discover().refs
    for s in summary["samples"]:  # against the source video's frame at the same step
        from robo_ray.stages.source_frames import source_frames

        ep = reader.load_episode(refs[s["episode_index"]])
        want = source_frames(reader, ep, cam, [s["frame_index"]])[0]
        assert psnr(arrays[f"{s['index']}/{cam}"], want) >= 30.0
    _doctor(lerobot_python, out, tmp_path)


# ---- 3. the real g1 dataset with four missing videos --------------------------------------------------------------
def test_real_g1_quarantines_four_and_loads_in_lerobot(lerobot_python, shared, tmp_path):
    src = shared / "real/g1_v21_30ep"
    out = tmp_path / "robo"
    r = _convert(src, out, code=3)
    quarantined = sorted(int(line.split("episode=")[1].split()[0]) for line in r.stderr.splitlines()
                         if line.startswith("quarantined[EP101]"))
    assert quarantined == [0, 3, 6, 9], r.stderr[-3000:]
    for e in quarantined:
        assert f"episode_{e:06d}.mp4" in r.stderr
    assert "26 episodes" in r.stdout and "validation passed" in r.stdout
    assert _source_map(out) == [e for e in range(30) if e not in quarantined]
    summary, arrays = _read(lerobot_python, out, tmp_path)
    assert summary["num_episodes"] == 26
    _check_against_source(summary, arrays, src, out, ("observation.state", "action"))
    _doctor(lerobot_python, out, tmp_path)
