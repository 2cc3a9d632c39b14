"""Discover checks that every episode's files exist with one listing per folder, not one call per file (#14)."""
from __future__ import annotations

from pathlib import Path

import pytest

from robo_ray.readers import open_reader
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset


class Calls:
    def __init__(self, fs, monkeypatch) -> None:
        self.exists: list[str] = []
        self.ls: list[str] = []
        real_exists, real_ls = fs.exists, fs.ls
        monkeypatch.setattr(fs, "exists", lambda p, **kw: self.exists.append(p) or real_exists(p, **kw))
        monkeypatch.setattr(fs, "ls", lambda p, *a, **kw: self.ls.append(p) or real_ls(p, *a, **kw))


@pytest.fixture(scope="module")
def v21(tmp_path_factory) -> Path:
    spec = DatasetSpec(version="v2.1", episode_lengths=[3] * 60, cameras=[CameraSpec(key="observation.images.top")],
                       chunks_size=25)  # 3 chunks: 3 data folders + 3 video folders
    return write_lerobot_dataset(tmp_path_factory.mktemp("ds") / "v21", spec)


def test_one_listing_per_folder(v21: Path, monkeypatch) -> None:
    reader = open_reader(str(v21))
    calls = Calls(reader.fs, monkeypatch)
    inv = reader.discover()
    assert len(inv.refs) == 60 and not [f for f in inv.findings if f.code == "D106"]
    per_episode = [p for p in calls.exists if "/episode_" in p]
    assert per_episode == [], f"{len(per_episode)} existence calls for episode files"
    folders = {p.rstrip("/") for p in calls.ls if "/chunk-" in p}
    assert len(folders) == 6 and len([p for p in calls.ls if "/chunk-" in p]) == 6, calls.ls


def test_missing_files_and_folders_are_found(v21: Path, tmp_path: Path) -> None:
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(v21, broken)
    (broken / "data/chunk-000/episode_000007.parquet").unlink()
    shutil.rmtree(broken / "videos/chunk-002")  # a whole folder: its 10 episodes' videos are missing
    reader = open_reader(str(broken))
    rels = [r.data_path for r in reader.discover().refs]
    assert reader.existing(rels) == set(rels) - {"data/chunk-000/episode_000007.parquet"}
    inv = open_reader(str(broken)).discover()
    missing = sorted(f.expected for f in inv.findings if f.code == "D106")
    assert "data/chunk-000/episode_000007.parquet" in missing
    assert len([m for m in missing if m.startswith("videos/chunk-002/")]) == 10, missing
