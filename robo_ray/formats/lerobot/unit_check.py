"""The LeRobot per-unit check (`LeRobotUnitVerifier.check_unit`, robo_ray/writers/base.py's `verify_unit`): re-read
one unit LeRobotWriter committed and check it the way lerobot 0.6.1 uses it.

Per unit (`check_unit`, on the worker right after the commit, or in a validation pass over an existing output), with
the numbering the unit's ledger entry carries (`extra["numbering"]`: episode / row offsets and task ids):
* every file of the unit hashed (sha256 and size against the unit's result);
* the data parquet: schema, rows per episode as the result says, `index` = offset..offset+N-1, episode_index,
  frame_index 0..len-1, timestamp = float32(frame_index / fps), each episode's task ids those of its tasks, NaN/Inf,
  statistics of the written values (mergeable, `UnitCheck.stats`);
* its meta/episodes part: schema, one row per episode with its index, tasks, length, row range, file references
  and per-camera from/to timestamps back to back in the unit's MP4;
* every MP4 of the unit: one video stream, size / pixel format / codec as written, packets one per frame with pts
  exactly k/fps; the first / middle / last frame of every episode decoded at from_timestamp + k/fps within lerobot's
  tolerance (1e-4 s, strict);
* the sampled episodes (`ctx.sample_ids`) compared with the source (robo_ray.stages.sample_compare.compare_samples:
  low-dim exact, images by PSNR, language through the unit's task ids; a camera whose packets the unit copied
  from the source (`extra["videos"]`) must decode bit-identical to the source's frames).
"""
from __future__ import annotations

import io
import json
import posixpath
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robo_ray.arrow_lists import list_values
from robo_ray.formats.lerobot.paths import INFO, VIDEO_PATH
from robo_ray.formats.lerobot.unit_view import (UnitView, meta_problems, numbering_problems, problem_detail,
                                                schema_problem)
from robo_ray.formats.lerobot.depth import CODEC as DEPTH_CODEC, PIX_FMT as DEPTH_PIX_FMT, DepthQuant, decode_depth
from robo_ray.formats.lerobot.video_encode import ENCODERS, PIX_FMT
from robo_ray.images import frame_array
from robo_ray.stages.check_records import UnitCheck
from robo_ray.stages.norm_stats import StatsAccumulator
from robo_ray.stages.sample_compare import WrittenSample, compare_samples
from robo_ray.stages.sampling import sample_indices
from robo_ray.storage import hash_against, is_local, join, open_sequential
from robo_ray.writers.base import UnitResult, VerifyContext

if TYPE_CHECKING:
    from robo_ray.formats.lerobot.layout import Feature
    from robo_ray.formats.lerobot.writer import LeRobotWriter

TOLERANCE_S = 1e-4  # lerobot's tolerance_s: |decoded frame time - query| must be strictly below it
AV1_DECODERS = ("av1", "libdav1d", "libaom-av1")


def _fail(c: UnitCheck, name: str, detail: str) -> None:
    """A failed check of the unit, also counted by kind (`failed:<kind>`: the failures list is capped)."""
    c.fail(name, detail)
    kind = "checksum" if name.startswith("checksum ") else name
    c.count(f"failed:{kind}")


class LeRobotUnitVerifier:
    """Re-reads one unit of a dataset written by LeRobotWriter (`check_unit`: on the worker that wrote it, or in a
    validation pass); robo_ray/formats/lerobot/verify.py's `LeRobotVerifier` adds the dataset-level checks."""

    def __init__(self, writer: "LeRobotWriter", ctx: VerifyContext) -> None:
        self.writer, self.ctx = writer, ctx
        self.fs = writer.fs
        self.root = writer.dataset_dir
        self.layout = writer.layout
        self.mapping = writer.mapping
        self._fps: int | None = None

    def path(self, rel: str) -> str:
        return join(self.root, rel)

    def rel(self, p: str) -> str:
        return posixpath.relpath(p, self.root.rstrip("/") or "/")

    def fps(self) -> int:
        """The frame rate the unit was written at: the writer's (its options on a worker), else meta/info.json's,
        else the source inventory's."""
        if self._fps is None:
            fps: Any = self.writer.options.fps
            if not fps and self.fs.exists(self.path(INFO)):
                try:
                    fps = json.loads(self.fs.cat_file(self.path(INFO))).get("fps")
                except ValueError:
                    fps = None
            if not fps and self.ctx.inv is not None:
                fps = self.ctx.inv.fps
            if not isinstance(fps, (int, float)) or fps <= 0 or fps != int(fps):
                raise ValueError(f"no integer frame rate to check the unit's timestamps with ({fps!r})")
            self._fps = int(fps)
        return self._fps

    # ---- one unit ------------------------------------------------------------------------------------------------
    def check_unit(self, r: UnitResult) -> UnitCheck:
        """Re-read one unit's files (see the module docstring); `r` is the unit's result (its ledger entry)."""
        c = UnitCheck(r.shard_index)
        if not r.filename:  # every episode quarantined: the unit has no file
            return c
        u = UnitView.of(r)
        c.episode_steps = dict(r.episodes)
        parquet: dict[str, bytes] = {}
        missing: set[str] = set()
        for name, size, digest in r.all_files():
            raw = self._hash(name, size, digest, c, keep=name.endswith(".parquet"))
            if raw is None:
                missing.add(name)
            elif raw:
                parquet[name] = raw
        c.count("files", len(r.all_files()))
        c.count("missing_files", len(missing))  # named by the dataset-level listing
        fps = self.fps()
        keep = {k for k, src in enumerate(u.sources) if src in self.ctx.sample_ids}
        stats = StatsAccumulator(self.mapping)
        rows: dict[int, dict[str, Any]] = {}
        if r.filename in parquet:
            rows = self._check_data(u, parquet[r.filename], fps, keep, c, stats)
        if u.meta_rel in parquet:
            self._check_meta(u, parquet[u.meta_rel], fps, c)
        frames: dict[tuple[int, str], list[np.ndarray]] = {}
        for cam in self.layout.cameras:
            rel = VIDEO_PATH.format(video_key=cam.key, chunk_index=u.chunk, file_index=u.file)
            if rel not in missing:
                frames.update(self._check_unit_video(u, rel, cam, fps, keep, c))
        c.stats = stats.to_dict()
        samples = self._samples(u, rows, frames)
        c.sampled, c.mismatches = compare_samples(self.ctx, self.mapping, samples, c.psnr)
        return c

    def _hash(self, name: str, size: int, digest: str, c: UnitCheck, keep: bool) -> bytes | None:
        """Hash one file of the unit against its result (its bytes returned when `keep`, b"" otherwise); None when
        it is missing."""
        raw, got, problem = hash_against(self.fs, self.path(name), size, digest, keep)
        if raw is not None:
            c.sha256[name] = got
        if problem:
            _fail(c, f"checksum {name}", f"{name} {problem}")
        return raw

    def _check_data(self, u: UnitView, raw: bytes, fps: int, keep: set[int], c: UnitCheck,
                    stats: StatsAccumulator) -> dict[int, dict[str, Any]]:
        """The unit's data parquet; returns the sampled episodes' rows at sample_indices."""
        rel = u.r.filename
        try:
            table = pq.ParquetFile(io.BytesIO(raw)).read()
        except (pa.ArrowException, OSError, ValueError) as exc:
            _fail(c, "data", f"{rel}: unreadable parquet ({str(exc).splitlines()[0][:200]})")
            return {}
        bad_schema = schema_problem(rel, table.schema, self.writer.data_schema, "the features'")
        if bad_schema:
            _fail(c, "data", bad_schema)
            return {}
        problems = numbering_problems(u, table, fps)
        if problems:
            _fail(c, "data", problem_detail(problems))
        if table.num_rows != sum(u.lengths):
            return {}
        c.count("rows", table.num_rows)
        self._count_nonfinite(u, table, c)
        out: dict[int, dict[str, Any]] = {}
        for k, (a, n) in enumerate(zip(u.starts(), u.lengths)):
            part = table.slice(a, n)
            stats.add(self._values(part), n)
            if k in keep:
                out[k] = self._sample_rows(part)
        return out

    def _count_nonfinite(self, u: UnitView, table: pa.Table, c: UnitCheck) -> None:
        """NaN/Inf in the float columns, counted; the first one's file, episode and column noted."""
        for f in self.layout.data_features:
            if not f.dtype.startswith("float") or f.key == "timestamp":
                continue
            bad = ~np.isfinite(_flat(table[f.key]).reshape(table.num_rows, -1))
            if bad.any():
                c.count("nonfinite", int(bad.sum()))
                row = int(np.flatnonzero(bad.any(axis=1))[0])
                k = int(np.searchsorted(np.cumsum(u.lengths), row, side="right"))
                c.note(f"nan/inf: {u.where(u.r.filename, k)}: {f.key}")

    def _values(self, part: pa.Table) -> dict[str, np.ndarray]:
        """An episode's numeric values keyed by mapping target (the action split back into its targets), and
        "reward": what the statistics are made of."""
        n = part.num_rows
        out: dict[str, np.ndarray] = {}
        for f in self.layout.data_features:
            if f.kind == "action":
                flat = _flat(part[f.key]).reshape(n, -1)
                start = 0
                for target, size in zip(f.targets, f.sizes):
                    out[target] = flat[:, start:start + size]
                    start += size
            elif f.kind == "tensor" and f.targets:
                out[f.targets[0]] = _flat(part[f.key]).reshape(n, -1)
            elif f.kind == "reward":
                out["reward"] = _flat(part[f.key]).reshape(n, 1)
        return out

    def _check_meta(self, u: UnitView, raw: bytes, fps: int, c: UnitCheck) -> None:
        try:
            table = pq.ParquetFile(io.BytesIO(raw)).read()
        except (pa.ArrowException, OSError, ValueError) as exc:
            _fail(c, "episodes metadata", f"{u.meta_rel}: unreadable parquet ({str(exc).splitlines()[0][:200]})")
            return
        bad_schema = schema_problem(u.meta_rel, table.schema, self.writer.episodes_schema, "the episodes schema")
        problems = [bad_schema] if bad_schema else meta_problems(u, table, self.layout.cameras, fps)
        if problems:
            _fail(c, "episodes metadata", problem_detail(problems))

    # ---- one unit's videos ---------------------------------------------------------------------------------------
    def _check_unit_video(self, u: UnitView, rel: str, cam: "Feature", fps: int, keep: set[int],
                          c: UnitCheck) -> dict[tuple[int, str], list[np.ndarray]]:
        """One camera's MP4 of the unit; returns the sampled episodes' frames (first / middle / last)."""
        problems: list[str] = []
        c.count("videos")
        try:
            frames, n_dec = self._check_video(u, rel, cam, fps, keep, problems)
        except (av.error.FFmpegError, OSError, ValueError) as exc:
            problems.append(f"{rel}: not decodable ({str(exc).splitlines()[0][:200]})")
            frames, n_dec = {}, 0
        c.count("frames_decoded", n_dec)
        if problems:
            _fail(c, "videos", problem_detail(problems))
        return {(k, cam.key): got for k, got in frames.items()}

    def _check_video(self, u: UnitView, rel: str, cam: "Feature", fps: int, keep: set[int],
                     problems: list[str]) -> tuple[dict[int, list[np.ndarray]], int]:
        f = self._open(rel)
        try:
            with av.open(f) as c:
                if not c.streams.video or c.streams.audio:
                    problems.append(f"{rel}: expected one video stream and no audio")
                    return {}, 0
                s = c.streams.video[0]
                cc = s.codec_context
                h, w = cam.shape[:2]
                pix_fmt = DEPTH_PIX_FMT if cam.depth else PIX_FMT
                if (cc.width, cc.height) != (w, h) or cc.pix_fmt != pix_fmt:
                    problems.append(f"{rel}: {cc.width}x{cc.height} {cc.pix_fmt}, the features say {w}x{h} {pix_fmt}")
                copied = _copied(u, cam.key)
                codec = DEPTH_CODEC if cam.depth else copied or ENCODERS[self.writer.options.vcodec][1]
                if s.codec.name != codec and not (codec == "av1" and s.codec.name in AV1_DECODERS):
                    problems.append(f"{rel}: codec {s.codec.name}, written as {codec}")
                ticks = Fraction(1, fps) / s.time_base
                total = sum(u.lengths)
                pts = sorted(p.pts for p in c.demux(s) if p.dts is not None)
                if ticks.denominator != 1 or pts != [k * int(ticks) for k in range(total)]:
                    problems.append(f"{rel}: {len(pts)} packets for {total} frames, or pts not k/{fps} "
                                    f"(time base {s.time_base})")
                    return {}, 0
                quant = self.writer.depth_quant if cam.depth else None
                return self._decode_episodes(u, rel, c, s, fps, keep, problems, quant)
        finally:
            if hasattr(f, "close"):
                f.close()

    def _decode_episodes(self, u: UnitView, rel: str, c: Any, s: Any, fps: int, keep: set[int],
                         problems: list[str], quant: DepthQuant | None = None
                         ) -> tuple[dict[int, list[np.ndarray]], int]:
        """First / middle / last frame of every episode at lerobot's query time (from_timestamp + k/fps); depth
        (`quant`) dequantized to mm as lerobot does."""
        out: dict[int, list[np.ndarray]] = {}
        n_dec = 0
        for k, (a, n) in enumerate(zip(u.starts(), u.lengths)):
            idx = sample_indices(n)
            got = []
            for i in idx:
                q = (a + i) / fps
                frame = _decode_at(c, s, q)
                if frame is None:
                    problems.append(f"{u.where(rel, k)}: no frame within {TOLERANCE_S}s of t={q:.6f}s (frame {i})")
                    break
                if k in keep:  # compared with the source: as an array (only then: the conversion costs more
                    # than the decode of a small frame)
                    got.append(frame_array(frame, "rgb24") if quant is None else decode_depth(frame, quant))
                n_dec += 1
            if k in keep and len(got) == len(idx):
                out[k] = got
        return out, n_dec

    def _open(self, rel: str) -> Any:
        p = self.path(rel)
        return p if is_local(self.fs) else open_sequential(self.fs, p)

    # ---- one unit's samples ----------------------------------------------------------------------------------------
    def _sample_rows(self, part: pa.Table) -> dict[str, Any]:
        idx = sample_indices(part.num_rows)
        sub = part.take(pa.array(idx))
        return {"steps": part.num_rows, "idx": idx,
                "columns": {f.key: _numpy(sub[f.key], f) for f in self.layout.data_features}}

    def _samples(self, u: UnitView, rows: dict[int, dict], frames: dict[tuple[int, str], list[np.ndarray]]
                 ) -> dict[int, WrittenSample]:
        """The sampled episodes as written, keyed by source episode (language through the unit's task ids)."""
        out: dict[int, WrittenSample] = {}
        maps = {fm.target: fm for fm in self.mapping.steps}
        task_of = {i: t for t, i in u.task_ids.items()}
        for k, r in rows.items():
            ws = WrittenSample(r["steps"])
            for f in self.layout.data_features:
                col = r["columns"][f.key]
                if f.kind == "action":
                    flat = np.asarray(col).reshape(len(r["idx"]), -1)
                    start = 0
                    for target, size in zip(f.targets, f.sizes):
                        ws.tensors[target] = _as_mapped(flat[:, start:start + size], maps[target].dtype)
                        start += size
                elif f.kind == "tensor" and f.targets:
                    ws.tensors[f.targets[0]] = np.asarray(col).reshape(len(r["idx"]), -1)
            ws.language = [task_of.get(int(t), "") for t in np.asarray(r["columns"]["task_index"]).reshape(-1)]
            if any((k, cam.key) not in frames for cam in self.layout.cameras):
                continue  # a camera that did not decode is named by "videos": no comparison of this episode
            for cam in self.layout.cameras:
                fm = self.layout.camera_maps[cam.key]
                ws.images[fm.target] = (lambda j, g=frames[(k, cam.key)], ch=fm.shape[2]:
                                        g[j] if ch == 3 else g[j][:, :, :1])
                bound = self.writer.depth_bound(fm.target)
                if bound is not None:
                    ws.depth_bounds[fm.target] = bound
                if _copied(u, cam.key):
                    ws.exact.add(fm.target)
            out[u.sources[k]] = ws
        return out


def _copied(u: UnitView, key: str) -> str | None:
    """The codec of the camera's MP4 in this unit when its packets were copied from the source, else None."""
    v = ((u.r.extra or {}).get("videos") or {}).get(key) or {}
    return v.get("codec") if v.get("mode") == "copy" and v.get("copied") else None


def _flat(column: pa.ChunkedArray) -> np.ndarray:
    arr = column.combine_chunks()
    while pa.types.is_list(arr.type) or pa.types.is_fixed_size_list(arr.type) or pa.types.is_large_list(arr.type):
        arr = list_values(arr)
    return arr.to_numpy(zero_copy_only=False)


def _numpy(column: pa.ChunkedArray, f: Any) -> Any:
    if f.dtype in ("string", "language"):
        return column.to_pylist()
    values = _flat(column)
    return values.reshape(len(column), -1)


def _as_mapped(values: np.ndarray, dtype: str) -> np.ndarray:
    """An action component read back from the float32 `action` as the mapping's dtype."""
    if dtype == "int64":
        return np.rint(values).astype(np.int64)
    if dtype == "bool":
        return values != 0
    return values.astype(np.float32)


def _decode_at(c: Any, s: Any, q: float) -> Any:
    """The decoded frame whose time is within TOLERANCE_S (strictly) of q; None when there is none."""
    c.seek(int(q / s.time_base), stream=s, backward=True, any_frame=False)
    for frame in c.decode(s):
        t = float(frame.time)
        if abs(t - q) < TOLERANCE_S:
            return frame
        if t > q + TOLERANCE_S:
            return None
    return None
