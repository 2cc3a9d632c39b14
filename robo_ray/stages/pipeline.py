"""`robo-ray run`: the five stages in order, discover -> spec/plan -> convert -> validate -> publish, on a
pluggable executor (robo_ray.executors: in-process; robo_ray.ray_exec: the Ray actor pool).

Where each part lives: the destination (what is ours, preparing it, the shared-destination rule, the commit
marker) in `destination`; resume (same job? which units are committed? reopening) in `resume`; the mapping,
writer and val split in `target_setup`; the Publisher (journal, attempts, commit, validate + publish) in
`publisher`, which ends in `finish` (validate, reports, exit code); whole-unit failures in `unit_failures`; the
run's log and outcome in `run_log`. This module only orders them.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

from robo_ray.config import JobConfig
from robo_ray.executors.base import Executor, JobSpec
from robo_ray.executors.in_process import InProcessExecutor
from robo_ray.mapping import Mapping
from robo_ray.readers import open_reader
from robo_ray.readers.base import Inventory, Reader
from robo_ray.stages.convert import ConvertOptions
from robo_ray.stages.destination import check_shared_destination, prepare_destination
from robo_ray.stages.discover import summarize, write_discover_outputs
from robo_ray.stages.plan import Unit
from robo_ray.stages.progress import ProgressFn, ProgressTracker
from robo_ray.stages.publisher import Publisher, PublishSpec
from robo_ray.stages.resume import check_resume, plan_fingerprint, reopen_for_resume
from robo_ray.stages.run_lock import RunLock, check_not_locked
from robo_ray.stages.run_log import RunLog, RunOutcome
from robo_ray.stages.spec import write_spec_outputs
from robo_ray.stages.target_setup import apply_val_split, make_writer, resolve_mapping
from robo_ray.stages.timings import StageClock
from robo_ray.stages.sampling import sample_ids
from robo_ray.stages.validate import UnitVerifySpec
from robo_ray.storage import join, url_to_fs, write_text_atomic
from robo_ray.watchdog import Limits
from robo_ray.writers import UnitResult, Writer


@dataclass
class RunContext:
    """One call of `run_pipeline`: the job, where it writes, how it runs and what it was asked."""

    cfg: JobConfig
    cfg_dump: dict[str, Any]  # credentials masked: job.json, and the "same job?" check of --resume
    reader: Reader
    out_fs: Any
    out_root: str
    executor: Executor
    log: RunLog
    progress: ProgressFn | None
    archive: bool
    resume: bool
    verify_resume: bool
    overwrite: bool
    previous_ledger: dict[str, Any] | None
    t0: float


def run_pipeline(cfg: JobConfig, *, overwrite: bool = False, executor: Executor | None = None,
                 stderr: TextIO | None = None, progress: ProgressFn | None = None,
                 archive: bool = False, resume: bool = False, verify_resume: bool = True) -> RunOutcome:
    """The whole job. Raises RoboRayError for usage/conflict problems; returns the outcome otherwise.

    `resume=True` continues an interrupted run in the same destination (robo_ray.stages.resume)."""
    t0 = time.monotonic()
    log = RunLog(stderr=stderr or sys.stderr)
    executor = executor or InProcessExecutor()
    reader = open_reader(cfg.source.url, cfg.source.format, cfg.source.storage_options, cfg.source.options)
    out_fs, out_root = url_to_fs(cfg.target.url, cfg.target.storage_options)
    check_shared_destination(cfg, out_fs, executor)  # before anything is written
    cfg_dump = cfg.safe_dump()
    check_not_locked(out_fs, out_root, cfg.target.url, take_over=resume or overwrite)
    previous_ledger: dict[str, Any] | None = None
    if resume:
        resume, previous_ledger = check_resume(out_fs, out_root, cfg, cfg_dump, overwrite)
    else:
        prepare_destination(out_fs, out_root, overwrite, cfg.target.url, cfg.target.format)
    lock = RunLock(out_fs, out_root, cfg.target.url).acquire(take_over=resume or overwrite)
    start = getattr(executor, "start", None)
    if start is not None:  # workers come up while Discover and Spec run
        start()
    try:
        return _run_locked(RunContext(cfg, cfg_dump, reader, out_fs, out_root, executor, log, progress, archive,
                                      resume, verify_resume, overwrite, previous_ledger, t0))
    finally:
        lock.release()


def _run_locked(run: RunContext) -> RunOutcome:
    """The job once this run holds the destination's lock: the stages in order."""
    clock = StageClock.starting("discover")
    inv = discover(run.cfg, run.reader, run.executor)
    clock.begin("plan")
    mapping, writer, units, unit_options = spec_and_plan(run.cfg, inv, run.log)
    fingerprint = plan_fingerprint(mapping, units)
    previous: list[UnitResult] = []
    if run.resume:
        run.resume, previous = reopen_for_resume(run.out_fs, run.out_root, run.cfg, writer, units, fingerprint,
                                                 run.previous_ledger, run.overwrite, run.verify_resume)
    write_plan_outputs(run, inv, mapping, units, previous)
    job = job_spec(run.cfg, inv, mapping, unit_options)
    spec = PublishSpec(run.cfg, mapping.model_dump_json(), inv, units, fingerprint,
                       previous=[r.to_dict() for r in previous], executor_name=run.executor.name,
                       archive=run.archive, elapsed_before=time.monotonic() - run.t0, clock=clock)
    clock.begin("convert")
    return convert_and_publish(run, units, job, spec)


SCAN_ON_WORKERS_MIN_FILES = 256  # below this many files the driver's own threads scan faster than a Ray Data pass


# ---- 1. discover -----------------------------------------------------------------------------------------------
def discover(cfg: JobConfig, reader: Reader, executor: Executor | None = None) -> Inventory:
    """The source's inventory, cut to `max_episodes`. A source of many files whose reader splits its scan
    (`Reader.scan_tasks`) is scanned by the executor's workers when it offers `scan` (on Ray: a Ray Data map over
    the file list), the small per-file rows merged here; otherwise the reader scans it in this process."""
    scan = getattr(executor, "scan", None)
    tasks = reader.scan_tasks() if scan is not None else []
    if len(tasks) >= SCAN_ON_WORKERS_MIN_FILES:
        inv = reader.merge_scans(scan(cfg.source, tasks))
    else:
        inv = reader.discover()
    if cfg.max_episodes:
        inv.refs = inv.refs[:cfg.max_episodes]
        inv.episodes_count, inv.total_steps = len(inv.refs), sum(r.length for r in inv.refs)
    return inv


# ---- 2. spec and plan ------------------------------------------------------------------------------------------
def spec_and_plan(cfg: JobConfig, inv: Inventory,
                  log: RunLog) -> tuple[Mapping, Writer, list[Unit], dict[str, Any]]:
    """The mapping, the target's writer, its unit options (it may refuse, exit 2, before anything is converted)
    and the units (after the val split)."""
    mapping = resolve_mapping(cfg, inv)
    writer = make_writer(cfg, mapping)
    unit_options = writer.unit_options(inv)
    inv.refs = apply_val_split(cfg, writer, inv.refs, log)
    units = writer.plan(inv.refs, inv.features, cfg.plan.target_shard_mb, cfg.plan.min_shards,
                        cfg.plan.max_unit_episodes)
    return mapping, writer, units, unit_options


def write_plan_outputs(run: RunContext, inv: Inventory, mapping: Mapping, units: list[Unit],
                       previous: list[UnitResult]) -> None:
    """Discover's and Spec's files, job.json, and their log lines."""
    fs, root, log = run.out_fs, run.out_root, run.log
    write_discover_outputs(fs, root, inv)
    log.info("discover: " + summarize(inv).replace("\n", " | "))
    for f in inv.findings:
        log.info(f"discover finding {f.line()}")
    write_spec_outputs(fs, root, mapping, inv)
    write_text_atomic(fs, join(root, "job.json"), json.dumps(run.cfg_dump, indent=2, sort_keys=True))
    log.info(f"plan: {len(units)} units for {len(inv.refs)} episodes; executor {run.executor.name}")
    if run.resume:
        log.info(f"resume: {len(previous)} of {len(units)} shards already committed and verified; "
                 f"converting {len(units) - len(previous)}")


# ---- 3. convert ------------------------------------------------------------------------------------------------
def job_spec(cfg: JobConfig, inv: Inventory, mapping: Mapping, unit_options: dict[str, Any]) -> JobSpec:
    """What every worker gets: the source, the mapping, the target, the convert options, the watchdog's limits
    and the episodes each unit's re-read compares with the source."""
    options = ConvertOptions(video_tolerance_s=cfg.convert.video_tolerance_s, nan_policy=cfg.convert.nan_policy,
                             decoder_threads=cfg.convert.decoder_threads,
                             decode_ahead=cfg.convert.decode_ahead, decode_thread=cfg.convert.decode_thread,
                             source_storage_options=cfg.source.storage_options,
                             target_storage_options=cfg.target.storage_options,
                             source_options=dict(cfg.source.options))
    verify = UnitVerifySpec(sample_ids(inv.refs, cfg.validate_.sample_episodes), cfg.validate_.min_psnr_db,
                            cfg.convert.nan_policy == "allow")
    return JobSpec(cfg.source.url, cfg.source.format, mapping.model_dump_json(), cfg.target.url, options,
                   Limits.from_config(cfg.convert), cfg.target.format, unit_options, verify)


def convert_and_publish(run: RunContext, units: list[Unit], job: JobSpec, spec: PublishSpec) -> RunOutcome:
    """Convert the pending units and hand each result to the Publisher, whose `finish` commits, validates
    (4.) and publishes (5.). An executor with `run_job` (Ray) runs its own Publisher."""
    log = run.log
    run_job = getattr(run.executor, "run_job", None)
    if run_job is not None:
        spec.log_lines, spec.log_errors = list(log.lines), list(log.errors)
        return run_job(units, job, spec, progress=run.progress, stderr=log.stderr)

    publisher = Publisher(spec, log=log, reader=run.reader)
    pending = publisher.pending()
    progress = run.progress
    tracker = ProgressTracker(progress, publisher.total_episodes, publisher.total_steps) if progress else None
    if tracker is not None:
        tracker.start(publisher.status())
        if hasattr(run.executor, "on_beat"):
            run.executor.on_beat = tracker.beat  # type: ignore[attr-defined]
    if pending:
        spec.clock.mark_once("first_unit_started")
    for res in run.executor.run(pending, job):
        publisher.record(res)
        if tracker is not None:
            tracker.unit_done(res)
    if tracker is not None:
        tracker.finish()
    outcome, _ = publisher.finish()
    return outcome
