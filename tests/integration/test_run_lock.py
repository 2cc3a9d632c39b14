"""One run per destination: a second run started while the first holds the lock exits 4 in one line; a lock
left by a dead run is taken over by --resume / --overwrite; a finished run leaves no lock."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, run_cli, wait_for
from tests.fixtures.lerobot_gen import DatasetSpec, write_lerobot_dataset


def _src(tmp_path: Path, n: int = 4) -> Path:
    return write_lerobot_dataset(tmp_path / "src", DatasetSpec(version="v2.1", episode_lengths=[10] * n))


def test_active_lock_refuses_a_second_run(tmp_path: Path) -> None:
    src = _src(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "run.lock").write_text(json.dumps({"run_id": "abc123", "host": "h", "pid": 1, "started_at": "t"}))
    proc = run_cli("run", str(src), str(out))
    assert proc.returncode == 4, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "RR403" in lines[0] and "abc123" in lines[0]
    assert sorted(p.name for p in out.iterdir()) == ["run.lock"]  # nothing touched
    # the holder died: --overwrite takes the lock over, and a finished run leaves none
    proc = run_cli("run", str(src), str(out), "--overwrite", "--set", "validate.tfds_readback=false")
    assert proc.returncode == 0, proc.stderr
    assert not (out / "run.lock").exists()


def test_two_concurrent_runs_exactly_one_publishes(tmp_path: Path) -> None:
    """Run A is frozen (SIGSTOP) right after taking the lock, so run B surely starts while A holds it: B must exit 4
    without touching A's output; A then finishes and publishes. (Started at the same instant, a loaded machine may
    let A finish before B begins, which is not a concurrent run.)"""
    src = _src(tmp_path, 12)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "robo_ray.cli", "run", str(src), str(out)]
    first = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (out / "run.lock").exists() or first.poll() is not None, 120, "run A to take the lock")
        os.kill(first.pid, signal.SIGSTOP)
        assert first.poll() is None, first.stderr.read()
        holder = json.loads((out / "run.lock").read_text())["run_id"]
        before = sorted(p.name for p in out.rglob("*"))
        second = run_cli("run", str(src), str(out))
        assert second.returncode == 4, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and "RR403" in lines[0] and holder in lines[0] and "Traceback" not in second.stderr
        assert sorted(p.name for p in out.rglob("*")) == before  # B wrote nothing
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert json.loads((out / "diff_summary.json").read_text())["episodes_written"] == 12
    assert not (out / "run.lock").exists()
