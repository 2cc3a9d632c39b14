"""robo_ray.data's rows without Ray (issue #29): the JSON bookkeeping round-trips and refuses what it did not
write; a row back to the Episode its source would have loaded; a row a map broke is one RowUnreadable naming the
column; an episode the source could not give keeps its code."""
from __future__ import annotations

import json

import numpy as np
import pytest

from robo_ray.data.rows import RowLayout, row_episode
from robo_ray.data.spec import SourceSpec, ref_from_json, ref_to_json
from robo_ray.episode import EpisodeRef, FeatureSpec, VideoRef
from robo_ray.errors import ConfigError, RowUnreadable
from robo_ray.mapping import default_mapping
from robo_ray.readers.base import Inventory

FEATURES = {
    "obs.state": FeatureSpec("obs.state", "tensor", "float64", (3,), role="state", name="observation/state"),
    "act": FeatureSpec("act", "tensor", "float32", (2,), role="action", name="action"),
    "rew": FeatureSpec("rew", "tensor", "float32", (), role="reward", scalar=True),
    "cam": FeatureSpec("cam", "video", "uint8", (4, 6, 3), codec="h264", role="camera",
                       name="observation/image"),
}
REF = EpisodeRef(7, 3, "data/x.parquet", (("cam", VideoRef("videos/x.mp4", 1.5, 3.0)),), ("pick",), 10, 13,
                 "ep-7", (5, 99), "val")


def _spec() -> SourceSpec:
    inv = Inventory("demo", "/data/demo", "fmt", "v1", 1, 3, dict(FEATURES), [REF], 20.0, "arm", ["pick"],
                    {"fps": 20}, [], {"episode_id": "int", "file_path": "text", "success": "bool"})
    return SourceSpec.of(inv, "s3://bucket/demo")


def test_source_spec_and_ref_round_trip():
    spec = _spec()
    again = SourceSpec.from_json(spec.to_json())
    assert again == spec and again.features["cam"].shape == (4, 6, 3)
    assert ref_from_json(ref_to_json(REF)) == REF
    inv = again.inventory([REF], fps=30.0)
    assert inv.fps == 30.0 and list(inv.refs) == [REF] and inv.metadata_types["success"] == "bool"


@pytest.mark.parametrize("text", ["not json", json.dumps({"url": "x"}), "[1, 2]", "{" * 10 + "x" * (1 << 20)])
def test_foreign_source_spec_is_one_error_naming_the_column(text):
    with pytest.raises(ConfigError, match="'source_spec'"):
        SourceSpec.from_json(text)


@pytest.mark.parametrize("text", ["{}", json.dumps({"episode_index": "x", "length": 1, "data_path": "a"}), "7"])
def test_foreign_ref_is_one_error_naming_the_column(text):
    with pytest.raises(ConfigError, match="'episode_ref'"):
        ref_from_json(text)


def _row(n: int = 3) -> dict:
    return {"length": n, "observation/state": np.arange(3 * n, dtype=np.float32).reshape(n, 3),
            "action": np.ones((n, 2), np.float32), "reward": np.array([0, 0, 1], np.float32)[:n],
            "observation/image": [b"\xff\xd8\xff" + bytes([i]) for i in range(n)], "language": ["pick"] * n,
            "timestamps": np.arange(n) / 20.0, "is_first": np.zeros(n, bool), "is_last": np.zeros(n, bool),
            "discount": np.ones(n, np.float32), "is_terminal": np.zeros(n, bool), "quarantine": None}


def test_a_row_becomes_the_episode_its_source_would_give():
    mapping = default_mapping(_spec().inventory([REF]))
    assert RowLayout(mapping).encoder(mapping.image_maps()[0]).fmt == "jpeg"
    ep = row_episode(_row(), REF, mapping, {"episode_id": 7})
    assert set(ep.columns) == {"obs.state", "act", "rew"} and ep.columns["rew"].tolist() == [0, 0, 1]
    assert ep.images["cam"][2] == b"\xff\xd8\xff\x02" and ep.step_tasks == ["pick"] * 3
    assert ep.timestamps is not None and ep.metadata == {"episode_id": 7} and not ep.videos
    decoded = {**_row(), "observation/image": np.zeros((3, 4, 6, 3), np.uint8)}
    assert len(row_episode(decoded, REF, mapping, {}).images["cam"]) == 3  # RawFrames


@pytest.mark.parametrize("column, value, match", [
    ("action", np.ones((2, 2), np.float32), "'action' has 2 steps"),
    ("action", None, "'action' is missing"),
    ("action", np.array(["a", "b", "c"], dtype=object), "'action' has not a numeric array"),
    ("observation/image", [b"x", b"y"], "'observation/image' holds 2 values"),
    ("observation/image", np.zeros((3, 4, 6), np.uint8), "'observation/image' holds uint8 frames"),
    ("language", ["a"], "'language' has 1 values"),
    ("length", "three", "'length' is not a step count"),
])
def test_a_row_a_map_broke_names_the_column(column, value, match):
    mapping = default_mapping(_spec().inventory([REF]))
    with pytest.raises(RowUnreadable, match=match) as info:
        row_episode({**_row(), column: value}, REF, mapping, {})
    assert info.value.code == "EP209"


def test_an_episode_the_source_could_not_give_keeps_its_code():
    mapping = default_mapping(_spec().inventory([REF]))
    rec = {"episode_index": 7, "code": "EP101", "reason": "missing video videos/x.mp4", "file": "videos/x.mp4"}
    with pytest.raises(RowUnreadable, match="missing video") as info:
        row_episode({**_row(), "quarantine": json.dumps(rec)}, REF, mapping, {})
    assert info.value.code == "EP101"
