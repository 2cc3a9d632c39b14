"""Git LFS pointers in place of a dataset's files (a Hugging Face clone without git-lfs): the error for the
episode names the file and says it is a pointer (parquet, MP4 by the decoding and the copying path, HDF5); a real
damaged file gets no such note."""
from __future__ import annotations

from pathlib import Path

import fsspec
import pytest

from robo_ray.errors import DataCorrupt, SourceFormatError, VideoDecodeError
from robo_ray.formats.hdf5 import open_h5
from robo_ray.lfs_pointer import lfs_pointer_note, parse_pointer
from robo_ray.readers.dataset_files import DatasetFiles
from robo_ray.video import VideoStream

OID = "e7b5e1e8ef317d14ff6981995046adce76fd23fc8db47578690743ca162a9f79"
POINTER = f"version https://git-lfs.github.com/spec/v1\noid sha256:{OID}\nsize 67188\n".encode()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_pointer_is_recognised_and_nothing_else_is() -> None:
    assert parse_pointer(POINTER) == (OID, 67188)
    assert parse_pointer(POINTER.replace(b"version https://git-lfs.github.com/spec/v1\n",
                                         b"version https://git-lfs.github.com/spec/v1\next-0-foo sha256:ab\n")) \
        == (OID, 67188)  # extension lines before the oid (the spec allows them)
    assert parse_pointer(b"PAR1" + POINTER) is None
    assert parse_pointer(POINTER.replace(b"sha256:", b"sha1:")) is None
    assert parse_pointer(b"") is None
    assert lfs_pointer_note(lambda: POINTER).startswith(" (it is a Git LFS pointer to a 67,188-byte object")
    assert lfs_pointer_note(lambda: b"garbage") == ""

    def fails() -> bytes:
        raise OSError("gone")

    assert lfs_pointer_note(fails) == ""


class _Files(DatasetFiles):
    def __init__(self, root: Path) -> None:
        self.fs, self.root = fsspec.filesystem("file"), str(root)


def test_parquet_pointer_names_the_cause(tmp_path: Path) -> None:
    _write(tmp_path / "episode_000000.parquet", POINTER)
    _write(tmp_path / "broken.parquet", b"PAR1 not really parquet at all PAR1")
    files = _Files(tmp_path)
    with pytest.raises(DataCorrupt, match=r"episode_000000.parquet: unreadable parquet .*Git LFS pointer"):
        files._read_parquet("episode_000000.parquet")
    with pytest.raises(DataCorrupt) as err:
        files._read_parquet("broken.parquet")
    assert "LFS" not in str(err.value)


def test_video_pointer_names_the_cause_local_and_through_a_file_object(tmp_path: Path) -> None:
    mp4 = _write(tmp_path / "episode_000000.mp4", POINTER)
    with pytest.raises(VideoDecodeError, match=r"cannot open video .*episode_000000.mp4: .*Git LFS pointer"):
        VideoStream(str(mp4), None)
    fs = fsspec.filesystem("memory")
    fs.pipe("/lfs/episode_000001.mp4", POINTER)
    with pytest.raises(VideoDecodeError, match="Git LFS pointer"):
        VideoStream("episode_000001.mp4", lambda: fs.open("/lfs/episode_000001.mp4", "rb"))
    junk = _write(tmp_path / "junk.mp4", b"\x00" * 300)
    with pytest.raises(VideoDecodeError) as err:
        VideoStream(str(junk), None)
    assert "LFS" not in str(err.value)


def test_copy_path_pointer_names_the_cause(tmp_path: Path) -> None:
    import numpy as np

    from robo_ray.episode import EncodedVideo
    from robo_ray.formats.lerobot.video_copy import copy_episode

    mp4 = str(_write(tmp_path / "episode_000002.mp4", POINTER))
    enc = EncodedVideo("videos/episode_000002.mp4", lambda: mp4, 0.0, None, np.arange(3) / 10, 1e-4, 16, 16)
    with pytest.raises(VideoDecodeError, match=r"videos/episode_000002.mp4: .*Git LFS pointer"):
        copy_episode(str(tmp_path / "x.mp4"), enc, 3, 10, None, 2)


def test_hdf5_pointer_names_the_cause(tmp_path: Path) -> None:
    h5 = _write(tmp_path / "main_data.hdf5", POINTER)
    with pytest.raises(SourceFormatError, match=r"data/main_data.hdf5: not a readable HDF5 file .*Git LFS pointer"):
        open_h5(fsspec.filesystem("file"), str(h5), "data/main_data.hdf5")
