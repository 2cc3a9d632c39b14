"""`RayExecutor`: the Convert stage as a Ray Dataset on Ray Data's autoscaling actor pool, with a Publisher actor
doing the journal, the commit and Validate.

How a job runs (driver = the process that called `run_pipeline`, e.g. `robo-ray run` or `ray_jobs.convert`):

1. `start()` (called by `run_pipeline` before Discover) brings Ray up in a background thread, with the Publisher
   actor and Ray Data's import, so `ray.init` (~6 s here: GCS, raylet, API server) overlaps Discover and Spec.
2. The driver discovers the source and plans the units (one unit = one output shard = an ordered run of episodes
   sharing source files). The pending units become a Ray Dataset, one row per unit (its index and the pickled
   `Unit`: episode refs only, never frames), longest first, one block per row. `map_batches(UnitMapper,
   batch_size=1, compute=ActorPoolStrategy(min_size=1, max_size=N, initial_size=what fits now,
   max_tasks_in_flight_per_actor=1))` converts them: each actor keeps its `UnitConverter` (PyAV containers,
   filesystems, JPEG encoders) across units, reads, decodes, encodes and writes its shard itself and returns a
   ~1 KB row; frames never enter the object store.
3. Elastic (robo_ray/ray_exec/sizing.py): N is the cluster's ceiling, not its present: `--actors`, else
   `--max-actors`, else the mode applied to what the autoscaler may grow to (when Ray exposes it). On a cluster
   this driver joined, the job asks the autoscaler for one CPU bundle per actor it can use
   (`request_resources`), so nodes are added; Ray Data's pool grows onto them (its upscaling threshold is set to
   1.0: one unit in flight per actor), shrinks when units run out, and the ask shrinks with the units left, so idle
   nodes can go at the tail; it is withdrawn at the end. The final report names the actors and nodes used.
4. A `Publisher` actor (`num_cpus=0`; the same class the in-process path uses) receives `begin`/`record` calls from
   the workers: it counts attempts, appends progress.jsonl, keeps ledger.json, and at the end writes the dataset's
   metadata (the commit), runs Validate and Publish and returns the `RunOutcome`.

Bounded attempts, in rounds: every conversion first asks the Publisher `begin(unit)`, which counts the unit's
attempt; once the count exceeds `max_attempts` the worker commits the unit with every episode quarantined (EP900
"worker crashed N times", EP901 with the last exception, EP902 timed out) and the job goes on. A Python exception
is retried at once by the same actor (`UnitMapper`). A crash, a watchdog kill or a lost node fails the unit's Ray
task (`max_task_retries=0`; Ray Data skips the failed block: `max_errored_blocks=-1`); the actor itself restarts
(`max_restarts=-1`, elsewhere if its node is gone). The units that did not come back run again in another Ray
Data pass, up to `max_attempts + 2` passes; what is still missing then is quarantined by the Publisher (EP901).
Nothing is written twice: a unit's files are committed atomically under plan names, and a unit already recorded
comes back from `begin` as done.

Why Ray Data now (it was taken out in #15 for its start-up cost): the pool must grow with an autoscaling cluster
and shrink at the tail, and Ray Data's actor pool does both; its start-up is measured in bench/ (docs/NOTES.md).

Modes: safe = 1 actor; parallel-half = half the ceiling's CPUs; parallel-max = all but one (at least 1);
`actors=N` overrides. More actors than units are never started. Address: None = in-process `ray.init()` (or the
cluster in `RAY_ADDRESS`, which `ray job submit` sets); "local" = always a new in-process instance; "auto" = the
`ray start` cluster of this machine; "ray://host:port" = Ray Client. `node_count()` tells `run_pipeline` how many
nodes the pool may run on: a local destination on more than one node is refused unless declared shared (RR205).

Watchdog (issue #9, robo_ray/watchdog.py): each worker names its actor handle in `begin` and sends the coordinator
heartbeats (episode started, file opened, frames decoded). While the pool runs, a driver thread asks the coordinator
every `Limits.poll_interval()` for attempts that are silent longer than `convert.read_timeout_s` or running longer
than `convert.unit_timeout_s`, and `ray.kill`s their actors (`no_restart=False`: Ray restarts the actor). The next
attempt converts the unit without the episode that timed out (quarantined EP902, naming the file); a unit that
times out as a whole is quarantined EP902 once its attempts are used up. The decision is made in the driver, not in
the actor, because an actor stuck in C code may not run any Python at all.

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
import warnings
from typing import Any, Iterator, TextIO

import ray

from robo_ray.errors import RoboRayError, UsageError
from robo_ray.executors.base import JobSpec
from robo_ray.ray_exec.data_context import quiet_data_context, warm_data_actors
from robo_ray.ray_exec.faults import FaultPlan
from robo_ray.ray_exec.local_instance import init_local
from robo_ray.ray_exec.monitors import PoolUsage, UsageSampler, Watchdog
from robo_ray.ray_exec.sizing import MODES, PoolSize, ResourceAsk, actors_for_mode, autoscaler_ceiling_cpus
from robo_ray.ray_exec.status import Status
from robo_ray.ray_exec.worker import AttemptCounter, LatePublisher, WorkerContext
from robo_ray.stages.plan import Unit
from robo_ray.stages.progress import ProgressFn
from robo_ray.stages.publisher import PublishSpec
from robo_ray.stages.run_log import RunOutcome
from robo_ray.stages.unit_failures import UNIT_FAILED, quarantine_lines, quarantine_unit
from robo_ray.writers import UnitResult

DEFAULT_MAX_ATTEMPTS = 3
log = logging.getLogger("robo_ray.ray_exec")

__all__ = ["RayExecutor", "actors_for_mode", "MODES"]


# Ray 2.60 (pinned) marks map_batches' ray_remote_args_fn deprecated for 2.64; a user's run should not print that
# line. One filter for the process: warnings.catch_warnings around the call would swap the global filters while the
# driver's other threads run (it is not thread-safe).
warnings.filterwarnings("ignore", message=".*ray_remote_args_fn.*deprecated")


def own_instance_kwargs(object_store_mb: int, num_cpus: int | None = None) -> dict[str, Any]:
    """`ray.init` arguments of the Ray instance robo-ray starts itself (no cluster to join). worker_niceness 0: Ray
    starts workers at nice 15 (its daemons first); on a shared laptop that starves the converting actors behind any
    nice-0 process (NOTES: "Ray workers at nice 15")."""
    kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING,
                              "object_store_memory": object_store_mb << 20, "_system_config": {"worker_niceness": 0}}
    if num_cpus:
        kwargs["num_cpus"] = num_cpus
    return kwargs


class RayExecutor:
    """Converts units on Ray Data's autoscaling actor pool (see the module docstring)."""

    def __init__(self, mode: str = "safe", actors: int | None = None, address: str | None = None, *,
                 max_actors: int | None = None, max_attempts: int | None = None,
                 status_interval_s: float | None = None, object_store_mb: int = 256,
                 num_cpus: int | None = None) -> None:
        if mode not in MODES:
            raise UsageError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        for flag, value in (("--actors", actors), ("--max-actors", max_actors)):
            if value is not None and value < 1:
                raise UsageError(f"{flag} must be at least 1, got {value}")
        self.mode, self.actors, self.max_actors, self.address = mode, actors, max_actors, address
        env_attempts = os.environ.get("ROBO_RAY_MAX_ATTEMPTS")
        self.max_attempts = max(1, int(max_attempts or env_attempts or DEFAULT_MAX_ATTEMPTS))
        if status_interval_s is None:
            status_interval_s = float(os.environ.get("ROBO_RAY_STATUS_INTERVAL_S", "10"))
        self.status_interval_s = status_interval_s
        self.object_store_mb, self.num_cpus = object_store_mb, num_cpus
        self.last_actor_count: int | None = None  # the pool's maximum for the last job
        self.last_attempts: dict[int, int] = {}
        self.usage = PoolUsage()
        # start-up instants (time.time()) for logs/timings.json: ray_ready, publisher_open, pool_requested,
        # first_actor_ready (the first pool actor's constructor done)
        self.startup: dict[str, float] = {}
        self._cluster_cpus: float | None = None
        self._started_ray = False
        self.publisher_name: str | None = None
        self._starter: threading.Thread | None = None  # `start`: brings Ray up in the background
        self._ready, self._release = threading.Event(), threading.Event()
        self._start_error: BaseException | None = None
        self._publisher: Any = None  # a LatePublisher actor started by `start`, opened by `run_job`

    # ---- cluster ----------------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        if self._cluster_cpus is None:
            return f"ray {self.mode}" + (f" ({self.actors} actors)" if self.actors else "")
        n = self.last_actor_count or actors_for_mode(self.mode, self._cluster_cpus, self.actors or self.max_actors)
        how = "explicit" if self.actors else ("elastic" if self.max_actors else self.mode)
        return f"ray {how}: up to {n} actor(s), {self._cluster_cpus:g} CPUs at start"

    def connect(self) -> float:
        """Initialise Ray if needed; returns the cluster's CPU count now."""
        if threading.current_thread() is not self._starter:
            self._join_starter()
        if not ray.is_initialized():
            addr = self.address
            if self._own_instance():
                init_local(**own_instance_kwargs(self.object_store_mb, self.num_cpus))
            else:
                try:
                    ray.init(address=addr or None, logging_level=logging.WARNING)
                except ConnectionError as exc:
                    where = addr or os.environ.get("RAY_ADDRESS")
                    raise UsageError(f"cannot connect to the Ray cluster at {where}: {exc}") from exc
            self._started_ray = True
        self._cluster_cpus = float(ray.cluster_resources().get("CPU", 0.0))
        return self._cluster_cpus

    def _own_instance(self) -> bool:
        """Whether `connect` starts a new in-process Ray instance (one node) rather than joining a cluster."""
        addr = self.address
        return addr in (None, "", "local") and not (addr is None and os.environ.get("RAY_ADDRESS"))

    def node_count(self) -> int:
        """Nodes the pool may run on: 1 for the in-process instance this executor would start (known without
        starting it); on a cluster, the alive nodes, and at least 2 when its autoscaler may add CPUs (a node that
        joins later must see the destination too)."""
        if self._own_instance():  # even while `start` is bringing it up: never wait for it here
            return 1
        cpus = self.connect()
        alive = sum(1 for node in ray.nodes() if node.get("Alive"))
        ceiling = autoscaler_ceiling_cpus()
        return max(alive, 2) if ceiling and ceiling > cpus else alive

    def owns_instance(self) -> bool:
        """Whether this executor started the Ray instance it runs on (rather than joining a cluster)."""
        # a start still under way counts: a run refused early (e.g. its destination exists) ends it the same way
        return self._own_instance() and (self._starter is not None or (bool(self._started_ray)
                                                                       and ray.is_initialized()))

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

    # ---- start-up ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Bring the cluster, the Publisher actor and Ray Data's import up in the background while Discover and
        Spec run on the driver (`connect` waits for them)."""
        if self._starter is None:
            self._ready.clear()
            self._starter = threading.Thread(target=self._start_cluster, name="robo-ray-start", daemon=True)
            self._starter.start()

    def _start_cluster(self) -> None:
        # ray.init off the main thread warns that it set no SIGTERM handler: SIGTERM then ends the driver the
        # default way and the head processes it started go with it (fate-shared), which is what a CLI wants
        logging.getLogger("ray._private.worker").addFilter(_DropMessage("SIGTERM handler is not set"))
        try:
            self.connect()
            self.startup["ray_ready"] = time.time()
            self._publisher = self._new_publisher()  # its process and imports too, before the job is known
            import ray.data  # noqa: F401 - ~1 s of imports, off the critical path
            warm_data_actors()
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

    def _new_publisher(self) -> Any:
        """A Publisher actor waiting for its job (`LatePublisher.open`): named, so an operator (or a test) can
        look at a running job: ray.get_actor(name).status.remote()."""
        self.publisher_name = f"robo-ray-publisher-{uuid.uuid4().hex[:8]}"
        cls = ray.remote(num_cpus=0, max_restarts=0)(LatePublisher)
        return cls.options(name=self.publisher_name, scheduling_strategy=_on_driver_node()).remote()

    # ---- Discover's scan ---------------------------------------------------------------------------------------
    def scan(self, source: Any, tasks: list[Any]) -> list[Any]:
        """Discover's per-file scan as a Ray Data map over the file list (robo_ray/ray_exec/scan.py): each actor
        opens the source as the driver did (`source`: the config's source section) and returns small per-file
        rows, in task order, for the reader's `merge_scans`. As many actors as fit now (at least one, whose
        pending request grows an autoscaling cluster)."""
        from robo_ray.ray_exec.scan import SourceOpener, scan_with_ray_data

        cpus = self.connect()
        size = PoolSize.plan(self.mode, self.actors, self.max_actors, cpus, len(tasks))
        return scan_with_ray_data(SourceOpener.of(source), tasks, concurrency=size.initial_size,
                                  num_cpus=size.cpus_per_actor)

    # ---- the Ray Dataset --------------------------------------------------------------------------------------
    def _stream(self, units: list[Unit], job: JobSpec, coordinator: Any, opened: Any = None
                ) -> Iterator[UnitResult]:
        """Convert `units` in rounds of Ray Data passes; yield each unit's result once, as it finishes (any
        order). Units whose task failed (crash, kill, lost node) run again in the next round; after
        `max_attempts + 2` rounds the rest is given up (absent from the results; the caller quarantines it)."""
        cpus = self.connect()
        size = PoolSize.plan(self.mode, self.actors, self.max_actors, cpus, len(units))
        self.last_actor_count = size.max_size
        faults = FaultPlan.from_env()
        if faults.active:
            log.warning("TEST-ONLY fault injection active: %s", faults.describe())
            print(f"robo-ray: WARNING test-only fault injection active: {faults.describe()}", file=sys.stderr)
        share = max(cpus, size.cpus_per_actor * size.initial_size) / size.initial_size
        ctx = ray.put(WorkerContext(uuid.uuid4().hex, job, coordinator, self.max_attempts, faults, share, opened))
        ask = ResourceAsk(active=not self._own_instance(), cpus_per_actor=size.cpus_per_actor)
        remaining = {u.index: u for u in units}
        watchdog = Watchdog(coordinator, job.limits)
        sampler = UsageSampler(coordinator, self.usage)
        watchdog.start()
        sampler.start()
        try:
            for round_no in range(self.max_attempts + 2):
                if not remaining:
                    break
                if round_no:
                    log.info("round %d: %d unit(s) did not come back; converting them again", round_no + 1,
                             len(remaining))
                ask.want(min(size.max_size, len(remaining)))
                self.startup.setdefault("pool_requested", time.time())
                for row in _unit_dataset(list(remaining.values()), ctx, size).iter_rows():
                    self.startup.setdefault("first_actor_ready", float(row["ready"]))
                    res = UnitResult.from_dict(pickle.loads(row["result"]))
                    self.usage.converted_on(str(row["worker"]), str(row["node"]))
                    if remaining.pop(res.shard_index, None) is not None:
                        yield res
                    ask.want(min(size.max_size, len(remaining)))
            if remaining:
                log.warning("%d unit(s) did not come back after %d rounds", len(remaining), self.max_attempts + 2)
        finally:
            sampler.stop()
            watchdog.stop()
            ask.withdraw()

    def run(self, units: list[Unit], job: JobSpec) -> Iterator[UnitResult]:
        """The plain Executor protocol: results only (no Publisher actor)."""
        if not units:
            return
        self.connect()
        counter = ray.remote(num_cpus=0)(AttemptCounter).options(scheduling_strategy=_on_driver_node()).remote(
            job.limits)
        seen: set[int] = set()
        try:
            for res in self._stream(units, job, counter):
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
        """Convert and publish: Publisher actor + the Ray Dataset. Returns the outcome computed by the Publisher."""
        stderr = stderr or sys.stderr
        self.connect()
        # this job's instants: an executor that runs a second job keeps only when Ray came up
        self.startup = {k: v for k, v in self.startup.items() if k == "ray_ready"}
        publisher, self._publisher = self._publisher or self._new_publisher(), None
        try:
            opened = publisher.open.remote(spec)
            if spec.previous:  # a resume: the Publisher's ledger says what is left, so wait for it
                self.startup["publisher_open"] = _raise_cause(opened)
                return self._run_with_publisher(publisher, units, job, progress, stderr, None)
            # a new run: every unit is pending, so the pool starts while the Publisher opens (its workers wait for
            # `opened` before their first call; ~1-4 s of start-up no longer in a row)
            return self._run_with_publisher(publisher, units, job, progress, stderr, opened)
        finally:
            ray.kill(publisher)

    def _run_with_publisher(self, publisher: Any, units: list[Unit], job: JobSpec,
                            progress: ProgressFn | None, stderr: TextIO, opened: Any) -> RunOutcome:
        if opened is None:
            by_index = {u.index: u for u in units}  # the driver's own units: the plan is not shipped back
            pending: list[Unit] = [by_index[i] for i in ray.get(publisher.pending_indices.remote())]
            st = ray.get(publisher.status.remote())
        else:
            pending = sorted(units, key=lambda u: u.index)
            st = {"units_done": 0, "episodes_total": sum(len(u.refs) for u in units), "episodes_done": 0,
                  "steps_done": 0}
        size = PoolSize.plan(self.mode, self.actors, self.max_actors, self._cluster_cpus or 0.0,
                             max(1, len(pending)))
        self.last_actor_count = size.max_size
        label = self.name
        publisher.set_executor_name.remote(label)  # after `open`: one caller's calls run in order
        interval = self.status_interval_s if not _isatty(stderr) else 0.0
        status = Status(len(units), st["episodes_total"], sum(sum(u.refs.lengths()) for u in units), stderr,
                        progress, interval, label,
                        poll=lambda: ray.get(publisher.in_flight_progress.remote(), timeout=30))
        status.units, status.eps, status.steps = st["units_done"], st["episodes_done"], st["steps_done"]
        status.start()
        try:
            if pending:
                for res in self._stream(pending, job, publisher, opened):
                    for line in quarantine_lines(res):
                        print(line, file=stderr, flush=True)
                    status.add(res)
        finally:
            status.stop()
        if opened is not None:  # the Publisher's own error (e.g. the destination), not what its absence caused
            self.startup["publisher_open"] = _raise_cause(opened)
        self.last_attempts = ray.get(publisher.attempt_counts.remote())
        ray.get(publisher.add_marks.remote(self.startup))
        if pending:
            ray.get(publisher.set_executor_name.remote(f"{label}; {self.usage.describe()}"))
        outcome, echo = _raise_cause(publisher.finish.remote())
        printed = set()
        for line in echo:  # problems found at the end (validation, units Ray gave up on)
            if line not in printed:
                print(line, file=stderr, flush=True)
                printed.add(line)
        return outcome


def _raise_cause(ref: Any) -> Any:
    """`ray.get(ref)`; a robo-ray error raised in the actor (e.g. OutputConflict, StorageError) is raised as itself:
    one line, not a traceback."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, RoboRayError):
            raise exc.cause from None
        raise


def _on_driver_node() -> Any:
    """The coordinator (Publisher) lives on the driver's node: a worker node lost mid-run (spot, drain) must cost
    only its units, never the job's journal. (A driver's node lost is a driver lost: `--resume`.)"""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)


def _unit_dataset(units: list[Unit], ctx: Any, size: PoolSize) -> Any:
    """The Ray Dataset of one round: one row and one block per unit, longest first (the pool's last units are
    short ones, so no actor idles through a long tail), mapped by `UnitMapper` on an autoscaling actor pool."""
    import ray.data
    from ray.data.context import AutoscalingConfig

    from robo_ray.ray_exec.mapper import UnitMapper

    data_ctx = quiet_data_context()
    data_ctx.max_errored_blocks = -1  # a unit whose task failed comes back in the next round, not as a job failure
    # one unit in flight per actor: the pool's utilisation tops at 1.0, so grow at 1.0 (Ray Data's default 1.75
    # assumes queued tasks); never shrink on utilisation (at 0.5, 2 actors lost one whenever one was between two
    # units and paid a new actor's start-up: g1 2 actors fell to 0.52 of the 2-process limit). Idle actors still
    # go at the tail: Ray Data releases them once every unit is handed out.
    data_ctx.autoscaling_config = AutoscalingConfig(actor_pool_util_upscaling_threshold=1.0,
                                                    actor_pool_util_downscaling_threshold=0.0)
    ordered = sorted(units, key=lambda u: (-sum(r.length for r in u.refs), u.index))
    rows = [{"index": u.index, "unit": pickle.dumps(u)} for u in ordered]
    top = min(size.max_size, len(rows))
    compute = ray.data.ActorPoolStrategy(min_size=min(size.min_size, top), max_size=top,
                                         initial_size=min(size.initial_size, top), max_tasks_in_flight_per_actor=1)
    ds = ray.data.from_items(rows, override_num_blocks=len(rows))
    return ds.map_batches(UnitMapper, fn_constructor_kwargs={"ctx": ctx}, batch_size=1, batch_format="numpy",
                          compute=compute, num_cpus=size.cpus_per_actor, ray_remote_args_fn=_actor_options)


def _actor_options() -> dict[str, Any]:
    """The pool actors' Ray options: an actor restarts when it dies (elsewhere if its node is gone); Ray never
    retries its task (the round loop does, bounded by the attempt count); spread over the nodes."""
    return {"max_restarts": -1, "max_task_retries": 0, "scheduling_strategy": "SPREAD"}


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


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
