"""Issue 2, acceptance 4: the real g1 dataset (AV1 640x480, MP4s of episodes 0, 3, 6, 9 missing): 26 episodes with
exact step counts, the 4 others quarantined with a message naming each missing MP4, exit code 3."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow


def test_g1_quarantines_exactly_the_missing_videos(shared: Path, tmp_path: Path) -> None:
    src = shared / "real" / "g1_v21_30ep"
    proc = run_cli("run", str(src), str(tmp_path / "o2"))
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    q_lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("quarantined[")]
    assert len(q_lines) == 4, proc.stderr
    for ep, line in zip((0, 3, 6, 9), q_lines):
        assert f"episode={ep} " in line and "EP101" in line
        assert f"observation.images.cam_high/episode_{ep:06d}.mp4" in line
    lengths = {json.loads(ln)["episode_index"]: json.loads(ln)["length"]
               for ln in (src / "meta/episodes.jsonl").read_text().splitlines() if ln.strip()}
    summary = json.loads((tmp_path / "o2/diff_summary.json").read_text())
    written = {int(k): v for k, v in summary["episode_steps"].items()}
    assert sorted(written) == [i for i in range(30) if i not in (0, 3, 6, 9)]
    assert all(written[i] == lengths[i] for i in written)
    assert summary["passed"] is True  # the written part is valid; the exit code reports the quarantine
    assert any(c["name"] == "tfds read-back" and c["status"] == "passed" for c in summary["checks"])
    info = json.loads((tmp_path / "o2/rlds/g1_v21_30ep/1.0.0/dataset_info.json").read_text())
    assert sum(int(n) for n in info["splits"][0]["shardLengths"]) == 26
