"""The actor side: `UnitActor` is the class of the pool's actors (one converter per actor, kept across units),
`WorkerContext` what every call carries, `AttemptCounter` the minimal coordinator used when no Publisher actor is
involved."""
from __future__ import annotations

import os
import pickle
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import ray

from robo_ray.activity import ACTIVITY
from robo_ray.executors.base import JobSpec
from robo_ray.ray_exec.faults import FaultPlan
from robo_ray.stages.attempts import UnitAttempts
from robo_ray.stages.convert import ChainedHooks
from robo_ray.stages.plan import Unit
from robo_ray.stages.publisher import Publisher, PublishSpec
from robo_ray.stages.unit_failures import UNIT_CRASHED, UNIT_FAILED, UNIT_TIMED_OUT, quarantine_unit
from robo_ray.watchdog import ACTOR_BEAT_S, Limits, WatchdogHooks, with_quarantined, without
from robo_ray.writers import UnitResult


@dataclass
class WorkerContext:
    """The job as the pool's actors see it; put in the object store once and passed by reference to every call, so
    an actor that Ray restarted (after a crash or a watchdog kill) rebuilds its converter from the next call."""

    key: str  # one per job: an actor rebuilds its converter when the key changes
    job: JobSpec
    coordinator: Any  # the Publisher actor (or an AttemptCounter): attempts, heartbeats, the ledger
    max_attempts: int
    faults: FaultPlan = field(default_factory=FaultPlan)
    cpus_per_actor: float = 1.0  # the cluster's CPUs / the pool's actors: the share when the node's is unknown
    opened: Any = None  # the ObjectRef of the coordinator's `open` when the pool started before it: waited for once


def _warm_imports() -> None:
    """Import now what the first unit would import lazily (pyarrow's dataset layer pulls in pandas: ~1 s): the
    actor starts while Discover runs on the driver, so this is off the critical path."""
    import importlib

    for name in ("pyarrow.parquet", "pyarrow.dataset", "av", "simplejpeg"):
        try:
            importlib.import_module(name)
        except ImportError:  # an optional codec library: the unit that needs it will say so
            pass


class NodeShare:
    """A pool actor's share of its node's CPUs while it converts (a `CpuShare` for its converter): the node's CPUs
    over the units in flight on the node, asked of the coordinator at most every `refresh_s` (the converter asks
    before each video episode). Two actors on a 2-CPU node: 1 each, so no decoding threads (they would only take
    turns on cores already busy); once the other one runs out of units, 2, and the last units of the run decode
    their cameras in threads of their own. `fallback` (the cluster's CPUs / actors) when the answer is late."""

    def __init__(self, coordinator: Any, host: str, node_cpus: float, fallback: float, refresh_s: float = 0.5) -> None:
        self.coordinator, self.host, self.node_cpus, self.fallback = coordinator, host, node_cpus, fallback
        self.refresh_s = refresh_s
        self._at: float | None = None
        self._share = fallback

    def __call__(self) -> float:
        now = time.monotonic()
        if self._at is None or now - self._at >= self.refresh_s:
            self._at = now
            try:
                busy = int(ray.get(self.coordinator.busy_on.remote(self.host), timeout=5))
            except Exception:  # noqa: BLE001 - a late or lost answer: the static share
                return self.fallback
            self._share = self.node_cpus / max(1, busy)
        return self._share


def node_cpus() -> float | None:
    """The CPUs Ray gives this actor's node (None when the cluster does not say)."""
    me = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node.get("NodeID") == me and node.get("Alive", True):
            cpus = (node.get("Resources") or {}).get("CPU")
            return float(cpus) if cpus else None
    return None


class UnitActor:
    """One per actor of the pool, started before the job is known (its imports overlap Discover and Spec). Holds a
    `UnitConverter` (reader, open PyAV containers, JPEG encoders, writer) for the job and converts one unit per
    call: reads, decodes, encodes and writes the shard itself, so decoded frames never reach the object store;
    returns one small dict (episodes, steps, sha256, bytes, quarantined).

    Attempts are counted by the coordinator (the Publisher actor): a unit whose worker keeps dying is quarantined
    as a whole once `max_attempts` is used up, which bounds the executor's resubmissions.

    Watchdog: `begin` hands the coordinator this actor's handle, and the conversion's progress (episode started,
    file opened, frames decoded: robo_ray.activity.ACTIVITY) goes to it as heartbeats; the driver kills an
    attempt that is silent or over time (robo_ray.ray_exec.executor). The next attempt converts the unit without
    the episodes that timed out (quarantined EP902); a unit that timed out as a whole on every attempt is
    quarantined EP902."""

    def __init__(self) -> None:
        _warm_imports()
        self.who = f"{socket.gethostname()}:{os.getpid()}"
        self.actor = ray.get_runtime_context().current_actor
        self.key: str | None = None
        self.converter: Any = None
        self.coordinator: Any = None
        self.max_attempts = 1
        self.faults = FaultPlan()

    def ready(self) -> str:
        """Answers once the actor is up (its imports done)."""
        return self.who

    def run_unit(self, ctx: WorkerContext, blob: bytes) -> dict[str, Any]:
        """Convert one pickled `Unit` of the job `ctx` (see `convert`)."""
        if ctx.key != self.key:
            if ctx.opened is not None:  # the coordinator takes no call before the job is open
                ray.get(ctx.opened)
            self._close()
            self.coordinator, self.max_attempts, self.faults = ctx.coordinator, ctx.max_attempts, ctx.faults
            cpus = node_cpus()
            share = NodeShare(self.coordinator, self.who.rsplit(":", 1)[0], cpus, ctx.cpus_per_actor) \
                if cpus else ctx.cpus_per_actor
            self.converter = ctx.job.make_converter(ChainedHooks(self.faults.hooks(), WatchdogHooks()), cpus=share)
            self.key = ctx.key
        return self.convert(pickle.loads(blob))

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
        row["check"] = None  # the unit's re-read went to the Publisher; the driver needs the counts only
        return row

    def _close(self) -> None:
        converter = getattr(self, "converter", None)  # None on Ray's ActorClass, which inherits __del__
        if converter is not None:
            try:
                converter.close()
            except Exception:  # noqa: BLE001 - best effort: the previous job's files are committed or temp
                pass
            self.converter = None

    def __del__(self) -> None:
        self._close()


class LatePublisher(Publisher):
    """The Publisher as a Ray actor that starts before the job is known (while Discover and Spec run on the
    driver): its process is up and its imports done when `open(spec)` hands it the job (about 3 s saved on a short
    run). Every Publisher method is an actor method once opened."""

    def __init__(self) -> None:  # noqa: D107 - the Publisher itself is built by `open`
        import importlib

        for name in ("pyarrow.parquet", "robo_ray.stages.validate", "robo_ray.stages.report_html"):
            importlib.import_module(name)

    def open(self, spec: PublishSpec) -> float:
        """Take the job; returns the instant it is open (logs/timings.json: publisher_open)."""
        Publisher.__init__(self, spec)
        return time.time()


class AttemptCounter(UnitAttempts):
    """Coordinator for `RayExecutor.run` (no Publisher): counts attempts (robo_ray.stages.attempts.UnitAttempts:
    heartbeats, failures, overdue, busy_on) and remembers results."""

    def __init__(self, limits: Limits | None = None) -> None:
        super().__init__(limits)
        self.results: dict[int, dict[str, Any]] = {}

    def begin(self, unit_index: int, worker: str = "", actor: Any = None) -> dict[str, Any]:
        if unit_index in self.results:
            return self.done(unit_index, self.results[unit_index])
        return super().begin(unit_index, worker, actor)

    def record(self, row: dict[str, Any]) -> list[str]:
        unit = UnitResult.from_dict(row).shard_index
        self.end(unit)
        self.results[unit] = row
        return []

    def in_flight(self, done: Any = None) -> dict[int, str]:  # type: ignore[override]
        """Units begun but not recorded yet -> the worker of their latest attempt (as the Publisher's)."""
        return super().in_flight(self.results if done is None else done)

    def get_attempts(self) -> dict[int, int]:
        return self.attempt_counts()
