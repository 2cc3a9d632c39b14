"""`InProcessExecutor`: the Convert stage in the calling process, one unit at a time (tests, laptops without
Ray), under the watchdog's worker thread when timeouts are configured."""
from __future__ import annotations

from typing import Any, Callable, Iterator

from robo_ray.executors.base import JobSpec
from robo_ray.stages.plan import Unit
from robo_ray.stages.unit_failures import quarantine_unit
from robo_ray.activity import ACTIVITY
from robo_ray.watchdog import WORKER_BEAT_S, ThreadWorker, WatchdogHooks, with_quarantined, without
from robo_ray.writers import UnitResult, Writer


class InProcessExecutor:
    """Sequential conversion, one unit at a time (tests, laptops without Ray).

    With the watchdog on (`job.limits`, from convert.unit_timeout_s / read_timeout_s) the converter runs in a
    worker thread (robo_ray.watchdog.ThreadWorker) that is abandoned when a read makes no progress or a unit runs
    over its time: the episode being read is quarantined (EP902, naming the file) and a fresh worker converts the
    rest of the unit without it; a unit over its time (or stuck outside an episode) is quarantined whole. Without
    limits the converter runs in the calling thread."""

    name = "in-process (1 worker)"

    def __init__(self) -> None:
        self.on_beat: Callable[[dict[str, Any]], None] | None = None  # progress snapshots (ACTIVITY), per episode

    def start(self) -> None:
        """Nothing to bring up: the converter is built by `run`."""

    def run(self, units: list[Unit], job: JobSpec) -> Iterator[UnitResult]:
        if job.limits.active:
            yield from self._run_watched(units, job)
            return
        conv = job.make_converter(WatchdogHooks() if self.on_beat else None)
        ACTIVITY.report(self.on_beat, WORKER_BEAT_S)
        try:
            for unit in units:
                ACTIVITY.begin_unit(unit.index)
                yield conv.convert(unit)
        finally:
            ACTIVITY.report(None)
            conv.close()

    def _run_watched(self, units: list[Unit], job: JobSpec) -> Iterator[UnitResult]:
        worker: ThreadWorker | None = None
        writer: Writer | None = None
        try:
            for unit in units:
                skip: dict[int, dict[str, Any]] = {}
                while True:
                    worker = worker if worker is not None and worker.alive else ThreadWorker(job, job.limits)
                    out = worker.run(without(unit, skip), self.on_beat)
                    if out.kind == "done":
                        yield with_quarantined(out.result, skip.values())  # type: ignore[arg-type]
                        break
                    if out.kind == "error":
                        raise out.error  # type: ignore[misc]
                    verdict = out.verdict
                    assert verdict is not None
                    if verdict.episode is not None and verdict.episode not in skip:
                        skip[verdict.episode] = verdict.record()  # redo the unit without it, in a fresh worker
                        continue
                    if writer is None:
                        writer = job.make_writer()
                    res = quarantine_unit(writer, without(unit, skip), verdict.code, verdict.reason)
                    yield with_quarantined(res, skip.values())
                    break
        finally:
            if worker is not None:
                worker.close()
