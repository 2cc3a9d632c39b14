"""robo_ray/writers/committed.py: the planned units a dataset holds as committed (the ledger's entries whose every
file is present with its size), the one helper every writer's `verify` names an unfinished run's units with."""
from __future__ import annotations

from pathlib import Path

import fsspec
import pytest

from robo_ray.writers.committed import LISTED, listed_sizes, uncommitted_units


def _entry(index: int, main: str, size: int, *more: tuple[str, int]) -> dict:
    return {"shard_index": index, "filename": main, "num_bytes": size, "sha256": "x",
            "files": [{"name": n, "num_bytes": s, "sha256": "y"} for n, s in more]}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for rel, size in {"data/u0.bin": 3, "videos/c/u0.mp4": 5, "data/u1.bin": 4, "data/u2.bin": 2}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x" * size)
    return tmp_path


def test_units_without_an_entry_or_with_a_changed_file_are_not_committed(root: Path) -> None:
    fs = fsspec.filesystem("file")
    ledger = {"num_shards": 4, "unit_files": ["data/u0.bin", "data/u1.bin", "data/u2.bin", "data/u3.bin"],
              "shards": [_entry(0, "data/u0.bin", 3, ("videos/c/u0.mp4", 5)),
                         _entry(1, "data/u1.bin", 4, ("videos/c/u1.mp4", 7)),  # its video is gone
                         _entry(2, "data/u2.bin", 9)]}  # another size than the ledger's
    u = uncommitted_units(fs, str(root), ledger)
    assert (u.planned, u.committed) == (4, 1)
    assert u.units == ["data/u1.bin", "data/u2.bin", "data/u3.bin"]
    assert u.changed == ["videos/c/u1.mp4", "data/u2.bin"]
    assert u.line() == ("units not committed: data/u1.bin, data/u2.bin, data/u3.bin; missing or changed since "
                        "their commit: videos/c/u1.mp4, data/u2.bin")


def test_a_finished_plan_says_nothing_and_a_unit_without_files_counts(root: Path) -> None:
    fs = fsspec.filesystem("file")
    ledger = {"num_shards": 2, "shards": [_entry(0, "data/u0.bin", 3), _entry(1, "", 0)]}  # 1: all quarantined
    u = uncommitted_units(fs, str(root), ledger)
    assert (u.units, u.committed, u.line()) == ([], 2, "")


def test_names_without_the_ledgers_unit_files(root: Path) -> None:
    fs = fsspec.filesystem("file")
    ledger = {"num_shards": 3, "shards": [_entry(1, "data/u1.bin", 4)]}
    assert uncommitted_units(fs, str(root), ledger, lambda i, n: f"s-{i}-of-{n}").units == ["s-0-of-3", "s-2-of-3"]
    assert uncommitted_units(fs, str(root), ledger).units == ["unit 0", "unit 2"]


def test_many_units_are_counted_past_the_listed_ones(root: Path) -> None:
    n = LISTED + 3
    u = uncommitted_units(fsspec.filesystem("file"), str(root), {"num_shards": n})
    assert u.line().endswith(f"unit {LISTED - 1} (and 3 more)") and len(u.units) == n


def test_one_listing_per_folder(root: Path, monkeypatch) -> None:
    fs = fsspec.filesystem("file")
    calls: list[str] = []
    real = fs.ls
    monkeypatch.setattr(fs, "ls", lambda p, *a, **kw: calls.append(p) or real(p, *a, **kw))
    got = listed_sizes(fs, str(root), ["data/u0.bin", "data/u1.bin", "data/nope.bin", "videos/c/u0.mp4", "gone/x"])
    assert got == {"data/u0.bin": 3, "data/u1.bin": 4, "videos/c/u0.mp4": 5}
    assert sorted(calls) == sorted(str(root / d) for d in ("data", "videos/c", "gone"))
