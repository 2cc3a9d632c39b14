"""The validation records: a check's outcome (`Check`), what re-reading one unit found (`UnitCheck`), their merge
(`UnitChecks`) and a dataset's validation (`ValidationResult`). Neutral: the writers' contract
(robo_ray.writers.base) and the Validate stage (robo_ray.stages.validate) both import them."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from robo_ray.stages.norm_stats import StatsAccumulator
from robo_ray.stats import StatsSet

if TYPE_CHECKING:
    from robo_ray.mapping import Mapping

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
