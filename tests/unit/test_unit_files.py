"""UnitFiles (robo_ray/writers/unit_files.py): a unit's files are staged at temp paths (beside the final name on a
local destination, in a local scratch folder otherwise), put under their final names only by publish_all, with
bytes and sha256; abort leaves no temp."""
from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import fsspec

from robo_ray.writers.unit_files import UnitFiles, remove_file, sha256_local


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_local_temps_sit_beside_the_final_name_until_publish(tmp_path: Path) -> None:
    files = UnitFiles(fsspec.filesystem("file"), str(tmp_path), "test")
    a = files.temp("videos/cam/chunk-000/a.mp4")
    assert files.temp("videos/cam/chunk-000/a.mp4") == a  # the same temp on every call
    assert a.startswith(str(tmp_path / "videos/cam/chunk-000/a.mp4") + ".tmp-")
    Path(a).write_bytes(b"aaa")
    Path(files.temp("data/b.parquet")).write_bytes(b"bb")
    assert all(".tmp-" in f for f in _files(tmp_path))  # nothing under a final name yet
    rows = files.publish_all(["data/b.parquet"])  # named ones first, then the rest in staging order
    assert rows == [{"name": "data/b.parquet", "num_bytes": 2, "sha256": hashlib.sha256(b"bb").hexdigest()},
                    {"name": "videos/cam/chunk-000/a.mp4", "num_bytes": 3,
                     "sha256": hashlib.sha256(b"aaa").hexdigest()}]
    files.close()
    assert _files(tmp_path) == ["data/b.parquet", "videos/cam/chunk-000/a.mp4"]


def test_drop_abort_and_new_temp_leave_no_temp(tmp_path: Path) -> None:
    files = UnitFiles(fsspec.filesystem("file"), str(tmp_path), "test")
    Path(files.temp("v/x.mp4")).write_bytes(b"x")
    files.drop("v/x.mp4")
    assert _files(tmp_path) == []
    episode = files.new_temp("v/y.mp4", "-episode")  # not staged: the caller removes it
    assert episode.endswith("-episode") and ".tmp-" in episode
    Path(episode).write_bytes(b"e")
    remove_file(episode)
    remove_file(episode)  # already gone: fine
    Path(files.temp("v/y.mp4")).write_bytes(b"y")
    files.abort()
    assert _files(tmp_path) == []
    assert files.publish_all() == []


def test_sweep_dirs_and_remove_finals(tmp_path: Path) -> None:
    d = tmp_path / "videos" / "cam" / "chunk-000"
    d.mkdir(parents=True)
    for name in ("episode_000001.mp4", "episode_000002.mp4", "episode_000002.mp4.tmp-1234abcd"):
        (d / name).write_bytes(b"old")
    files = UnitFiles(fsspec.filesystem("file"), str(tmp_path), "test")
    Path(files.temp("videos/cam/chunk-000/episode_000001.mp4")).write_bytes(b"new")
    files.publish_all()
    files.sweep_dirs(["videos/cam/chunk-000", "videos/other/chunk-000"])  # a missing folder is skipped
    assert sorted(os.listdir(d)) == ["episode_000001.mp4", "episode_000002.mp4.tmp-1234abcd"]
    assert (d / "episode_000001.mp4").read_bytes() == b"new"
    files.remove_finals(["videos/cam/chunk-000/episode_000001.mp4", "data/missing.parquet"])
    assert os.listdir(d) == ["episode_000002.mp4.tmp-1234abcd"]


def test_object_store_stages_in_a_local_scratch_folder_and_uploads() -> None:
    fs = fsspec.filesystem("memory")
    root = f"/unit-files-{uuid.uuid4().hex[:8]}"
    files = UnitFiles(fs, root, "test")
    tmp = files.temp("data/a.parquet")
    scratch = os.path.dirname(tmp)
    assert os.path.basename(scratch).startswith("robo-ray-test-") and tmp.endswith("-a.parquet")
    Path(tmp).write_bytes(b"abc")
    assert not fs.exists(f"{root}/data/a.parquet")
    assert sha256_local(tmp) == hashlib.sha256(b"abc").hexdigest()
    assert files.publish_all() == [{"name": "data/a.parquet", "num_bytes": 3,
                                    "sha256": hashlib.sha256(b"abc").hexdigest()}]
    assert fs.cat_file(f"{root}/data/a.parquet") == b"abc"
    files.close()
    assert not os.path.exists(scratch)
    files2 = UnitFiles(fs, root, "test")
    Path(files2.temp("data/b.parquet")).write_bytes(b"b")
    scratch2 = os.path.dirname(files2.temp("data/b.parquet"))
    files2.abort()
    assert not os.path.exists(scratch2) and not fs.exists(f"{root}/data/b.parquet")
    fs.rm(root, recursive=True)
