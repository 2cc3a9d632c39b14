"""The ORTF per-unit check (`OrtfUnitVerifier.check_unit`, robo_ray/writers/base.py's `verify_unit`): re-read one
chunk OrtfWriter committed.

Per unit (`check_unit`, on the worker right after the commit, or in a validation pass over an existing output): every
file of the unit re-read and hashed (sha256 and size against the unit's result), steps.parquet's schema, rows per
episode (contiguous, step_index 0..n-1, as many as the result says), per-step task ids within the unit's task list,
NaN/Inf, statistics of the written values, each camera MP4's frame count and size from its index plus its first frame
decoded; first/middle/last frames of the sampled episodes, handed with their rows to the neutral comparison with the
source (the language through the unit's own task list, `extra["step_tasks"]` / the episode rows: no meta/ file
is needed on a worker).

A damaged file's problems are collected per file (`file <name>: ...`, one failed check naming it); the
dataset-level checks (robo_ray/formats/ortf/verify.py) merge them with what they find in the same file."""
from __future__ import annotations

import io
import json
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Callable

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robo_ray.arrow_lists import list_values
from robo_ray.formats.ortf.layout import MANIFEST, episode_id, steps_schema
from robo_ray.stages.check_records import UnitCheck
from robo_ray.stages.norm_stats import StatsAccumulator
from robo_ray.stages.sample_compare import WrittenSample, compare_samples
from robo_ray.stages.sampling import sample_indices
from robo_ray.storage import hash_against, join, open_sequential
from robo_ray.writers.base import UnitResult, VerifyContext

if TYPE_CHECKING:
    from robo_ray.formats.ortf.writer import OrtfWriter

MAX_FILE_PROBLEMS = 5  # problems named per file (the rest counted): a unit's check stays small


def file_detail(msgs: list[str]) -> str:
    """A file's problems in one line: the first MAX_FILE_PROBLEMS, the rest counted."""
    more = len(msgs) - MAX_FILE_PROBLEMS
    return "; ".join(msgs[:MAX_FILE_PROBLEMS]) + (f"; and {more} more" if more > 0 else "")


class OrtfUnitVerifier:
    """Re-reads one chunk of an ORTF dataset written by OrtfWriter (`check_unit`: on the worker that wrote it, or in
    a validation pass); robo_ray/formats/ortf/verify.py's `OrtfVerifier` adds the dataset-level checks."""

    def __init__(self, writer: "OrtfWriter", ctx: VerifyContext) -> None:
        self.writer, self.ctx = writer, ctx
        self.fs, self.mapping, self.layout = writer.fs, writer.mapping, writer.layout
        self.root = writer.dataset_dir
        self.bad: dict[str, list[str]] = {}  # file -> its problems (one failed check each)
        self.meta: dict[str, bytes | None] = {}  # meta/ files as read (once)
        self._rate: Fraction | None = None

    def problem(self, name: str, msg: str) -> None:
        self.bad.setdefault(name, []).append(msg)

    def path(self, rel: str) -> str:
        return join(self.root, rel)

    # ---- one unit ------------------------------------------------------------------------------------------------
    def check_unit(self, r: UnitResult) -> UnitCheck:
        """Re-read one unit's files (see the module docstring); `r` is the unit's result (its ledger entry)."""
        c = UnitCheck(r.shard_index)
        bad: dict[str, list[str]] = {}
        missing: set[str] = set()
        stats = StatsAccumulator(self.mapping)
        samples: dict[int, WrittenSample] = {}
        data: bytes | None = None
        for name, size, digest in r.all_files():
            got = self._read_file(name, size, digest, c, bad, keep=name == r.filename)
            if got is None:
                missing.add(name)
            elif name == r.filename:
                data = got
        c.count("files", len(r.all_files()))
        if r.filename:
            c.episode_steps = dict(r.episodes)
            if data is not None:
                c.episode_steps = self._check_steps(r, data, c, bad, missing, stats, samples)
        for name, msgs in bad.items():
            c.fail(f"file {name}", file_detail(msgs))
        c.count("damaged_files", len(bad))
        c.count("missing_files", len(missing))  # named by the dataset-level listing
        c.stats = stats.to_dict()
        c.sampled, c.mismatches = compare_samples(self.ctx, self.mapping, samples, c.psnr)
        return c

    def _read_file(self, name: str, size: int, digest: str, c: UnitCheck, bad: dict[str, list[str]],
                   keep: bool) -> bytes | None:
        """Hash one file of the unit (its bytes returned when `keep`, b"" otherwise); None when it is missing."""
        raw, got, problem = hash_against(self.fs, self.path(name), size, digest, keep)
        if raw is not None:
            c.sha256[name] = got
        if problem:
            bad.setdefault(name, []).append(problem)
        return raw

    def _check_steps(self, r: UnitResult, data: bytes, c: UnitCheck, bad: dict[str, list[str]], missing: set[str],
                     stats: StatsAccumulator, samples: dict[int, WrittenSample]) -> dict[int, int]:
        """steps.parquet and the episodes' videos; returns {episode index: steps} as read (the result's counts where
        the file is bad)."""
        ledger_steps = dict(r.episodes)
        rows = {int(e["index"]): e for e in r.extra.get("episodes", [])}

        def problem(msg: str) -> None:
            bad.setdefault(r.filename, []).append(msg)

        table = self._read_steps(r, data, c, problem)
        if table is None:
            return ledger_steps
        step_tasks = list(r.extra.get("step_tasks") or [])
        if "task_id" in table.column_names:
            tids = table["task_id"].to_numpy(zero_copy_only=False)
            if len(tids) and (tids.min() < 0 or tids.max() >= len(step_tasks)):
                problem(f"task_id values {int(tids.min())}..{int(tids.max())} outside the unit's "
                        f"{len(step_tasks)} tasks")
        ids = table["episode_id"].to_numpy(zero_copy_only=False)
        out: dict[int, int] = {}
        bounds: dict[str, tuple[int, int]] = {}
        start = 0
        for k in range(1, len(ids) + 1):  # rows are grouped by episode, in the ledger's order
            if k == len(ids) or ids[k] != ids[start]:
                bounds[str(ids[start])] = (start, k)
                start = k
        if len(bounds) != len(set(ids.tolist())):
            problem("an episode's rows are not contiguous")
            return ledger_steps
        for ep, n in r.episodes:
            key = episode_id(ep)
            lo, hi = bounds.pop(key, (0, 0))
            if hi - lo != n:
                problem(f"episode {key} has {hi - lo} rows, the ledger says {n}")
                continue
            part = table.slice(lo, n)
            if not np.array_equal(part["step_index"].to_numpy(), np.arange(n)):
                problem(f"episode {key}: step_index is not 0..{n - 1}")
            values = self._values(part)
            stats.add(values, n)
            self._check_videos(r, ep, n, rows.get(ep, {}), c, bad, missing, samples, part, values, step_tasks)
            out[ep] = n
        if bounds:
            problem(f"rows of episodes the ledger does not list: {sorted(bounds)[:5]}")
        return out if not bad.get(r.filename) else ledger_steps

    def _read_steps(self, r: UnitResult, data: bytes, c: UnitCheck, problem: Callable[[str], None]) -> pa.Table | None:
        try:
            table = pq.read_table(io.BytesIO(data))
        except (pa.ArrowException, OSError, ValueError) as exc:
            problem(f"unreadable parquet ({str(exc).splitlines()[0][:200]})")
            return None
        want = steps_schema(self.mapping, self.layout, "task_id" in table.column_names)
        if not table.schema.equals(want):
            got = {f.name: str(f.type) for f in table.schema}
            diff = [f"{f.name}: {got.get(f.name, 'missing')} (want {f.type})" for f in want
                    if got.get(f.name) != str(f.type)] + [f"{n}: unexpected" for n in got if n not in want.names]
            problem(f"schema differs: {'; '.join(diff[:5])}")
            return None
        n_bad = 0
        for col in table.columns:
            t = col.type.value_type if pa.types.is_fixed_size_list(col.type) else col.type
            if pa.types.is_floating(t):
                flat = col.combine_chunks()
                arr = (list_values(flat) if pa.types.is_fixed_size_list(col.type) else flat).to_numpy(zero_copy_only=False)
                n_bad += int((~np.isfinite(arr)).sum())
        c.count("nonfinite", n_bad)
        return table

    def _values(self, part: pa.Table) -> dict[str, np.ndarray]:
        """The episode's numeric columns keyed by mapping target (and "reward"), (T, per step)."""
        n = part.num_rows
        out: dict[str, np.ndarray] = {}
        for target, col in self.layout.columns.items():
            c = part[col].combine_chunks()
            arr = (list_values(c) if pa.types.is_fixed_size_list(c.type) else c).to_numpy(zero_copy_only=False)
            out[target] = np.asarray(arr).reshape(n, -1)
        if self.layout.reward:
            out["reward"] = part["reward"].to_numpy().reshape(n, 1)
        return out

    # ---- videos --------------------------------------------------------------------------------------------------
    def _check_videos(self, r: UnitResult, ep: int, n: int, row: dict[str, Any], c: UnitCheck,
                      bad: dict[str, list[str]], missing: set[str], samples: dict[int, WrittenSample],
                      part: pa.Table, values: dict[str, np.ndarray], step_tasks: list[str]) -> None:
        sampled = ep in self.ctx.sample_ids
        idx = sample_indices(n)
        written = WrittenSample(n) if sampled else None
        files = row.get("videos", {})
        for cam, fm in self.layout.cameras.items():
            rel = files.get(cam) or self.writer.video_rel(cam, r.extra.get("chunk", ""), ep)
            if rel in bad or rel in missing:
                written = None  # damaged or missing (named): no comparison of this episode
                continue
            try:
                c.count("videos")
                frames = self._video_frames(rel, n, fm.shape[:2], idx if sampled else [0])
            except FileNotFoundError:
                missing.add(rel)  # not a file of the unit's result, or gone since: named by the listing
                written = None
                continue
            except (av.error.FFmpegError, OSError, ValueError) as exc:
                bad.setdefault(rel, []).append(str(exc).splitlines()[0][:300])
                written = None
                continue
            if written is not None:
                depth = fm.dtype == "uint16"
                written.images[fm.target] = _image_fn(frames, depth, fm.shape[2])
                if cam in row.get("copied", ()):  # the source's packets: frames bit-identical to its own
                    written.exact.add(fm.target)
        if written is not None:
            for target in self.layout.columns:
                written.tensors[target] = values[target][idx]
            written.language = self._language(part, row, step_tasks, idx)
            samples[ep] = written

    def rate(self) -> Fraction:
        """The videos' frame rate (frame k at k / rate): the writer's (its options on a worker, else the source
        inventory's), else the manifest's control frequency."""
        if self._rate is None:
            fps = self.writer.options.fps or (self.ctx.inv.fps if self.ctx.inv is not None else None)
            if not fps:
                p = self.path(MANIFEST)
                hz = (json.loads(self.fs.cat_file(p)).get("action_space") or {}).get("control_frequency_hz") \
                    if self.fs.exists(p) else None
                fps = hz if isinstance(hz, (int, float)) and hz > 0 else 1
            self._rate = Fraction(fps).limit_denominator(1001)
        return self._rate

    def _video_frames(self, rel: str, n: int, hw: list[int], want: list[int]) -> dict[int, av.VideoFrame]:
        """Open the MP4, check its frame count and size from its index, decode the frames at `want` (frame k at
        k/fps: a seek to the keyframe before it, then a short forward decode)."""
        rate = self.rate()
        with open_sequential(self.fs, self.path(rel)) as f, av.open(f, "r") as c:
            if not c.streams.video:
                raise ValueError("no video stream")
            s = c.streams.video[0]
            if s.frames != n:
                raise ValueError(f"holds {s.frames} frames, the episode has {n} steps")
            if (s.codec_context.height, s.codec_context.width) != tuple(hw):
                raise ValueError(f"is {s.codec_context.width}x{s.codec_context.height}, the mapping says "
                                 f"{hw[1]}x{hw[0]}")
            out: dict[int, av.VideoFrame] = {}
            todo = sorted(set(want))
            for k in todo:
                if k:
                    c.seek(int(k / rate / s.time_base), stream=s, backward=True, any_frame=False)
                for frame in c.decode(s):
                    j = -1 if frame.time is None else round(frame.time * rate)
                    if j >= k:
                        if j == k:
                            out[k] = frame
                        break
            missing = [i for i in todo if i not in out]
            if missing:
                raise ValueError(f"frames {missing} do not decode")
            return out

    @staticmethod
    def _language(part: pa.Table, row: dict[str, Any], step_tasks: list[str], idx: list[int]) -> list[str]:
        """The instruction at the sampled steps: per-step task ids through the unit's task list (chunk-local ids
        before finalize renumbers them, a prefix of meta/tasks.jsonl after), else the episode's task."""
        if "task_id" in part.column_names:
            ids = part["task_id"].to_numpy()
            return [step_tasks[int(ids[i])] if 0 <= int(ids[i]) < len(step_tasks) else "" for i in idx]
        first = (row.get("tasks") or [""])[0]
        return [first] * len(idx)


def _image_fn(frames: dict[int, av.VideoFrame], depth: bool, channels: int) -> Callable[[int], np.ndarray]:
    """k -> the decoded frame at the k-th sampled step, as the source side of the comparison gets its frames."""
    keys = sorted(frames)

    def get(k: int) -> np.ndarray:
        frame = frames[keys[k]]
        if depth:  # 16-bit values, HxWx1 (compared with the source's exactly: FFV1 is lossless)
            return frame.to_ndarray(format="gray16le")[:, :, None]
        arr = frame.to_ndarray(format="gray" if channels == 1 else "rgb24")
        return arr[:, :, None] if arr.ndim == 2 else arr
    return get
