"""DecodeAhead: a camera's frames produced in a thread ahead of the writer; order, errors, early close, and the
watchdog's view (the decoding thread reports for the converting thread)."""
from __future__ import annotations

import threading
import time

import pytest

from robo_ray.activity import ACTIVITY
from robo_ray.errors import FrameCountMismatch
from robo_ray.stages.convert import DecodeAhead


def _frames(n: int, fail: bool = False, closed: list[str] | None = None):
    try:
        for i in range(n):
            yield i
        if fail:
            raise FrameCountMismatch("video.mp4: episode 3 camera top has 5 frames, the parquet has 6 rows")
    except GeneratorExit:
        if closed is not None:
            closed.append(threading.current_thread().name)
        raise


def test_frames_in_order_then_the_generators_error() -> None:
    got = []
    with pytest.raises(FrameCountMismatch, match="episode 3"):
        for x in DecodeAhead(_frames(5, fail=True), depth=2):
            got.append(x)
    assert got == [0, 1, 2, 3, 4]
    assert list(DecodeAhead(_frames(50), depth=4)) == list(range(50))


def test_close_mid_stream_stops_the_thread_and_closes_the_generator_in_it() -> None:
    closed: list[str] = []
    ahead = DecodeAhead(_frames(1000, closed=closed), depth=3)
    assert [next(ahead) for _ in range(2)] == [0, 1]
    time.sleep(0.1)  # the thread is blocked on the full queue
    ahead.close()
    assert not ahead._thread.is_alive()
    assert closed == ["robo-ray-decode"]  # GeneratorExit raised where the generator runs
    with pytest.raises(StopIteration):
        next(ahead)


def test_the_decoding_thread_reports_to_the_converting_threads_watchdog() -> None:
    snaps: list[dict] = []

    def reading():
        ACTIVITY.reading("/src/videos/ep3.mp4", "opening")
        yield 1

    ACTIVITY.report(snaps.append, 0.0)
    try:
        ACTIVITY.begin_unit(7)
        ACTIVITY.start_episode(3, ["data/ep3.parquet", "videos/ep3.mp4"], "data/ep3.parquet")
        assert list(DecodeAhead(reading(), depth=2)) == [1]
        deadline = time.monotonic() + 2
        while not any(s.get("file") == "videos/ep3.mp4" for s in snaps) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        ACTIVITY.report(None)
    seen = [s for s in snaps if s.get("file") == "videos/ep3.mp4"]
    assert seen and seen[-1]["unit"] == 7 and seen[-1]["episode"] == 3 and seen[-1]["what"] == "opening"
