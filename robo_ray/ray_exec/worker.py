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
from robo_ray.stages.pipeline import UNIT_CRASHED, UNIT_FAILED, JobSpec, quarantine_unit
from robo_ray.stages.plan import Unit
from robo_ray.writers.rlds.writer import ShardResult


class UnitWorker:
    """One per actor. Holds a `UnitConverter` (reader, open PyAV containers, JPEG encoders, writer) for the actor's
    lifetime and converts one unit per call: reads, decodes, encodes and writes the shard itself, so decoded frames
    never reach the object store; returns one small JSON row (episodes, steps, sha256, bytes, quarantined).

    Attempts are counted by the coordinator (the Publisher actor): a unit whose worker keeps dying is quarantined
    as a whole once `max_attempts` is used up, which bounds Ray's otherwise unbounded actor-task retries."""

    def __init__(self, job: JobSpec, coordinator: Any, max_attempts: int, faults: FaultPlan | None = None) -> None:
        self.coordinator = coordinator
        self.max_attempts = max_attempts
        self.faults = faults or FaultPlan()
        self.converter = job.make_converter()
        self.faults.install(self.converter)
        self.who = f"{socket.gethostname()}:{os.getpid()}"

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = [json.dumps(self.convert(pickle.loads(blob))) for blob in batch["unit"]]
        return {"result": np.array(rows, dtype=object)}

    def convert(self, unit: Unit) -> dict[str, Any]:
        reply = ray.get(self.coordinator.begin.remote(unit.index, self.who))
        if reply["done"] is not None:  # recorded by an attempt that died after recording
            return reply["done"]
        attempt = int(reply["attempt"])
        if attempt > self.max_attempts:
            used = attempt - 1
            if reply["last_error"]:
                res = quarantine_unit(self.converter.writer, unit, UNIT_FAILED,
                                      f"unit failed {used} times, last: {reply['last_error']}")
            else:
                res = quarantine_unit(self.converter.writer, unit, UNIT_CRASHED,
                                      f"worker crashed {used} times converting this unit")
        else:
            try:
                self.faults.before_unit(unit.index)
                res = self.converter.convert(unit)
            except Exception as exc:  # retried by Ray (bounded by max_attempts above)
                ray.get(self.coordinator.failed.remote(unit.index, f"{type(exc).__name__}: {exc}"[:500]))
                raise
        row = res.to_dict()
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

    def __init__(self) -> None:
        self.attempts: dict[int, int] = {}
        self.errors: dict[int, str] = {}
        self.results: dict[int, dict[str, Any]] = {}

    def begin(self, unit_index: int, worker: str = "") -> dict[str, Any]:
        if unit_index in self.results:
            return {"attempt": self.attempts.get(unit_index, 0), "done": self.results[unit_index],
                    "last_error": None}
        self.attempts[unit_index] = self.attempts.get(unit_index, 0) + 1
        return {"attempt": self.attempts[unit_index], "done": None, "last_error": self.errors.get(unit_index)}

    def failed(self, unit_index: int, error: str) -> None:
        self.errors[unit_index] = error

    def record(self, row: dict[str, Any]) -> list[str]:
        self.results[ShardResult.from_dict(row).shard_index] = row
        return []

    def get_attempts(self) -> dict[int, int]:
        return dict(self.attempts)
