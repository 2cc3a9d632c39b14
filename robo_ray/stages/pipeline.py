"""`robo-ray run`: discover -> spec -> plan -> convert -> validate -> publish, with a pluggable executor
(in-process here; robo_ray.ray_exec provides the Ray actor-pool executor).

The conversion results flow into a `Publisher` (plain Python, no Ray): it appends progress.jsonl, keeps
ledger.json (which shards are committed, their sizes and sha256), counts attempts per unit, and at the end writes
the dataset's metadata (features.json, dataset_info.json: the commit), validates and publishes. In-process the
Publisher is an ordinary object; the Ray executor runs the same class as a Ray actor.

Resume (`resume=True`): the output's job.json and the ledger's plan fingerprint must equal this run's (else
`OutputConflict`, or a fresh start with `overwrite=True`); a shard counts as done when its ledger entry matches the
plan and the file's size (and sha256 with `verify_resume`) equals the entry. Only the other units run. Shard names
come from the plan, so a redone unit rewrites the same bytes under the same name.
"""
from __future__ import annotations

import hashlib
import io
import json
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Iterator, Protocol, TextIO

from robo_ray.config import JobConfig
from robo_ray.episode import EpisodeRef, QuarantineRecord
from robo_ray.errors import (ConfigError, DestinationNotEmpty, LocalDestinationOnCluster, OutputConflict,
                             ValidationFailed)
from robo_ray.mapping import Mapping
from robo_ray.readers import open_reader
from robo_ray.readers.base import Inventory, Reader
from robo_ray.stages.convert import ConvertHooks, ConvertOptions, CpuShare, UnitConverter
from robo_ray.stages.discover import summarize, write_discover_outputs
from robo_ray.stages.journal import JOURNAL_DIR, LEDGER_NAME, Journal, ledger_text, read_ledger
from robo_ray.stages.plan import Unit, assign_val_split
from robo_ray.stages.publish import dataset_checksums, final_report, write_logs
from robo_ray.stages.report_html import start_samples, try_write_report_html
from robo_ray.stages.run_lock import LOCK_NAME, RunLock, check_not_locked
from robo_ray.stages.spec import load_mapping, write_spec_outputs
from robo_ray.stages.timings import StageClock
from robo_ray.stages.validate import (UnitCheck, UnitCheckRunner, UnitChecks, UnitVerifySpec, Validator,
                                     sample_ids, write_validation_outputs)
from robo_ray.storage import create_exclusive, is_local, join, url_to_fs, write_text_atomic
from robo_ray.stages.progress import ProgressFn, ProgressTracker
from robo_ray.watchdog import (ACTIVITY, WORKER_BEAT_S, InFlight, Limits, ThreadWorker, WatchdogHooks,
                               with_quarantined, without)
from robo_ray.writers import DEFAULT_TARGET, REGISTRY as WRITERS, UnitResult, Writer, writer_class

# the run's own files at the output root; each writer adds its dataset's entries (Writer.outputs())
RUN_OUTPUTS = ("inventory.json", "episode_index.csv", "mapping.md", "mapping.yaml", "progress.jsonl",
               "ledger.json", "validation_report.md", "diff_summary.json", "final_report.md", "logs", "job.json",
               "dataset_statistics.json", "commit.json", "report.html", JOURNAL_DIR, LOCK_NAME)


def our_outputs(fs, out_root: str, target_format: str) -> set[str]:
    """The top-level names robo-ray may replace at an output root: the run's files, this target's dataset entries
    and those of the target an earlier run there wrote (its job.json says which). Another target's names are not
    ours here: a user's own `data/` beside an RLDS output is never deleted."""
    names = set(RUN_OUTPUTS)
    formats = {target_format}
    previous = _read_json(fs, join(out_root, "job.json"))
    if isinstance(previous, dict):
        formats.add(str((previous.get("target") or {}).get("format") or DEFAULT_TARGET))
    for fmt in formats:
        entry = WRITERS.get(fmt)
        if entry is not None:
            names |= set(entry.outputs)
    return names


# the commit marker: the run's last write, a conditional create (two runs racing on one destination: one publishes)
COMMIT_MARKER = "commit.json"

# quarantine codes for whole units that never produced a shard (a resume retries them)
UNIT_CRASHED = "EP900"  # the worker process died on every attempt (segfault, abort, OOM kill)
UNIT_FAILED = "EP901"  # the unit raised on every attempt, or the executor lost it
UNIT_TIMED_OUT = "EP902"  # a read made no progress / the unit ran over its time (robo_ray/watchdog.py)
UNIT_FAILURE_CODES = (UNIT_CRASHED, UNIT_FAILED, UNIT_TIMED_OUT)
# config keys that change how a run is supervised, not what it writes: a --resume may change them
EXECUTION_KEYS = (("convert", "unit_timeout_s"), ("convert", "read_timeout_s"), ("convert", "decode_ahead"),
                  ("convert", "decode_thread"), ("target", "shared"))


def busy_on(host: str, workers: Iterable[str]) -> int:
    """How many of `workers` ("host:pid", one per unit in flight) run on `host`."""
    return sum(1 for w in workers if w.rsplit(":", 1)[0] == host)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Executor(Protocol):
    """Runs units and yields their results (in any order).

    An executor may also offer `run_job(units, job, spec, progress=..., stderr=...) -> RunOutcome`, taking over
    conversion *and* publishing (the Ray executor runs the Publisher as an actor); `run_pipeline` uses it when
    present and falls back to `run` + an in-process Publisher otherwise. An executor whose workers may run on
    several machines offers `node_count() -> int`: a local destination is then refused on more than one node unless
    declared shared (`check_shared_destination`).
    """

    name: str

    def start(self) -> None:
        """Begin bringing workers up; called before Discover so their start-up overlaps it."""

    def run(self, units: list[Unit], job: "JobSpec") -> Iterator[UnitResult]: ...


@dataclass(frozen=True)
class JobSpec:
    """What a worker needs to build its UnitConverter and writer (picklable)."""

    source_url: str
    source_format: str | None
    mapping_json: str
    out_url: str
    options: ConvertOptions
    limits: Limits = field(default_factory=Limits)  # the watchdog's timeouts (none: no watchdog)
    target_format: str = DEFAULT_TARGET
    target_options: dict[str, Any] = field(default_factory=dict)
    verify: UnitVerifySpec | None = None  # re-read each unit right after its commit (Writer.verify_unit)

    def make_writer(self) -> Writer:
        mapping = Mapping.model_validate_json(self.mapping_json)
        return writer_class(self.target_format)(self.out_url, mapping, self.options.target_storage_options,
                                                self.target_options)

    def make_converter(self, hooks: ConvertHooks | None = None, cpus: CpuShare = None) -> UnitConverter:
        """The worker's converter; `cpus`: its share of the CPUs (robo_ray.stages.convert.CpuShare)."""
        writer = self.make_writer()
        return UnitConverter(self.source_url, self.source_format, writer.mapping, writer, self.options,
                             hooks=hooks, verify=self.verify, cpus=cpus)


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


@dataclass
class RunLog:
    """Collects convert.log / errors.log lines and echoes problems to stderr, one line each."""

    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def info(self, msg: str) -> None:
        self.lines.append(f"{_now()} INFO {msg}")

    def warning(self, msg: str) -> None:
        self.lines.append(f"{_now()} WARNING {msg}")
        print(f"warning: {msg}", file=self.stderr, flush=True)

    def problem(self, msg: str) -> None:
        self.lines.append(f"{_now()} ERROR {msg}")
        self.errors.append(f"{_now()} {msg}")
        print(msg, file=self.stderr, flush=True)


@dataclass
class RunOutcome:
    exit_code: int
    out_url: str
    dataset_dir: str
    episodes_written: int
    quarantined: list[dict[str, Any]]
    validation_passed: bool
    message: str
    report_html: str | None = None  # URL of report.html, None when it could not be written


def prepare_destination(fs, out_root: str, overwrite: bool, out_url: str,
                        target_format: str = DEFAULT_TARGET) -> None:
    """Refuse a non-empty destination unless --overwrite; with it, remove only robo-ray's own outputs."""
    if not fs.exists(out_root):
        fs.makedirs(out_root, exist_ok=True)
        return
    if not fs.isdir(out_root):
        raise DestinationNotEmpty(f"destination {out_url} exists and is not a directory")
    entries = [e.rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(out_root, detail=False)]
    if LOCK_NAME in entries and not overwrite:  # another run got the lock since check_not_locked
        check_not_locked(fs, out_root, out_url, take_over=False)
    if entries and not overwrite:
        raise DestinationNotEmpty(f"destination {out_url} is not empty (use --overwrite to replace its outputs)")
    # a temp left by a killed write of one of our own outputs (ledger.json.tmp-xxxx) is ours too
    ours = our_outputs(fs, out_root, target_format)
    foreign = [e for e in entries if e.split(".tmp-", 1)[0] not in ours and not e.endswith(".tar.gz")]
    if overwrite and foreign:
        raise DestinationNotEmpty(f"destination {out_url} holds files robo-ray did not write "
                                  f"({', '.join(sorted(foreign)[:5])}); refusing to overwrite")
    for e in entries:
        if e != LOCK_NAME:  # the lock is this run's (taken over) or handled by RunLock
            fs.rm(join(out_root, e), recursive=True)


def make_writer(cfg: JobConfig, mapping: Mapping) -> Writer:
    """The configured target's writer (target.format through the registry, target.options to its model)."""
    return writer_class(cfg.target.format)(cfg.target.url, mapping, cfg.target.storage_options, cfg.target.options)


def resolve_mapping(cfg: JobConfig, inv: Inventory) -> Mapping:
    if cfg.mapping_file:
        with open(cfg.mapping_file, encoding="utf-8") as f:
            mapping = load_mapping(f.read(), cfg.mapping_file)
    else:
        mapping = writer_class(cfg.target.format).default_schema(inv, cfg.images, cfg.target.name)
        mapping.version = cfg.target.version
    if cfg.source.instruction is not None:  # the config / --instruction wins over an edited mapping's
        mapping.defaults.instruction = cfg.source.instruction
    mapping.check_against(inv.features)
    return mapping


# ---- resume: is the output the same job, and which shards are already committed ------------------------------
def _config_view(cfg_dump: dict[str, Any]) -> dict[str, Any]:
    """The part of job.json that decides "same job": everything but where the output is (we are reading it) and
    the watchdog's timeouts (EXECUTION_KEYS)."""
    view = json.loads(json.dumps(cfg_dump))
    view.get("target", {}).pop("url", None)
    for section, key in EXECUTION_KEYS:
        view.get(section, {}).pop(key, None)
    return view


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else k))
    return out


def config_differences(previous: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Dotted keys whose values differ between two job.json dumps (ignoring target.url)."""
    a, b = _flat(_config_view(previous)), _flat(_config_view(current))
    return sorted(k for k in set(a) | set(b) if a.get(k, "<unset>") != b.get(k, "<unset>"))


def apply_val_split(cfg: JobConfig, writer: Writer, refs: list[EpisodeRef], log: RunLog) -> list[EpisodeRef]:
    """`splits.val_fraction` (--val-fraction): the episodes moved to `val` (stages.plan.assign_val_split), logged."""
    if cfg.splits.val_fraction <= 0:
        return refs
    if not writer.keeps_splits:
        raise ConfigError(f"--val-fraction / splits.val_fraction: the {writer.title} target has no splits; "
                          "drop it or choose another target")
    refs = assign_val_split(refs, cfg.splits.val_fraction, writer.mapping.dataset_name)
    val = [r.episode_index for r in refs if r.split == "val"]
    log.info(f"splits: val_fraction {cfg.splits.val_fraction} -> {len(val)} of {len(refs)} episodes in val "
             f"(source episode indices {val[:50]}{' ...' if len(val) > 50 else ''})")
    return refs


def plan_fingerprint(mapping: Mapping, units: list[Unit]) -> dict[str, str]:
    """Hashes of what the shards' bytes depend on besides the config: the mapping and the unit plan."""
    plan = hashlib.sha256(b"[")  # = sha256(json.dumps([[index, num_shards, [episode rows]] per unit])), streamed
    for k, u in enumerate(units):
        rows = [[r.episode_index, r.length, list(r.source_files())] + ([r.split] if r.split else []) for r in u.refs]
        plan.update(((", " if k else "") + json.dumps([u.index, u.num_shards, rows])).encode())
    plan.update(b"]")
    return {"mapping": hashlib.sha256(mapping.model_dump_json().encode()).hexdigest(), "plan": plan.hexdigest()}


def _read_json(fs, path: str) -> Any:
    try:
        return json.loads(fs.cat_file(path))
    except FileNotFoundError:
        return None
    except (ValueError, OSError):
        return None


def committed_units(writer: Writer, units: list[Unit], ledger: dict[str, Any] | None,
                    verify: bool = True) -> list[UnitResult]:
    """The ledger's units that are really done: entry matches the plan, every file's size (and sha256) match.

    Units quarantined as a whole (worker crashes, repeated failures) are not done: a resume retries them."""
    done: list[UnitResult] = []
    by_index = {u.index: u for u in units}
    for entry in (ledger or {}).get("shards", []):
        try:
            res = UnitResult.from_dict(entry)
        except TypeError:
            continue
        unit = by_index.get(res.shard_index)
        if unit is None or res.filename not in ("", *writer.unit_filenames(unit)):
            continue
        if any(q.get("code") in UNIT_FAILURE_CODES for q in res.quarantined):
            continue
        covered = [e for e, _ in res.episodes] + [q["episode_index"] for q in res.quarantined]
        if sorted(covered) != sorted(unit.episode_indices):
            continue
        if writer.is_committed(res, verify):
            done.append(res)
    return done


def quarantine_unit(writer: Writer, unit: Unit, code: str, reason: str) -> UnitResult:
    """Commit a unit none of whose episodes could be converted, every episode quarantined with `reason` (the
    writer decides what an empty unit leaves, e.g. an empty shard where the format names files by their count)."""
    eps = unit.episode_indices
    span = f"{eps[0]}..{eps[-1]}" if len(eps) > 3 else ", ".join(map(str, eps))
    return writer.quarantine_unit(unit, [
        QuarantineRecord(ref.episode_index, code, f"{reason} (unit {unit.index}, episodes {span})",
                         ref.data_path).to_dict() for ref in unit.refs])


def quarantine_lines(res: UnitResult) -> list[str]:
    return [QuarantineRecord(**q).line() for q in res.quarantined]


# ---- the publisher -------------------------------------------------------------------------------------------
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


class Publisher:
    """Collects result rows: progress.jsonl, ledger.json, attempt counts; at the end commit, validate, publish.

    Plain Python; `robo_ray.ray_exec` runs it as a Ray actor (then workers call `begin`/`record` remotely)."""

    LEDGER_FLUSH_S = 1.0  # rewrite ledger.json at most this often (always at the end)
    LEDGER_SHARE = 0.05  # ... and at most this fraction of the run's time (its size grows with the run)

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
        self.results: dict[int, UnitResult] = {}
        for d in spec.previous:
            r = UnitResult.from_dict(d)
            self.results[r.shard_index] = r
        self.resumed = set(self.results)
        self.unit_checks = UnitChecks(self.mapping)  # merged as units are recorded (resumed units: at finish)
        self.attempts: dict[int, int] = {}
        self.started: dict[int, str] = {}
        self.workers: dict[int, list[str]] = {}
        self.flight = InFlight(Limits.from_config(self.cfg.convert))  # the Ray driver's watchdog (executor.py)
        self._t0 = time.monotonic()
        self._last_flush = 0.0
        self._flush_cost = 0.0  # seconds the last ledger.json rewrite took
        self._ledger_path = join(self.root, LEDGER_NAME)
        self.journal = Journal(self.fs, self.root, resumed=bool(self.resumed))
        self.flush_ledger(force=True)
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

    def attempt_counts(self) -> dict[int, int]:
        return dict(self.attempts)

    def in_flight(self) -> dict[int, str]:
        """Units begun but not recorded yet -> the worker of their latest attempt ("host:pid")."""
        return {u: self.workers[u][-1] for u in self.attempts if u not in self.results and self.workers.get(u)}

    # ---- called by workers ------------------------------------------------------------------------------------
    def busy_on(self, host: str) -> int:
        """Units in flight on workers of `host` (a worker's share of its node: robo_ray.ray_exec.worker.NodeShare)."""
        return busy_on(host, (self.workers[u][-1] for u in self.flight.begun if self.workers.get(u)))

    def begin(self, unit_index: int, worker: str = "", actor: Any = None) -> dict[str, Any]:
        """A worker starts a unit: count the attempt; hand back the result if the unit is already done.

        `actor` (the worker's Ray actor handle) lets the driver's watchdog kill a stuck attempt; the reply's `skip`
        lists the episodes earlier attempts timed out on (quarantined, not converted again)."""
        if unit_index in self.results:
            return InFlight.done(self.attempts.get(unit_index, 0), self.results[unit_index].to_dict())
        n = self.attempts.get(unit_index, 0) + 1
        self.attempts[unit_index] = n
        if not self.started:  # first_unit_started -> last_unit_committed: the conversion, without start-up
            self.spec.clock.mark_once("first_unit_started")
        self.started.setdefault(unit_index, _now())
        self.workers.setdefault(unit_index, []).append(worker)
        if n > 1:
            self.log.info(f"unit {unit_index}: attempt {n} on {worker or 'a worker'} "
                          f"(previous: {self.flight.errors.get(unit_index, 'worker died')})")
        return self.flight.begin(unit_index, n, actor)

    def heartbeat(self, unit_index: int, attempt: int, snapshot: dict[str, Any]) -> None:
        """A worker's progress (robo_ray.watchdog.ACTIVITY snapshot: episode, file, episodes done so far)."""
        self.flight.heartbeat(unit_index, attempt, snapshot)

    def in_flight_progress(self) -> dict[int, dict[str, Any]]:
        """The latest snapshot of every unit in flight (the driver's progress display polls it)."""
        return {u: dict(snap) for u, snap in self.flight.snap.items() if u not in self.results}

    def overdue(self) -> list[tuple[int, Any, str]]:
        """(unit, actor handle, reason) of the attempts over a timeout; the caller kills those actors."""
        out = self.flight.overdue()
        for unit, _, reason in out:
            self.log.info(f"unit {unit}: attempt {self.attempts.get(unit, 0)} {reason}; killing its worker")
        return out

    def failed(self, unit_index: int, error: str) -> None:
        self.flight.failed(unit_index, error)
        self.log.info(f"unit {unit_index}: attempt {self.attempts.get(unit_index, 0)} raised {error}")

    def record(self, row: UnitResult | dict[str, Any]) -> list[str]:
        """A unit's shard is committed: journal it. Returns the problem lines echoed (empty when echoing live)."""
        res = row if isinstance(row, UnitResult) else UnitResult.from_dict(row)
        check, res.check = res.check, None  # the worker's re-read of the unit: merged, never in the ledger
        self.flight.end(res.shard_index)
        if check is not None:
            self.unit_checks.add(UnitCheck.from_dict(check))
        old = self.results.get(res.shard_index)
        if old is not None and old.sha256 == res.sha256 and old.episodes == res.episodes:
            return []  # a retried unit that had already been recorded: same bytes, nothing new
        self.results[res.shard_index] = res
        ts = _now()
        started = self.started.get(res.shard_index)
        lines: list[str] = []
        for ep, steps in res.episodes:
            rec = {"episode_id": ep, "status": "completed", "started_at": started, "completed_at": ts,
                   "steps": steps, "shard": res.shard_index}
            lines.append(json.dumps(rec))
        echo_start = self.log.stderr.tell() if isinstance(self.log.stderr, io.StringIO) else None
        for q in res.quarantined:
            lines.append(json.dumps({"episode_id": q["episode_index"], "status": "failed", "started_at": started,
                                     "completed_at": ts, "error": q["reason"], "code": q["code"],
                                     "file": q.get("file"), "shard": None}))
            self.log.problem(QuarantineRecord(**q).line())
        self.log.info(f"shard {res.filename}: {len(res.episodes)} episodes, {res.num_bytes} bytes, "
                      f"sha256 {res.sha256}")
        self.journal.record(res.shard_index, res.to_dict(), lines)
        self.flush_ledger()
        self.spec.clock.end("convert", mark="last_unit_committed")
        if echo_start is not None:
            return self.log.stderr.getvalue()[echo_start:].splitlines()
        return []

    def fail_unit(self, unit_index: int, code: str, reason: str) -> UnitResult:
        """Quarantine a whole unit (its shard is committed empty) and record it."""
        res = quarantine_unit(self.writer, self.units[unit_index], code, reason)
        self.record(res)
        return res

    # ---- journal ----------------------------------------------------------------------------------------------
    def ledger(self, complete: bool = False) -> dict[str, Any]:
        return {"shards": [r.packed() for r in sorted(self.results.values(), key=lambda r: r.shard_index)],
                "num_shards": len(self.units), "fingerprint": self.spec.fingerprint,
                "unit_files": [self.writer.unit_filenames(u)[0] for _, u in sorted(self.units.items())],
                "attempts": {str(k): v for k, v in sorted(self.attempts.items())},
                "resumed_shards": sorted(self.resumed), "complete": complete}

    def flush_ledger(self, force: bool = False, complete: bool = False) -> None:
        now = time.monotonic()
        wait = max(self.LEDGER_FLUSH_S, self._flush_cost / self.LEDGER_SHARE)
        if not force and (not self.journal.appends or now - self._last_flush < wait):
            return  # object stores: the journal's parts hold the units recorded since (journal.py)
        write_text_atomic(self.fs, self._ledger_path, ledger_text(self.ledger(complete)))
        self._last_flush = time.monotonic()
        self._flush_cost = self._last_flush - now

    # ---- the end ----------------------------------------------------------------------------------------------
    def _publish_commit_marker(self, outcome: RunOutcome, results: list[UnitResult]) -> None:
        """Create commit.json only if it does not exist yet (S3 If-None-Match, GCS ifGenerationMatch=0, local
        hard link): of two runs that raced on one destination, only the first to get here publishes."""
        if not outcome.validation_passed:
            return
        marker = {"run_id": self.spec.run_id, "published_at": _now(), "exit_code": outcome.exit_code,
                  "dataset": self.writer.dataset_rel, "format": self.writer.format_name,
                  "fingerprint": self.spec.fingerprint,
                  "shards": {name: digest for r in results for name, _, digest in r.all_files()}}
        path = join(self.root, COMMIT_MARKER)
        try:
            create_exclusive(self.fs, path, json.dumps(marker, indent=2, sort_keys=True).encode())
        except FileExistsError:
            other = (_read_json(self.fs, path) or {}).get("run_id", "unknown")
            raise OutputConflict(f"{self.cfg.target.url} was published by another run ({other}) while this one "
                                 "ran; this run's result is not committed (check the output, then rerun with "
                                 "--resume or --overwrite)", code="RR402") from None

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
        ledger = self.ledger(complete=True)
        self.flush_ledger(force=True, complete=True)
        self.journal.merge()
        quarantined = [q for r in results for q in r.quarantined]
        retried = {k: v for k, v in self.attempts.items() if v > 1}
        if retried:
            self.log.info(f"units retried: {retried}")
        convert_seconds = self.spec.elapsed_before + time.monotonic() - self._t0
        outcome = validate_and_publish(self.cfg, self.writer, inv, self.reader(), ledger, self.log,
                                       self.spec.executor_name, convert_seconds, quarantined, self.spec.archive,
                                       unit_checks=self.unit_checks, clock=self.spec.clock)
        self._publish_commit_marker(outcome, results)
        echo = self.log.stderr.getvalue()[echo_start:].splitlines() if echo_start is not None else []
        return outcome, echo


# ---- the job -------------------------------------------------------------------------------------------------
def run_pipeline(cfg: JobConfig, *, overwrite: bool = False, executor: Executor | None = None,
                 stderr: TextIO | None = None, progress: ProgressFn | None = None,
                 archive: bool = False, resume: bool = False, verify_resume: bool = True) -> RunOutcome:
    """The whole job. Raises RoboRayError for usage/conflict problems; returns the outcome otherwise.

    `resume=True` continues an interrupted run in the same destination (see the module docstring)."""
    t0 = time.monotonic()
    log = RunLog(stderr=stderr or sys.stderr)
    executor = executor or InProcessExecutor()
    reader = open_reader(cfg.source.url, cfg.source.format, cfg.source.storage_options, cfg.source.options)
    out_fs, out_root = url_to_fs(cfg.target.url, cfg.target.storage_options)
    check_shared_destination(cfg, out_fs, executor)  # before anything is written
    cfg_dump = cfg.safe_dump()  # credentials masked: job.json, and the "same job?" check of --resume
    check_not_locked(out_fs, out_root, cfg.target.url, take_over=resume or overwrite)
    previous_ledger: dict[str, Any] | None = None
    if resume:
        resume, previous_ledger = _check_resume(out_fs, out_root, cfg, cfg_dump, overwrite)
    else:
        prepare_destination(out_fs, out_root, overwrite, cfg.target.url, cfg.target.format)
    lock = RunLock(out_fs, out_root, cfg.target.url).acquire(take_over=resume or overwrite)
    start = getattr(executor, "start", None)
    if start is not None:  # workers come up while Discover and Spec run
        start()
    try:
        return _run_locked(cfg, cfg_dump, reader, out_fs, out_root, executor, log, progress, archive, resume,
                           verify_resume, overwrite, previous_ledger, t0)
    finally:
        lock.release()


def check_shared_destination(cfg: JobConfig, out_fs, executor: Executor) -> None:
    """Refuse a local destination (a path, file://) when the executor's workers run on more than one node: each
    node would write its shards to its own disk. `target.shared` (--shared-destination) declares it shared."""
    node_count = getattr(executor, "node_count", None)
    if cfg.target.shared or node_count is None or not is_local(out_fs):
        return
    nodes = node_count()
    if nodes > 1:
        raise LocalDestinationOnCluster(
            f"the destination {cfg.target.url} is a local path and the Ray cluster has {nodes} nodes: each node "
            "would write its shards to its own disk; use an object store (s3://, gs://), or, if every node sees "
            "this path (NFS, a shared volume), pass --shared-destination (config: target.shared: true)")


def _run_locked(cfg: JobConfig, cfg_dump: dict[str, Any], reader: Reader, out_fs, out_root: str, executor: Executor,
                log: RunLog, progress: ProgressFn | None, archive: bool, resume: bool,
                verify_resume: bool, overwrite: bool, previous_ledger: dict[str, Any] | None,
                t0: float) -> RunOutcome:
    """The job once this run holds the destination's lock."""

    clock = StageClock.starting("discover")
    inv = reader.discover()
    if cfg.max_episodes:
        inv.refs = inv.refs[:cfg.max_episodes]
        inv.episodes_count, inv.total_steps = len(inv.refs), sum(r.length for r in inv.refs)
    clock.begin("plan")
    mapping = resolve_mapping(cfg, inv)
    writer = make_writer(cfg, mapping)
    unit_options = writer.unit_options(inv)  # may refuse (exit 2) before anything is converted
    inv.refs = apply_val_split(cfg, writer, inv.refs, log)
    units = writer.plan(inv.refs, inv.features, cfg.plan.target_shard_mb, cfg.plan.min_shards,
                        cfg.plan.max_unit_episodes)
    fingerprint = plan_fingerprint(mapping, units)
    previous: list[UnitResult] = []
    if resume:
        old = (previous_ledger or {}).get("fingerprint")
        if old is not None and old != fingerprint:
            what = " and ".join(k for k in ("mapping", "plan") if old.get(k) != fingerprint[k])
            if not overwrite:
                raise OutputConflict(f"cannot resume into {cfg.target.url}: the {what} differ from the first run's "
                                     "(source or mapping changed); use --overwrite to start over", code="RR401")
            prepare_destination(out_fs, out_root, True, cfg.target.url, cfg.target.format)
            resume = False
        else:
            writer.remove_stale_temps()
            previous = committed_units(writer, units, previous_ledger, verify_resume)
            if len(previous) < len(units):  # un-commit: units are about to change until the new commit
                for name in writer.commit_files():
                    path = join(writer.dataset_dir, name)
                    if out_fs.exists(path):
                        out_fs.rm(path)
            marker_path = join(out_root, COMMIT_MARKER)
            if out_fs.exists(marker_path):
                out_fs.rm(marker_path)  # this run publishes again

    write_discover_outputs(out_fs, out_root, inv)
    log.info("discover: " + summarize(inv).replace("\n", " | "))
    for f in inv.findings:
        log.info(f"discover finding {f.level}[{f.code}]: {f.message}")
    write_spec_outputs(out_fs, out_root, mapping, inv)
    write_text_atomic(out_fs, join(out_root, "job.json"), json.dumps(cfg_dump, indent=2, sort_keys=True))
    log.info(f"plan: {len(units)} units for {len(inv.refs)} episodes; executor {executor.name}")
    if resume:
        log.info(f"resume: {len(previous)} of {len(units)} shards already committed and verified; "
                 f"converting {len(units) - len(previous)}")

    options = ConvertOptions(video_tolerance_s=cfg.convert.video_tolerance_s, nan_policy=cfg.convert.nan_policy,
                             decoder_threads=cfg.convert.decoder_threads,
                             decode_ahead=cfg.convert.decode_ahead, decode_thread=cfg.convert.decode_thread,
                             source_storage_options=cfg.source.storage_options,
                             target_storage_options=cfg.target.storage_options,
                             source_options=dict(cfg.source.options))
    verify = UnitVerifySpec(sample_ids(inv.refs, cfg.validate_.sample_episodes), cfg.validate_.min_psnr_db,
                            cfg.convert.nan_policy == "allow")
    job = JobSpec(cfg.source.url, cfg.source.format, mapping.model_dump_json(), cfg.target.url, options,
                  Limits.from_config(cfg.convert), cfg.target.format, unit_options, verify)
    spec = PublishSpec(cfg, mapping.model_dump_json(), inv, units, fingerprint,
                       previous=[r.to_dict() for r in previous], executor_name=executor.name, archive=archive,
                       elapsed_before=time.monotonic() - t0, clock=clock)
    clock.begin("convert")
    run_job = getattr(executor, "run_job", None)
    if run_job is not None:
        spec.log_lines, spec.log_errors = list(log.lines), list(log.errors)
        return run_job(units, job, spec, progress=progress, stderr=log.stderr)

    publisher = Publisher(spec, log=log, reader=reader)
    pending = publisher.pending()
    tracker = ProgressTracker(progress, publisher.total_episodes, publisher.total_steps) if progress else None
    if tracker is not None:
        tracker.start(publisher.status())
        if hasattr(executor, "on_beat"):
            executor.on_beat = tracker.beat  # type: ignore[attr-defined]
    if pending:
        clock.mark_once("first_unit_started")
    for res in executor.run(pending, job):
        publisher.record(res)
        if tracker is not None:
            tracker.unit_done(res)
    if tracker is not None:
        tracker.finish()
    outcome, _ = publisher.finish()
    return outcome


def _check_resume(fs, out_root: str, cfg: JobConfig, cfg_dump: dict[str, Any],
                  overwrite: bool) -> tuple[bool, dict[str, Any] | None]:
    """Decide whether the destination holds the same job. Returns (resuming, previous ledger)."""
    prev_job = _read_json(fs, join(out_root, "job.json")) if fs.exists(out_root) else None
    if prev_job is None:  # nothing committed yet (or a fresh destination): start clean, our files only
        prepare_destination(fs, out_root, True, cfg.target.url, cfg.target.format)
        return False, None
    diffs = config_differences(prev_job, cfg_dump)
    if diffs:
        if not overwrite:
            raise OutputConflict(f"cannot resume into {cfg.target.url}: the config differs from the first run's "
                                 f"({', '.join(diffs[:6])}); use --overwrite to start over", code="RR401")
        prepare_destination(fs, out_root, True, cfg.target.url, cfg.target.format)
        return False, None
    return True, read_ledger(fs, out_root)


def run_warnings(ledger: dict[str, Any], episodes_written: int) -> list[str]:
    """What the run report warns about: written episodes without any language instruction (Octo / OpenVLA
    loaders skip unlabeled trajectories)."""
    unlabeled = sum(int(s.get("unlabeled") or 0) for s in ledger.get("shards", []))
    if not unlabeled:
        return []
    return [f"{unlabeled} of {episodes_written} written episodes have an empty language instruction on every "
            "step (loaders that skip unlabeled episodes, e.g. OpenVLA, drop them): set one with --instruction "
            "TEXT (config source.instruction)"]


def validate_and_publish(cfg: JobConfig, writer: Writer, inv: Inventory, reader: Reader | None,
                         ledger: dict[str, Any], log: RunLog, mode: str, convert_seconds: float,
                         quarantined: list[dict[str, Any]], archive: bool = False,
                         unit_checks: UnitChecks | None = None,
                         check_units: UnitCheckRunner | None = None, clock: StageClock | None = None) -> RunOutcome:
    """Validate the committed output (the writer's verify + the neutral checks), then publish the reports.
    `unit_checks`: the units already re-read by their workers; the others are checked by `check_units` (a
    parallel pass) or here."""
    t1 = time.monotonic()
    clock = clock or StageClock()  # `robo-ray publish` times its own verify and publish
    clock.begin("verify")
    fs, out_root, mapping = writer.fs, writer.out_root, writer.mapping
    src = cfg.source
    samples = start_samples(writer, inv, (lambda: open_reader(src.url, src.format, src.storage_options, src.options))
                            if reader is not None else None, quarantined)  # the report's episodes, meanwhile
    v = Validator(writer, inv, reader, ledger, cfg.validate_.sample_episodes, cfg.validate_.min_psnr_db,
                  cfg.validate_.tfds_readback, allow_nonfinite=cfg.convert.nan_policy == "allow",
                  unit_checks=unit_checks, check_units=check_units,
                  readback_shards=cfg.validate_.readback_shards)
    res = v.run()
    before, now = v.units_checked
    if before or now:
        log.info(f"verify: {before} units re-read by the workers that wrote them, {now} re-read at the end")
    clock.begin("publish")
    write_validation_outputs(fs, out_root, res, mapping.dataset_name, time.monotonic() - t1)
    for p in res.problems:
        log.problem(f"validation: {p}")
    warnings = run_warnings(ledger, res.episodes_written)
    for w in warnings:
        log.warning(w)
    checksums = dataset_checksums(writer, known=res.shard_sha256)
    sizes = {n: fs.size(join(writer.dataset_dir, n)) for n in checksums}
    report_html, report_error = try_write_report_html(writer, inv, reader, res, quarantined, samples)
    if report_error:
        log.problem(f"report.html not written (the conversion is unaffected): {report_error}")
    write_text_atomic(fs, join(out_root, "final_report.md"),
                      final_report(writer, inv, res, checksums, sizes, convert_seconds + time.monotonic() - t1,
                                   mode, quarantined, report_error, warnings))
    if archive:
        from robo_ray.stages.publish import write_archive
        write_archive(writer, checksums)
    n = max(1, len(inv.refs))
    over = len(quarantined) / n > cfg.convert.max_quarantine_fraction
    nan_fail = cfg.convert.nan_policy == "fail" and any(q["code"] == "EP203" for q in quarantined)
    exit_code = 0 if res.passed and not over and not nan_fail else 3
    if quarantined:
        log.info(f"{len(quarantined)} of {len(inv.refs)} episodes quarantined "
                 f"(threshold {cfg.convert.max_quarantine_fraction:.0%})")
    write_logs(fs, out_root, log.lines, log.errors, clock)
    where = f"{writer.out_url}/{writer.dataset_rel}" if writer.dataset_rel else writer.out_url
    msg = (f"{res.episodes_written} episodes / {res.steps_written} steps written to {where} ({writer.title}); "
           f"{len(quarantined)} quarantined; validation {'passed' if res.passed else 'FAILED'}")
    return RunOutcome(exit_code, writer.out_url, writer.dataset_dir, res.episodes_written, quarantined, res.passed,
                      msg, report_html)


def raise_for_outcome(outcome: RunOutcome) -> None:
    if outcome.exit_code == 3:
        raise ValidationFailed(outcome.message)
