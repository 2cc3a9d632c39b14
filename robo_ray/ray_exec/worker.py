"""The actor side: `UnitWorker` is the callable class handed to `Dataset.map_batches` (one instance per actor of
the pool), `AttemptCounter` the minimal coordinator used when no Publisher actor is involved."""
from __future__ import annotations

import json
import os
import pickle
import socket
from typing import Any

import numpy as np
import ray

from robo_ray.ray_exec.faults import FaultPlan
from robo_ray.stages.convert import ChainedHooks
from robo_ray.stages.pipeline import UNIT_CRASHED, UNIT_FAILED, UNIT_TIMED_OUT, JobSpec, quarantine_unit
from robo_ray.stages.plan import Unit
from robo_ray.watchdog import ACTIVITY, ACTOR_BEAT_S, InFlight, Limits, WatchdogHooks, with_quarantined, without
from robo_ray.writers import UnitResult


class UnitWorker:
    """One per actor. Holds a `UnitConverter` (reader, open PyAV containers, JPEG encoders, writer) for the actor's
    lifetime and converts one unit per call: reads, decodes, encodes and writes the shard itself, so decoded frames
    never reach the object store; returns one small JSON row (episodes, steps, sha256, bytes, quarantined).

    Attempts are counted by the coordinator (the Publisher actor): a unit whose worker keeps dying is quarantined
    as a whole once `max_attempts` is used up, which bounds Ray's otherwise unbounded actor-task retries.

    Watchdog: `begin` hands the coordinator this actor's handle, and the conversion's progress (episode started,
    file opened, frames decoded: robo_ray.watchdog.ACTIVITY) goes to it as heartbeats; the driver kills an
    attempt that is silent or over time (robo_ray.ray_exec.executor). The next attempt converts the unit without
    the episodes that timed out (quarantined EP902); a unit that timed out as a whole on every attempt is
    quarantined EP902."""

    def __init__(self, job: JobSpec, coordinator: Any, max_attempts: int, faults: FaultPlan | None = None) -> None:
        self.coordinator = coordinator
        self.max_attempts = max_attempts
        self.faults = faults or FaultPlan()
        self.converter = job.make_converter(ChainedHooks(self.faults.hooks(), WatchdogHooks()))
        self.who = f"{socket.gethostname()}:{os.getpid()}"
        self.actor = ray.get_runtime_context().current_actor

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = [json.dumps(self.convert(pickle.loads(blob))) for blob in batch["unit"]]
        return {"result": np.array(rows, dtype=object)}

    def convert(self, unit: Unit) -> dict[str, Any]:
        reply = ray.get(self.coordinator.begin.remote(unit.index, self.who, self.actor))
        if reply["done"] is not None:  # recorded by an attempt that died after recording
            return reply["done"]
        attempt = int(reply["attempt"])
        skipped = {int(q["episode_index"]): q for q in reply.get("skip") or []}
        rest = without(unit, skipped)
        if attempt > self.max_attempts:
            used = attempt - 1
            if reply.get("timed_out"):
                res = quarantine_unit(self.converter.writer, rest, UNIT_TIMED_OUT,
                                      f"unit timed out {used} times, last: {reply['timed_out']}")
            elif reply["last_error"]:
                res = quarantine_unit(self.converter.writer, rest, UNIT_FAILED,
                                      f"unit failed {used} times, last: {reply['last_error']}")
            else:
                res = quarantine_unit(self.converter.writer, rest, UNIT_CRASHED,
                                      f"worker crashed {used} times converting this unit")
        else:
            coordinator = self.coordinator
            ACTIVITY.report(lambda snap: coordinator.heartbeat.remote(unit.index, attempt, snap), ACTOR_BEAT_S)
            ACTIVITY.begin_unit(unit.index)
            try:
                self.faults.before_unit(unit.index)
                res = self.converter.convert(rest)
            except Exception as exc:  # retried by Ray (bounded by max_attempts above)
                ray.get(self.coordinator.failed.remote(unit.index, f"{type(exc).__name__}: {exc}"[:500]))
                raise
            finally:
                ACTIVITY.report(None)
        row = with_quarantined(res, skipped.values()).to_dict()
        ray.get(self.coordinator.record.remote(row))  # durable in the ledger before the task returns
        return row

    def __del__(self) -> None:
        conv = getattr(self, "converter", None)
        if conv is not None:
            try:
                conv.close()
            except Exception:  # noqa: BLE001 - best effort at actor teardown
                pass


class AttemptCounter:
    """Coordinator for `RayExecutor.run` (no Publisher): counts attempts and remembers results."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.attempts: dict[int, int] = {}
        self.results: dict[int, dict[str, Any]] = {}
        self.flight = InFlight(limits or Limits())

    def begin(self, unit_index: int, worker: str = "", actor: Any = None) -> dict[str, Any]:
        if unit_index in self.results:
            return InFlight.done(self.attempts.get(unit_index, 0), self.results[unit_index])
        self.attempts[unit_index] = self.attempts.get(unit_index, 0) + 1
        return self.flight.begin(unit_index, self.attempts[unit_index], actor)

    def heartbeat(self, unit_index: int, attempt: int, snapshot: dict[str, Any]) -> None:
        self.flight.heartbeat(unit_index, attempt, snapshot)

    def overdue(self) -> list[tuple[int, Any, str]]:
        return self.flight.overdue()

    def failed(self, unit_index: int, error: str) -> None:
        self.flight.failed(unit_index, error)

    def record(self, row: dict[str, Any]) -> list[str]:
        unit = UnitResult.from_dict(row).shard_index
        self.flight.end(unit)
        self.results[unit] = row
        return []

    def get_attempts(self) -> dict[int, int]:
        return dict(self.attempts)
