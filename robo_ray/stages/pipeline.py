"""`robo-ray run`: discover -> spec -> plan -> convert -> validate -> publish, with a pluggable executor
(in-process here; robo_ray.ray_exec provides the Ray actor-pool executor)."""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Protocol, TextIO

from robo_ray.config import JobConfig
from robo_ray.episode import QuarantineRecord
from robo_ray.errors import DestinationNotEmpty, ValidationFailed
from robo_ray.mapping import Mapping, default_mapping
from robo_ray.readers import open_reader
from robo_ray.readers.base import Inventory, Reader
from robo_ray.stages.convert import ConvertOptions, UnitConverter
from robo_ray.stages.discover import summarize, write_discover_outputs
from robo_ray.stages.plan import Unit, plan_units
from robo_ray.stages.publish import dataset_checksums, final_report, write_logs
from robo_ray.stages.spec import load_mapping, write_spec_outputs
from robo_ray.stages.validate import Validator, write_validation_outputs
from robo_ray.storage import join, url_to_fs, write_text_atomic
from robo_ray.writers.rlds.writer import RldsWriter, ShardResult

OUR_OUTPUTS = ("rlds", "inventory.json", "episode_index.csv", "mapping.md", "mapping.yaml", "progress.jsonl",
               "ledger.json", "validation_report.md", "diff_summary.json", "final_report.md", "logs", "job.json")


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Executor(Protocol):
    """Runs units and yields their results (in any order)."""

    name: str

    def run(self, units: list[Unit], job: "JobSpec") -> Iterator[ShardResult]: ...


@dataclass(frozen=True)
class JobSpec:
    """What a worker needs to build its UnitConverter (picklable)."""

    source_url: str
    source_format: str | None
    mapping_json: str
    out_url: str
    options: ConvertOptions

    def make_converter(self) -> UnitConverter:
        mapping = Mapping.model_validate_json(self.mapping_json)
        return UnitConverter(self.source_url, self.source_format, mapping, self.out_url, self.options)


class InProcessExecutor:
    """Sequential conversion in this process (tests, laptops without Ray)."""

    name = "in-process (1 worker)"

    def run(self, units: list[Unit], job: JobSpec) -> Iterator[ShardResult]:
        conv = job.make_converter()
        try:
            for unit in units:
                yield conv.convert(unit)
        finally:
            conv.close()


@dataclass
class RunLog:
    """Collects convert.log / errors.log lines and echoes problems to stderr, one line each."""

    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def info(self, msg: str) -> None:
        self.lines.append(f"{_now()} INFO {msg}")

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


def prepare_destination(fs, out_root: str, overwrite: bool, out_url: str) -> None:
    """Refuse a non-empty destination unless --overwrite; with it, remove only robo-ray's own outputs."""
    if not fs.exists(out_root):
        fs.makedirs(out_root, exist_ok=True)
        return
    if not fs.isdir(out_root):
        raise DestinationNotEmpty(f"destination {out_url} exists and is not a directory")
    entries = [e.rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(out_root, detail=False)]
    if entries and not overwrite:
        raise DestinationNotEmpty(f"destination {out_url} is not empty (use --overwrite to replace its outputs)")
    foreign = [e for e in entries if e not in OUR_OUTPUTS and not e.endswith(".tar.gz")]
    if overwrite and foreign:
        raise DestinationNotEmpty(f"destination {out_url} holds files robo-ray did not write "
                                  f"({', '.join(sorted(foreign)[:5])}); refusing to overwrite")
    for e in entries:
        fs.rm(join(out_root, e), recursive=True)


def resolve_mapping(cfg: JobConfig, inv: Inventory) -> Mapping:
    if cfg.mapping_file:
        with open(cfg.mapping_file, encoding="utf-8") as f:
            mapping = load_mapping(f.read(), cfg.mapping_file)
    else:
        mapping = default_mapping(inv, cfg.images, cfg.target.name)
        mapping.version = cfg.target.version
    mapping.check_against(inv.features)
    return mapping


def run_pipeline(cfg: JobConfig, *, overwrite: bool = False, executor: Executor | None = None,
                 stderr: TextIO | None = None, progress: Callable[[int, int], None] | None = None,
                 archive: bool = False) -> RunOutcome:
    """The whole job. Raises RoboRayError for usage/conflict problems; returns the outcome otherwise."""
    t0 = time.monotonic()
    log = RunLog(stderr=stderr or sys.stderr)
    executor = executor or InProcessExecutor()
    reader = open_reader(cfg.source.url, cfg.source.format, cfg.source.storage_options)
    out_fs, out_root = url_to_fs(cfg.target.url, cfg.target.storage_options)
    prepare_destination(out_fs, out_root, overwrite, cfg.target.url)

    inv = reader.discover()
    if cfg.max_episodes:
        inv.refs = inv.refs[:cfg.max_episodes]
        inv.episodes_count, inv.total_steps = len(inv.refs), sum(r.length for r in inv.refs)
    write_discover_outputs(out_fs, out_root, inv)
    log.info("discover: " + summarize(inv).replace("\n", " | "))
    for f in inv.findings:
        log.info(f"discover finding {f.level}[{f.code}]: {f.message}")

    mapping = resolve_mapping(cfg, inv)
    write_spec_outputs(out_fs, out_root, mapping, inv)
    units = plan_units(inv.refs, inv.features, cfg.plan.target_shard_mb, cfg.plan.min_shards)
    write_text_atomic(out_fs, join(out_root, "job.json"),
                      json.dumps(cfg.model_dump(mode="json", by_alias=True), indent=2, sort_keys=True))
    log.info(f"plan: {len(units)} units for {len(inv.refs)} episodes; executor {executor.name}")

    options = ConvertOptions(video_tolerance_s=cfg.convert.video_tolerance_s, nan_policy=cfg.convert.nan_policy,
                             decoder_threads=cfg.convert.decoder_threads,
                             source_storage_options=cfg.source.storage_options,
                             target_storage_options=cfg.target.storage_options)
    job = JobSpec(cfg.source.url, cfg.source.format, mapping.model_dump_json(), cfg.target.url, options)
    results = _convert_all(executor, units, job, out_fs, out_root, log, progress)

    writer = RldsWriter(cfg.target.url, mapping, cfg.target.storage_options)
    writer.finalize(results, f"{inv.dataset_name} ({inv.source_format} {inv.source_version}) converted by robo-ray")
    quarantined = [q for r in results for q in r.quarantined]
    ledger = {"shards": [r.to_dict() for r in sorted(results, key=lambda r: r.shard_index)]}
    write_text_atomic(out_fs, join(out_root, "ledger.json"), json.dumps(ledger, indent=2))

    outcome = validate_and_publish(cfg, out_fs, out_root, mapping, inv, reader, ledger, log, executor.name,
                                   time.monotonic() - t0, quarantined, archive)
    return outcome


def _convert_all(executor: Executor, units: list[Unit], job: JobSpec, fs, out_root: str, log: RunLog,
                 progress: Callable[[int, int], None] | None) -> list[ShardResult]:
    results: list[ShardResult] = []
    total = sum(len(u.refs) for u in units)
    done = 0
    progress_lines: list[str] = []
    for res in executor.run(units, job):
        results.append(res)
        ts = _now()
        for ep, steps in res.episodes:
            progress_lines.append(json.dumps({"episode_id": ep, "status": "completed", "completed_at": ts,
                                              "steps": steps, "shard": res.shard_index}))
        for q in res.quarantined:
            progress_lines.append(json.dumps({"episode_id": q["episode_index"], "status": "failed",
                                              "completed_at": ts, "error": q["reason"], "code": q["code"],
                                              "file": q.get("file"), "shard": None}))
            log.problem(QuarantineRecord(**q).line())
        log.info(f"shard {res.filename}: {len(res.episodes)} episodes, {res.num_bytes} bytes, "
                 f"sha256 {res.sha256}")
        done += len(res.episodes) + len(res.quarantined)
        if progress:
            progress(done, total)
        write_text_atomic(fs, join(out_root, "progress.jsonl"), "\n".join(progress_lines) + "\n")
    return results


def validate_and_publish(cfg: JobConfig, fs, out_root: str, mapping: Mapping, inv: Inventory, reader: Reader | None,
                         ledger: dict[str, Any], log: RunLog, mode: str, convert_seconds: float,
                         quarantined: list[dict[str, Any]], archive: bool = False) -> RunOutcome:
    t1 = time.monotonic()
    v = Validator(fs, out_root, mapping, inv, reader, ledger, cfg.validate_.sample_episodes,
                  cfg.validate_.min_psnr_db, cfg.validate_.tfds_readback,
                  allow_nonfinite=cfg.convert.nan_policy == "allow")
    res = v.run()
    write_validation_outputs(fs, out_root, res, mapping.dataset_name, time.monotonic() - t1)
    for p in res.problems:
        log.problem(f"validation: {p}")
    checksums = dataset_checksums(fs, v.dataset_dir)
    sizes = {n: fs.size(join(v.dataset_dir, n)) for n in checksums}
    write_text_atomic(fs, join(out_root, "final_report.md"),
                      final_report(mapping, inv, res, checksums, sizes, convert_seconds + time.monotonic() - t1,
                                   mode, quarantined, cfg.target.url))
    if archive:
        from robo_ray.stages.publish import write_archive
        write_archive(fs, out_root, v.dataset_dir, mapping.dataset_name)
    n = max(1, len(inv.refs))
    over = len(quarantined) / n > cfg.convert.max_quarantine_fraction
    nan_fail = cfg.convert.nan_policy == "fail" and any(q["code"] == "EP203" for q in quarantined)
    exit_code = 0 if res.passed and not over and not nan_fail else 3
    if quarantined:
        log.info(f"{len(quarantined)} of {len(inv.refs)} episodes quarantined "
                 f"(threshold {cfg.convert.max_quarantine_fraction:.0%})")
    write_logs(fs, out_root, log.lines, log.errors)
    msg = (f"{res.episodes_written} episodes / {res.steps_written} steps written to "
           f"{cfg.target.url}/rlds/{mapping.dataset_name}/{mapping.version}; {len(quarantined)} quarantined; "
           f"validation {'passed' if res.passed else 'FAILED'}")
    return RunOutcome(exit_code, cfg.target.url, v.dataset_dir, res.episodes_written, quarantined, res.passed, msg)


def raise_for_outcome(outcome: RunOutcome) -> None:
    if outcome.exit_code == 3:
        raise ValidationFailed(outcome.message)
