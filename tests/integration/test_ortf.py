"""ORTF v0.2: the reader on a hand-written spec-shaped dataset, the writer's round trip (LeRobot -> ORTF -> RLDS
equals LeRobot -> RLDS), Minari -> ORTF, and bad manifests (one line, exit 2)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from robo_ray.config import load_config
from robo_ray.errors import ConfigError
from robo_ray.readers import open_reader
from robo_ray.stages.pipeline import run_pipeline
from robo_ray.formats.ortf.api import write_ortf
from tests.conftest import decode_all_frames, load_rlds, psnr, run_cli
from tests.fixtures import ortf_gen
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset


def _convert(src: Path | str, out: Path, *overrides: str) -> list[dict[str, Any]]:
    cfg = load_config(None, ["validate.tfds_readback=false", *overrides],
                      **{"source.url": str(src), "target.url": str(out)})
    outcome = run_pipeline(cfg)
    assert outcome.exit_code == 0, outcome.message
    return load_rlds(Path(outcome.dataset_dir))


@pytest.mark.parametrize("depth", ["mp4", "npz"])
def test_native_dataset(tmp_path: Path, depth: str) -> None:
    src = ortf_gen.write_ortf_native(tmp_path / "src", depth=depth)
    episodes = _convert(src, tmp_path / "out")
    assert len(episodes) == len(ortf_gen.EPISODES)
    for ep, got in enumerate(episodes):  # UUID ids: episode_id is the row position, the UUID is kept
        n, task, success, terminal, reason, notes = ortf_gen.EPISODES[ep]
        meta, steps = got["episode_metadata"], got["steps"]
        assert int(meta["episode_id"]) == ep and meta["ortf_episode_id"].decode() == ortf_gen.episode_uuid(ep)
        assert int(meta["success"]) == (-1 if success is None else int(success))
        assert meta["failure_reason"].decode() == (reason or "") and meta["operator_notes"].decode() == notes
        assert int(meta["task_id"]) == task
        vals = ortf_gen.step_values(ep, n)
        np.testing.assert_array_equal(steps["action"], vals["action"])
        for comp in ortf_gen.STATE:
            np.testing.assert_array_equal(steps[f"observation/{comp}"], vals[f"observation.state.{comp}"])
        np.testing.assert_array_equal(steps["observation/state"], np.concatenate(
            [vals[f"observation.state.{c}"] for c in ortf_gen.STATE], axis=1))
        assert steps["is_first"].tolist() == [True] + [False] * (n - 1)
        assert steps["is_last"].tolist() == [False] * (n - 1) + [True]
        assert steps["is_terminal"].tolist() == [False] * (n - 1) + [terminal]
        assert {s.decode() for s in steps["language_instruction"]} == {ortf_gen.TASKS[task]}
        for t in range(n):  # 16-bit depth survives exactly (uint16 PNG); RGB within H.264 loss
            np.testing.assert_array_equal(steps["observation/depth"][t][:, :, 0], ortf_gen.depth_frame(ep, t))
            assert psnr(steps["observation/image_cam_wrist"][t], ortf_gen.rgb_frame(ep, 0, t)) > 35
            assert psnr(steps["observation/image_cam_overhead"][t], ortf_gen.rgb_frame(ep, 1, t)) > 35
    ann = json.loads(episodes[0]["episode_metadata"]["annotations"])
    assert ann["scene_objects"]["objects"][0]["label"] == "Box A" and "first_frame.jpg" in ann["files"]
    assert episodes[1]["episode_metadata"]["annotations"] == b""
    features = (tmp_path / "out" / "rlds" / "kitchen_manipulation_dataset" / "1.0.0" / "features.json").read_text()
    assert '"dtype": "uint16"' in features


ROUND_TRIP = {
    "v30_2cam_video_and_png_reward_multitask": DatasetSpec(
        version="v3.0", episode_lengths=[9, 6, 8], with_reward_done=True, episodes_per_file=2,
        cameras=[CameraSpec("observation.images.top", codec="h264"),
                 CameraSpec("observation.images.wrist", storage="image", height=32, width=48)],
        tasks_per_episode=[["pick", "place"], ["place"], ["wipe"]]),
    "v21_state_only": DatasetSpec(version="v2.1", episode_lengths=[5, 4], cameras=[]),
}


def _assert_same_rlds(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert int(x["episode_metadata"]["episode_id"]) == int(y["episode_metadata"]["episode_id"])
        assert sorted(x["steps"]) == sorted(y["steps"])
        for key in x["steps"]:
            np.testing.assert_array_equal(x["steps"][key], y["steps"][key], err_msg=key)


@pytest.mark.parametrize("name", sorted(ROUND_TRIP))
def test_lerobot_ortf_rlds_equals_lerobot_rlds(tmp_path: Path, name: str) -> None:
    src = write_lerobot_dataset(tmp_path / "lerobot", ROUND_TRIP[name])
    # PNG both ways: JPEG bytes depend on the encoder's input path (YUV planes vs RGB), the pixels must not
    direct = _convert(src, tmp_path / "direct", "images.encoding=png")
    res = write_ortf(str(src), str(tmp_path / "ortf"), lossless=True)
    assert res.episodes == len(ROUND_TRIP[name].episode_lengths)
    inv = open_reader(str(tmp_path / "ortf")).discover()  # the written dataset validates against the spec
    assert inv.source_format == "ortf" and not inv.findings
    via = _convert(tmp_path / "ortf", tmp_path / "via", "images.encoding=png")
    _assert_same_rlds(direct, via)


def test_lerobot_sample_round_trip(tmp_path: Path, shared: Path) -> None:
    src = shared / "samples" / "lerobot_v21_h264_1cam"
    direct = _convert(src, tmp_path / "direct", "max_episodes=2", "images.encoding=png")
    write_ortf(str(src), str(tmp_path / "ortf"), lossless=True, max_episodes=2)
    via = _convert(tmp_path / "ortf", tmp_path / "via", "images.encoding=png")
    _assert_same_rlds(direct, via)


def test_minari_to_ortf(tmp_path: Path, shared: Path) -> None:
    src = shared / "samples" / "minari" / "pointmaze" / "umaze-random-v0"
    with pytest.raises(ConfigError, match=r"--set target.options.fps="):  # Minari records no rate
        write_ortf(str(src), str(tmp_path / "refused"))
    write_ortf(str(src), str(tmp_path / "ortf"), fps=10)
    reader = open_reader(str(tmp_path / "ortf"))
    inv = reader.discover()
    assert not inv.findings and inv.total_steps == 604
    episodes = _convert(tmp_path / "ortf", tmp_path / "out")
    direct = _convert(src, tmp_path / "direct")
    for x, y in zip(direct, episodes):
        for key in ("action", "reward", "discount", "is_terminal", "is_last", "observation/achieved_goal",
                    "terminated", "truncated", "info/success"):
            np.testing.assert_array_equal(x["steps"][key], y["steps"][key], err_msg=key)


@pytest.mark.parametrize("depth", ["mp4", "npz"])
def test_ortf_to_ortf_keeps_depth_and_pixels_exact(tmp_path: Path, depth: str) -> None:
    """Native ORTF (16-bit depth as FFV1 MP4 or NPZ, two H.264 cameras) -> ORTF, lossless: the depth is written as
    FFV1 gray16le and decodes to the very values, the RGB cameras to the very pixels the source decodes to."""
    src = ortf_gen.write_ortf_native(tmp_path / "src", depth=depth)
    res = write_ortf(str(src), str(tmp_path / "ortf"), lossless=True, chunk_size=1)
    assert res.episodes == len(ortf_gen.EPISODES) and sorted(res.cameras) == ["cam_overhead", "cam_wrist", "depth"]
    manifest = json.loads((tmp_path / "ortf/meta/manifest.json").read_text())
    sensor = {s["name"]: s for s in manifest["sensors"]}["depth_depth"]
    assert sensor["encoding"] == "ffv1" and sensor["bit_depth"] == 16
    a, b = open_reader(str(src)), open_reader(str(tmp_path / "ortf"))
    inv = b.discover()
    assert not inv.findings and len(inv.refs) == len(ortf_gen.EPISODES)
    for ref, sref in zip(inv.refs, a.discover().refs):
        got, want = b.load_episode(ref), a.load_episode(sref)
        np.testing.assert_array_equal(got.images["observation.images.depth"].array,
                                      want.images["observation.images.depth"].array)
        pairs = [("observation.state.state", "observation.state"), ("action", "action")]
        for got_key, want_key in pairs + [(f"observation.state.{c}",) * 2 for c in ortf_gen.STATE]:
            np.testing.assert_array_equal(got.columns[got_key], want.columns[want_key])
        assert got.step_tasks == want.step_tasks
    for cam in ("cam_wrist", "cam_overhead"):  # lossless: the decoded source frames, pixel for pixel
        for ep in range(len(ortf_gen.EPISODES)):
            src_mp4 = next((src / "videos" / cam).rglob(f"episode_{ep:06d}.mp4"))
            out_mp4 = next((tmp_path / "ortf/videos" / cam).rglob(f"episode_{ep:06d}.mp4"))
            for (_, x), (_, y) in zip(decode_all_frames(src_mp4), decode_all_frames(out_mp4), strict=True):
                np.testing.assert_array_equal(x, y)


def _bad(tmp_path: Path, edit) -> Path:
    src = tmp_path / "src"
    shutil.copytree(_bad.base, src)  # type: ignore[attr-defined]
    path = src / "meta" / "manifest.json"
    text = edit(json.loads(path.read_text()))
    path.write_text(text if isinstance(text, str) else json.dumps(text))
    return src


def _drop(key: str):
    return lambda m: {k: v for k, v in m.items() if k != key}


BAD_MANIFESTS = {
    "unknown_version": (lambda m: {**m, "ortf_version": "0.3"}, "ortf_version '0.3' is not supported"),
    "version_not_string": (lambda m: {**m, "ortf_version": 0.2}, "ortf_version"),
    "not_json": (lambda m: "{not json", "meta/manifest.json: not valid JSON"),
    "missing_sensors": (_drop("sensors"), "required field `sensors` is missing"),
    "robot_not_object": (lambda m: {**m, "robot": "panda"}, "`robot` must be a JSON object"),
    "unknown_sensor": (lambda m: {**m, "observation_space": {**m["observation_space"],
                                                            "images": {"cam_wrist": "nope"}}}, "unknown sensor"),
}


@pytest.fixture(scope="module")
def native_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ortf_gen.write_ortf_native(tmp_path_factory.mktemp("ortf") / "native")


@pytest.mark.parametrize("case", sorted(BAD_MANIFESTS))
def test_bad_manifest_is_one_line_exit_2(tmp_path: Path, native_src: Path, case: str) -> None:
    _bad.base = native_src  # type: ignore[attr-defined]
    edit, needle = BAD_MANIFESTS[case]
    src = _bad(tmp_path, edit)
    proc = run_cli("run", str(src), str(tmp_path / "out"))
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr, proc.stderr
