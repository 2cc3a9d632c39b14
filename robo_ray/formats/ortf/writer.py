"""ORTF v0.2 writer on the Writer contract (robo_ray/writers/base.py; spec: ../specs/ortf_v0.2.txt).

The ORTF dataset is the output root itself (`dataset_rel` ""), beside robo-ray's reports. One work unit = one chunk
(`data/chunk-NNN/steps.parquet`, unit index = chunk id): `plan_units` balances the units by size, then each is cut to
at most `chunk_size` episodes.

A unit's sink (`ChunkSink`) receives canonical episodes. `add` encodes each camera's decoded frames once with PyAV
into `videos/<camera>/chunk-NNN/episode_NNNNNN.mp4` (H.264 yuv420p straight from the decoder's frames, crf
`crf`; `lossless`: libx264rgb crf 0 from the RGB frames, so they decode to the very pixels an RLDS conversion
stores; 16-bit depth: FFV1 gray16le) and buffers the episode's step rows (observation tensors as
`observation.state.<component>`, `action`, boundary flags, `reward`/`discount` when the source has them, one
`observation.images.<camera>.frame_index` per camera, `task_id` per step only in a chunk where an episode changes
task). Where the videos go until `commit` (`robo_ray.writers.unit_files.UnitFiles`):
* local: temp names beside the final ones (`....mp4.tmp-xxxxxxxx`), renamed by `commit` (a failing camera or a frame
  count that differs from the steps removes the episode's temps: nothing under a final name);
* other filesystems: a local scratch folder, uploaded by `commit` (one PUT each: visible whole or not at all).
`commit` writes the chunk's steps.parquet last (atomic; a unit whose every episode was quarantined writes one with
no rows, so that readers always find the schema), removes final-named files of earlier attempts that this commit
does not hold, and returns the ledger row: every file with bytes and sha256, and in `extra` the per-episode rows and
the per-column sums (count, sum, sum of squares, min, max) that `finalize` needs.

`finalize` numbers globally: meta/tasks.jsonl (the reader's tasks first, then tasks first seen at write time, in
episode order; a chunk whose per-step `task_id`s were written with chunk-local ids is rewritten with the global ids
and its ledger entry updated, `extra["renumbered_from"]` = the digest of the bytes it rewrote), meta/episodes.parquet
(start_step / end_step contiguous over the written episodes), meta/stats.json (merged sums) and meta/manifest.json
last (the commit).

Validate: `verify_unit` re-reads one committed chunk on the worker that wrote it (right after its commit, before
finalize: the chunk's own task list `extra["step_tasks"]` stands in for meta/tasks.jsonl), `verify` checks meta/ and
the dataset as a whole over the merged unit checks (robo_ray/formats/ortf/verify.py).

Python API: `write_ortf(source_url, out_url, ...) -> OrtfWriteResult` runs the whole pipeline in-process.
"""
from __future__ import annotations

import hashlib
import io
import json
import posixpath
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any, Iterable

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field, ValidationError, field_validator

from robo_ray.episode import CanonicalEpisode, EpisodeRef, FeatureSpec, Frames
from robo_ray.errors import ConfigError, FrameCountMismatch, VideoDecodeError
from robo_ray.formats.ortf.layout import (EPISODES, MANIFEST, ORTF_VERSION, STATS, TASKS, chunk_name, episode_id,
                                          episodes_schema, plan_layout, steps_schema)
from robo_ray.images import decode_image
from robo_ray.mapping import Mapping
from robo_ray.readers.base import Inventory
from robo_ray.stages.plan import MAX_UNIT_EPISODES, Unit, plan_units
from robo_ray.storage import join, url_to_fs, write_bytes_atomic
from robo_ray.writers.base import UnitResult, UnitSink, VerifyContext, Writer, WriterOptions
from robo_ray.writers.unit_files import UnitFiles

# x264 / FFV1 with one thread: the bytes do not depend on the machine's core count (actors are the parallelism)
ENCODER_THREADS = 1
# x264's macroblock-tree rate control made the last frames of short episodes encode to other bytes from one process
# to the next for identical frames and settings (~3 runs in 10 of the determinism tests; 0 in 12 without it)
X264_DETERMINISTIC = {"mbtree": "0"}


class OrtfOptions(WriterOptions):
    """`target.options` of an ORTF run (`--set target.options.KEY=VALUE`)."""

    lossless: bool = False  # libx264rgb crf 0: frames decode to the very source pixels
    crf: int = Field(18, ge=0, le=51)  # H.264 quality when not lossless
    chunk_size: int = Field(1000, ge=1)  # episodes per chunk at most
    fps: float | None = Field(None, gt=0, le=10_000)  # default: the source's rate
    created_at: str | None = None  # manifest created_at (default: now); fixed for deterministic manifests
    name: str | None = None  # manifest name (default: the source's dataset name)

    @field_validator("created_at", mode="before")
    @classmethod
    def _iso(cls, v: Any) -> Any:
        """`--set target.options.created_at=2025-01-01T00:00:00Z` arrives as a datetime (YAML): back to text."""
        if isinstance(v, datetime):
            v = v.astimezone(timezone.utc) if v.tzinfo else v
            return v.strftime("%Y-%m-%dT%H:%M:%SZ")
        return v


@dataclass
class OrtfWriteResult:
    out_url: str
    episodes: int
    steps: int
    cameras: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    quarantined: list[dict[str, Any]] = field(default_factory=list)


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def _column(arr: np.ndarray, t: pa.DataType) -> pa.Array:
    """(T, ...) -> a fixed_size_list column (flattened per step), or a plain column for scalars."""
    if not pa.types.is_fixed_size_list(t):
        return pa.array(arr.reshape(len(arr)), type=t)
    flat = np.ascontiguousarray(arr.reshape(len(arr), -1))
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1), type=t.value_type), t.list_size)


# ---- video ------------------------------------------------------------------------------------------------------
class VideoKind:
    DEPTH = "ffv1"  # 16-bit depth: FFV1 gray16le (lossless)
    RGB = "libx264rgb"  # lossless (crf 0), or frames whose size 4:2:0 cannot hold
    YUV = "libx264"  # H.264 yuv420p


def _rgb_array(arr: np.ndarray, resize: tuple[int, int] | None) -> np.ndarray:
    """HxW[xC] uint8 -> HxWx3 (grey repeated, alpha dropped), resized as the RLDS encoder resizes arrays."""
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if resize and arr.shape[:2] != tuple(resize):
        from PIL import Image

        img = Image.fromarray(arr[:, :, 0] if arr.shape[2] == 1 else arr)
        arr = np.asarray(img.resize((resize[1], resize[0]), Image.Resampling.BILINEAR))
        if arr.ndim == 2:
            arr = arr[:, :, None]
    if arr.shape[2] == 1:
        arr = np.repeat(arr, 3, axis=2)
    return np.ascontiguousarray(arr[:, :, :3], dtype=np.uint8)


def _depth_array(item: Any) -> np.ndarray:
    if isinstance(item, av.VideoFrame):
        return item.to_ndarray(format="gray16le")
    if isinstance(item, (bytes, bytearray, memoryview)):
        from PIL import Image

        try:
            with Image.open(io.BytesIO(bytes(item))) as im:
                arr = np.asarray(im)
        except Exception as exc:  # PIL raises many types for bad data
            raise VideoDecodeError(f"cannot decode a 16-bit depth image: {exc}") from exc
    else:
        arr = np.asarray(item)
    if arr.ndim == 3:
        arr = arr[:, :, 0]
    return np.ascontiguousarray(arr.astype("<u2", copy=False))


class VideoEncoder:
    """One camera's frames of one episode -> one MP4 (frame k at pts k, time base 1/fps); decoded frames are
    encoded once, from the decoder's frame (PyAV), the array, or the decoded source bytes."""

    def __init__(self, fps: float, depth: bool, lossless: bool, crf: int, resize: tuple[int, int] | None) -> None:
        self.rate = Fraction(fps).limit_denominator(1001)
        self.depth, self.lossless, self.crf = depth, lossless, crf
        self.resize = None if depth else resize

    def frame(self, item: Any, kind: str | None) -> av.VideoFrame:
        """The item as a VideoFrame ready for `kind`'s encoder (None: not decided yet)."""
        if self.depth:
            return av.VideoFrame.from_ndarray(_depth_array(item), format="gray16le")
        if isinstance(item, av.VideoFrame):
            frame = item
            if self.resize and (frame.height, frame.width) != tuple(self.resize):
                frame = frame.reformat(width=self.resize[1], height=self.resize[0], interpolation="AREA")
            if kind == VideoKind.RGB or (kind is None and (self.lossless or frame.width % 2 or frame.height % 2)):
                frame = frame.reformat(format="rgb24")  # the same conversion as to_ndarray(format="rgb24")
            return frame
        if isinstance(item, (bytes, bytearray, memoryview)):
            item = decode_image(bytes(item), 3)
        return av.VideoFrame.from_ndarray(_rgb_array(np.asarray(item), self.resize), format="rgb24")

    def _open_stream(self, c: Any, first: av.VideoFrame) -> tuple[Any, str]:
        w, h = first.width, first.height
        if self.depth:
            kind = VideoKind.DEPTH
            stream = c.add_stream("ffv1", rate=self.rate)
            stream.pix_fmt = "gray16le"
        elif self.lossless or w % 2 or h % 2:
            kind = VideoKind.RGB
            stream = c.add_stream("libx264rgb", rate=self.rate)
            stream.pix_fmt = "rgb24"
            stream.options = {"crf": "0" if self.lossless else str(self.crf), "preset": "veryfast", "g": "2",
                              "bf": "0", **X264_DETERMINISTIC}
        else:
            kind = VideoKind.YUV
            stream = c.add_stream("libx264", rate=self.rate)
            stream.pix_fmt = "yuv420p"
            stream.options = {"crf": str(self.crf), "preset": "veryfast", "g": "2", "bf": "0", **X264_DETERMINISTIC}
            if first.format.name == "yuv420p":  # the decoder's planes as they are: keep their colour tags
                stream.codec_context.colorspace = int(first.colorspace)
                stream.codec_context.color_range = int(first.color_range)
        stream.width, stream.height = w, h
        stream.time_base = 1 / self.rate
        stream.codec_context.thread_count = ENCODER_THREADS
        return stream, kind

    def encode(self, path: str, frames: Iterable[Any]) -> int:
        """Write the MP4 at `path`; returns the number of frames."""
        n = 0
        tb = 1 / self.rate
        with av.open(path, "w", format="mp4") as c:
            stream, kind = None, None
            for item in frames:
                frame = self.frame(item, kind)
                if stream is None:
                    stream, kind = self._open_stream(c, frame)
                elif (frame.width, frame.height) != (stream.width, stream.height):
                    raise VideoDecodeError(f"frame {n} is {frame.width}x{frame.height}, the first was "
                                           f"{stream.width}x{stream.height}")
                frame.pts = n
                frame.time_base = tb
                frame.pict_type = av.video.frame.PictureType.NONE  # the encoder's GOP, not the source's
                for p in stream.encode(frame):
                    c.mux(p)
                n += 1
            if stream is not None:
                for p in stream.encode():
                    c.mux(p)
        return n


# ---- one unit ---------------------------------------------------------------------------------------------------
@dataclass
class _Sums:
    """Per-column sums of one unit, merged by finalize (never the values themselves)."""

    count: int = 0
    sum: np.ndarray | None = None
    sumsq: np.ndarray | None = None
    min: np.ndarray | None = None
    max: np.ndarray | None = None

    def add(self, arr: np.ndarray) -> None:
        if not len(arr):
            return
        a = arr.reshape(len(arr), -1).astype(np.float64)
        s, q, lo, hi = a.sum(0), (a * a).sum(0), a.min(0), a.max(0)
        if self.sum is None:
            self.sum, self.sumsq, self.min, self.max = s, q, lo, hi
        else:
            self.sum, self.sumsq = self.sum + s, self.sumsq + q
            self.min, self.max = np.minimum(self.min, lo), np.maximum(self.max, hi)
        self.count += len(a)

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "sum": [float(x) for x in self.sum], "sumsq": [float(x) for x in self.sumsq],
                "min": [float(x) for x in self.min], "max": [float(x) for x in self.max]}


class ChunkSink(UnitSink):
    """Accumulates one chunk (see the module docstring for where the bytes go)."""

    def __init__(self, writer: "OrtfWriter", unit: Unit) -> None:
        self.writer = writer
        self.chunk = chunk_name(unit.index, unit.num_shards)
        resize = writer.mapping.images.resize
        self._resize = (int(resize[0]), int(resize[1])) if resize else None
        self.data_rel = f"data/{self.chunk}/steps.parquet"
        self.result = UnitResult(unit.index, "")
        self.files = UnitFiles(writer.fs, writer.dataset_dir, writer.format_name)  # the MP4s until commit
        self._tables: list[pa.Table] = []
        self._step_tasks: list[np.ndarray] = []
        self._local_tasks: dict[str, int] = {}  # task text -> chunk-local id, in order of first appearance
        self._multi_task = False
        self._sums: dict[str, _Sums] = {}
        self._rows: list[dict[str, Any]] = []

    # ---- episodes ---------------------------------------------------------------------------------------------
    def add(self, episode: CanonicalEpisode) -> None:
        """Encode the episode's cameras (temp files), then buffer its rows; if anything fails the episode's temps
        are removed and the unit is as if it had never been offered."""
        w, n, idx = self.writer, episode.length, episode.episode_index
        fps = w.fps()  # resolved from the source by the driver (unit_options) into every worker's options
        made: list[str] = []
        try:
            for cam, fm in w.layout.cameras.items():
                rel = w.video_rel(cam, self.chunk, idx)
                tmp = self.files.temp(rel)
                made.append(rel)
                frames: Frames = episode.cameras[fm.target]
                enc = VideoEncoder(fps, fm.dtype == "uint16", w.options.lossless, w.options.crf, self._resize)
                count = enc.encode(tmp, frames)
                if count != n:
                    raise FrameCountMismatch(f"{episode.ref.data_path}: episode {idx} camera {fm.source} gave "
                                             f"{count} frames for {n} steps")
            table, lang = self._episode_table(episode, fps)
        except BaseException:
            for rel in made:
                self.files.drop(rel)
            raise
        self._tables.append(table)
        distinct = list(dict.fromkeys(lang))
        self._multi_task |= len(distinct) > 1
        for t in distinct:
            self._local_tasks.setdefault(t, len(self._local_tasks))
        self._step_tasks.append(np.array([self._local_tasks[t] for t in lang], dtype=np.int64))
        for target, col in w.layout.columns.items():
            arr = episode.tensors[target]
            if arr.dtype.kind == "f":
                self._sums.setdefault(col, _Sums()).add(arr.reshape(n, -1))
        self._rows.append({"index": idx, "length": n, "tasks": distinct,
                           "videos": {cam: w.video_rel(cam, self.chunk, idx) for cam in w.layout.cameras},
                           "meta": json.dumps(episode.metadata, sort_keys=True, default=str)})
        self.result.episodes.append((idx, n))

    def _episode_table(self, ep: CanonicalEpisode, fps: float) -> tuple[pa.Table, list[str]]:
        w, n = self.writer, ep.length
        schema = steps_schema(w.mapping, w.layout, False)
        cols: dict[str, Any] = {
            "episode_id": [episode_id(ep.episode_index)] * n, "step_index": np.arange(n, dtype=np.int64),
            "timestamp": np.arange(n, dtype=np.float64) / fps, "is_first": ep.is_first, "is_last": ep.is_last,
            "is_terminal": ep.is_terminal}
        for target, col in w.layout.columns.items():
            cols[col] = _column(np.asarray(ep.tensors[target]), schema.field(col).type)
        for target, col in w.layout.texts.items():
            cols[col] = list(ep.texts[target])
        if w.layout.reward:
            cols["reward"] = np.asarray(ep.reward, np.float32)
        if w.layout.discount:
            cols["discount"] = np.asarray(ep.discount, np.float32)
        for cam in w.layout.cameras:
            cols[f"observation.images.{cam}.frame_index"] = np.arange(n, dtype=np.int64)
        arrays = [c if isinstance(c, pa.Array) else pa.array(c, type=schema.field(k).type) for k, c in cols.items()]
        if len(ep.language) != n:
            raise FrameCountMismatch(f"episode {ep.episode_index}: {len(ep.language)} instructions for {n} steps")
        return pa.Table.from_arrays(arrays, schema=schema), list(ep.language)

    def quarantine(self, record: dict[str, Any]) -> None:
        self.result.quarantined.append(record)

    # ---- commit / abort ---------------------------------------------------------------------------------------
    def commit(self) -> UnitResult:
        w = self.writer
        try:
            videos = self.files.publish_all()
            data = parquet_bytes(self._chunk_table())  # a unit with no episode: no rows (readers find the schema)
            write_bytes_atomic(w.fs, join(w.dataset_dir, self.data_rel), data)
            self.result.filename = self.data_rel
            self.result.num_bytes = len(data)
            self.result.sha256 = hashlib.sha256(data).hexdigest()
            # final-named videos of this chunk that this commit does not hold (left by an earlier attempt that
            # converted an episode this one quarantined)
            self.files.sweep_dirs(f"videos/{cam}/{self.chunk}" for cam in w.layout.cameras)
        except BaseException:
            self.abort()
            raise
        self.files.close()
        self.result.files = videos
        self.result.extra = {"chunk": self.chunk, "episodes": self._rows,
                             "step_tasks": list(self._local_tasks) if self._multi_task else [],
                             "stats": {col: s.to_dict() for col, s in self._sums.items()}}
        return self.result

    def _chunk_table(self) -> pa.Table:
        if not self._tables:
            return steps_schema(self.writer.mapping, self.writer.layout, False).empty_table()
        table = pa.concat_tables(self._tables)
        if self._multi_task:
            table = table.append_column(pa.field("task_id", pa.int64()),
                                        pa.array(np.concatenate(self._step_tasks), type=pa.int64()))
        return table

    def abort(self) -> None:
        self.files.abort()
        self._tables = []


# ---- the writer -------------------------------------------------------------------------------------------------
class OrtfWriter(Writer):
    """Writes an ORTF v0.2 dataset at the output root: data/, meta/, videos/."""

    format_name = "ortf"
    title = "ORTF v0.2 (Parquet + MP4)"
    paired_reader = "ortf"
    Options = OrtfOptions
    OUTPUTS = ("data", "meta", "videos")
    keeps_splits = False  # ORTF v0.2 has no splits: --val-fraction is refused; source splits are not written
    options: OrtfOptions

    def __init__(self, out_url: str, mapping: Mapping, storage_options: dict[str, Any] | None = None,
                 options: dict[str, Any] | None = None) -> None:
        super().__init__(out_url, mapping, storage_options, options)
        self.layout = plan_layout(mapping)

    @property
    def dataset_rel(self) -> str:
        return ""

    def commit_files(self) -> list[str]:
        return [MANIFEST]

    # ---- options ------------------------------------------------------------------------------------------------
    def fps(self, inv: Inventory | None = None) -> float:
        """The output's frame rate: target.options.fps, else the inventory's; refused when neither is known."""
        source_fps = (inv.fps or 0.0) if inv is not None else 0.0
        fps = self.options.fps or (source_fps if source_fps > 0 else None)
        if not fps:
            where = f"the source ({inv.source_format}) records" if inv is not None else "the source records"
            raise ConfigError(f"ORTF needs a frame rate and {where} none: pass one with "
                              "--set target.options.fps=<frames per second>")
        return float(fps)

    def unit_options(self, inv: Inventory) -> dict[str, Any]:
        opts = self.options.model_dump(exclude_unset=True)
        opts["fps"] = self.fps(inv)
        return opts

    # ---- plan ---------------------------------------------------------------------------------------------------
    def plan(self, refs: list[EpisodeRef], features: dict[str, FeatureSpec], target_unit_mb: float,
             min_units: int, max_unit_episodes: int = MAX_UNIT_EPISODES) -> list[Unit]:
        """Size-balanced units (`plan_units`), each cut to at most `chunk_size` episodes; unit index = chunk id."""
        size = self.options.chunk_size
        pieces = [u.refs[k:k + size] for u in plan_units(refs, features, target_unit_mb, min_units, max_unit_episodes)
                  for k in range(0, len(u.refs), size)]
        return [Unit(i, len(pieces), p) for i, p in enumerate(pieces)]

    def unit_filenames(self, unit: Unit) -> list[str]:
        return [f"data/{chunk_name(unit.index, unit.num_shards)}/steps.parquet"]

    def video_rel(self, cam: str, chunk: str, index: int) -> str:
        return f"videos/{cam}/{chunk}/episode_{episode_id(index)}.mp4"

    def open_unit(self, unit: Unit) -> ChunkSink:
        return ChunkSink(self, unit)

    # ---- finalize -----------------------------------------------------------------------------------------------
    def task_table(self, results: list[UnitResult], inv: Inventory) -> list[str]:
        """Global task ids: the reader's tasks first, then tasks first seen at write time, in episode order."""
        table = list(dict.fromkeys(inv.tasks))
        seen = set(table)
        for r in results:
            for row in r.extra.get("episodes", []):
                for t in row["tasks"]:
                    if t not in seen:
                        seen.add(t)
                        table.append(t)
        return table

    def _renumber_step_tasks(self, results: list[UnitResult], tasks: list[str]) -> None:
        """Rewrite the per-step task ids of chunks written with chunk-local ids; update their ledger entries."""
        ids = {t: i for i, t in enumerate(tasks)}
        for r in results:
            local = r.extra.get("step_tasks") or []
            if not local or not r.filename:
                continue
            remap = np.array([ids[t] for t in local], dtype=np.int64)
            if np.array_equal(remap, np.arange(len(local))):
                continue
            path = join(self.dataset_dir, r.filename)
            raw = self.fs.cat_file(path)
            table = pq.read_table(io.BytesIO(raw))
            i = table.schema.get_field_index("task_id")
            col = remap[table["task_id"].to_numpy()]
            data = parquet_bytes(table.set_column(i, table.schema.field(i), pa.array(col, type=pa.int64())))
            write_bytes_atomic(self.fs, path, data)
            r.num_bytes, r.sha256 = len(data), hashlib.sha256(data).hexdigest()
            r.extra["step_tasks"] = tasks[:int(remap.max()) + 1]
            # the digest of what was renumbered: Validate ties the worker's re-read (made before) to this file
            r.extra["renumbered_from"] = hashlib.sha256(raw).hexdigest()

    def build_meta(self, results: list[UnitResult], inv: Inventory) -> dict[str, bytes]:
        """meta/ files from the unit results (pure: verify rebuilds them to find edits). Manifest last."""
        results = sorted(results, key=lambda r: r.shard_index)
        fps = self.fps(inv)
        tasks = self.task_table(results, inv)
        ids = {t: i for i, t in enumerate(tasks)}
        cams = list(self.layout.cameras)
        rows: list[dict[str, Any]] = []
        start = 0
        for r in results:
            for row in r.extra.get("episodes", []):
                n = int(row["length"])
                rows.append({"episode_id": episode_id(int(row["index"])),
                             "task_id": ids[row["tasks"][0]] if row["tasks"] else None,
                             "start_step": start, "end_step": start + n, "length": n, "duration_seconds": n / fps,
                             "success": None, "failure_reason": None, "operator_notes": "", "chunk_id": r.shard_index,
                             "recorded_at": None, "video_files": row["videos"] or None, "audio_file": None,
                             "source_metadata": row["meta"]})
                start += n
        if not cams:
            for row in rows:
                row.pop("video_files")
        out = {EPISODES: parquet_bytes(pa.Table.from_pylist(rows, schema=episodes_schema(cams))),
               TASKS: "".join(json.dumps({"task_id": i, "type": f"task_{i}", "instruction": t, "description": t})
                              + "\n" for i, t in enumerate(tasks)).encode(),
               STATS: json.dumps(self._stats(results), indent=2).encode()}
        out[MANIFEST] = json.dumps(self.manifest(inv, len(rows), start, fps), indent=2).encode()
        return out

    def _stats(self, results: list[UnitResult]) -> dict[str, Any]:
        merged: dict[str, dict[str, Any]] = {}
        for r in results:
            for col, s in r.extra.get("stats", {}).items():
                m = merged.get(col)
                arrs = {k: np.asarray(s[k], np.float64) for k in ("sum", "sumsq", "min", "max")}
                if m is None:
                    merged[col] = {"count": int(s["count"]), **arrs}
                else:
                    m["count"] += int(s["count"])
                    m["sum"], m["sumsq"] = m["sum"] + arrs["sum"], m["sumsq"] + arrs["sumsq"]
                    m["min"], m["max"] = np.minimum(m["min"], arrs["min"]), np.maximum(m["max"], arrs["max"])
        out: dict[str, Any] = {}
        for col in self.layout.columns.values():
            m = merged.get(col)
            if m is None or not m["count"]:
                continue
            mean = m["sum"] / m["count"]
            std = np.sqrt(np.maximum(m["sumsq"] / m["count"] - mean * mean, 0.0))
            out[col] = {"mean": mean.tolist(), "std": std.tolist(), "min": m["min"].tolist(),
                        "max": m["max"].tolist(), "count": int(m["count"])}
        return out

    def manifest(self, inv: Inventory, episodes: int, steps: int, fps: float) -> dict[str, Any]:
        shapes = {col: self.layout.field_of(self.mapping, t).shape for t, col in self.layout.columns.items()}
        action_dim = int(np.prod(shapes["action"] or [1])) if "action" in shapes else 0
        state = {col[len("observation.state."):]: {"dim": int(np.prod(shape or [1])), "units": "unknown"}
                 for col, shape in shapes.items() if col.startswith("observation.state.")}
        sensors, images = [], {}
        for cam, fm in self.layout.cameras.items():
            h, w = fm.shape[:2]
            depth = fm.dtype == "uint16"
            sensor = {"name": f"{cam}_depth" if depth else f"{cam}_rgb",
                      "type": "depth_camera" if depth else "camera", "mount": "unknown",
                      "resolution": {"width": w, "height": h}, "fps": fps, "encoding": "ffv1" if depth else "h264"}
            if depth:
                sensor.update({"bit_depth": 16, "depth_units": "millimeters"})
            sensors.append(sensor)
            images[cam] = sensor["name"]
        title = self.options.name or inv.dataset_name
        return {
            "ortf_version": ORTF_VERSION,
            "dataset_id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"robo-ray:{inv.source_format}:{title}")),
            "name": title,
            "description": f"Converted by robo-ray from {inv.source_format} {inv.source_version}",
            "created_at": self.options.created_at or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "license": "unknown",
            "robot": {"id": inv.robot_type or "unknown", "name": inv.robot_type or "unknown", "type": "unknown",
                      "dof": action_dim, "joints": []},
            "action_space": {"type": "unknown", "frame": "unknown", "control_frequency_hz": fps,
                             "dimensions": [{"name": f"a{i}", "index": i, "type": "continuous", "units": "unknown"}
                                            for i in range(action_dim)]},
            "observation_space": {"state": state, "images": images},
            "sensors": sensors,
            "frames": {"world": {"type": "fixed", "convention": "z_up", "description": "unknown source frame"}},
            "collection": {"operator": "unknown", "interface": "converted by robo-ray",
                           "source_format": f"{inv.source_format} {inv.source_version}"},
            "statistics": {"total_episodes": episodes, "total_steps": steps,
                           "total_duration_hours": steps / fps / 3600.0},
            "timestamp_reference": "episode_start",
            "sync_tolerance_ms": round(500.0 / fps, 3),
            "video_lossless": self.options.lossless,
        }

    def finalize(self, results: list[UnitResult], inv: Inventory) -> dict[str, Any]:
        """Renumber per-step task ids where needed, then episodes.parquet, tasks.jsonl, stats.json and
        manifest.json last (the commit)."""
        results = sorted(results, key=lambda r: r.shard_index)
        self._renumber_step_tasks(results, self.task_table(results, inv))
        meta = self.build_meta(results, inv)
        for name in (EPISODES, TASKS, STATS, MANIFEST):
            write_bytes_atomic(self.fs, join(self.dataset_dir, name), meta[name])
        return json.loads(meta[MANIFEST])

    def verify_unit(self, result: UnitResult, ctx: VerifyContext) -> Any:
        """Re-read one committed chunk (its steps.parquet and videos; robo_ray/formats/ortf/verify.py)."""
        from robo_ray.formats.ortf.verify import OrtfVerifier

        return OrtfVerifier(self, ctx).check_unit(result)

    def verify(self, ctx: VerifyContext, res: Any) -> bool:
        """The dataset-level checks (meta/, every file present, counts across chunks, the merged chunk checks, the
        reader's read-back of a sample of chunks)."""
        from robo_ray.formats.ortf.verify import OrtfVerifier

        return OrtfVerifier(self, ctx).run(res)

    def usage(self) -> list[str]:
        return ["```python", "from robo_ray.readers import open_reader", "",
                f"reader = open_reader('{self.out_url}', 'ortf')", "inventory = reader.discover()",
                "episode = reader.load_episode(inventory.refs[0])  # columns as numpy, videos referenced",
                "", "import pyarrow.parquet as pq",
                f"steps = pq.read_table('{self.out_url}/data/chunk-000/steps.parquet')", "```"]


# ---- Python API -------------------------------------------------------------------------------------------------
def write_ortf(source_url: str, out_url: str, *, source_format: str | None = None,
               storage_options: dict[str, Any] | None = None, out_storage_options: dict[str, Any] | None = None,
               max_episodes: int | None = None, fps: float | None = None, lossless: bool = False, crf: int = 18,
               chunk_size: int = 1000, name: str | None = None, overwrite: bool = False,
               created_at: str | None = None) -> OrtfWriteResult:
    """Convert a source dataset to ORTF v0.2 at `out_url` (the whole pipeline, in-process: discover, plan, convert,
    finalize, validate, reports beside the dataset). Quarantined episodes are returned, not raised; a dataset that
    fails validation raises ValidationFailed."""
    from robo_ray.config import JobConfig
    from robo_ray.errors import ValidationFailed
    from robo_ray.stages.pipeline import run_pipeline

    options: dict[str, Any] = {"lossless": lossless, "crf": crf, "chunk_size": chunk_size}
    for k, v in (("fps", fps), ("name", name), ("created_at", created_at)):
        if v is not None:
            options[k] = v
    try:
        cfg = JobConfig.model_validate({
            "source": {"url": source_url, "format": source_format, "storage_options": storage_options or {}},
            "target": {"url": out_url, "format": "ortf", "options": options,
                       "storage_options": out_storage_options or {}},
            "images": {"encoding": "png"}, "max_episodes": max_episodes,
            "convert": {"max_quarantine_fraction": 1.0}})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"invalid argument {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    outcome = run_pipeline(cfg, overwrite=overwrite, stderr=io.StringIO())
    if not outcome.validation_passed:
        raise ValidationFailed(outcome.message)
    fs, root = url_to_fs(out_url, out_storage_options)
    manifest = json.loads(fs.cat_file(join(root, MANIFEST)))
    files = sorted(posixpath.relpath(p, root.rstrip("/") or "/") for top in OrtfWriter.OUTPUTS
                   if fs.exists(join(root, top)) for p in fs.find(join(root, top)))
    return OrtfWriteResult(out_url, int(manifest["statistics"]["total_episodes"]),
                           int(manifest["statistics"]["total_steps"]), list(manifest["observation_space"]["images"]),
                           files, outcome.quarantined)
