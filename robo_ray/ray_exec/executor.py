"""`RayExecutor`: the Convert stage on Ray, with a Publisher actor doing the journal, the commit and Validate.

How a job runs (driver = the process that called `run_pipeline`, e.g. `robo-ray run` or `ray_jobs.convert`):

1. The driver discovers the source (it reads the episode index through fsspec) and plans the units (one unit = one
   output shard = an ordered run of episodes sharing source files). It builds a Ray Dataset with one row and one
   block per unit (`ray.data.from_items`); a row carries the pickled `Unit` (episode refs only, no data).
2. `map_batches(UnitWorker, batch_size=1, compute=ActorPoolStrategy(size=N, max_tasks_in_flight_per_actor=1))`:
   each actor builds one `UnitConverter` and keeps it (PyAV containers, filesystems, JPEG encoders) across units.
   An actor reads, decodes, encodes and writes its shard itself and returns a ~1 KB JSON row; frames never enter
   the object store. One task in flight per actor, so a slow unit never holds others hostage in its queue.
3. A `Publisher` actor (`num_cpus=0`; the same class the in-process path uses) receives `begin`/`record` calls from
   the workers: it counts attempts, appends progress.jsonl, keeps ledger.json, and at the end writes
   features.json + dataset_info.json (the commit), runs Validate and Publish and returns the `RunOutcome`.

Why Ray Data can be used with bounded retries (checked against the installed Ray 2.60 source,
ray/data/_internal/execution/operators/actor_pool_map_operator.py): Ray Data creates pool actors with
`max_restarts=-1, max_task_retries=-1`, i.e. a unit that kills its worker is retried forever. We keep actor
restarts unlimited (a killed actor must come back) but count attempts ourselves: every call first asks the
Publisher `begin(unit)`, which increments the unit's attempt count. When the count exceeds `max_attempts`, the
worker does not touch the unit again; it commits an empty shard whose episodes are all quarantined (EP900 "worker
crashed N times", or EP901 with the last exception) and the job goes on. As a backstop `max_task_retries` is finite
(`max_attempts + 2`) and `DataContext.max_errored_blocks = -1`, so a unit Ray itself gives up on is dropped from
the stream instead of failing the job; the Publisher then quarantines it (EP901) before the commit.
`DataContext.actor_task_retry_on_errors = True` makes Python exceptions retry under the same budget.

A plain pool of `@ray.remote` actors would give the same control; Ray Data was kept because it gives the actor pool,
backpressure and scheduling for free, and its retry semantics can be bounded this way without patching it.

Modes: safe = 1 actor; parallel-half = half the cluster's CPUs; parallel-max = all CPUs but one (at least 1);
`actors=N` overrides. More actors than units are never started. Address: None = in-process `ray.init()` (or the
cluster in `RAY_ADDRESS`, which `ray job submit` sets); "local" = always a new in-process instance; "auto" = the
`ray start` cluster of this machine; "ray://host:port" = Ray Client.

Watchdog (issue #9, robo_ray/watchdog.py): each worker names its actor handle in `begin` and sends the coordinator
heartbeats (episode started, file opened, frames decoded). While the pool runs, a driver thread asks the coordinator
every `Limits.poll_interval()` for attempts that are silent longer than `convert.read_timeout_s` or running longer
than `convert.unit_timeout_s`, and `ray.kill`s their actors (`no_restart=False`: Ray restarts the actor and retries
the task, which counts as an attempt). The retry converts the unit without the episode that timed out (quarantined
EP902, naming the file); a unit that times out as a whole is quarantined EP902 once its attempts are used up. The
other actors keep converting meanwhile. The decision is made in the driver, not in the actor, because an actor
stuck in C code may not run any Python at all.

Progress: `progress(Progress)` per episode (robo_ray/stages/progress.py; the CLI draws a bar on a TTY): the
actors' heartbeats carry their unit's episode / frame / quarantine counts to the Publisher, and a driver thread
asks it for them every PROGRESS_POLL_S; when stderr is not a TTY (job logs), a one-line status every
`status_interval_s` (env `ROBO_RAY_STATUS_INTERVAL_S`, default 10 s).
"""
from __future__ import annotations

import json
import logging
import os
import pickle
import sys
import threading
import time
import uuid
import warnings
from typing import Any, Callable, Iterator, TextIO

import ray

from robo_ray.errors import RoboRayError, UsageError
from robo_ray.ray_exec.faults import FaultPlan
from robo_ray.ray_exec.worker import AttemptCounter, UnitWorker
from robo_ray.stages.pipeline import (UNIT_FAILED, JobSpec, Publisher, PublishSpec, RunOutcome, quarantine_lines,
                                      quarantine_unit)
from robo_ray.stages.plan import Unit
from robo_ray.stages.progress import ProgressFn, ProgressTracker
from robo_ray.watchdog import Limits
from robo_ray.writers import UnitResult

MODES = ("safe", "parallel-half", "parallel-max")
DEFAULT_MAX_ATTEMPTS = 3
PROGRESS_POLL_S = 0.5  # the progress display asks the Publisher for the actors' latest snapshots this often
log = logging.getLogger("robo_ray.ray_exec")


def actors_for_mode(mode: str, cluster_cpus: float, actors: int | None = None) -> int:
    """Actor count for a mode on a cluster with `cluster_cpus` CPUs (explicit `actors` wins)."""
    if actors:
        return max(1, int(actors))
    cpus = max(1, int(cluster_cpus))
    if mode == "safe":
        return 1
    if mode == "parallel-half":
        return max(1, cpus // 2)
    if mode == "parallel-max":
        return max(1, cpus - 1)
    raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")


class _Status:
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


class RayExecutor:
    """Converts units on a Ray actor pool (see the module docstring)."""

    def __init__(self, mode: str = "safe", actors: int | None = None, address: str | None = None, *,
                 max_attempts: int | None = None, status_interval_s: float | None = None,
                 object_store_mb: int = 256, num_cpus: int | None = None) -> None:
        if mode not in MODES:
            raise UsageError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        if actors is not None and actors < 1:
            raise UsageError(f"--actors must be at least 1, got {actors}")
        self.mode, self.actors, self.address = mode, actors, address
        env_attempts = os.environ.get("ROBO_RAY_MAX_ATTEMPTS")
        self.max_attempts = max(1, int(max_attempts or env_attempts or DEFAULT_MAX_ATTEMPTS))
        if status_interval_s is None:
            status_interval_s = float(os.environ.get("ROBO_RAY_STATUS_INTERVAL_S", "10"))
        self.status_interval_s = status_interval_s
        self.object_store_mb, self.num_cpus = object_store_mb, num_cpus
        self.last_actor_count: int | None = None
        self.last_attempts: dict[int, int] = {}
        self._cluster_cpus: float | None = None
        self._started_ray = False
        self.publisher_name: str | None = None

    # ---- cluster ----------------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        if self._cluster_cpus is None:
            return f"ray {self.mode}" + (f" ({self.actors} actors)" if self.actors else "")
        n = self.last_actor_count or actors_for_mode(self.mode, self._cluster_cpus, self.actors)
        return f"ray {self.mode if not self.actors else 'explicit'}: {n} actor(s) on {self._cluster_cpus:g} CPUs"

    def connect(self) -> float:
        """Initialise Ray if needed; returns the cluster's CPU count."""
        if not ray.is_initialized():
            addr = self.address
            if addr in (None, "", "local") and not (addr is None and os.environ.get("RAY_ADDRESS")):
                kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING,
                                          "object_store_memory": self.object_store_mb << 20}
                if self.num_cpus:
                    kwargs["num_cpus"] = self.num_cpus
                ray.init(address="local", **kwargs)
            else:
                try:
                    ray.init(address=addr or None, logging_level=logging.WARNING)
                except ConnectionError as exc:
                    where = addr or os.environ.get("RAY_ADDRESS")
                    raise UsageError(f"cannot connect to the Ray cluster at {where}: {exc}") from exc
            self._started_ray = True
        self._cluster_cpus = float(ray.cluster_resources().get("CPU", 1.0))
        return self._cluster_cpus

    def shutdown(self) -> None:
        """Stop Ray if this executor started it."""
        if self._started_ray and ray.is_initialized():
            ray.shutdown()
        self._started_ray = False

    # ---- the actor pool ---------------------------------------------------------------------------------------
    def _stream(self, units: list[Unit], job: JobSpec, coordinator: Any) -> Iterator[UnitResult]:
        """Run `units` on the pool; yield each unit's result as it finishes (any order). Units Ray gave up on are
        simply absent (the caller quarantines them)."""
        from ray.data import ActorPoolStrategy, DataContext

        cpus = self._cluster_cpus or self.connect()
        n = max(1, min(actors_for_mode(self.mode, cpus, self.actors), len(units)))
        self.last_actor_count = n
        cpus_per_actor = 1.0 if n <= cpus else max(0.01, round(cpus / n, 2))
        faults = FaultPlan.from_env()
        if faults.active:
            log.warning("TEST-ONLY fault injection active: %s", faults.describe())
            print(f"robo-ray: WARNING test-only fault injection active: {faults.describe()}", file=sys.stderr)
        logging.getLogger("ray.data").setLevel(logging.WARNING)  # its INFO lines would drown the status lines
        ctx = DataContext.get_current()
        saved = {k: getattr(ctx, k) for k in ("max_errored_blocks", "actor_task_retry_on_errors",
                                                "enable_progress_bars")}
        ctx.max_errored_blocks = -1
        ctx.actor_task_retry_on_errors = True
        ctx.enable_progress_bars = False
        watchdog = _Watchdog(coordinator, job.limits)
        try:
            # longest units first (LPT): the pool's last unit is a short one, so no actor idles through a long tail
            by_size = sorted(units, key=lambda u: (-sum(r.length for r in u.refs), u.index))
            items = [{"unit_index": u.index, "unit": pickle.dumps(u)} for u in by_size]
            ds = ray.data.from_items(items, override_num_blocks=len(items))
            with warnings.catch_warnings():
                # max_restarts / max_task_retries go through **ray_remote_args, deprecated in Ray 2.60 (removal
                # planned for 2.64). They are only the backstop: the attempt count in `begin` is the real bound.
                warnings.simplefilter("ignore", category=DeprecationWarning)
                ds = ds.map_batches(
                    UnitWorker, batch_size=1,
                    compute=ActorPoolStrategy(size=n, max_tasks_in_flight_per_actor=1),
                    fn_constructor_kwargs={"job": job, "coordinator": coordinator,
                                           "max_attempts": self.max_attempts, "faults": faults},
                    num_cpus=cpus_per_actor, max_restarts=-1, max_task_retries=self.max_attempts + 2)
            watchdog.start()
            for row in ds.iter_rows():
                yield UnitResult.from_dict(json.loads(row["result"]))
        finally:
            watchdog.stop()
            for k, v in saved.items():
                setattr(ctx, k, v)

    def run(self, units: list[Unit], job: JobSpec) -> Iterator[UnitResult]:
        """The plain Executor protocol: results only (no Publisher actor)."""
        if not units:
            return
        self.connect()
        counter = ray.remote(num_cpus=0)(AttemptCounter).remote(job.limits)
        seen: set[int] = set()
        try:
            for res in self._stream(units, job, counter):
                if res.shard_index not in seen:
                    seen.add(res.shard_index)
                    yield res
            self.last_attempts = ray.get(counter.get_attempts.remote())
        finally:
            ray.kill(counter)
        lost = [u for u in units if u.index not in seen]
        if lost:
            writer = job.make_writer()
            for u in lost:
                yield quarantine_unit(writer, u, UNIT_FAILED, "Ray gave up on this unit after repeated failures")

    def run_job(self, units: list[Unit], job: JobSpec, spec: PublishSpec, *,
                progress: ProgressFn | None = None, stderr: TextIO | None = None) -> RunOutcome:
        """Convert and publish: Publisher actor + actor pool. Returns the outcome computed by the Publisher."""
        stderr = stderr or sys.stderr
        cpus = self.connect()
        publisher_cls = ray.remote(num_cpus=0, max_restarts=0)(Publisher)
        # named, so an operator (or a test) can look at a running job: ray.get_actor(name).status.remote()
        self.publisher_name = f"robo-ray-publisher-{uuid.uuid4().hex[:8]}"
        publisher = publisher_cls.options(name=self.publisher_name).remote(spec)
        try:
            return self._run_with_publisher(publisher, units, job, progress, stderr, cpus)
        finally:
            ray.kill(publisher)

    def _run_with_publisher(self, publisher: Any, units: list[Unit], job: JobSpec,
                            progress: ProgressFn | None, stderr: TextIO, cpus: float) -> RunOutcome:
        pending: list[Unit] = ray.get(publisher.pending.remote())
        self.last_actor_count = max(1, min(actors_for_mode(self.mode, cpus, self.actors), max(1, len(pending))))
        spec_name = self.name
        ray.get(publisher.set_executor_name.remote(spec_name))
        st = ray.get(publisher.status.remote())
        interval = self.status_interval_s if not _isatty(stderr) else 0.0
        status = _Status(len(units), st["episodes_total"], sum(r.length for u in units for r in u.refs), stderr,
                         progress, interval, spec_name,
                         poll=lambda: ray.get(publisher.in_flight_progress.remote(), timeout=30))
        status.units, status.eps, status.steps = st["units_done"], st["episodes_done"], st["steps_done"]
        status.start()
        try:
            if pending:
                for res in self._stream(pending, job, publisher):
                    for line in quarantine_lines(res):
                        print(line, file=stderr, flush=True)
                    status.add(res)
        finally:
            status.stop()
        self.last_attempts = ray.get(publisher.attempt_counts.remote())
        try:
            outcome, echo = ray.get(publisher.finish.remote())
        except ray.exceptions.RayTaskError as exc:  # e.g. OutputConflict, StorageError: one line, not a traceback
            if isinstance(exc.cause, RoboRayError):
                raise exc.cause from None
            raise
        printed = set()
        for line in echo:  # problems found at the end (validation, units Ray gave up on)
            if line not in printed:
                print(line, file=stderr, flush=True)
                printed.add(line)
        return outcome


class _Watchdog:
    """Driver thread: kills the actors of attempts the coordinator finds overdue (see the module docstring)."""

    def __init__(self, coordinator: Any, limits: Limits) -> None:
        self.coordinator, self.limits = coordinator, limits
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.limits.active:
            self._thread = threading.Thread(target=self._loop, name="robo-ray-watchdog", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.limits.poll_interval()):
            try:
                overdue = ray.get(self.coordinator.overdue.remote(), timeout=60)
            except Exception as exc:  # noqa: BLE001 - the coordinator is busy or gone: look again later
                log.debug("watchdog: no answer from the coordinator: %s", exc)
                continue
            for unit, actor, reason in overdue:
                log.info("unit %s: %s; killing its actor", unit, reason)
                try:
                    ray.kill(actor, no_restart=False)
                except Exception as exc:  # noqa: BLE001 - already dead
                    log.debug("watchdog: kill failed: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
