"""`robo-ray validate --actors N` / `--address`: every committed unit of an existing output re-read by Ray tasks
(`Writer.verify_unit`) in parallel, the small `UnitCheck`s merged by the caller (robo_ray.stages.validate)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import ray

from robo_ray.episode import EpisodeRef
from robo_ray.readers.base import Reader
from robo_ray.stages.check_records import UnitCheck
from robo_ray.stages.validate import UnitCheckRunner, run_unit_check
from robo_ray.writers import UnitResult, VerifyContext, Writer, writer_class

TASKS_PER_CPU = 4  # batches per CPU: small enough to balance, large enough that a task's start-up is paid rarely


@dataclass(frozen=True)
class UnitCheckJob:
    """What a task needs to rebuild the writer and the source side of the sampled comparison (picklable)."""

    target_format: str
    out_url: str
    mapping_json: str
    storage_options: dict[str, Any]
    target_options: dict[str, Any]
    reader: Reader | None  # readers pickle (their open files are reopened on use)
    sample_refs: dict[int, EpisodeRef]  # the sampled episodes only, not the inventory
    min_psnr_db: float
    allow_nonfinite: bool

    @classmethod
    def of(cls, writer: Writer, ctx: VerifyContext) -> "UnitCheckJob":
        refs = ctx.ref_map() if ctx.sample_ids else {}
        return cls(writer.format_name, writer.out_url, writer.mapping.model_dump_json(), writer.storage_options,
                   writer.options.model_dump(exclude_unset=True), ctx.reader,
                   {i: refs[i] for i in ctx.sample_ids if i in refs}, ctx.min_psnr_db, ctx.allow_nonfinite)

    def check(self, results: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
        from robo_ray.mapping import Mapping

        writer = writer_class(self.target_format)(self.out_url, Mapping.model_validate_json(self.mapping_json),
                                                  self.storage_options, self.target_options)
        ctx = VerifyContext({}, None, self.reader, set(self.sample_refs), self.min_psnr_db, False,
                            self.allow_nonfinite, refs=dict(self.sample_refs))
        out: list[dict[str, Any] | None] = []
        for d in results:
            c = run_unit_check(writer, UnitResult.from_dict(d), ctx)
            out.append(c.to_dict() if c is not None else None)
        return out


def _check_batch(job: UnitCheckJob, results: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
    return job.check(results)


def ray_unit_checks(connect: Any) -> UnitCheckRunner:
    """A `UnitCheckRunner` running on Ray: `connect()` (RayExecutor.connect) brings the cluster up and returns its
    CPU count; the units are cut into batches, one task each (1 CPU), results yielded as tasks finish."""

    def run(writer: Writer, results: list[UnitResult], ctx: VerifyContext) -> Iterator[UnitCheck | None]:
        cpus = max(1, int(connect()))
        job = ray.put(UnitCheckJob.of(writer, ctx))
        n = min(len(results), cpus * TASKS_PER_CPU)
        batches = [results[k::n] for k in range(n)] if n else []
        task = ray.remote(num_cpus=1, max_retries=2)(_check_batch)
        pending = [task.remote(job, [r.to_dict() for r in b]) for b in batches]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for d in ray.get(done[0]):
                yield UnitCheck.from_dict(d) if d is not None else None

    return run
