"""The convert progress bar on a terminal (issue #16): `robo-ray run` in a pseudo-terminal (python `pty`) on a
generated LeRobot v2.1 dataset whose episodes all go into one unit, one of them without its video (EP101).

* the bar counts episodes, not units: it shows counts strictly between 0 and N although there is one unit, and
  never goes back; in-process and on a Ray actor (the actor's heartbeats carry the counts to the driver);
* the first rate shown is sane (the bar starts with the stage, not at the first update);
* the quarantine line is a line of its own above the bar (the bar's line is cleared first), never glued to it;
* without a terminal there is no carriage-return bar at all.
"""
from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import sys
import termios
from pathlib import Path

import pytest

from robo_ray.stages.progress import Progress, ProgressTracker
from robo_ray.writers import UnitResult
from tests.conftest import REPO, run_cli
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, corrupt_video, write_lerobot_dataset

EPISODES, LENGTH, MISSING = 8, 600, 2
BAR = re.compile(r"convert:\s+\d+%\|[^|]*\|\s*(\d+)/(\d+) \[[^\]]*?(?:(\?|[\d.]+)(ep/s|s/ep))")
RUN = ("--set", "plan.min_shards=1", "--set", "validate.tfds_readback=false", "--set",
       "validate.sample_episodes=0", "--set", "convert.max_quarantine_fraction=0.5")


def _source(root: Path, length: int) -> Path:
    spec = DatasetSpec(version="v2.1", episode_lengths=[length] * EPISODES,
                       cameras=[CameraSpec(height=240, width=320)])
    write_lerobot_dataset(root, spec)
    corrupt_video(root / f"videos/chunk-000/observation.images.top/episode_{MISSING:06d}.mp4", "delete")
    return root


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _source(tmp_path_factory.mktemp("progress") / "src", LENGTH)


@pytest.fixture(scope="module")
def long_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Episodes long enough that an actor's heartbeats (at most one per ACTOR_BEAT_S) land inside the unit even
    when the machine is idle and fast (8 x 150 frames converted in under 1 s here: the bar went 0 -> 8): the
    Ray bar can only move between units that way."""
    return _source(tmp_path_factory.mktemp("progress") / "long", LENGTH * 3)


def run_in_pty(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> tuple[int, str]:
    """`robo-ray ARGS` with stdin/stdout/stderr on a pseudo-terminal of 120x40; (exit code, everything shown)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal like a user's
        os.chdir(REPO)
        os.execve(sys.executable, [sys.executable, "-m", "robo_ray.cli", *args], {**os.environ, **(env or {})})
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    import select
    import time
    out, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode("utf-8", "replace")


def _bars(shown: str) -> list[tuple[int, int, str, str]]:
    return [(int(m[1]), int(m[2]), m[3], m[4]) for m in BAR.finditer(shown)]


def _check_display(code: int, shown: str) -> None:
    assert code == 0, shown[-3000:]
    bars = _bars(shown)
    counts = [done for done, total, _, _ in bars]
    assert bars and {total for _, total, _, _ in bars} == {EPISODES}, shown[-3000:]
    assert counts == sorted(counts) and counts[-1] == EPISODES  # never back, ends at every episode
    assert any(0 < c < EPISODES for c in counts), f"the bar moved per unit, not per episode: {counts}"
    rates = [(float(r), u) for _, _, r, u in bars if r != "?"]
    first, unit = rates[0]
    assert (first if unit == "ep/s" else 1 / first) < 100, f"absurd first rate: {rates[0]}"
    # the quarantine line: the bar's line cleared, then the line on its own, ended by a newline
    line = re.search(r"(^|\r\n|\r {20,}\r)(quarantined\[EP101\] episode=2 [^\r\n]*)\r\n", shown)
    assert line is not None, shown[-3000:]
    assert "convert:" not in line[2] and "ep/s" not in line[2]
    assert shown.count("quarantined[EP101]") == 1
    assert re.search(r"[^\r\n]quarantined\[EP", shown) is None  # never glued to the bar's text


def test_bar_in_process(source: Path, tmp_path: Path) -> None:
    code, shown = run_in_pty("run", str(source), str(tmp_path / "out"), *RUN)
    _check_display(code, shown)
    assert re.search(rf"{EPISODES}/{EPISODES} \[[^\]]*frames/s, 1 quarantined\]", shown), shown[-2000:]


def test_bar_on_a_ray_actor(long_source: Path, tmp_path: Path) -> None:
    code, shown = run_in_pty("run", str(long_source), str(tmp_path / "out"), "--mode", "safe", *RUN,
                             env={"RAY_AUTH_MODE": "disabled"})
    _check_display(code, shown)


def test_no_bar_without_a_terminal(source: Path, tmp_path: Path) -> None:
    proc = run_cli("run", str(source), str(tmp_path / "out"), *RUN)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "\r" not in proc.stderr and "convert:" not in proc.stderr
    assert "quarantined[EP101] episode=2" in proc.stderr


def test_tracker_counts_episodes_in_flight_and_never_goes_back() -> None:
    shown: list[Progress] = []
    t = ProgressTracker(shown.append, 10, 100)
    t.start({"episodes_done": 2, "steps_done": 20, "quarantined": 0})  # a resumed run
    t.beat({"unit": 1, "episodes_done": 1, "frames_done": 10, "quarantined": 0})
    t.beat({"unit": 1, "episodes_done": 1, "frames_done": 10, "quarantined": 0})  # no new episode: not shown
    t.beat({"unit": 2, "episodes_done": 0, "frames_done": 0, "quarantined": 1})
    t.beat({"unit": 1, "episodes_done": 0, "frames_done": 0, "quarantined": 0})  # a retry starts again
    t.unit_done(UnitResult(1, "f", episodes=[(2, 10), (3, 10)], quarantined=[]))
    t.unit_done(UnitResult(1, "f", episodes=[(2, 10), (3, 10)], quarantined=[]))  # recorded twice: once
    t.beat({"unit": 1, "episodes_done": 1, "frames_done": 10, "quarantined": 0})  # a late beat of a done unit
    t.finish()
    assert [(p.episodes, p.frames, p.quarantined, p.final) for p in shown] == [
        (2, 20, 0, False), (3, 30, 0, False), (4, 30, 1, False), (5, 40, 1, False), (5, 40, 1, True)]
