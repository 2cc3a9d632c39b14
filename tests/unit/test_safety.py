"""Untrusted info.json: path templates, shapes and counts are checked before use."""
from __future__ import annotations

import pytest

from robo_ray.errors import UnsafeInput
from robo_ray.safety import check_count, check_relative_path, check_shape, render_path_template

FIELDS = {"episode_chunk": 1, "episode_index": 42, "video_key": "observation.images.top", "chunk_index": 0,
          "file_index": 3}


def test_renders_lerobot_templates() -> None:
    assert render_path_template("data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet", FIELDS) == \
        "data/chunk-001/episode_000042.parquet"
    assert render_path_template("videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4", FIELDS) == \
        "videos/observation.images.top/chunk-000/file-003.mp4"


@pytest.mark.parametrize("template", [
    "../{episode_index}.parquet",
    "data/../../etc/{episode_index}",
    "/etc/passwd{episode_index}",
    "s3://other-bucket/{episode_index}",
    "file:///etc/{episode_index}",
    "{episode_index.__class__}",
    "{episode_index.__class__.__mro__}",
    "{episode_index[0]}",
    "{episode_index:>99999999}",
    "{episode_index!r}",
    "{secret}",
    "C:/windows/{episode_index}",
])
def test_rejects_unsafe_templates(template: str) -> None:
    with pytest.raises(UnsafeInput):
        render_path_template(template, FIELDS)


def test_rendered_value_cannot_escape() -> None:
    with pytest.raises(UnsafeInput):
        render_path_template("videos/{video_key}/x.mp4", {**FIELDS, "video_key": "../../x"})


def test_relative_path_normalises_inside_root() -> None:
    assert check_relative_path("a/./b/../c.mp4") == "a/c.mp4"


@pytest.mark.parametrize("shape", [[-1], [0], [1 << 20], [2, "3"], [True], "abc", [1, 2, 3, 4, 5, 6],
                                   [60000, 60000, 3]])
def test_rejects_bad_shapes(shape) -> None:
    with pytest.raises(UnsafeInput):
        check_shape("f", shape)


def test_accepts_normal_shapes() -> None:
    assert check_shape("f", [480, 640, 3]) == (480, 640, 3)


@pytest.mark.parametrize("value", [1e12, -1, "3", None, True, 10 ** 13])
def test_rejects_bad_counts(value) -> None:
    with pytest.raises(UnsafeInput):
        check_count("total_episodes", value, 10 ** 7)
