"""The watchdog: no read or decode hangs a run (a FIFO in place of an MP4, a socket that never answers, a store
that stops sending). No Ray here; robo_ray/executors/in_process.py and robo_ray/ray_exec (actors) use it.

* `Limits`: `convert.unit_timeout_s` (wall time of one attempt at a unit) and `convert.read_timeout_s` (longest
  time without progress: a frame decoded, a file opened, an episode started or finished).
* `ACTIVITY` (robo_ray/activity.py): what this thread's conversion is doing now (unit, episode, the file being
  read). robo_ray/video.py reports each open, seek and decoded frame, `WatchdogHooks` each episode start and end.
* `judge`: limits + how long the attempt has run / been silent + the last snapshot -> `Verdict` (None: fine).
  Silent with a known episode: that episode is quarantined (EP902, naming the file) and the unit redone without
  it; over the unit's wall time, or silent outside an episode: what is left of the unit is quarantined (EP902).
* `ThreadWorker` (in-process mode): the UnitConverter runs in a daemon thread; the caller waits on its progress
  with deadlines and abandons it when the verdict says so (see the class for why a thread); a fresh worker, with a
  fresh UnitConverter, takes the next attempt.
* `InFlight` (Ray mode): the coordinator's (Publisher actor's) per-unit attempt state: start time, last heartbeat,
  the attempt's actor handle. `overdue()` returns the actors the driver must `ray.kill` (a process can always be
  killed; Ray restarts it and retries the unit, skipping the episodes that timed out).
"""
from __future__ import annotations

import dataclasses
import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable

from robo_ray.activity import ACTIVITY, Abandoned
from robo_ray.episode import QuarantineRecord
from robo_ray.errors import EpisodeTimedOut, RoboRayError

if TYPE_CHECKING:
    from robo_ray.stages.plan import Unit
    from robo_ray.writers.base import UnitResult

TIMED_OUT = EpisodeTimedOut.code  # EP902
WORKER_BEAT_S = 0.5  # an in-process worker thread's progress messages: at most this often
ACTOR_BEAT_S = 1.0  # an actor's heartbeats to the Publisher: at most this often
STARTUP_TIMEOUT_S = 120.0  # a worker must have built its converter within this (plus read_timeout_s)


def _s(x: float) -> str:
    return f"{x:g}"


@dataclass(frozen=True)
class Limits:
    unit_timeout_s: float | None = None
    read_timeout_s: float | None = None

    @classmethod
    def from_config(cls, convert_cfg: Any) -> "Limits":
        return cls(getattr(convert_cfg, "unit_timeout_s", None), getattr(convert_cfg, "read_timeout_s", None))

    @property
    def active(self) -> bool:
        return bool(self.unit_timeout_s or self.read_timeout_s)

    def exceeded(self, elapsed_s: float, silent_s: float) -> str | None:
        """"read" (no progress for read_timeout_s), "unit" (over unit_timeout_s) or None."""
        if self.read_timeout_s and silent_s >= self.read_timeout_s:
            return "read"
        if self.unit_timeout_s and elapsed_s >= self.unit_timeout_s:
            return "unit"
        return None

    def until_next(self, elapsed_s: float, silent_s: float, cap: float = 1.0) -> float:
        """Seconds until the earliest limit could be exceeded (at most `cap`)."""
        left = [cap]
        if self.read_timeout_s:
            left.append(self.read_timeout_s - silent_s)
        if self.unit_timeout_s:
            left.append(self.unit_timeout_s - elapsed_s)
        return max(0.01, min(left))

    def poll_interval(self) -> float:
        """How often a supervisor should look: a quarter of the shortest limit, 0.2..5 s."""
        shortest = min(x for x in (self.unit_timeout_s, self.read_timeout_s, 20.0) if x)
        return min(5.0, max(0.2, shortest / 4))


class WatchdogHooks:
    """Convert hooks (robo_ray.stages.convert.ConvertHooks) reporting each episode's start and end to ACTIVITY."""

    def before_episode(self, ref: Any) -> None:
        ACTIVITY.start_episode(ref.episode_index, ref.source_files(), ref.data_path)

    def after_episode(self, ref: Any) -> None:
        ACTIVITY.end_episode(ref.length)  # an abandoned thread stops here at the latest: its unit is never committed

    def quarantined(self, ref: Any) -> None:
        ACTIVITY.end_episode(quarantined=True)


# ---- verdicts ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    code: str
    reason: str
    episode: int | None  # None: the whole unit (what is left of it) is quarantined
    file: str | None

    def record(self) -> dict[str, Any]:
        assert self.episode is not None
        return QuarantineRecord(self.episode, self.code, self.reason, self.file).to_dict()


def _doing(snap: dict[str, Any], episode: bool = True) -> str:
    file, ep = snap.get("file"), snap.get("episode")
    if file:
        return f"{snap.get('what') or 'reading'} {file}" + (f" (episode {ep})" if episode and ep is not None else "")
    return f"converting episode {ep}" if ep is not None else "before its first episode"


def judge(limits: Limits, elapsed_s: float, silent_s: float, snap: dict[str, Any]) -> Verdict | None:
    over = limits.exceeded(elapsed_s, silent_s)
    if over is None:
        return None
    ep, file = snap.get("episode"), snap.get("file")
    if over == "read":
        reason = f"timed out after {_s(limits.read_timeout_s or 0)} s {_doing(snap, False)} (convert.read_timeout_s)"
        return Verdict(TIMED_OUT, reason, ep, file)
    reason = f"unit timed out after {_s(limits.unit_timeout_s or 0)} s (convert.unit_timeout_s), last " \
             f"{_doing(snap)}"
    return Verdict(TIMED_OUT, reason, None, file)


# ---- a unit minus its timed-out episodes ------------------------------------------------------------------------
def without(unit: Unit, skip: Iterable[int]) -> Unit:
    gone = set(skip)
    return dataclasses.replace(unit, refs=tuple(r for r in unit.refs if r.episode_index not in gone)) if gone else unit


def with_quarantined(res: UnitResult, records: Iterable[dict[str, Any]]) -> UnitResult:
    """`res` (a shard of the unit minus skipped episodes) plus the skipped episodes' records, in episode order."""
    records = list(records)
    if records:
        res.quarantined = sorted(list(res.quarantined) + records, key=lambda q: q["episode_index"])
    return res


# ---- in-process: the converter in a worker thread that can be abandoned ----------------------------------------
@dataclass
class Outcome:
    kind: str  # done | error | stuck
    result: UnitResult | None = None
    error: BaseException | None = None
    verdict: Verdict | None = None


class ThreadWorker:
    """A UnitConverter (built from a JobSpec) driven by one daemon thread; the caller waits on its progress with
    deadlines and abandons it when it is stuck.

    A thread and not a child process: PyAV releases the GIL in FFmpeg's open/read/seek/decode and Python file
    reads release it while they wait, so the caller keeps running; and in-process means in this process
    (fsspec filesystems registered at run time, monkeypatches, a SIGKILL that should end the run). An abandoned
    thread cannot be stopped: it stays blocked (a daemon thread does not delay the exit), or raises `Abandoned` at
    its next report and aborts its shard."""

    _count = 0

    def __init__(self, job: Any, limits: Limits) -> None:
        self.limits = limits
        self.busy = False
        self.cancelled = threading.Event()
        self.inbox: queue.SimpleQueue[Unit | None] = queue.SimpleQueue()
        self.outbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        ThreadWorker._count += 1
        self.thread = threading.Thread(target=self._main, args=(job,), daemon=True,
                                       name=f"robo-ray-convert-{ThreadWorker._count}")
        self.thread.start()
        wait = STARTUP_TIMEOUT_S + (limits.read_timeout_s or 0)
        try:
            kind, payload = self.outbox.get(timeout=wait)
        except queue.Empty:
            self.abandon()
            raise RoboRayError(f"the conversion worker did not start within {_s(wait)} s") from None
        if kind == "error":
            raise payload

    def _main(self, job: Any) -> None:
        ACTIVITY.bind(self.cancelled)
        try:
            converter = job.make_converter(WatchdogHooks())
        except BaseException as exc:  # noqa: BLE001 - the caller raises it
            self.outbox.put(("error", exc))
            return
        ACTIVITY.report(lambda snap: self.outbox.put(("beat", snap)), WORKER_BEAT_S)
        self.outbox.put(("ready", None))
        try:
            while (unit := self.inbox.get()) is not None:
                ACTIVITY.begin_unit(unit.index)
                try:
                    res = converter.convert(unit)
                except Abandoned:
                    return
                except BaseException as exc:  # noqa: BLE001 - raised by the caller, as an in-process run would
                    self.outbox.put(("error", exc))
                    continue
                self.outbox.put(("done", res))
        finally:
            converter.close()

    def run(self, unit: Unit, on_beat: Callable[[dict[str, Any]], None] | None = None) -> Outcome:
        """Convert `unit`; abandon the thread when it is silent or over time (then `alive` is False). Each
        progress snapshot also goes to `on_beat` (the progress display)."""
        self.inbox.put(unit)
        self.busy = True
        t0 = last = time.monotonic()
        snap: dict[str, Any] = {"unit": unit.index}
        while True:
            now = time.monotonic()
            verdict = judge(self.limits, now - t0, now - last, snap)
            if verdict is not None:
                self.abandon()
                return Outcome("stuck", verdict=verdict)
            try:
                kind, payload = self.outbox.get(timeout=self.limits.until_next(now - t0, now - last))
            except queue.Empty:
                continue
            if kind == "beat":
                last, snap = time.monotonic(), payload
                if on_beat is not None:
                    on_beat(payload)
                continue
            self.busy = False
            return Outcome("done", result=payload) if kind == "done" else Outcome("error", error=payload)

    @property
    def alive(self) -> bool:
        return not self.cancelled.is_set() and self.thread.is_alive()

    def abandon(self) -> None:
        self.cancelled.set()

    def close(self, wait_s: float = 5.0) -> None:
        """Stop the thread: an idle one closes its converter; one still in a unit (the caller was interrupted)
        aborts its shard at its next report."""
        if self.busy:
            self.abandon()
        self.inbox.put(None)
        self.thread.join(timeout=wait_s)
        self.abandon()


# ---- Ray: in-flight attempts, kept by the coordinator -------------------------------------------------------------
class InFlight:
    """Per-unit attempt state for the driver's watchdog (held by the Publisher actor / AttemptCounter).

    A worker's `begin` registers the attempt (Publisher clock) with its actor handle; heartbeats carry the
    worker's ACTIVITY snapshot; `overdue()` judges every attempt in flight and returns the actors to kill. An
    attempt that timed out on a known episode leaves that episode in `skip` (the next attempt converts the unit
    without it). `timed_out[unit]` says the latest attempt timed out: once the bounded attempts are used up, what
    is left of the unit is quarantined with EP902 (with EP900/EP901 when the latest attempt crashed or raised)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.errors: dict[int, str] = {}  # unit -> its latest attempt's failure (an exception, or a timeout)
        self.attempt: dict[int, int] = {}
        self.begun: dict[int, float] = {}
        self.beat: dict[int, float] = {}
        self.snap: dict[int, dict[str, Any]] = {}
        self.actor: dict[int, Any] = {}
        self.skip: dict[int, dict[int, dict[str, Any]]] = {}
        self.timed_out: dict[int, tuple[int, str]] = {}  # unit -> (the attempt that timed out, why)

    @staticmethod
    def done(attempt: int, row: dict[str, Any]) -> dict[str, Any]:
        """The reply to `begin` for a unit already recorded."""
        return {"attempt": attempt, "done": row, "last_error": None, "skip": [], "timed_out": None}

    def begin(self, unit: int, attempt: int, actor: Any) -> dict[str, Any]:
        """Register attempt number `attempt`; the reply to the worker's `begin`."""
        now = time.monotonic()
        self.attempt[unit], self.begun[unit], self.beat[unit] = attempt, now, now
        self.snap[unit] = {"unit": unit}
        if actor is not None:
            self.actor[unit] = actor
        timed_out = self.timed_out.get(unit)
        if timed_out is not None and timed_out[0] != attempt - 1:  # a later attempt died silently: a crash is latest
            del self.timed_out[unit]
            timed_out = None
        return {"attempt": attempt, "done": None, "last_error": self.errors.get(unit),
                "skip": list(self.skip.get(unit, {}).values()), "timed_out": timed_out[1] if timed_out else None}

    def failed(self, unit: int, error: str) -> None:
        self.errors[unit] = error
        self.timed_out.pop(unit, None)  # the latest failure decides the code

    def heartbeat(self, unit: int, attempt: int, snap: dict[str, Any]) -> None:
        if unit in self.begun and self.attempt.get(unit) == attempt:
            self.beat[unit], self.snap[unit] = time.monotonic(), snap

    def end(self, unit: int) -> None:
        for d in (self.begun, self.beat, self.snap, self.actor):
            d.pop(unit, None)

    def overdue(self) -> list[tuple[int, Any, str]]:
        """(unit, actor handle, reason) of every attempt over a limit; each is returned once."""
        now = time.monotonic()
        out = []
        for unit in [u for u in self.begun if u in self.actor]:
            verdict = judge(self.limits, now - self.begun[unit], now - self.beat[unit], self.snap.get(unit, {}))
            if verdict is None:
                continue
            if verdict.episode is not None:
                self.skip.setdefault(unit, {})[verdict.episode] = verdict.record()
            self.timed_out[unit] = (self.attempt[unit], verdict.reason)
            self.errors[unit] = verdict.reason
            out.append((unit, self.actor[unit], verdict.reason))
            self.end(unit)
        return out
