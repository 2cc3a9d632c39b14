"""A resumed run converts again the units the killed run had journaled but not yet put in ledger.json: their
progress.jsonl lines go first, so every episode is journaled once (stages/journal.keep_progress_of)."""
from __future__ import annotations

import json
from pathlib import Path

import fsspec

from robo_ray.stages.journal import PROGRESS_NAME, keep_progress_of


def _write(root: Path, episodes: list[int]) -> Path:
    path = root / PROGRESS_NAME
    lines = [json.dumps({"episode_id": e, "status": "completed", "steps": 3, "shard": e // 2}) for e in episodes]
    path.write_text("".join(f"{x}\n" for x in lines))
    return path


def _episodes(path: Path) -> list[int]:
    return [json.loads(x)["episode_id"] for x in path.read_text().splitlines() if x.strip()]


def test_lines_of_units_not_committed_are_dropped(tmp_path):
    path = _write(tmp_path, [0, 1, 2, 3, 4])
    assert keep_progress_of(fsspec.filesystem("file"), str(tmp_path), {0, 1, 2, 3}) == 1
    assert _episodes(path) == [0, 1, 2, 3]


def test_a_journal_of_committed_units_only_is_left_untouched(tmp_path):
    path = _write(tmp_path, [0, 1, 2, 3])
    before = path.stat().st_mtime_ns, path.read_bytes()
    assert keep_progress_of(fsspec.filesystem("file"), str(tmp_path), {0, 1, 2, 3, 4, 5}) == 0
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before


def test_no_journal_yet(tmp_path):
    assert keep_progress_of(fsspec.filesystem("file"), str(tmp_path), {0}) == 0
    assert not (tmp_path / PROGRESS_NAME).exists()
