"""`RayExecutor`: the Convert stage on Ray, with a Publisher actor doing the journal, the commit and Validate.

How a job runs (driver = the process that called `run_pipeline`, e.g. `robo-ray run` or `ray_jobs.convert`):

1. `start()` (called by `run_pipeline` before Discover) brings Ray and the pool's actors up in a background thread,
   so `ray.init` (~6 s here: GCS, raylet, API server) and the actors' imports overlap Discover and Spec.
2. The driver discovers the source (it reads the episode index through fsspec) and plans the units (one unit = one
   output shard = an ordered run of episodes sharing source files). The pool is a plain list of `UnitActor`s
   spread over the cluster's nodes (`scheduling_strategy="SPREAD"`); the driver keeps one unit in flight per actor (`ray.wait`), longest units first. A call carries the job by
   reference (`WorkerContext`, put once) and the pickled `Unit` (episode refs only, no data). Each actor builds one
   `UnitConverter` per job and keeps it (PyAV containers, filesystems, JPEG encoders) across units; it reads,
   decodes, encodes and writes its shard itself and returns a ~1 KB dict: frames never enter the object store.
3. A `Publisher` actor (`num_cpus=0`; the same class the in-process path uses) receives `begin`/`record` calls from
   the workers: it counts attempts, appends progress.jsonl, keeps ledger.json, and at the end writes
   features.json + dataset_info.json (the commit), runs Validate and Publish and returns the `RunOutcome`.

Bounded retries: actors restart without limit (`max_restarts=-1`: a killed actor must come back) and Ray never
retries a call (`max_task_retries=0`); the driver resubmits a unit whose call failed (actor died, killed by the
watchdog, or a Python exception). Every call first asks the Publisher `begin(unit)`, which increments the unit's
attempt count; when the count exceeds `max_attempts`, the worker does not touch the unit again: it commits an empty
shard whose episodes are all quarantined (EP900 "worker crashed N times", or EP901 with the last exception) and the
job goes on. As a backstop the driver stops resubmitting after `max_attempts + 2` calls; the Publisher then
quarantines the unit (EP901) before the commit.

Why not Ray Data (used until #15): `from_items(...).map_batches(ActorPoolStrategy)` cost 6.2 s for a 2-unit job
against 1.9 s for the same two actors called directly (/tmp measurement in docs/NOTES.md), its pool cannot start
before the job's plan exists, and its retry semantics (`max_task_retries=-1`) had to be bounded from outside.

Modes: safe = 1 actor; parallel-half = half the cluster's CPUs; parallel-max = all CPUs but one (at least 1);
`actors=N` overrides. More actors than units are never started. Address: None = in-process `ray.init()` (or the
cluster in `RAY_ADDRESS`, which `ray job submit` sets); "local" = always a new in-process instance; "auto" = the
`ray start` cluster of this machine; "ray://host:port" = Ray Client. `node_count()` tells `run_pipeline` how many
nodes the pool runs on: a local destination on more than one node is refused unless declared shared (RR205).

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

import logging
import os
import pickle
import sys
import threading
import time
import uuid
from collections import deque
from typing import Any, Callable, Iterator, TextIO

import ray

from robo_ray.errors import RoboRayError, UsageError
from robo_ray.executors.base import JobSpec
from robo_ray.ray_exec.faults import FaultPlan
from robo_ray.ray_exec.worker import AttemptCounter, LatePublisher, UnitActor, WorkerContext
from robo_ray.stages.plan import Unit
from robo_ray.stages.progress import ProgressFn, ProgressTracker
from robo_ray.stages.publisher import PublishSpec
from robo_ray.stages.run_log import RunOutcome
from robo_ray.stages.unit_failures import UNIT_FAILED, quarantine_lines, quarantine_unit
from robo_ray.watchdog import Limits
from robo_ray.writers import UnitResult

MODES = ("safe", "parallel-half", "parallel-max")
DEFAULT_MAX_ATTEMPTS = 3
PROGRESS_POLL_S = 0.5  # the progress display asks the Publisher for the actors' latest snapshots this often
PROBES_MAX = 20  # readiness probes of a failed actor before the pool gives up on it
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
        self._starter: threading.Thread | None = None  # `start`: brings Ray and the pool up in the background
        self._ready, self._release = threading.Event(), threading.Event()
        self._start_error: BaseException | None = None
        self._pool: list[Any] = []
        self._publisher: Any = None  # a LatePublisher actor started by `start`, opened by `run_job`

    # ---- cluster ----------------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        if self._cluster_cpus is None:
            return f"ray {self.mode}" + (f" ({self.actors} actors)" if self.actors else "")
        n = self.last_actor_count or actors_for_mode(self.mode, self._cluster_cpus, self.actors)
        return f"ray {self.mode if not self.actors else 'explicit'}: {n} actor(s) on {self._cluster_cpus:g} CPUs"

    def connect(self) -> float:
        """Initialise Ray if needed; returns the cluster's CPU count."""
        if threading.current_thread() is not self._starter:
            self._join_starter()
        if not ray.is_initialized():
            addr = self.address
            if self._own_instance():
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

    def _own_instance(self) -> bool:
        """Whether `connect` starts a new in-process Ray instance (one node) rather than joining a cluster."""
        addr = self.address
        return addr in (None, "", "local") and not (addr is None and os.environ.get("RAY_ADDRESS"))

    def node_count(self) -> int:
        """Alive nodes of the cluster the pool runs on: 1 for the in-process instance this executor would start
        (known without starting it), else asked of the cluster (connecting first)."""
        if not ray.is_initialized() and self._own_instance():
            return 1
        self.connect()
        return sum(1 for node in ray.nodes() if node.get("Alive"))

    def owns_instance(self) -> bool:
        """Whether this executor started the Ray instance it runs on (rather than joining a cluster)."""
        return bool(self._started_ray) and self._own_instance() and ray.is_initialized()

    def stop_now(self) -> None:
        """At the end of a process that started its own instance: kill every process under this one (Ray's head
        processes, their agents and workers, a read-back child) at once and wait for them, instead of
        `ray.shutdown()`'s graceful stop one by one (2-3 s at the end of every run). Only for a process about to
        exit: Ray is unusable afterwards."""
        import psutil

        procs = psutil.Process().children(recursive=True)
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        # until each is gone or a zombie (dead, its files closed; whoever is its parent then reaps it): waiting for
        # the reaping itself (psutil.wait_procs) took 1.3 s of every run's exit
        deadline = time.monotonic() + 5.0
        while procs and time.monotonic() < deadline:
            procs = [p for p in procs if _still_running(p)]
            if procs:
                time.sleep(0.01)

    def disconnect(self) -> None:
        """At the end of a process that joined a cluster: detach this driver (`ray.shutdown()` only disconnects
        when the instance is not ours), so the cluster sees the job end rather than its driver vanish."""
        if ray.is_initialized():
            ray.shutdown()

    def shutdown(self) -> None:
        """Stop Ray if this executor started it."""
        try:
            self._join_starter()
        except BaseException:  # noqa: BLE001 - shutting down: a failed start has nothing left to stop
            pass
        if self._started_ray and ray.is_initialized():
            ray.shutdown()
        self._started_ray = False
        self._release.set()
        self._starter = None

    # ---- the actor pool ---------------------------------------------------------------------------------------
    def start(self) -> None:
        """Bring the cluster and the pool's actors up in the background while Discover and Spec run on the driver
        (`_stream` waits for them). Without it, `_stream` starts them itself."""
        if self._starter is None:
            self._ready.clear()
            self._starter = threading.Thread(target=self._start_pool, name="robo-ray-start", daemon=True)
            self._starter.start()

    def _start_pool(self) -> None:
        # ray.init off the main thread warns that it set no SIGTERM handler: SIGTERM then ends the driver the
        # default way and the head processes it started go with it (fate-shared), which is what a CLI wants
        logging.getLogger("ray._private.worker").addFilter(_DropMessage("SIGTERM handler is not set"))
        try:
            cpus = self.connect()
            self._pool = self._new_actors(actors_for_mode(self.mode, cpus, self.actors), cpus)
            self._publisher = self._new_publisher()  # its process and imports too, before the job is known
        except BaseException as exc:  # noqa: BLE001 - raised again in the driver's thread by `_join_starter`
            self._start_error = exc
        finally:
            self._ready.set()
        # Stay alive: the processes `ray.init` started here die with this thread (Linux parent-death signal).
        self._release.wait()

    def _join_starter(self) -> None:
        """Wait for `start`'s thread to be done starting; raise what it raised."""
        if self._starter is None:
            return
        self._ready.wait()
        if self._start_error is not None:
            err, self._start_error = self._start_error, None
            raise err

    def _new_actors(self, n: int, cpus: float) -> list[Any]:
        """n pool actors: unlimited restarts (a killed actor comes back), no task retries (the executor resubmits,
        bounded by the attempt count), one CPU each unless more actors than CPUs were asked for, spread over the
        cluster's nodes (SPREAD: with 2 nodes, 2 actors run on different nodes, not both on the driver's)."""
        cpus_per_actor = 1.0 if n <= cpus else max(0.01, round(cpus / n, 2))
        cls = ray.remote(UnitActor).options(num_cpus=cpus_per_actor, max_restarts=-1, max_task_retries=0,
                                            scheduling_strategy="SPREAD")
        return [cls.remote() for _ in range(n)]

    def _new_publisher(self) -> Any:
        """A Publisher actor waiting for its job (`LatePublisher.open`): named, so an operator (or a test) can
        look at a running job: ray.get_actor(name).status.remote()."""
        self.publisher_name = f"robo-ray-publisher-{uuid.uuid4().hex[:8]}"
        cls = ray.remote(num_cpus=0, max_restarts=0)(LatePublisher)
        return cls.options(name=self.publisher_name).remote()

    def _actors(self, n: int) -> list[Any]:
        """n actors of the pool: the ones `start` brought up (extras killed), more if needed."""
        cpus = self.connect()
        pool, extra, self._pool = self._pool[:n], self._pool[n:], []
        for actor in extra:
            ray.kill(actor)
        if len(pool) < n:
            pool += self._new_actors(n - len(pool), cpus)
        return pool

    def _stream(self, units: list[Unit], job: JobSpec, coordinator: Any) -> Iterator[UnitResult]:
        """Run `units` on the pool; yield each unit's result as it finishes (any order). A unit whose call fails
        (its actor died, was killed by the watchdog, or raised) is resubmitted: the worker's `begin` counts the
        attempt and quarantines the unit once `max_attempts` is used up; a unit still failing after
        `max_attempts + 2` calls is given up (absent from the results; the caller quarantines it)."""
        cpus = self.connect()
        n = max(1, min(actors_for_mode(self.mode, cpus, self.actors), len(units)))
        self.last_actor_count = n
        faults = FaultPlan.from_env()
        if faults.active:
            log.warning("TEST-ONLY fault injection active: %s", faults.describe())
            print(f"robo-ray: WARNING test-only fault injection active: {faults.describe()}", file=sys.stderr)
        actors = self._actors(n)
        ctx = ray.put(WorkerContext(uuid.uuid4().hex, job, coordinator, self.max_attempts, faults, cpus / n))
        # longest units first (LPT): the pool's last unit is a short one, so no actor idles through a long tail
        queue = deque(sorted(units, key=lambda u: (-sum(r.length for r in u.refs), u.index)))
        calls: dict[int, int] = {}
        running: dict[Any, tuple[Any, Unit | None]] = {}  # call -> (actor, its unit; None: a readiness probe)
        probes: dict[Any, int] = {}  # actor -> readiness probes sent since its call failed
        idle = list(actors)
        watchdog = _Watchdog(coordinator, job.limits)
        watchdog.start()
        try:
            while queue or any(u is not None for _, u in running.values()):
                while queue and idle:  # one unit in flight per actor: backpressure, no unit queued behind a slow one
                    unit, actor = queue.popleft(), idle.pop()
                    calls[unit.index] = calls.get(unit.index, 0) + 1
                    running[actor.run_unit.remote(ctx, pickle.dumps(unit))] = (actor, unit)
                if not running:  # every actor left the pool: the rest is given up (the caller quarantines it)
                    log.warning("no actor left in the pool; %d unit(s) not converted", len(queue))
                    break
                done, _ = ray.wait(list(running), num_returns=1)
                actor, unit = running.pop(done[0])
                try:
                    row = ray.get(done[0])
                except ray.exceptions.RayError as exc:
                    self._probe(actor, running, probes)  # back to work once Ray has restarted it
                    if unit is not None:
                        self._resubmit_or_give_up(unit, calls[unit.index], exc, queue)
                    continue
                probes.pop(actor, None)
                idle.append(actor)
                if unit is not None:
                    yield UnitResult.from_dict(row)
        finally:
            watchdog.stop()
            for actor in actors:
                ray.kill(actor)

    def _resubmit_or_give_up(self, unit: Unit, calls: int, exc: Exception, queue: deque) -> None:
        if calls < self.max_attempts + 2:
            log.info("unit %s: call %d failed (%s); resubmitting", unit.index, calls, type(exc).__name__)
            queue.appendleft(unit)
        else:
            log.warning("unit %s: giving up after %d calls: %s", unit.index, calls,
                        str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)

    @staticmethod
    def _probe(actor: Any, running: dict[Any, tuple[Any, Unit | None]], probes: dict[Any, int]) -> None:
        """An actor whose call failed (it died, was killed by the watchdog, or raised) gets no unit until a
        `ready` call answers: a unit sent to an actor Ray is still restarting would fail without an attempt.
        An actor that stays unreachable for PROBES_MAX probes leaves the pool."""
        n = probes.get(actor, 0) + 1
        probes[actor] = n
        if n <= PROBES_MAX:
            running[actor.ready.remote()] = (actor, None)
        else:
            log.warning("an actor of the pool did not come back after %d restarts; continuing without it", n - 1)

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
        publisher, self._publisher = self._publisher or self._new_publisher(), None
        try:
            ray.get(publisher.open.remote(spec))
            return self._run_with_publisher(publisher, units, job, progress, stderr, cpus)
        finally:
            ray.kill(publisher)

    def _run_with_publisher(self, publisher: Any, units: list[Unit], job: JobSpec,
                            progress: ProgressFn | None, stderr: TextIO, cpus: float) -> RunOutcome:
        by_index = {u.index: u for u in units}  # the driver's own units: the plan is not shipped back
        pending: list[Unit] = [by_index[i] for i in ray.get(publisher.pending_indices.remote())]
        self.last_actor_count = max(1, min(actors_for_mode(self.mode, cpus, self.actors), max(1, len(pending))))
        spec_name = self.name
        ray.get(publisher.set_executor_name.remote(spec_name))
        st = ray.get(publisher.status.remote())
        interval = self.status_interval_s if not _isatty(stderr) else 0.0
        status = _Status(len(units), st["episodes_total"], sum(sum(u.refs.lengths()) for u in units), stderr,
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


def _still_running(p: Any) -> bool:
    """Whether a killed process has not died yet (a zombie has)."""
    import psutil

    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class _DropMessage(logging.Filter):
    """Drops the log records whose message contains `text`."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


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
