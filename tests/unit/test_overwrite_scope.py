"""--overwrite replaces only what robo-ray wrote: the run's files and the dataset entries of this target and of the
target an earlier run there wrote (job.json), never another target's names that a user created."""
from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest

from robo_ray.errors import DestinationNotEmpty
from robo_ray.stages.destination import prepare_destination


def _dst(tmp_path: Path, job_format: str | None) -> Path:
    dst = tmp_path / "dst"
    (dst / "data").mkdir(parents=True)
    (dst / "data" / "mine.txt").write_text("user data")
    (dst / "mapping.md").write_text("x")
    if job_format is not None:
        (dst / "job.json").write_text(json.dumps({"target": {"format": job_format}}))
    return dst


def test_rlds_overwrite_refuses_a_users_data_folder(tmp_path: Path) -> None:
    dst = _dst(tmp_path, "rlds")
    with pytest.raises(DestinationNotEmpty, match="data"):
        prepare_destination(fsspec.filesystem("file"), str(dst), True, str(dst), "rlds")
    assert (dst / "data" / "mine.txt").exists()


def test_overwrite_of_an_earlier_ortf_run_removes_its_folders(tmp_path: Path) -> None:
    dst = _dst(tmp_path, "ortf")  # data/ was written by the earlier ORTF run (its job.json says so)
    prepare_destination(fsspec.filesystem("file"), str(dst), True, str(dst), "rlds")
    assert not (dst / "data").exists() and not (dst / "mapping.md").exists()


def test_same_target_overwrite_removes_its_folders(tmp_path: Path) -> None:
    dst = _dst(tmp_path, None)
    prepare_destination(fsspec.filesystem("file"), str(dst), True, str(dst), "lerobot")
    assert list(dst.iterdir()) == []
