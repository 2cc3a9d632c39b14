"""Every LeRobot variant the readers must handle, generated with PyAV, converted in-process and read back
through tfds: values equal the generator's, images match the generator's frames, tasks per step are right."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from robo_ray.config import load_config
from robo_ray.stages.pipeline import run_pipeline
from tests.conftest import load_rlds, psnr
from tests.fixtures.lerobot_gen import (CameraSpec, DatasetSpec, dataset_tasks, expected_episode_data, expected_frame,
                                        frame_task_indices, write_lerobot_dataset)

TWO_CAMS = [CameraSpec("observation.images.top"), CameraSpec("observation.images.wrist", height=32, width=48)]

VARIANTS: dict[str, DatasetSpec] = {
    "v20_legacy_chw": DatasetSpec(version="v2.0", legacy_info=True, chw_shapes=True),
    "v21_h264_1cam": DatasetSpec(version="v2.1"),
    "v21_hevc_2cam_chunks": DatasetSpec(version="v2.1", episode_lengths=[12, 9, 14, 8],
                                        cameras=[CameraSpec("observation.images.top", codec="hevc"),
                                                 CameraSpec("observation.images.wrist", codec="hevc")],
                                        chunks_size=2),
    "v30_av1_2cam_files_chunks": DatasetSpec(version="v3.0", episode_lengths=[10, 7, 12, 9, 6], cameras=[
        CameraSpec("observation.images.top", codec="av1"),
        CameraSpec("observation.images.wrist", codec="av1", height=32, width=48)],
        episodes_per_file=2, chunks_size=2, with_reward_done=True),
    "v30_h264_multitask": DatasetSpec(version="v3.0", episode_lengths=[16, 10, 12],
                                      tasks_per_episode=[["pick", "place"], ["place"], ["wipe", "pick"]]),
    "v21_state_only": DatasetSpec(version="v2.1", cameras=[], with_reward_done=True),
    "v30_state_only": DatasetSpec(version="v3.0", cameras=[]),
    "v21_image_in_parquet": DatasetSpec(version="v2.1", cameras=[
        CameraSpec("observation.images.top", storage="image"), CameraSpec("observation.images.wrist")]),
}


def _target(key: str, spec: DatasetSpec) -> str:
    return "observation/image" if len(spec.cameras) == 1 else f"observation/image_{key.split('.')[-1]}"


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_converts_losslessly(name: str, tmp_path: Path) -> None:
    spec = VARIANTS[name]
    src = write_lerobot_dataset(tmp_path / name, spec)
    cfg = load_config(None, None, **{"source.url": str(src), "target.url": str(tmp_path / "out"),
                                    "plan.min_shards": 2})
    outcome = run_pipeline(cfg)
    assert outcome.exit_code == 0, outcome.message
    episodes = load_rlds(Path(outcome.dataset_dir))
    assert len(episodes) == len(spec.episode_lengths)
    tasks, _ = dataset_tasks(spec)
    for ep_index, got in enumerate(episodes):
        steps = got["steps"]
        assert int(got["episode_metadata"]["episode_id"]) == ep_index
        T = spec.episode_lengths[ep_index]
        assert len(steps["is_first"]) == T
        exp = expected_episode_data(spec, ep_index)
        if spec.state_dim:
            np.testing.assert_array_equal(steps["observation/state"], exp["observation.state"])
        np.testing.assert_array_equal(steps["action"], exp["action"])
        if spec.with_reward_done:
            np.testing.assert_array_equal(steps["reward"], exp["next.reward"])
            assert steps["is_terminal"].tolist() == exp["next.done"].tolist()
        else:
            assert not steps["reward"].any() and not steps["is_terminal"].any()
        np.testing.assert_array_equal(steps["discount"], np.ones(T, np.float32))
        want_lang = [tasks[i] for i in frame_task_indices(spec, ep_index)]
        assert [s.decode() for s in steps["language_instruction"]] == want_lang
        for cam_index, cam in enumerate(spec.cameras):
            imgs = steps[_target(cam.key, spec)]
            assert imgs.shape == (T, cam.height, cam.width, 3)
            for i in (0, T // 2, T - 1):
                assert psnr(imgs[i], expected_frame(ep_index, i, cam_index, cam.height, cam.width)) > 36.0


def test_png_encoding_is_lossless_for_embedded_images(tmp_path: Path) -> None:
    spec = DatasetSpec(version="v2.1", cameras=[CameraSpec("observation.images.top", storage="image")])
    src = write_lerobot_dataset(tmp_path / "src", spec)
    cfg = load_config(None, ["images.encoding=png"], **{"source.url": str(src), "target.url": str(tmp_path / "o")})
    outcome = run_pipeline(cfg)
    assert outcome.exit_code == 0, outcome.message
    features = json.loads((Path(outcome.dataset_dir) / "features.json").read_text())
    img = (features["featuresDict"]["features"]["steps"]["sequence"]["feature"]["featuresDict"]["features"]
           ["observation"]["featuresDict"]["features"]["image"])
    assert img["image"]["encodingFormat"] == "png"
    episodes = load_rlds(Path(outcome.dataset_dir))
    for ep_index, got in enumerate(episodes):
        for i, frame in enumerate(got["steps"]["observation/image"]):
            np.testing.assert_array_equal(frame, expected_frame(ep_index, i, 0, 48, 64))


def test_chw_shapes_become_hwc_in_the_schema(tmp_path: Path) -> None:
    src = write_lerobot_dataset(tmp_path / "src", VARIANTS["v20_legacy_chw"])
    info = json.loads((src / "meta/info.json").read_text())
    assert info["features"]["observation.images.top"]["shape"] == [3, 48, 64]
    cfg = load_config(None, None, **{"source.url": str(src), "target.url": str(tmp_path / "o")})
    outcome = run_pipeline(cfg)
    assert outcome.exit_code == 0
    mapping_md = (tmp_path / "o" / "mapping.md").read_text()
    assert "CHW->HWC" in mapping_md and "[48, 64, 3]" in mapping_md
