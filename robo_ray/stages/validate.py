"""Validate: recompute everything from the written files (pipeline_stages.md, stage D).

The neutral half runs here (`Validator`): every committed unit's check, then `discovered = written + quarantined`,
per-episode and total steps. Its parts have their own modules: the records (`stages.check_records`), the sampled
comparison with the source (`stages.sample_compare`), what is sampled (`stages.sampling`), the statistics
(`stages.norm_stats`) and the report files (`stages.validation_report`). The format-specific half (re-reading the
files: framing, CRCs, schema, NaN/Inf, images, checksums against the ledger, the real loader's read-back) is the
writer's (robo_ray.writers.base):

* `Writer.verify_unit(result, ctx) -> UnitCheck`: one committed unit re-read, right after its commit, by the worker
  that wrote it (a run), or by a parallel pass (`robo-ray validate`). A `UnitCheck` is small (counts, failures,
  sha256s, mergeable statistics, the sampled comparison's outcome) whatever the unit's size.
* `Writer.verify(ctx, res)`: the dataset-level checks (metadata, every planned file present, counts across units,
  the loader's read-back of a sample), merging the units' `UnitCheck`s (`ctx.unit_checks`, `UnitChecks`) instead of
  re-reading every file in one process.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from robo_ray.episode import RefTable
from robo_ray.readers.base import Inventory, Reader
from robo_ray.stages.check_records import UnitCheck, UnitChecks, ValidationResult
from robo_ray.stages.sampling import sample_ids
from robo_ray.writers import UnitResult, VerifyContext, Writer


@dataclass(frozen=True)
class UnitVerifySpec:
    """What a worker needs to re-read the unit it just committed (picklable, travels in the JobSpec)."""

    sample_ids: frozenset[int] | set[int] = frozenset()
    min_psnr_db: float = 30.0
    allow_nonfinite: bool = False

    def check(self, writer: Writer, reader: Reader | None, unit: Any, result: UnitResult) -> "UnitCheck | None":
        """`writer.verify_unit` of a unit just committed by this worker (the unit's own refs, no inventory)."""
        refs = {r.episode_index: r for r in unit.refs}
        ctx = VerifyContext({}, None, reader, set(self.sample_ids) & set(refs), self.min_psnr_db, False,
                            self.allow_nonfinite, refs=refs, rehash=False)
        return run_unit_check(writer, result, ctx)


# checks the units of a dataset (in parallel on a cluster, or in a loop): (writer, results, ctx) -> UnitChecks
UnitCheckRunner = Callable[[Writer, list[UnitResult], VerifyContext], Iterable["UnitCheck | None"]]


def check_units_here(writer: Writer, results: list[UnitResult], ctx: VerifyContext) -> Iterator["UnitCheck | None"]:
    """The in-process `UnitCheckRunner`: one unit after the other."""
    for r in results:
        yield run_unit_check(writer, r, ctx)


class Validator:
    """Validates one written dataset against its source inventory and the run's ledger: every committed unit is
    re-read (`Writer.verify_unit`: by its worker during a run, else by `check_units`), then the writer's
    dataset-level checks (`Writer.verify`) and the neutral ones run here."""

    def __init__(self, writer: Writer, inv: Inventory | None, reader: Reader | None, ledger: dict[str, Any] | None,
                 sample_episodes: int = 50, min_psnr_db: float = 30.0, loader_readback: bool = True,
                 allow_nonfinite: bool = False, unit_checks: UnitChecks | None = None,
                 check_units: UnitCheckRunner | None = None, readback_shards: int = 2) -> None:
        self.writer, self.inv, self.reader, self.ledger = writer, inv, reader, ledger or {}
        self.sample_episodes = sample_episodes
        ids = sample_ids(inv.refs, sample_episodes) if inv is not None and reader is not None else set()
        self.ctx = VerifyContext(self.ledger, inv, reader, ids, min_psnr_db, loader_readback, allow_nonfinite,
                                 readback_shards=readback_shards)
        self.unit_checks = unit_checks
        self.check_units = check_units or check_units_here
        self.units_checked = (0, 0)  # (units whose check came with them, units re-read by `check_units`), by run()

    @property
    def dataset_dir(self) -> str:
        return self.writer.dataset_dir

    def run(self) -> ValidationResult:
        res = ValidationResult()
        self.ctx.unit_checks = self._all_unit_checks()
        if self.writer.verify(self.ctx, res):  # else not committed: the writer said what is missing
            self._check_counts(res)
        compared_with = getattr(self.reader, "compared_with", None)  # a source that is not the files (Ray rows)
        if compared_with:
            for check in res.checks:
                if check.name.startswith("sample "):
                    check.detail += f" (the source here: {compared_with})"
        return res

    def _all_unit_checks(self) -> UnitChecks | None:
        """Every committed unit's check: those made by the workers, the rest now (resumed units; every unit for
        `robo-ray validate`). None when the writer verifies whole datasets only."""
        if type(self.writer).verify_unit is Writer.verify_unit:
            return None
        merged = self.unit_checks or UnitChecks(self.writer.mapping)
        todo = [r for r in self.ctx.results() if r.shard_index not in merged.units]
        self.units_checked = (len(merged.units), len(todo))
        for check in self.check_units(self.writer, todo, self.ctx) if todo else ():
            if check is not None:
                merged.add(check)
        return merged

    def _check_counts(self, res: ValidationResult) -> None:
        """discovered = written + quarantined, per-episode and total steps (numpy: a few arrays of the episodes)."""
        if self.inv is None:
            return
        quarantined = {q["episode_index"] for s in self.ledger.get("shards", []) for q in s.get("quarantined", [])}
        quarantined |= {q["episode_index"] for q in self.ledger.get("unit_failures", [])}
        quar = np.array(sorted(quarantined), np.int64)
        refs = RefTable.of(self.inv.refs)
        disc, disc_len = refs.episode_array(), refs.length_array()
        written, steps = res.episode_ids, res.episode_lengths
        lost = np.setdiff1d(np.setdiff1d(disc, written), quar)
        extra = np.setdiff1d(written, disc)
        both = np.intersect1d(written, quar)
        ok = not len(lost) and not len(extra) and not len(both)
        res.add("discovered = written + quarantined", ok,
                f"{len(np.unique(disc))} = {len(written)} + {len(quar)}" if ok else
                f"missing from output and not quarantined: {lost[:20].tolist()}; unexpected: {extra[:20].tolist()}; "
                f"written and quarantined: {both[:20].tolist()}")
        _, wi, di = np.intersect1d(written, disc, assume_unique=False, return_indices=True)
        wrong = np.flatnonzero(steps[wi] != disc_len[di])
        res.add("per-episode steps", not len(wrong), "every written episode has its source length" if not len(wrong)
                else "; ".join(f"episode {written[wi[k]]}: source {disc_len[di[k]]} steps, output {steps[wi[k]]}"
                               for k in wrong[:10]))
        exp_steps = int(disc_len[di].sum())
        res.add("total steps", res.steps_written == exp_steps,
                f"output {res.steps_written} steps, source {exp_steps} for the written episodes")


def run_unit_check(writer: Writer, result: UnitResult, ctx: VerifyContext) -> "UnitCheck | None":
    """`writer.verify_unit` timed; an unexpected error becomes a failed check of that unit, never a crash."""
    t0 = time.monotonic()
    try:
        check = writer.verify_unit(result, ctx)
    except Exception as exc:  # a reader bug must not hide the unit: it fails validation, in one line
        check = UnitCheck(result.shard_index)
        check.fail(f"unit {result.shard_index}", f"re-reading unit {result.shard_index} ({result.filename}) "
                   f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")
    if check is not None:
        check.seconds = time.monotonic() - t0
    return check
