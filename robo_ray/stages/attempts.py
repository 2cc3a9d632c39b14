"""Attempt tracking for the units of a run: how many attempts each unit had, the worker of its latest attempt,
when its first began, and (through the watchdog's `InFlight`) the attempts in flight: heartbeats, failures, the
attempts over a timeout. The Publisher holds one; the Ray side's AttemptCounter is one."""
from __future__ import annotations

from typing import Any, Container, Iterable

from robo_ray.stages.run_log import utc_now
from robo_ray.watchdog import InFlight, Limits


def busy_on(host: str, workers: Iterable[str]) -> int:
    """How many of `workers` ("host:pid", one per unit in flight) run on `host`."""
    return sum(1 for w in workers if w.rsplit(":", 1)[0] == host)


class UnitAttempts:
    """Per unit: attempts begun, the worker ("host:pid") of the latest, the time the first began; and the
    attempts in flight (`flight`, the driver's watchdog: robo_ray.ray_exec.executor kills what `overdue` names).

    Its methods are the coordinator calls a worker makes (`begin`, `heartbeat`, `failed`) and the driver's
    (`overdue`, `busy_on`); a coordinator that remembers results answers `begin` for a done unit itself (`done`)."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.attempts: dict[int, int] = {}
        self.workers: dict[int, str] = {}  # unit -> the worker of its latest attempt
        self.started: dict[int, str] = {}  # unit -> when its first attempt began (UTC)
        self.flight = InFlight(limits or Limits())

    def begin(self, unit_index: int, worker: str = "", actor: Any = None) -> dict[str, Any]:
        """A worker starts an attempt: count it; the reply carries its number, the previous attempt's error and
        the episodes to skip (robo_ray.watchdog.InFlight.begin). `actor` lets the watchdog kill a stuck one."""
        n = self.attempts.get(unit_index, 0) + 1
        self.attempts[unit_index] = n
        self.started.setdefault(unit_index, utc_now())
        self.workers[unit_index] = worker
        return self.flight.begin(unit_index, n, actor)

    def done(self, unit_index: int, row: dict[str, Any]) -> dict[str, Any]:
        """The reply to `begin` for a unit already recorded (`row`: its result)."""
        return InFlight.done(self.attempts.get(unit_index, 0), row)

    def last_error(self, unit_index: int, default: str) -> str:
        """Why the unit's latest attempt failed (an exception or a timeout), `default` when none was reported."""
        return self.flight.errors.get(unit_index, default)

    def heartbeat(self, unit_index: int, attempt: int, snapshot: dict[str, Any]) -> None:
        """A worker's progress (robo_ray.watchdog.ACTIVITY snapshot: episode, file, episodes done so far)."""
        self.flight.heartbeat(unit_index, attempt, snapshot)

    def failed(self, unit_index: int, error: str) -> None:
        self.flight.failed(unit_index, error)

    def end(self, unit_index: int) -> None:
        """The unit is recorded: no attempt of it is in flight any more."""
        self.flight.end(unit_index)

    def overdue(self) -> list[tuple[int, Any, str]]:
        """(unit, actor handle, reason) of the attempts over a timeout; the caller kills those actors."""
        return self.flight.overdue()

    def busy_on(self, host: str) -> int:
        """Units in flight on workers of `host` (a worker's share of its node: robo_ray.ray_exec.worker.NodeShare)."""
        return busy_on(host, (self.workers[u] for u in self.flight.begun if u in self.workers))

    def attempt_counts(self) -> dict[int, int]:
        return dict(self.attempts)

    def in_flight(self, done: Container[int]) -> dict[int, str]:
        """Units begun and not in `done` -> the worker of their latest attempt ("host:pid")."""
        return {u: w for u, w in self.workers.items() if u not in done}

    def in_flight_progress(self, done: Container[int]) -> dict[int, dict[str, Any]]:
        """The latest snapshot of every unit in flight and not in `done`."""
        return {u: dict(snap) for u, snap in self.flight.snap.items() if u not in done}
