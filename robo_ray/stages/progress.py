"""The Convert stage's progress for a display, per episode: committed units plus what the attempts in flight have
reported (robo_ray.activity.ACTIVITY snapshots carry the episodes, frames and quarantined episodes of the unit so
far: the heartbeats the watchdog already receives, in-process or from Ray actors, so no extra calls)."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

from robo_ray.writers import UnitResult


@dataclass(frozen=True)
class Progress:
    """Where the Convert stage is: episodes done (written or quarantined) and frames written, of the totals."""

    episodes: int
    episodes_total: int
    frames: int
    frames_total: int
    quarantined: int
    final: bool = False  # the stage is over (the display closes)


ProgressFn = Callable[[Progress], None]


class ProgressTracker:
    """Turns unit results and in-flight snapshots into `Progress`, handed to `fn` when an episode was done.

    Counts never go back on the display: a retried unit restarts its count from zero, its earlier attempt's
    episodes stay shown until the retry passes them. Thread-safe (the Ray driver polls from a thread)."""

    def __init__(self, fn: ProgressFn, episodes_total: int, frames_total: int) -> None:
        self.fn, self.episodes_total, self.frames_total = fn, episodes_total, frames_total
        self.committed = (0, 0, 0)  # episodes, frames, quarantined of the units recorded
        self.units_done: set[int] = set()
        self.flight: dict[int, tuple[int, int, int]] = {}
        self.shown = (-1, -1, -1)
        self.lock = threading.Lock()

    def start(self, status: dict[str, Any]) -> None:
        """Begin with what is already committed (a resumed run): `Publisher.status()`."""
        with self.lock:
            self.committed = (int(status.get("episodes_done", 0)), int(status.get("steps_done", 0)),
                              int(status.get("quarantined", 0)))
            self._emit(force=True)

    def unit_done(self, res: UnitResult) -> None:
        with self.lock:
            self.flight.pop(res.shard_index, None)
            if res.shard_index in self.units_done:
                return
            self.units_done.add(res.shard_index)
            e, f, q = self.committed
            self.committed = (e + len(res.episodes) + len(res.quarantined), f + sum(s for _, s in res.episodes),
                              q + len(res.quarantined))
            self._emit()

    def beat(self, snap: dict[str, Any]) -> None:
        """An ACTIVITY snapshot of a unit in flight."""
        unit = snap.get("unit")
        if unit is None or "episodes_done" not in snap:
            return
        with self.lock:
            if unit in self.units_done:
                return
            self.flight[unit] = (int(snap["episodes_done"]) + int(snap.get("quarantined", 0)),
                                 int(snap.get("frames_done", 0)), int(snap.get("quarantined", 0)))
            self._emit()

    def in_flight(self, snaps: dict[int, dict[str, Any]]) -> None:
        """Snapshots of every unit in flight (the Ray Publisher's)."""
        for unit, snap in snaps.items():
            self.beat({**snap, "unit": unit})

    def finish(self) -> None:
        with self.lock:
            self.fn(self._progress(final=True))

    def _progress(self, final: bool = False) -> Progress:
        e, f, q = self.committed
        for fe, ff, fq in self.flight.values():
            e, f, q = e + fe, f + ff, q + fq
        se, sf, sq = self.shown
        return Progress(min(max(e, se), self.episodes_total), self.episodes_total,
                        min(max(f, sf), self.frames_total), self.frames_total, max(q, sq), final)

    def _emit(self, force: bool = False) -> None:
        p = self._progress()
        now = (p.episodes, p.frames, p.quarantined)
        if force or (p.episodes, p.quarantined) != self.shown[::2]:
            self.shown = now
            self.fn(p)
