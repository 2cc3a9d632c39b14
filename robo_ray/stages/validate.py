"""Validate: recompute everything from the written files (pipeline_stages.md, stage D).

The neutral half lives here: the result model, `discovered = written + quarantined`, per-episode and total steps,
the sampled comparison with the source (low-dim exact, images by PSNR against the decoded source frame), statistics
and the report files. The format-specific half (re-reading the files: framing, CRCs, schema, NaN/Inf, images,
checksums against the ledger, the real loader's read-back) is the writer's `verify` (robo_ray.writers.base).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

import numpy as np

from robo_ray.episode import EpisodeRef
from robo_ray.errors import EpisodeError
from robo_ray.mapping import Mapping
from robo_ray.readers.base import Inventory, Reader
from robo_ray.stats import KLL_K, RANK_ERROR, StatsSet
from robo_ray.storage import join, write_text_atomic
from robo_ray.writers import VerifyContext, Writer


@dataclass
class Check:
    name: str
    passed: bool
    detail: str = ""


@dataclass
class ValidationResult:
    checks: list[Check] = field(default_factory=list)
    episodes_written: int = 0
    steps_written: int = 0
    episode_steps: dict[int, int] = field(default_factory=dict)
    shard_sha256: dict[str, str] = field(default_factory=dict)  # every written file's sha256 (name -> digest)
    psnr: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    statistics: dict[str, Any] = field(default_factory=dict)  # per feature (the writer's naming)
    stats: "StatsAccumulator | None" = None  # the mergeable statistics behind `statistics`, when the writer kept them

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def add(self, name: str, passed: bool, detail: str = "") -> None:
        self.checks.append(Check(name, passed, detail))
        if not passed:
            self.problems.append(f"{name}: {detail}")

    def set_statistics(self, stats: "StatsAccumulator") -> None:
        self.stats, self.statistics = stats, stats.summary()

    def set_episodes(self, episode_steps: dict[int, int]) -> None:
        self.episode_steps = dict(sorted(episode_steps.items()))
        self.episodes_written = len(episode_steps)
        self.steps_written = sum(episode_steps.values())


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


class Validator:
    """Validates one written dataset against its source inventory and the run's ledger: the writer re-reads its
    files (`Writer.verify`), then the dataset-level checks run here."""

    def __init__(self, writer: Writer, inv: Inventory | None, reader: Reader | None, ledger: dict[str, Any] | None,
                 sample_episodes: int = 50, min_psnr_db: float = 30.0, loader_readback: bool = True,
                 allow_nonfinite: bool = False) -> None:
        self.writer, self.inv, self.reader, self.ledger = writer, inv, reader, ledger or {}
        self.sample_episodes = sample_episodes
        self.ctx = VerifyContext(self.ledger, inv, reader, self._sample_ids(), min_psnr_db, loader_readback,
                                 allow_nonfinite)

    @property
    def dataset_dir(self) -> str:
        return self.writer.dataset_dir

    def run(self) -> ValidationResult:
        res = ValidationResult()
        if self.writer.verify(self.ctx, res):  # else not committed: the writer said what is missing
            self._check_counts(res)
        return res

    def _sample_ids(self) -> set[int]:
        """Episodes compared to the source: `sample_episodes` spread evenly over the discovered ones."""
        if self.inv is None or self.reader is None or not self.sample_episodes:
            return set()  # 0 = no comparison with the source (`robo-ray convert`, benchmarks)
        ids = [r.episode_index for r in self.inv.refs]
        if len(ids) > self.sample_episodes:
            step = len(ids) / self.sample_episodes
            ids = [ids[int(k * step)] for k in range(self.sample_episodes)]
        return set(ids)

    def _check_counts(self, res: ValidationResult) -> None:
        if self.inv is None:
            return
        quarantined = {q["episode_index"] for s in self.ledger.get("shards", []) for q in s.get("quarantined", [])}
        quarantined |= {q["episode_index"] for q in self.ledger.get("unit_failures", [])}
        discovered = {r.episode_index: r.length for r in self.inv.refs}
        episodes = res.episode_steps
        written = set(episodes)
        lost = sorted(set(discovered) - written - quarantined)
        extra = sorted(written - set(discovered))
        both = sorted(written & quarantined)
        ok = not lost and not extra and not both
        res.add("discovered = written + quarantined", ok,
                f"{len(discovered)} = {len(written)} + {len(quarantined)}" if ok else
                f"missing from output and not quarantined: {lost[:20]}; unexpected: {extra[:20]}; "
                f"written and quarantined: {both[:20]}")
        wrong = [(i, discovered[i], episodes[i]) for i in sorted(written & set(discovered))
                 if discovered[i] != episodes[i]]
        res.add("per-episode steps", not wrong, "every written episode has its source length" if not wrong else
                "; ".join(f"episode {i}: source {a} steps, output {b}" for i, a, b in wrong[:10]))
        exp_steps = sum(discovered[i] for i in written & set(discovered))
        res.add("total steps", res.steps_written == exp_steps,
                f"output {res.steps_written} steps, source {exp_steps} for the written episodes")


def sample_checks(ctx: VerifyContext, mapping: Mapping, samples: dict[int, WrittenSample],
                  res: ValidationResult) -> None:
    """The sampled comparison with the source, for a writer's verify: one check for low-dim values and language,
    one for images."""
    if ctx.reader is None or ctx.inv is None:
        return
    refs = {r.episode_index: r for r in ctx.inv.refs}
    ids = sorted(i for i in samples if i in refs)
    mismatches: list[str] = []
    for ep_id in ids:
        mismatches += compare_sample(ctx.reader, mapping, refs[ep_id], samples[ep_id], res)
    ok_psnr = not res.psnr or min(res.psnr) >= ctx.min_psnr_db
    res.add("sample low-dim", not mismatches, f"{len(ids)} episodes x first/middle/last step equal the source"
            if not mismatches else "; ".join(mismatches[:10]))
    if res.psnr:
        res.add("sample images", ok_psnr, f"{len(res.psnr)} images, PSNR mean {np.mean(res.psnr):.1f} dB, "
                f"min {min(res.psnr):.1f} dB (threshold {ctx.min_psnr_db} dB)")


def _resize_like(src: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    from PIL import Image

    img = Image.fromarray(src if src.shape[2] == 3 else src[:, :, 0])
    arr = np.asarray(img.resize((shape[1], shape[0]), Image.Resampling.BILINEAR))
    return arr if arr.ndim == 3 else arr[:, :, None]


def validation_markdown(res: ValidationResult, name: str, seconds: float) -> str:
    status = "✅ PASSED" if res.passed else "❌ FAILED"
    lines = [f"# Validation Report: {name}", "", "## Summary", f"- **Status**: {status}",
             f"- **Validated at**: {datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}",
             f"- **Duration**: {seconds:.1f}s", f"- **Episodes written**: {res.episodes_written}",
             f"- **Steps written**: {res.steps_written}", "", "## Checks", "", "| Check | Result | Detail |",
             "|---|---|---|"]
    lines += [f"| {c.name} | {'✅' if c.passed else '❌'} | {c.detail} |" for c in res.checks]
    if res.problems:
        lines += ["", "## Problems", ""] + [f"- {p}" for p in res.problems[:200]]
    return "\n".join(lines) + "\n"


def diff_summary(res: ValidationResult) -> dict[str, Any]:
    return {"passed": res.passed, "episodes_written": res.episodes_written, "steps_written": res.steps_written,
            "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in res.checks],
            "psnr_db": {"count": len(res.psnr), "mean": float(np.mean(res.psnr)) if res.psnr else None,
                        "min": float(min(res.psnr)) if res.psnr else None},
            "episode_steps": {str(k): v for k, v in res.episode_steps.items()},
            "shard_sha256": res.shard_sha256, "problems": res.problems[:1000]}


def write_validation_outputs(fs, out_root: str, res: ValidationResult, name: str, seconds: float) -> None:
    """validation_report.md, diff_summary.json and dataset_statistics.json at the output root."""
    write_text_atomic(fs, join(out_root, "validation_report.md"), validation_markdown(res, name, seconds))
    write_text_atomic(fs, join(out_root, "diff_summary.json"), json.dumps(diff_summary(res), indent=2))
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
