"""What this thread's conversion is doing now (unit, episode, the file being read): `ACTIVITY`, reported to the
watchdog (robo_ray/watchdog.py) by the converter, the video decoder (robo_ray/video.py) and the encoders. Light on
purpose: anything that reads or decodes imports it.

A sink set with `ACTIVITY.report(sink, interval)` gets the latest snapshot at most every `interval` s
(`_Reporter`): at once when the last one is that old, else from the reporter's own thread within `interval`, so a
thread stuck in a read right after an event is still reported where it is, and a unit of many short episodes costs
one message per interval instead of two per episode (a frame costs a thread-local lookup, a counter and a clock
read)."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable


class Abandoned(BaseException):
    """Raised in an abandoned worker thread at its next progress report: it unwinds (its shard is aborted by
    UnitConverter.convert's `except BaseException`) and can never commit. Not an Exception: nothing catches it."""


class Activity(threading.local):
    """The conversion's current unit / episode / file, per thread (each converting thread has its own; only it
    writes it). A thread bound to a `cancelled` event raises `Abandoned` at its next report once it is set."""

    def __init__(self) -> None:
        self.unit: int | None = None
        self.episode: int | None = None
        self.file: str | None = None
        self.what = "starting"
        self.files: tuple[str, ...] = ()  # the episode's source files, relative to the source root
        self._reporter: _Reporter | None = None
        self._cancelled: threading.Event | None = None
        self.done = (0, 0, 0)  # this attempt at the unit so far: (episodes written, their frames, quarantined)

    def bind(self, cancelled: threading.Event | None) -> None:
        self._cancelled = cancelled

    def export(self) -> dict[str, Any]:
        """This thread's state, for a helper thread working for it (`adopt`)."""
        return dict(self.__dict__)

    def adopt(self, state: dict[str, Any]) -> None:
        """Act for the thread whose `export` this is (a camera's decoding thread): its reports go to the same
        watchdog (naming the file this thread blocks on), and it is abandoned with it."""
        self.__dict__.update(state)

    def report(self, sink: Callable[[dict[str, Any]], None] | None, interval: float = 1.0) -> None:
        """Send this thread's snapshots to `sink` (None: stop)."""
        if self._reporter is not None:
            self._reporter.close()
        self._reporter = _Reporter(sink, interval) if sink is not None else None

    def begin_unit(self, unit_index: int) -> None:
        self.unit, self.episode, self.file, self.what, self.files = unit_index, None, None, "starting", ()
        self.done = (0, 0, 0)
        self._event()

    def start_episode(self, episode_index: int, files: Iterable[str], first: str | None) -> None:
        self.episode, self.files, self.file, self.what = episode_index, tuple(files), first, "reading"
        self._event()

    def end_episode(self, frames: int = 0, quarantined: bool = False) -> None:
        """Between episodes the thread writes the shard: a stall there is the unit's, not an episode's. The
        episode is counted (written with `frames` steps, or quarantined) for the progress display."""
        eps, n, q = self.done
        self.done = (eps, n, q + 1) if quarantined else (eps + 1, n + frames, q)
        self.episode, self.file, self.what, self.files = None, None, "writing the shard", ()
        self._event()

    def reading(self, path: str, what: str = "reading") -> None:
        """This thread is about to block on `path` (open, seek, first decode of a window)."""
        path = self._relative(path)
        if (path, what) != (self.file, self.what):
            self.file, self.what = path, what
            self._event()
        else:
            self.beat()

    def beat(self) -> None:
        """Progress (e.g. a decoded frame): one clock read unless a report is due."""
        if self._cancelled is not None and self._cancelled.is_set():
            raise Abandoned("this conversion was abandoned by the watchdog")
        if self._reporter is not None:
            self._reporter.note()

    def snapshot(self) -> dict[str, Any]:
        eps, frames, q = self.done
        return {"unit": self.unit, "episode": self.episode, "file": self.file, "what": self.what,
                "episodes_done": eps, "frames_done": frames, "quarantined": q}

    def _relative(self, path: str) -> str:
        for f in self.files:  # name the file as quarantine lines do: relative to the source root
            if path == f or path.endswith("/" + f):
                return f
        return path

    def _event(self) -> None:
        if self._cancelled is not None and self._cancelled.is_set():
            raise Abandoned("this conversion was abandoned by the watchdog")
        if self._reporter is not None:
            self._reporter.note(self.snapshot())


class _Reporter:
    """Delivers one converting thread's latest snapshot to a sink, at most every `interval` s: from the converting
    thread when the last delivery is that old, else from its own daemon thread once it is (the converting thread
    may be blocked in C code by then: PyAV and file reads release the GIL). Progress without a new snapshot (a
    decoded frame) delivers the last snapshot again, which is what tells the watchdog the thread is alive."""

    def __init__(self, sink: Callable[[dict[str, Any]], None], interval: float) -> None:
        self.sink, self.interval = sink, interval
        self.latest: dict[str, Any] | None = None
        self.seq = self.sent_seq = 0
        self.sent_at = 0.0
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="robo-ray-heartbeat", daemon=True)
        self.thread.start()

    def note(self, snap: dict[str, Any] | None = None) -> None:
        """Progress (and the new snapshot, after an event); delivered now if the last delivery is old enough."""
        if snap is not None:
            self.latest = snap
        self.seq += 1
        if time.monotonic() - self.sent_at >= self.interval:
            self.deliver()

    def deliver(self) -> None:
        with self.lock:
            if self.latest is None or self.seq == self.sent_seq:
                return
            self.sent_seq, self.sent_at, snap = self.seq, time.monotonic(), self.latest
            try:
                self.sink(snap)
            except Exception:  # noqa: BLE001 - reporting must never break a conversion
                pass

    def _loop(self) -> None:
        while not self.stopped.wait(self.interval / 2):
            if time.monotonic() - self.sent_at >= self.interval:
                self.deliver()

    def close(self) -> None:
        self.stopped.set()


ACTIVITY = Activity()
