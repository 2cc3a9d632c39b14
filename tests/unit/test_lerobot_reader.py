"""LeRobot metadata parsing: versions, legacy info.json variants, CHW shapes, episode refs, inventory findings."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from robo_ray.errors import SourceFormatError, UnknownFormat, UnsafeInput
from robo_ray.mapping import default_mapping
from robo_ray.readers import detect_format, open_reader
from robo_ray.formats.lerobot.reader import _parse_version, parse_features
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset


@pytest.mark.parametrize("raw,want", [("v2.0", "v2.0"), ("v2.1", "v2.1"), ("v3.0", "v3.0"), ("v3.0.1", "v3.0")])
def test_version_detection(raw: str, want: str) -> None:
    assert _parse_version(raw) == want


@pytest.mark.parametrize("raw", ["v1.6", "v4.0", None, 3.0, "3.0"])
def test_unsupported_versions(raw) -> None:
    with pytest.raises(UnknownFormat):
        _parse_version(raw)


def test_legacy_video_info_and_chw() -> None:
    feats = parse_features({
        "observation.image": {"dtype": "video", "shape": [3, 720, 960], "names": ["channel", "height", "width"],
                              "video_info": {"video.fps": 30.0, "video.codec": "h264"}},
        "observation.state": {"dtype": "float32", "shape": [19], "names": {"motors": ["a"] * 19}},
        "observation.images.wrist": {"dtype": "image", "shape": [96, 128, 3], "names": ["height", "width", "channel"]},
    })
    assert feats["observation.image"].shape == (720, 960, 3)
    assert feats["observation.image"].declared_shape == (3, 720, 960)
    assert feats["observation.image"].codec == "h264"
    assert feats["observation.images.wrist"].shape == (96, 128, 3)
    assert feats["observation.state"].shape == (19,)


def test_shape_disagreeing_with_video_info_is_refused() -> None:
    with pytest.raises(SourceFormatError, match="disagrees"):
        parse_features({"cam": {"dtype": "video", "shape": [480, 640, 3],
                                "info": {"video.height": 240, "video.width": 320}}})


def test_unknown_dtype_and_bad_shape() -> None:
    with pytest.raises(SourceFormatError):
        parse_features({"x": {"dtype": "complex_thing", "shape": [1]}})
    with pytest.raises(UnsafeInput):
        parse_features({"x": {"dtype": "float32", "shape": [-3]}})


def test_real_datasets_metadata(shared: Path) -> None:
    g1 = open_reader(str(shared / "real/g1_v21_30ep"))
    inv = g1.discover()
    assert inv.episodes_count == 30 and inv.total_steps == 10861
    missing = [f for f in inv.findings if f.code == "D106"]
    assert len(missing) == 4 and "episode_000003.mp4" in missing[1].message
    v20 = open_reader(str(shared / "real/rerun-apple_storage-v20"))
    assert v20.version == "v2.0" and v20.features["observation.image"].shape == (720, 960, 3)


def test_refs_are_small_and_picklable(tmp_path: Path) -> None:
    src = write_lerobot_dataset(tmp_path / "d", DatasetSpec(version="v3.0", episode_lengths=[5, 6, 7],
                                                            episodes_per_file=2))
    refs = open_reader(str(src)).episode_refs()
    assert pickle.loads(pickle.dumps(refs)) == refs
    assert len(pickle.dumps(refs[0])) < 1024
    assert refs[2].data_path == "data/chunk-000/file-001.parquet"
    assert refs[1].video_map["observation.images.top"].from_timestamp == pytest.approx(5 / 20)


def test_detect_format(tmp_path: Path) -> None:
    src = write_lerobot_dataset(tmp_path / "d", DatasetSpec(episode_lengths=[3]))
    assert detect_format(str(src)) == "lerobot"


def test_episodes_jsonl_garbage_is_one_clear_error(tmp_path: Path) -> None:
    src = write_lerobot_dataset(tmp_path / "d", DatasetSpec(episode_lengths=[3, 4]))
    with open(src / "meta/episodes.jsonl", "a") as f:
        f.write("{not json\n")
    with pytest.raises(SourceFormatError, match=r"meta/episodes.jsonl:3"):
        open_reader(str(src)).discover()


def test_malicious_data_path_template(tmp_path: Path) -> None:
    src = write_lerobot_dataset(tmp_path / "d", DatasetSpec(episode_lengths=[3]))
    info = json.loads((src / "meta/info.json").read_text())
    info["data_path"] = "../../{episode_index}.parquet"
    (src / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(UnsafeInput):
        open_reader(str(src)).discover()


def test_default_mapping_names(tmp_path: Path) -> None:
    one = open_reader(str(write_lerobot_dataset(tmp_path / "a", DatasetSpec(episode_lengths=[3])))).discover()
    targets = {f.source: f.target for f in default_mapping(one).steps}
    assert targets == {"observation.state": "observation/state", "action": "action",
                       "observation.images.top": "observation/image"}
    two = open_reader(str(write_lerobot_dataset(tmp_path / "b", DatasetSpec(
        episode_lengths=[3], with_reward_done=True,
        cameras=[CameraSpec("observation.images.top"), CameraSpec("observation.images.wrist")])))).discover()
    m = default_mapping(two)
    targets = {f.source: f.target for f in m.steps}
    assert targets["observation.images.top"] == "observation/image_top"
    assert targets["observation.images.wrist"] == "observation/image_wrist"
    assert m.defaults.reward_source == "next.reward" and m.defaults.is_terminal_source == "next.done"


def test_v30_episodes_read_only_their_row_groups(tmp_path: Path, monkeypatch) -> None:
    """lerobot writes one row group per episode: a unit reads its episodes' row groups in one read, a lone episode
    its own; the rows equal a whole-file read."""
    from robo_ray.readers.base import BaseReader
    from tests.fixtures.lerobot_gen import DatasetSpec, write_lerobot_dataset

    src = write_lerobot_dataset(tmp_path / "src", DatasetSpec(version="v3.0", episode_lengths=[5, 6, 7, 8, 9, 10],
                                                              cameras=[]))
    whole = open_reader(str(src))
    refs = whole.discover().refs
    expected = {}
    for r in refs:
        whole._planned = {}
        table = whole.last_table(r.data_path)
        expected[r.episode_index] = whole.load_episode(r).columns["action"]
        assert table.num_rows == sum(x.length for x in refs)
    reads: list[object] = []
    original = BaseReader._read_parquet

    def spy(self, rel, columns=None, error=None, row_groups=None):
        if rel.startswith("data/"):
            reads.append(row_groups)
        return original(self, rel, columns, **({"error": error} if error else {}), row_groups=row_groups)

    monkeypatch.setattr(BaseReader, "_read_parquet", spy)
    reader = open_reader(str(src))
    reader.prepare(refs[2:5])  # a unit of episodes 2..4
    for r in refs[2:5]:
        assert (reader.load_episode(r).columns["action"] == expected[r.episode_index]).all()
    assert reads == [[2, 3, 4]]
    reads.clear()
    reader.prepare([])
    assert (reader.load_episode(refs[0]).columns["action"] == expected[0]).all()  # a lone episode: its own group
    assert reads == [[0]]
