"""The sampled comparison of written episodes with their source: low-dim values exactly, images by PSNR against
the decoded source frame (and bit-identical for cameras a writer copied without re-encoding), language equal
(`compare_samples`, `sample_checks`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from robo_ray.episode import EpisodeRef
from robo_ray.errors import EpisodeError
from robo_ray.mapping import Mapping
from robo_ray.readers.base import Reader
from robo_ray.stages.check_records import ValidationResult, add_sample_checks
from robo_ray.stages.sampling import sample_indices
from robo_ray.writers import VerifyContext


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def resize_like(src: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    from PIL import Image

    img = Image.fromarray(src if src.shape[2] == 3 else src[:, :, 0])
    arr = np.asarray(img.resize((shape[1], shape[0]), Image.Resampling.BILINEAR))
    return arr if arr.ndim == 3 else arr[:, :, None]


@dataclass
class WrittenSample:
    """What a writer read back of one sampled episode, at `sample_indices(steps)`: per tensor target the rows
    (flattened per step), per camera target a function giving the decoded HxWxC frame, the language per step."""

    steps: int
    tensors: dict[str, np.ndarray] = field(default_factory=dict)  # target -> (len(idx), per_step)
    images: dict[str, Callable[[int], np.ndarray]] = field(default_factory=dict)  # target -> k -> frame at idx[k]
    language: list[str] | None = None  # at idx
    exact: set[str] = field(default_factory=set)  # camera targets whose frames must equal the source's (copied)
    # 16-bit (depth) camera targets stored lossy: source frame -> the largest error allowed per pixel (a writer's
    # documented quantization); a 16-bit camera not here must come back exact
    depth_bounds: dict[str, Callable[[np.ndarray], np.ndarray]] = field(default_factory=dict)


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
                if fm.target in written.exact and not np.array_equal(src, got):
                    out.append(f"episode {ref.episode_index} step {idx[k]}: {fm.target} was copied from the source's "
                               "encoded stream but does not decode bit-identical to the source's frame")
                if src.dtype == np.uint16:  # depth: per pixel within the writer's bound, never by PSNR
                    out += _depth_mismatch(ref.episode_index, idx[k], fm.target, src, got,
                                           written.depth_bounds.get(fm.target))
                    continue
                if src.shape != got.shape:
                    src = resize_like(src, got.shape)
                res.psnr.append(psnr(src, got))
    if written.language is not None:
        d = mapping.defaults
        want = d.step_language(ep.step_tasks, T)
        for k, i in enumerate(idx):
            if k < len(written.language) and written.language[k] != want[i]:
                out.append(f"episode {ref.episode_index} step {i}: language_instruction differs from the "
                           f"{'task' if d.language_source == 'task' else 'instruction'} ({want[i]!r})")
    return out


def _depth_mismatch(episode: int, step: int, target: str, src: np.ndarray, got: np.ndarray,
                    bound: Callable[[np.ndarray], np.ndarray] | None) -> list[str]:
    """A 16-bit frame read back against its source: every pixel within `bound(src)` (None: exact)."""
    got = np.asarray(got)
    if got.size != src.size:
        return [f"episode {episode} step {step}: {target} is {got.shape}, the source frame {src.shape}"]
    err = np.abs(got.reshape(src.shape).astype(np.float64) - src.astype(np.float64))
    allowed = np.zeros(src.shape) if bound is None else np.asarray(bound(src), np.float64)
    bad = err > allowed
    if not bad.any():
        return []
    worst = np.unravel_index(int(np.argmax(err - allowed)), err.shape)
    return [f"episode {episode} step {step}: {target} depth off by up to {err.max():.0f} ({int(bad.sum())} pixels "
            f"beyond the {'quantization bound' if bound is not None else 'exact match'}; e.g. {int(src[worst])} -> "
            f"{int(got.reshape(src.shape)[worst])}, allowed {allowed[worst]:.2f})"]


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


def sample_checks(ctx: VerifyContext, mapping: Mapping, samples: dict[int, WrittenSample],
                  res: ValidationResult) -> None:
    """The sampled comparison with the source, for a writer's dataset-level verify: one check for low-dim values
    and language, one for images."""
    if ctx.reader is None or ctx.inv is None:
        return
    psnr_values: list[float] = []
    ids, mismatches = compare_samples(ctx, mapping, samples, psnr_values)
    add_sample_checks(res, ids, mismatches, psnr_values, ctx.min_psnr_db)
