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
    statistics: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def add(self, name: str, passed: bool, detail: str = "") -> None:
        self.checks.append(Check(name, passed, detail))
        if not passed:
            self.problems.append(f"{name}: {detail}")

    def set_episodes(self, episode_steps: dict[int, int]) -> None:
        self.episode_steps = dict(sorted(episode_steps.items()))
        self.episodes_written = len(episode_steps)
        self.steps_written = sum(episode_steps.values())


class StatsAccumulator:
    """Normalization statistics of every numeric step feature, over all written steps (exact quantiles).
    `add` takes the written values of one episode keyed by mapping target (plus "reward")."""

    def __init__(self, mapping: Mapping) -> None:
        self.shapes: dict[str, list[int]] = {fm.target: list(fm.shape) for fm in mapping.steps if fm.kind == "tensor"}
        self.shapes["reward"] = []
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in self.shapes}

    def add(self, values: dict[str, Any], T: int) -> None:
        if T == 0:
            return
        for key in self.shapes:
            v = values.get(key)
            if isinstance(v, np.ndarray) and v.size and v.size % T == 0:
                self.parts[key].append(v.reshape(T, -1))

    def finish(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, parts in self.parts.items():
            if not parts:
                continue
            a = np.concatenate(parts).astype(np.float64)
            shape = self.shapes[key]

            def vec(x: np.ndarray) -> Any:
                return x.reshape(shape).tolist() if shape else float(x.reshape(-1)[0])
            out[key] = {
                "mean": vec(a.mean(0)), "std": vec(a.std(0)), "min": vec(a.min(0)), "max": vec(a.max(0)),
                "q01": vec(np.quantile(a, 0.01, axis=0)), "q99": vec(np.quantile(a, 0.99, axis=0)),
                "count": int(a.shape[0])}
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
    stats = {"note": "normalization statistics over every written step (float64 math on the stored float32 "
                     "values); count = steps", "features": res.statistics}
    write_text_atomic(fs, join(out_root, "dataset_statistics.json"), json.dumps(stats, indent=2))
