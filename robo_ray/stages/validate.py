"""Validate: recompute everything from the written files (pipeline_stages.md, stage D).

The neutral half lives here: the result model, `discovered = written + quarantined`, per-episode and total steps,
the sampled comparison with the source (low-dim exact, images by PSNR against the decoded source frame), statistics
and the report files. The format-specific half (re-reading the files: framing, CRCs, schema, NaN/Inf, images,
checksums against the ledger, the real loader's read-back) is the writer's (robo_ray.writers.base):

* `Writer.verify_unit(result, ctx) -> UnitCheck`: one committed unit re-read, right after its commit, by the worker
  that wrote it (a run), or by a parallel pass (`robo-ray validate`). A `UnitCheck` is small (counts, failures,
  sha256s, mergeable statistics, the sampled comparison's outcome) whatever the unit's size.
* `Writer.verify(ctx, res)`: the dataset-level checks (metadata, every planned file present, counts across units,
  the loader's read-back of a sample), merging the units' `UnitCheck`s (`ctx.unit_checks`, `UnitChecks`) instead of
  re-reading every file in one process.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, ClassVar, Iterable, Iterator, Literal, Sequence, TypeVar

import numpy as np

from robo_ray.episode import EpisodeRef, RefTable
from robo_ray.errors import EpisodeError
from robo_ray.mapping import Mapping
from robo_ray.readers.base import Inventory, Reader, spread
from robo_ray.stats import KLL_K, RANK_ERROR, StatsSet
from robo_ray.storage import join, write_text_atomic
from robo_ray.writers import UnitResult, VerifyContext, Writer


CheckStatus = Literal["passed", "failed", "skipped"]
CHECK_STATUSES: tuple[CheckStatus, ...] = ("passed", "failed", "skipped")


@dataclass
class Check:
    """One validation check and its outcome: passed, failed, or skipped (not run; `detail` says why). A skipped
    check never counts as passed, and does not fail the validation either."""

    name: str
    status: CheckStatus
    detail: str = ""  # what was checked, what differs, or why the check did not run

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def failed(self) -> bool:
        return self.status == "failed"


@dataclass
class UnitCheck:
    """What re-reading one committed unit found (`Writer.verify_unit`): sent from the worker that wrote the unit to
    the Publisher, merged there (`UnitChecks`). Its size does not depend on the unit's (failures are capped)."""

    unit_index: int
    episode_steps: dict[int, int] = field(default_factory=dict)  # written episode -> steps, as re-read
    sha256: dict[str, str] = field(default_factory=dict)  # file name (relative to dataset_dir) -> digest, as re-read
    failures: list[tuple[str, str]] = field(default_factory=list)  # (check name, one-line detail)
    counts: dict[str, int] = field(default_factory=dict)  # the writer's counters (e.g. "nonfinite"), summed
    psnr: list[float] = field(default_factory=list)  # sampled images vs the source
    sampled: list[int] = field(default_factory=list)  # episodes compared with the source
    mismatches: list[str] = field(default_factory=list)  # the sampled comparison's differences
    notes: list[str] = field(default_factory=list)  # problem lines behind a counter (the first of each kind)
    stats: dict[str, Any] | None = None  # StatsAccumulator.to_dict() of the unit's written steps
    seconds: float = 0.0

    MAX_FAILURES: ClassVar[int] = 50

    def fail(self, name: str, detail: str) -> None:
        if len(self.failures) < self.MAX_FAILURES:
            self.failures.append((name, detail))

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + int(n)

    def note(self, line: str) -> None:
        if len(self.notes) < self.MAX_FAILURES:
            self.notes.append(line)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["episode_steps"] = [[k, v] for k, v in self.episode_steps.items()]  # JSON keys would become strings
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "UnitCheck":
        d = dict(d)
        d["episode_steps"] = {int(k): int(v) for k, v in d.get("episode_steps", [])}
        d["failures"] = [tuple(f) for f in d.get("failures", [])]
        return cls(**d)


class UnitChecks:
    """The merge of many `UnitCheck`s, kept as they arrive (memory: one int pair per written episode, one sha256
    per file, one statistics sketch set): what a writer's dataset-level `verify` reads."""

    def __init__(self, mapping: "Mapping") -> None:
        self.units: set[int] = set()
        self._episodes: list[np.ndarray] = []  # per unit: written episode indices (int64) ...
        self._steps: list[np.ndarray] = []  # ... and their steps
        self.sha256: dict[str, str] = {}
        self.failures: list[tuple[str, str]] = []
        self.counts: dict[str, int] = {}
        self.psnr: list[float] = []
        self.sampled: list[int] = []
        self.mismatches: list[str] = []
        self.notes: list[str] = []
        self.stats = StatsAccumulator(mapping)
        self.seconds = 0.0

    def add(self, c: UnitCheck) -> None:
        if c.unit_index in self.units:  # a unit recorded twice (a retried attempt): the first check stands
            return
        self.units.add(c.unit_index)
        n = len(c.episode_steps)
        self._episodes.append(np.fromiter(c.episode_steps.keys(), np.int64, n))
        self._steps.append(np.fromiter(c.episode_steps.values(), np.int64, n))
        self.sha256.update(c.sha256)
        self.failures += c.failures[:UnitCheck.MAX_FAILURES - min(len(self.failures), UnitCheck.MAX_FAILURES)]
        for k, n in c.counts.items():
            self.counts[k] = self.counts.get(k, 0) + n
        self.psnr += c.psnr
        self.sampled += c.sampled
        self.mismatches += c.mismatches[:20]
        self.notes += c.notes[:max(0, 200 - len(self.notes))]
        if c.stats:
            self.stats.merge(StatsSet.from_dict(c.stats))
        self.seconds += c.seconds

    def episode_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(episode indices, steps) of every merged unit, in merge order (int64 arrays)."""
        if not self._episodes:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(self._episodes), np.concatenate(self._steps)

    @property
    def episode_steps(self) -> dict[int, int]:
        """{episode: steps} of every merged unit (built on demand; a later unit's value wins)."""
        eps, steps = self.episode_arrays()
        return dict(zip(eps.tolist(), steps.tolist()))

    @property
    def duplicates(self) -> list[int]:
        """Episodes written by more than one unit."""
        eps, _ = self.episode_arrays()
        values, counts = np.unique(eps, return_counts=True)
        return values[counts > 1].tolist()

    def apply(self, res: "ValidationResult", min_psnr_db: float) -> None:
        """The neutral half of the merge: per-unit failures as checks, unique episodes, the sampled comparison,
        episode/step counts, file digests and statistics into `res`."""
        for name, detail in self.failures:
            res.add(name, False, detail)
        dup = self.duplicates
        res.add("unique episodes", not dup, "every episode is written once" if not dup
                else f"episodes written more than once: {dup[:20]}")
        add_sample_checks(res, self.sampled, self.mismatches, self.psnr, min_psnr_db)
        res.set_episodes(*self.episode_arrays())
        res.shard_sha256.update(self.sha256)
        res.set_statistics(self.stats)


@dataclass
class ValidationResult:
    checks: list[Check] = field(default_factory=list)
    episodes_written: int = 0
    steps_written: int = 0
    episode_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # written episodes, sorted
    episode_lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # their steps
    shard_sha256: dict[str, str] = field(default_factory=dict)  # every written file's sha256 (name -> digest)
    psnr: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    statistics: dict[str, Any] = field(default_factory=dict)  # per feature (the writer's naming)
    stats: "StatsAccumulator | None" = None  # the mergeable statistics behind `statistics`, when the writer kept them

    @property
    def passed(self) -> bool:
        """No check failed (skipped checks do not fail the validation; they are not counted as passed either)."""
        return not any(c.failed for c in self.checks)

    def add(self, name: str, passed: bool, detail: str = "") -> None:
        """A check that ran: passed or failed."""
        self.checks.append(Check(name, "passed" if passed else "failed", detail))
        if not passed:
            self.problems.append(f"{name}: {detail}")

    def skip(self, name: str, reason: str) -> None:
        """A check that did not run, and why (e.g. its loader is not installed)."""
        self.checks.append(Check(name, "skipped", reason))

    def counts(self) -> dict[str, int]:
        """{"passed": n, "failed": n, "skipped": n} over the checks."""
        return {s: sum(1 for c in self.checks if c.status == s) for s in CHECK_STATUSES}

    def tally(self) -> str:
        """The checks per outcome, for people: "12 passed, 0 failed, 1 skipped"."""
        n = self.counts()
        return f"{n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped"

    def verdict(self) -> str:
        """PASSED / FAILED and the checks per outcome."""
        return f"{'PASSED' if self.passed else 'FAILED'} ({self.tally()})"

    def set_statistics(self, stats: "StatsAccumulator") -> None:
        self.stats, self.statistics = stats, stats.summary()

    def set_episodes(self, episodes: "dict[int, int] | np.ndarray", steps: np.ndarray | None = None) -> None:
        """The written episodes: {episode: steps}, or two arrays (episode indices, steps; a repeated episode keeps
        its last value). Kept as sorted int64 arrays: 16 bytes per episode."""
        if isinstance(episodes, dict):
            steps = np.fromiter(episodes.values(), np.int64, len(episodes))
            episodes = np.fromiter(episodes.keys(), np.int64, len(episodes))
        assert steps is not None
        episodes, steps = np.asarray(episodes, np.int64), np.asarray(steps, np.int64)
        last = len(episodes) - 1 - np.unique(episodes[::-1], return_index=True)[1]  # sorted unique, last value
        self.episode_ids, self.episode_lengths = episodes[last], steps[last]
        self.episodes_written = len(self.episode_ids)
        self.steps_written = int(self.episode_lengths.sum())

    @property
    def episode_steps(self) -> dict[int, int]:
        """{episode: steps} of the written episodes, sorted (built on demand)."""
        return dict(zip(self.episode_ids.tolist(), self.episode_lengths.tolist()))


LOADER_GROUPS = {"action": "action", "proprio": "state"}  # dataset_statistics.json group -> FieldMap.role


class StatsAccumulator(StatsSet):
    """Normalization statistics of every numeric step feature of a mapping (plus "reward"), over all written steps:
    mergeable, memory independent of the number of steps (robo_ray.stats). `add` takes the written values of one
    episode keyed by mapping target."""

    def __init__(self, mapping: Mapping) -> None:
        shapes = {fm.target: list(fm.shape) for fm in mapping.steps if fm.kind == "tensor"}
        super().__init__({**shapes, "reward": []})
        # what the loaders call action / proprio: the mapping's action- and state-role features, in mapping order
        self.groups = {group: [fm.target for fm in mapping.steps if fm.kind == "tensor" and fm.role == role]
                       for group, role in LOADER_GROUPS.items()}


def loader_statistics(stats: StatsAccumulator, episodes: int, steps: int) -> dict[str, Any]:
    """The layout Octo's and OpenVLA's `make_dataset_from_rlds(dataset_statistics=...)` read: top-level `action`
    and `proprio` (mean, std, min, max, p01 / p99 for Octo, q01 / q99 for OpenVLA; features of a group concatenated
    per step in mapping order, as their standardize functions concatenate them), `num_transitions`,
    `num_trajectories`. Without a state feature `proprio` is zeros of the action's size, as OpenVLA's
    get_dataset_statistics computes it (its normalization reads `proprio` unconditionally)."""
    out: dict[str, Any] = {}
    stats.flush()
    for group, targets in stats.groups.items():
        parts = [stats.features[t] for t in targets if t in stats.features and stats.features[t].count]
        if not parts:
            continue
        summaries = [p.summary() for p in parts]
        g = {k: np.concatenate([np.ravel(s[k]) for s in summaries]).tolist()
             for k in ("mean", "std", "min", "max", "q01", "q99")}
        g["p01"], g["p99"] = g["q01"], g["q99"]
        out[group] = g
    if "action" in out and "proprio" not in out:
        zeros = [0.0] * len(out["action"]["mean"])
        out["proprio"] = {k: zeros for k in out["action"]}
    out["num_transitions"], out["num_trajectories"] = steps, episodes
    return out


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def sample_indices(T: int) -> list[int]:
    """The steps compared with the source: first, middle, last."""
    return sorted({0, T // 2, T - 1}) if T else []


@dataclass
class WrittenSample:
    """What a writer read back of one sampled episode, at `sample_indices(steps)`: per tensor target the rows
    (flattened per step), per camera target a function giving the decoded HxWxC frame, the language per step."""

    steps: int
    tensors: dict[str, np.ndarray] = field(default_factory=dict)  # target -> (len(idx), per_step)
    images: dict[str, Callable[[int], np.ndarray]] = field(default_factory=dict)  # target -> k -> frame at idx[k]
    language: list[str] | None = None  # at idx


def compare_sample(reader: Reader, mapping: Mapping, ref: EpisodeRef, written: WrittenSample,
                   res: ValidationResult) -> list[str]:
    """Compare one written episode with its source at first/middle/last step: low-dim values exactly (after the
    mapping's dtype), images by PSNR (appended to res.psnr), language equal. Returns the mismatches."""
    from robo_ray.stages.source_frames import source_frames

    try:
        ep = reader.load_episode(ref)
    except EpisodeError as exc:
        return [f"episode {ref.episode_index}: source unreadable ({exc})"]
    T = ep.length
    idx = sample_indices(T)
    out: list[str] = []
    for fm in mapping.steps:
        if fm.kind == "tensor":
            per = int(np.prod(fm.shape)) if fm.shape else 1
            got = np.asarray(written.tensors[fm.target]).reshape(len(idx), per)
            src = ep.columns[fm.source].reshape(T, per)
            want = src.astype(np.float32) if fm.dtype == "float32" else src.astype(np.int64)
            for k, i in enumerate(idx):
                if not np.array_equal(got[k].astype(want.dtype), want[i], equal_nan=want.dtype.kind == "f"):
                    out.append(f"episode {ref.episode_index} step {i}: {fm.target} differs from {fm.source}")
        elif fm.kind == "image":
            frames = source_frames(reader, ep, fm.source, idx)
            for k, src in enumerate(frames):
                got = written.images[fm.target](k)
                if src.shape != got.shape:
                    src = _resize_like(src, got.shape)
                res.psnr.append(psnr(src, got))
    if written.language is not None:
        d = mapping.defaults
        want = d.step_language(ep.step_tasks, T)
        for k, i in enumerate(idx):
            if k < len(written.language) and written.language[k] != want[i]:
                out.append(f"episode {ref.episode_index} step {i}: language_instruction differs from the "
                           f"{'task' if d.language_source == 'task' else 'instruction'} ({want[i]!r})")
    return out


def sample_ids(refs: Sequence[EpisodeRef], sample_episodes: int) -> set[int]:
    """Episodes compared to the source: `sample_episodes` spread evenly over the discovered ones (0 = none)."""
    if not sample_episodes:
        return set()
    ids = refs.episode_indices() if isinstance(refs, RefTable) else [r.episode_index for r in refs]
    if len(ids) > sample_episodes:
        step = len(ids) / sample_episodes
        ids = [ids[int(k * step)] for k in range(sample_episodes)]
    return set(ids)


ItemT = TypeVar("ItemT")


def spread_sample(items: list[ItemT], k: int) -> list[ItemT]:
    """`k` of `items` spread evenly, the first and the last included (0, or k >= len: all): the units a loader's
    read-back reads (`VerifyContext.readback_shards`)."""
    return [items[i] for i in spread(len(items), k or len(items))]


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


def compare_samples(ctx: VerifyContext, mapping: Mapping, samples: dict[int, WrittenSample],
                    psnr_out: list[float]) -> tuple[list[int], list[str]]:
    """Compare the sampled written episodes with their source (`compare_sample`): (episodes compared, mismatches);
    image PSNRs are appended to `psnr_out`."""
    if ctx.reader is None or not samples:
        return [], []
    refs = ctx.ref_map()
    ids = sorted(i for i in samples if i in refs)
    holder = ValidationResult()
    mismatches: list[str] = []
    for ep_id in ids:
        mismatches += compare_sample(ctx.reader, mapping, refs[ep_id], samples[ep_id], holder)
    psnr_out += holder.psnr
    return ids, mismatches


def add_sample_checks(res: ValidationResult, sampled: list[int], mismatches: list[str], psnr_values: list[float],
                      min_psnr_db: float) -> None:
    """The two checks of the sampled comparison: low-dim values and language, images by PSNR."""
    res.psnr += [p for p in psnr_values]
    if not sampled and not mismatches:
        return
    res.add("sample low-dim", not mismatches, f"{len(sampled)} episodes x first/middle/last step equal the source"
            if not mismatches else "; ".join(mismatches[:10]))
    if res.psnr:
        ok_psnr = min(res.psnr) >= min_psnr_db
        res.add("sample images", ok_psnr, f"{len(res.psnr)} images, PSNR mean {np.mean(res.psnr):.1f} dB, "
                f"min {min(res.psnr):.1f} dB (threshold {min_psnr_db} dB)")


def sample_checks(ctx: VerifyContext, mapping: Mapping, samples: dict[int, WrittenSample],
                  res: ValidationResult) -> None:
    """The sampled comparison with the source, for a writer's dataset-level verify: one check for low-dim values
    and language, one for images."""
    if ctx.reader is None or ctx.inv is None:
        return
    psnr_values: list[float] = []
    ids, mismatches = compare_samples(ctx, mapping, samples, psnr_values)
    add_sample_checks(res, ids, mismatches, psnr_values, ctx.min_psnr_db)


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


def _resize_like(src: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    from PIL import Image

    img = Image.fromarray(src if src.shape[2] == 3 else src[:, :, 0])
    arr = np.asarray(img.resize((shape[1], shape[0]), Image.Resampling.BILINEAR))
    return arr if arr.ndim == 3 else arr[:, :, None]


STATUS_MARKS: dict[str, str] = {"passed": "✅", "failed": "❌", "skipped": "⏭️ skipped"}  # in the Markdown reports


def marked_verdict(res: ValidationResult) -> str:
    """The verdict with its mark, for the Markdown reports."""
    return f"{'✅' if res.passed else '❌'} {res.verdict()}"


def validation_markdown(res: ValidationResult, name: str, seconds: float) -> str:
    status = marked_verdict(res)
    lines = [f"# Validation Report: {name}", "", "## Summary", f"- **Status**: {status}",
             f"- **Validated at**: {datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}",
             f"- **Duration**: {seconds:.1f}s", f"- **Episodes written**: {res.episodes_written}",
             f"- **Steps written**: {res.steps_written}", "", "## Checks", "", "| Check | Result | Detail |",
             "|---|---|---|"]
    lines += [f"| {c.name} | {STATUS_MARKS[c.status]} | {c.detail} |" for c in res.checks]
    if res.problems:
        lines += ["", "## Problems", ""] + [f"- {p}" for p in res.problems[:200]]
    return "\n".join(lines) + "\n"


def diff_summary_fields(res: ValidationResult) -> dict[str, Any]:
    """diff_summary.json without its per-episode steps. `passed`: no check failed; per check `status` (passed /
    failed / skipped, `detail` saying why a check was skipped) and `passed` (false for a skipped check)."""
    return {"passed": res.passed, "counts": res.counts(), "episodes_written": res.episodes_written,
            "steps_written": res.steps_written,
            "checks": [{"name": c.name, "status": c.status, "passed": c.passed, "detail": c.detail}
                       for c in res.checks],
            "psnr_db": {"count": len(res.psnr), "mean": float(np.mean(res.psnr)) if res.psnr else None,
                        "min": float(min(res.psnr)) if res.psnr else None},
            "shard_sha256": res.shard_sha256, "problems": res.problems[:1000]}


def diff_summary(res: ValidationResult) -> dict[str, Any]:
    """diff_summary.json as a dict (episode_steps keyed by the episode index as a string)."""
    return {**diff_summary_fields(res), "episode_steps": {str(k): v for k, v in res.episode_steps.items()}}


def diff_summary_text(res: ValidationResult, chunk: int = 8192) -> str:
    """diff_summary.json's text (`diff_summary` indented), its per-episode steps written from the arrays in
    chunks: no {episode: steps} dict of the whole dataset."""
    text = json.dumps(diff_summary_fields(res), indent=2)
    ids, lengths = res.episode_ids.tolist(), res.episode_lengths.tolist()
    parts = [",\n".join(f'    "{e}": {n}' for e, n in zip(ids[i:i + chunk], lengths[i:i + chunk]))
             for i in range(0, len(ids), chunk)]
    steps = "{\n" + ",\n".join(parts) + "\n  }" if parts else "{}"
    return text[:-2] + f',\n  "episode_steps": {steps}\n}}'


def write_validation_outputs(fs, out_root: str, res: ValidationResult, name: str, seconds: float) -> None:
    """validation_report.md, diff_summary.json and dataset_statistics.json at the output root."""
    write_text_atomic(fs, join(out_root, "validation_report.md"), validation_markdown(res, name, seconds))
    write_text_atomic(fs, join(out_root, "diff_summary.json"), diff_summary_text(res))
    write_text_atomic(fs, join(out_root, "dataset_statistics.json"), json.dumps(dataset_statistics(res), indent=2))


def dataset_statistics(res: ValidationResult) -> dict[str, Any]:
    """dataset_statistics.json: the loaders' layout at the top level (`loader_statistics`, when the writer kept
    mergeable statistics), every feature's statistics under `features`, provenance under `robo_ray`."""
    out = loader_statistics(res.stats, res.episodes_written, res.steps_written) if res.stats is not None else \
        {"num_transitions": res.steps_written, "num_trajectories": res.episodes_written}
    out["features"] = res.statistics
    out["robo_ray"] = {
        "note": "normalization statistics over every written step of every split (float64 math on the stored "
                "values); count = steps. Top level: the layout Octo's and OpenVLA's loaders read as "
                "dataset_statistics (README 'Statistics and splits').",
        "action": res.stats.groups["action"] if res.stats is not None else [],
        "proprio": res.stats.groups["proprio"] if res.stats is not None else [],
        "quantiles": f"q01/q99 (= p01/p99) from Apache DataSketches KLL (k={KLL_K}): normalized rank error <= "
                     f"{RANK_ERROR:.5f} with 99% confidence, exact up to {KLL_K} steps",
        "quantile_rank_error": RANK_ERROR}
    return out
