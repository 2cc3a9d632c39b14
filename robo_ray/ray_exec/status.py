"""The Ray executor's view of progress: finished units counted on the driver, the actors' in-flight heartbeats
asked of the Publisher every PROGRESS_POLL_S for the progress display, and a one-line status every `interval_s`
for job logs (no TTY)."""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, TextIO

from robo_ray.stages.progress import ProgressFn, ProgressTracker
from robo_ray.writers import UnitResult

PROGRESS_POLL_S = 0.5  # the progress display asks the Publisher for the actors' latest snapshots this often
log = logging.getLogger("robo_ray.ray_exec")


class Status:
    """Counts finished work; prints a one-line status periodically (job logs), or feeds the progress display per
    episode: `poll()` returns the Publisher's in-flight snapshots (the actors' heartbeats), asked every
    PROGRESS_POLL_S."""

    def __init__(self, total_units: int, total_eps: int, total_steps: int, stream: TextIO,
                 progress: ProgressFn | None, interval_s: float, label: str,
                 poll: Callable[[], dict[int, dict[str, Any]]] | None = None) -> None:
        self.total_units, self.total_eps, self.total_steps = total_units, total_eps, total_steps
        self.units = self.eps = self.steps = self.quarantined = 0
        self.stream, self.interval_s, self.label = stream, interval_s, label
        self.tracker = ProgressTracker(progress, total_eps, total_steps) if progress else None
        self.poll = poll
        self.t0 = time.monotonic()
        self.steps_at_start = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._poller: threading.Thread | None = None

    def start(self) -> None:
        self.steps_at_start = self.steps
        self.t0 = time.monotonic()
        if self.tracker is not None:
            self.tracker.start({"episodes_done": self.eps, "steps_done": self.steps,
                                "quarantined": self.quarantined})
            if self.poll is not None:
                self._poller = threading.Thread(target=self._poll_loop, name="robo-ray-progress", daemon=True)
                self._poller.start()
        if self.interval_s > 0:
            self.line()
            self._thread = threading.Thread(target=self._loop, name="robo-ray-status", daemon=True)
            self._thread.start()

    def add(self, res: UnitResult) -> None:
        self.units += 1
        self.eps += len(res.episodes) + len(res.quarantined)
        self.steps += sum(s for _, s in res.episodes)
        self.quarantined += len(res.quarantined)
        if self.tracker is not None:
            self.tracker.unit_done(res)

    def _poll_loop(self) -> None:
        while not self._stop.wait(PROGRESS_POLL_S):
            try:
                self.tracker.in_flight(self.poll())  # type: ignore[misc,union-attr]
            except Exception as exc:  # noqa: BLE001 - the display must never break a run
                log.debug("progress: no answer from the publisher: %s", exc)

    def fps(self) -> float:
        dt = time.monotonic() - self.t0
        return (self.steps - self.steps_at_start) / dt if dt > 0 else 0.0

    def line(self) -> None:
        el = int(time.monotonic() - self.t0)
        print(f"robo-ray [{self.label}] {self.units}/{self.total_units} shards, {self.eps}/{self.total_eps} "
              f"episodes, {self.steps}/{self.total_steps} frames, {self.fps():.1f} frames/s, "
              f"{self.quarantined} quarantined, elapsed {el // 3600:d}:{el // 60 % 60:02d}:{el % 60:02d}",
              file=self.stream, flush=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.line()

    def stop(self) -> None:
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=1)
        if self.tracker is not None:
            self.tracker.finish()
        if self._thread is not None:
            self._thread.join(timeout=1)
            self.line()
