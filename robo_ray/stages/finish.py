"""The end of a run, after the commit: validate the committed output, publish the reports (validation report,
final_report.md, report.html, logs, optional archive), the run's warnings, and the exit code
(`validate_and_publish`; `raise_for_outcome` turns a failed one into `ValidationFailed`)."""
from __future__ import annotations

import time
from typing import Any, Callable

from robo_ray.config import JobConfig
from robo_ray.errors import ValidationFailed
from robo_ray.readers import open_reader
from robo_ray.readers.base import Inventory, Reader
from robo_ray.stages.publish import dataset_checksums, final_report, write_logs
from robo_ray.stages.report_html import start_samples, try_write_report_html
from robo_ray.stages.run_log import RunLog, RunOutcome
from robo_ray.stages.timings import StageClock
from robo_ray.stages.check_records import UnitChecks
from robo_ray.stages.validate import UnitCheckRunner, Validator
from robo_ray.stages.validation_report import write_validation_outputs
from robo_ray.storage import join, write_text_atomic
from robo_ray.writers import Writer


def run_warnings(ledger: dict[str, Any], episodes_written: int) -> list[str]:
    """What the run report warns about: written episodes without any language instruction (Octo / OpenVLA
    loaders skip unlabeled trajectories); depth pixels a quantizing target clipped to its range (a unit's
    `extra["clipped_depth"]`: {camera: {below, above, pixels}})."""
    out: list[str] = []
    unlabeled = sum(int(s.get("unlabeled") or 0) for s in ledger.get("shards", []))
    if unlabeled:
        out.append(f"{unlabeled} of {episodes_written} written episodes have an empty language instruction on every "
                   "step (loaders that skip unlabeled episodes, e.g. OpenVLA, drop them): set one with "
                   "--instruction TEXT (config source.instruction)")
    clipped: dict[str, list[int]] = {}
    for s in ledger.get("shards", []):
        for cam, c in ((s.get("extra") or {}).get("clipped_depth") or {}).items():
            tot = clipped.setdefault(str(cam), [0, 0, 0])
            for i, k in enumerate(("below", "above", "pixels")):
                tot[i] += int(c.get(k) or 0)
    for cam, (below, above, pixels) in sorted(clipped.items()):
        if below or above:
            out.append(f"{cam}: {below} of {pixels} depth pixels lie below the target's depth range (0, no depth, "
                       f"among them: they read back as its minimum) and {above} above it (read back as its "
                       "maximum): set the target's depth range options (README, target options)")
    return out


def validate_and_publish(cfg: JobConfig, writer: Writer, inv: Inventory, reader: Reader | None,
                         ledger: dict[str, Any], log: RunLog, mode: str, convert_seconds: float,
                         quarantined: list[dict[str, Any]], archive: bool = False,
                         unit_checks: UnitChecks | None = None,
                         check_units: UnitCheckRunner | None = None, clock: StageClock | None = None,
                         open_source: Callable[[], Reader] | None = None) -> RunOutcome:
    """Validate the committed output (the writer's verify + the neutral checks), then publish the reports.
    `unit_checks`: the units already re-read by their workers; the others are checked by `check_units` (a
    parallel pass) or here. `open_source`: how the report opens the source (default: `open_reader` of the
    config's source; a source that is not a URL, such as a Ray Dataset's rows, gives its own)."""
    t1 = time.monotonic()
    clock = clock or StageClock()  # `robo-ray publish` times its own verify and publish
    clock.begin("verify")
    fs, out_root, mapping = writer.fs, writer.out_root, writer.mapping
    src = cfg.source
    opener = open_source or (lambda: open_reader(src.url, src.format, src.storage_options, src.options))
    samples = start_samples(writer, inv, opener if reader is not None else None, quarantined)  # the report's episodes, meanwhile
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
    """Exit code 3 (validation failed, or too much quarantined) as `ValidationFailed`."""
    if outcome.exit_code == 3:
        raise ValidationFailed(outcome.message)
