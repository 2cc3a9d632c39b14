"""`write_dataset(ds, dst, to=..., ...)`: a Dataset of episode rows to any target, as `robo-ray run` writes it.

1. The dataset is materialized once (the user's pipeline runs once; its blocks stay in the object store, which
   spills to disk) and the driver reads only each row's bookkeeping (`sources.RowKey`, a small remote task a block).
2. The run's own stages plan it: the inventory rebuilt from the rows' source descriptions, the target's default
   mapping and plan (`pipeline.spec_and_plan`), the destination, the lock, discover/spec outputs and job.json, the
   Publisher.
3. A dataset of one row a unit goes to `UnitDatasink` (one write task a unit; plan-stable names: the same units and
   bytes as `robo-ray run` on the same episodes); `on_write_complete` is the Publisher's finish (finalize,
   validation, reports). Each write task journals its unit on the destination, so `resume=True` continues a write
   cut short with the units still missing (`stages.resume`, as `robo-ray run --resume`).
"""
from __future__ import annotations

import pickle
import sys
import time
from typing import Any

import ray

from robo_ray.config import JobConfig
from robo_ray.data.sink import UNIT, WHERE, DriverRows, RowSource, UnitDatasink
from robo_ray.data.sources import RowKey, Sources, check_columns, gather_sources
from robo_ray.data.spec import LENGTH, REF, SOURCE, SPEC
from robo_ray.errors import ConfigError, DatasetColumns
from robo_ray.stages.destination import prepare_destination
from robo_ray.stages.pipeline import RunContext, job_spec, spec_and_plan, write_plan_outputs
from robo_ray.stages.publisher import Publisher, PublishSpec
from robo_ray.stages.resume import check_resume, plan_fingerprint, reopen_for_resume
from robo_ray.stages.run_lock import RunLock, check_not_locked
from robo_ray.stages.run_log import RunLog, RunOutcome
from robo_ray.stages.timings import StageClock
from robo_ray.storage import url_to_fs
from robo_ray.writers import DEFAULT_TARGET, writer_class

EXECUTOR_NAME = "Ray Data Datasink (robo_ray.data.write)"


class _Executor:
    """What the plan outputs name as the executor."""

    name = EXECUTOR_NAME


@ray.remote(num_cpus=0.25)
def _block_keys(block: Any, index: int) -> tuple[list[RowKey], dict[str, str]]:
    """The bookkeeping of one materialized block: each row's key, and the description of each source in it."""
    from ray.data.block import BlockAccessor

    acc = BlockAccessor.for_block(block)
    cols = acc.to_batch_format("numpy") if acc.num_rows() else {}
    keys: list[RowKey] = []
    specs: dict[str, str] = {}
    for r in range(acc.num_rows()):
        source = str(cols[SOURCE][r])
        try:
            length = int(cols[LENGTH][r])
        except (TypeError, ValueError):
            raise DatasetColumns(f"write: column {LENGTH!r} of a row of {source} is not a step count "
                                 f"({cols[LENGTH][r]!r})") from None
        keys.append(RowKey(source, str(cols[REF][r]), length, index, r))
        specs.setdefault(source, str(cols[SPEC][r]))
    return keys, specs


def write_dataset(ds: Any, dst: str, *, to: str = DEFAULT_TARGET, name: str | None = None, fps: float | None = None,
                  storage_options: dict[str, Any] | None = None, overwrite: bool = False, resume: bool = False,
                  config: dict[str, Any] | None = None, stderr: Any = None, **options: Any) -> RunOutcome:
    """Write `ds` (episode rows of `robo_ray.data.read`, after any map / filter / union) to `dst` as the target
    `to` (a `robo-ray run --to` choice) named `name`, its writer's `options` (config `target.options`), `fps` for
    sources without one (or several sources of different rates); `config`: other config sections as in a YAML
    config (plan, validate, convert, images, splits). Returns the `RunOutcome` (exit_code 0 when validation passed
    and no more than `convert.max_quarantine_fraction` was quarantined); writes the CLI's reports beside the data.
    `resume=True` (the CLI's --resume): continue a write into `dst` that was cut short (a failed task, a killed
    driver): the same dataset and options write only the units not committed yet, to the same bytes."""
    t0 = time.monotonic()
    writer_class(to)  # an unknown target, before anything runs
    early = ds.schema(fetch_if_missing=False)  # known without running anything (e.g. a drop_columns)
    if early is not None:
        check_columns(early.names)
    cfg = _config(dst, to, name, options, storage_options, config)
    # the rows in the dataset's order whatever task finishes first: union(a, b) numbers a's episodes first, and the
    # same dataset always gives the same plan (this dataset's own context; Ray Data's default is False)
    ds.context.execution_options.preserve_order = True
    mat = ds.materialize()
    names = mat.schema().names
    check_columns(names)
    blocks = mat.to_arrow_refs()  # the blocks as Arrow tables, in the dataset's order
    keys: list[RowKey] = []
    specs: dict[str, str] = {}
    for k, s in ray.get([_block_keys.remote(b, i) for i, b in enumerate(blocks)]):
        keys += k
        for src, text in s.items():
            specs.setdefault(src, text)
    src = gather_sources(keys, specs, names, fps)
    cfg.source.url = "ray-dataset:" + " + ".join(src.specs)
    return _run(cfg, src, blocks, overwrite, resume, stderr, t0)


def _config(dst: str, to: str, name: str | None, options: dict[str, Any], storage_options: dict[str, Any] | None,
            config: dict[str, Any] | None) -> JobConfig:
    data: dict[str, Any] = {k: v for k, v in (config or {}).items() if k != "target"}  # source: instruction
    data["target"] = {"url": dst, "format": to, "name": name, "options": options,
                      "storage_options": dict(storage_options or {})}
    try:
        return JobConfig.model_validate(data)
    except ValueError as exc:
        raise ConfigError(f"write: {str(exc).splitlines()[0]} ({str(exc).splitlines()[-1].strip()})") from None


def _run(cfg: JobConfig, src: Sources, blocks: list[Any], overwrite: bool, resume: bool, stderr: Any,
         t0: float) -> RunOutcome:
    """The run's stages on the rows: destination and lock (or, resuming, the first run's ledger), plan, outputs,
    then the Datasink on the units still to write and its Publisher."""
    log = RunLog(stderr=stderr or sys.stderr)
    out_fs, out_root = url_to_fs(cfg.target.url, cfg.target.storage_options)
    cfg_dump = cfg.safe_dump()
    check_not_locked(out_fs, out_root, cfg.target.url, take_over=resume or overwrite)
    previous_ledger = None
    if resume:
        resume, previous_ledger = check_resume(out_fs, out_root, cfg, cfg_dump, overwrite)
    else:
        prepare_destination(out_fs, out_root, overwrite, cfg.target.url, cfg.target.format)
    lock = RunLock(out_fs, out_root, cfg.target.url).acquire(take_over=resume or overwrite)
    try:
        clock = StageClock.starting("plan")
        inv = src.inv
        mapping, writer, units, unit_options = spec_and_plan(cfg, inv, log)
        fingerprint = plan_fingerprint(mapping, units)
        previous: list[Any] = []
        if resume:
            resume, previous = reopen_for_resume(out_fs, out_root, cfg, writer, units, fingerprint, previous_ledger,
                                                 overwrite, True)
        run = RunContext(cfg, cfg_dump, None, out_fs, out_root, _Executor(), log,  # type: ignore[arg-type]
                         None, False, resume, True, overwrite, previous_ledger, t0)
        write_plan_outputs(run, inv, mapping, units, previous)
        compared_with = (f"the rows of the Ray Dataset given to robo_ray.data.write, after its maps and filters, "
                         f"read from {' + '.join(src.specs)}")
        log.info(f"validate: sampled episodes are compared with {compared_with}")
        job = job_spec(cfg, inv, mapping, unit_options)
        spec = PublishSpec(cfg, mapping.model_dump_json(), inv, units, fingerprint,
                           previous=[r.to_dict() for r in previous], executor_name=EXECUTOR_NAME,
                           elapsed_before=time.monotonic() - t0, clock=clock, journal_parts=True)
        rows = RowSource(blocks, inv.features, inv.fps, src.mapping.model_dump_json(), src.mixed, compared_with)
        driver_reader = rows.reader(DriverRows(rows, src.where))
        publisher = Publisher(spec, log=log, reader=driver_reader)  # type: ignore[arg-type]
        publisher.open_source = lambda: rows.reader(DriverRows(rows, src.where))  # type: ignore[assignment]
        clock.begin("convert")
        pending = publisher.pending()
        if not pending:  # a resumed write whose units were all committed: finalize, validate, publish
            return publisher.finish()[0]
        sink = UnitDatasink(job, rows, publisher)
        items = [{"index": u.index, UNIT: pickle.dumps(u, protocol=pickle.HIGHEST_PROTOCOL),
                  WHERE: pickle.dumps([src.where[i] for i in u.episode_indices])} for u in pending]
        ray.data.from_items(items, override_num_blocks=len(items)).write_datasink(sink)  # rows -> >= 1 unit
        assert sink.outcome is not None
        return sink.outcome
    finally:
        lock.release()
