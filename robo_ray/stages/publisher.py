"""The Publisher: where a run's unit results go (plain Python, no Ray). It records each committed unit in the
journal (progress.jsonl, ledger.json: `journal.UnitLedger`), counts attempts and relays the watchdog's view of the
units in flight (`attempts.UnitAttempts`), and at the end commits the dataset's metadata, validates and publishes
(`finish.validate_and_publish`), then writes the commit marker. In-process the Publisher is an ordinary object;
the Ray executor runs the same class as a Ray actor (robo_ray.ray_exec.worker.LatePublisher)."""
from __future__ import annotations

import io
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from robo_ray.config import JobConfig
from robo_ray.episode import QuarantineRecord
from robo_ray.mapping import Mapping
from robo_ray.readers import open_reader
from robo_ray.readers.base import Inventory, Reader
from robo_ray.stages.attempts import UnitAttempts
from robo_ray.stages.destination import publish_commit_marker
from robo_ray.stages.finish import validate_and_publish
from robo_ray.stages.journal import UnitLedger
from robo_ray.stages.plan import Unit
from robo_ray.stages.run_log import RunLog, RunOutcome, utc_now
from robo_ray.stages.target_setup import make_writer
from robo_ray.stages.timings import StageClock
from robo_ray.stages.unit_failures import UNIT_FAILED, quarantine_unit
from robo_ray.stages.check_records import UnitCheck, UnitChecks
from robo_ray.storage import url_to_fs
from robo_ray.watchdog import Limits
from robo_ray.writers import UnitResult


@dataclass
class PublishSpec:
    """Everything the Publisher needs (picklable: it is shipped to a Ray actor)."""

    cfg: JobConfig
    mapping_json: str
    inv: Inventory
    units: list[Unit]
    fingerprint: dict[str, str]
    previous: list[dict[str, Any]] = field(default_factory=list)  # committed shards of a resumed run
    executor_name: str = "in-process (1 worker)"
    archive: bool = False
    log_lines: list[str] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)
    elapsed_before: float = 0.0  # seconds spent on discover/spec/plan
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    clock: StageClock = field(default_factory=StageClock)  # stage timings, written to logs/timings.json
    journal_parts: bool = False  # units journaled as parts on local disks too (`journal.Journal`)


class Publisher:
    """Collects result rows: progress.jsonl, ledger.json, attempt counts; at the end commit, validate, publish.

    Plain Python; `robo_ray.ray_exec` runs it as a Ray actor (then workers call `begin`/`record` remotely)."""

    def __init__(self, spec: PublishSpec, log: RunLog | None = None, reader: Reader | None = None) -> None:
        self.spec = spec
        self.cfg = spec.cfg
        self.mapping = Mapping.model_validate_json(spec.mapping_json)
        self.fs, self.root = url_to_fs(self.cfg.target.url, self.cfg.target.storage_options)
        self.writer = make_writer(self.cfg, self.mapping)
        self.units = {u.index: u for u in spec.units}
        self.total_episodes = sum(len(u.refs) for u in spec.units)
        self.total_steps = sum(sum(u.refs.lengths()) for u in spec.units)
        if log is None:  # inside an actor: buffer the echo, the driver prints what finish() returns
            log = RunLog(stderr=io.StringIO(), lines=list(spec.log_lines), errors=list(spec.log_errors))
        self.log = log
        self._reader = reader
        self.open_source: Callable[[], Reader] | None = None  # the report's own source reader (default: the URL's)
        self.unit_checks = UnitChecks(self.mapping)  # merged as units are recorded (resumed units: at finish)
        self.tries = UnitAttempts(Limits.from_config(self.cfg.convert))  # flight: the Ray driver's watchdog
        self._t0 = time.monotonic()
        self.book = UnitLedger(self.fs, self.root, spec.fingerprint,
                               [self.writer.unit_filenames(u)[0] for _, u in sorted(self.units.items())],
                               spec.previous, self.tries.attempt_counts, spec.journal_parts)
        self.results = self.book.results  # unit -> its recorded result
        self.writer.prepare_verify(self.cfg.validate_.tfds_readback)  # overlaps the conversion

    # ---- what to run ------------------------------------------------------------------------------------------
    def pending(self) -> list[Unit]:
        return [u for i, u in sorted(self.units.items()) if i not in self.results]

    def pending_indices(self) -> list[int]:
        """The indices of `pending` (what a driver that holds the plan asks for)."""
        return [i for i in sorted(self.units) if i not in self.results]

    def status(self) -> dict[str, Any]:
        done = [r for r in self.results.values()]
        return {"units_done": len(done), "units_total": len(self.units),
                "episodes_done": sum(len(r.episodes) + len(r.quarantined) for r in done),
                "episodes_total": self.total_episodes,
                "steps_done": sum(s for r in done for _, s in r.episodes),
                "quarantined": sum(len(r.quarantined) for r in done)}

    def set_executor_name(self, name: str) -> None:
        self.spec.executor_name = name

    def add_marks(self, marks: dict[str, float]) -> None:
        """Instants the executor saw (e.g. its start-up: Ray ready, the pool's first actor) for logs/timings.json."""
        for name, at in marks.items():
            self.spec.clock.marks.setdefault(name, float(at))

    def attempt_counts(self) -> dict[int, int]:
        return self.tries.attempt_counts()

    def in_flight(self) -> dict[int, str]:
        """Units begun but not recorded yet -> the worker of their latest attempt ("host:pid")."""
        return self.tries.in_flight(self.results)

    # ---- called by workers ------------------------------------------------------------------------------------
    def busy_on(self, host: str) -> int:
        """Units in flight on workers of `host` (a worker's share of its node: robo_ray.ray_exec.worker.NodeShare)."""
        return self.tries.busy_on(host)

    def begin(self, unit_index: int, worker: str = "", actor: Any = None) -> dict[str, Any]:
        """A worker starts a unit: count the attempt; hand back the result if the unit is already done.

        `actor` (the worker's Ray actor handle) lets the driver's watchdog kill a stuck attempt; the reply's `skip`
        lists the episodes earlier attempts timed out on (quarantined, not converted again)."""
        if unit_index in self.results:
            return self.tries.done(unit_index, self.results[unit_index].to_dict())
        if not self.tries.started:  # first_unit_started -> last_unit_committed: the conversion, without start-up
            self.spec.clock.mark_once("first_unit_started")
        reply = self.tries.begin(unit_index, worker, actor)
        n = reply["attempt"]
        if n > 1:
            self.log.info(f"unit {unit_index}: attempt {n} on {worker or 'a worker'} "
                          f"(previous: {self.tries.last_error(unit_index, 'worker died')})")
        return reply

    def heartbeat(self, unit_index: int, attempt: int, snapshot: dict[str, Any]) -> None:
        """A worker's progress (robo_ray.watchdog.ACTIVITY snapshot: episode, file, episodes done so far)."""
        self.tries.heartbeat(unit_index, attempt, snapshot)

    def in_flight_progress(self) -> dict[int, dict[str, Any]]:
        """The latest snapshot of every unit in flight (the driver's progress display polls it)."""
        return self.tries.in_flight_progress(self.results)

    def overdue(self) -> list[tuple[int, Any, str]]:
        """(unit, actor handle, reason) of the attempts over a timeout; the caller kills those actors."""
        out = self.tries.overdue()
        for unit, _, reason in out:
            self.log.info(f"unit {unit}: attempt {self.tries.attempts.get(unit, 0)} {reason}; killing its worker")
        return out

    def failed(self, unit_index: int, error: str) -> None:
        self.tries.failed(unit_index, error)
        self.log.info(f"unit {unit_index}: attempt {self.tries.attempts.get(unit_index, 0)} raised {error}")

    def record(self, row: UnitResult | dict[str, Any], part_written: bool = False) -> list[str]:
        """A unit's shard is committed: journal it (`part_written`: the task that committed it wrote its journal
        part). Returns the problem lines echoed (empty when echoing live)."""
        res = row if isinstance(row, UnitResult) else UnitResult.from_dict(row)
        check, res.check = res.check, None  # the worker's re-read of the unit: merged, never in the ledger
        self.tries.end(res.shard_index)
        if check is not None:
            self.unit_checks.add(UnitCheck.from_dict(check))
        if not self.book.is_new(res):
            return []  # a retried unit that had already been recorded: same bytes, nothing new
        echo_start = self.log.stderr.tell() if isinstance(self.log.stderr, io.StringIO) else None
        for q in res.quarantined:
            self.log.problem(QuarantineRecord(**q).line())
        self.log.info(f"shard {res.filename}: {len(res.episodes)} episodes, {res.num_bytes} bytes, "
                      f"sha256 {res.sha256}")
        self.book.record(res, self.tries.started.get(res.shard_index), utc_now(), part_written)
        self.spec.clock.end("convert", mark="last_unit_committed")
        if echo_start is not None:
            return self.log.stderr.getvalue()[echo_start:].splitlines()
        return []

    def fail_unit(self, unit_index: int, code: str, reason: str) -> UnitResult:
        """Quarantine a whole unit (its shard is committed empty) and record it."""
        res = quarantine_unit(self.writer, self.units[unit_index], code, reason)
        self.record(res)
        return res

    # ---- the end ----------------------------------------------------------------------------------------------
    def _publish_commit_marker(self, outcome: RunOutcome, results: list[UnitResult]) -> None:
        """commit.json, when validation passed (`destination.publish_commit_marker`: of two runs that raced on
        one destination, only the first to get here publishes)."""
        if not outcome.validation_passed:
            return
        marker = {"run_id": self.spec.run_id, "published_at": utc_now(), "exit_code": outcome.exit_code,
                  "dataset": self.writer.dataset_rel, "format": self.writer.format_name,
                  "fingerprint": self.spec.fingerprint,
                  "shards": {name: digest for r in results for name, _, digest in r.all_files()}}
        publish_commit_marker(self.fs, self.root, self.cfg.target.url, marker)

    def reader(self) -> Reader:
        if self._reader is None:
            src = self.cfg.source
            self._reader = open_reader(src.url, src.format, src.storage_options, src.options)
        return self._reader

    def finish(self) -> tuple[RunOutcome, list[str]]:
        """Commit (features.json, dataset_info.json), validate, publish. Returns the outcome and the problem
        lines written during finish (for a caller whose log does not echo live)."""
        echo_start = self.log.stderr.tell() if isinstance(self.log.stderr, io.StringIO) else None
        for u in self.pending():  # an executor that lost a unit: never silently
            self.fail_unit(u.index, UNIT_FAILED, "the executor returned no result for this unit")
        removed = self.writer.remove_stale_temps()
        if removed:
            self.log.info(f"removed {removed} partial shard file(s) left by killed workers")
        results = sorted(self.results.values(), key=lambda r: r.shard_index)
        inv = self.spec.inv
        self.spec.clock.begin("finalize")
        self.writer.finalize(results, inv)
        ledger = self.book.finish()
        quarantined = [q for r in results for q in r.quarantined]
        retried = {k: v for k, v in self.tries.attempts.items() if v > 1}
        if retried:
            self.log.info(f"units retried: {retried}")
        convert_seconds = self.spec.elapsed_before + time.monotonic() - self._t0
        outcome = validate_and_publish(self.cfg, self.writer, inv, self.reader(), ledger, self.log,
                                       self.spec.executor_name, convert_seconds, quarantined, self.spec.archive,
                                       unit_checks=self.unit_checks, clock=self.spec.clock,
                                       open_source=self.open_source)
        self._publish_commit_marker(outcome, results)
        echo = self.log.stderr.getvalue()[echo_start:].splitlines() if echo_start is not None else []
        return outcome, echo

