"""Wall-clock stage timings of a run, written to `logs/timings.json` at the output root (issue #14's bench).

A `StageClock` is small and picklable: it travels with the `PublishSpec`, so the stamps made on the driver
(discover, plan, the start of convert) and those made where the Publisher runs (units committed, finalize, verify,
publish; a Ray actor in another process) land in one file. Stamps are `time.time()` seconds since the epoch, so
stamps of different processes on one machine compare (across machines: as well as their clocks agree).

Stages run one after the other: `begin(name)` ends the stage still open (unless something already ended it) and
starts `name`; `end(name)` sets a stage's end (again: the latest call wins), `mark(name)` an instant. Marks of a
run: `first_unit_started` (the first unit handed to a worker) and `last_unit_committed`; between them is the
conversion without Ray's or the actors' start-up (bench.throughput's window marginal). A Ray run adds its start-up:
`ray_ready` (Ray up, in the background since the run began), `publisher_open`, `pool_requested` (the Ray Dataset
of the units starts executing) and `first_actor_ready` (the pool's first actor constructed).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from robo_ray.storage import join, write_text_atomic

TIMINGS_NAME = "timings.json"  # under logs/


@dataclass
class StageClock:
    """stage -> [start, end] and instants (see the module docstring)."""

    created: float = field(default_factory=time.time)
    stages: dict[str, list[float | None]] = field(default_factory=dict)  # name -> [start, end or None]
    marks: dict[str, float] = field(default_factory=dict)
    current: str | None = None

    @classmethod
    def starting(cls, stage: str) -> "StageClock":
        """A new clock with `stage` begun."""
        clock = cls()
        clock.begin(stage)
        return clock

    def begin(self, stage: str) -> None:
        now = time.time()
        if self.current is not None and self.stages[self.current][1] is None:
            self.stages[self.current][1] = now
        self.stages[stage] = [now, None]
        self.current = stage

    def end(self, stage: str, mark: str | None = None) -> None:
        """End `stage` now (a stage that was never begun starts now too); `mark` also records the instant."""
        now = time.time()
        self.stages.setdefault(stage, [now, None])[1] = now
        if mark:
            self.marks[mark] = now

    def mark(self, name: str) -> None:
        self.marks[name] = time.time()

    def mark_once(self, name: str) -> None:
        """Record the instant `name` unless it is already recorded (e.g. first_unit_started)."""
        self.marks.setdefault(name, time.time())

    def to_dict(self) -> dict[str, Any]:
        """The JSON form; a stage still open ends now."""
        now = time.time()
        stages = {}
        for name, (start, end) in self.stages.items():
            end = end if end is not None else now
            stages[name] = {"start": start, "end": end, "seconds": round(end - start, 3)}
        return {"clock": "time.time() seconds since the epoch", "created": self.created, "written": now,
                "written_by_pid": os.getpid(), "stages": stages, "marks": dict(self.marks)}


def write_timings(fs: Any, out_root: str, clock: StageClock | None) -> None:
    """logs/timings.json (nothing without a clock)."""
    if clock is not None:
        write_text_atomic(fs, join(out_root, "logs", TIMINGS_NAME), json.dumps(clock.to_dict(), indent=2))
