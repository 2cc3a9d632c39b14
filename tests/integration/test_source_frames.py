"""Validate's source frames (a short seek + decode per sampled step) are exactly the frames a full decode of the
file gives at those steps' timestamps, for episodes in the middle of shared v3.0 files and across keyframes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from robo_ray.readers import open_reader
from robo_ray.stages.source_frames import source_frames
from tests.conftest import decode_all_frames
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset


@pytest.mark.parametrize("codec", ["h264", "av1"])
def test_sampled_frames_equal_a_full_decode(tmp_path: Path, codec: str) -> None:
    spec = DatasetSpec(version="v3.0", episode_lengths=[70, 90, 65], fps=20, episodes_per_file=3,
                       cameras=[CameraSpec("observation.images.top", codec=codec)])
    src = write_lerobot_dataset(tmp_path / "src", spec)
    reader = open_reader(str(src))
    inv = reader.discover()
    key = "observation.images.top"
    for ref in inv.refs:
        ep = reader.load_episode(ref)
        steps = [0, 1, ep.length // 2, ep.length - 2, ep.length - 1]
        got = source_frames(reader, ep, key, steps)
        video = ep.videos[key]
        frames = decode_all_frames(Path(reader.path(video.path)))
        for i, arr in zip(steps, got):
            t = video.from_timestamp + float(ep.timestamps[i])
            j = int(np.argmin([abs(ft - t) for ft, _ in frames]))
            np.testing.assert_array_equal(arr, frames[j][1], err_msg=f"episode {ref.episode_index} step {i}")
