"""One ORTF chunk being written (`ChunkSink`): its episodes' MP4s and step rows, committed as the chunk's
steps.parquet (see robo_ray/formats/ortf/writer.py's docstring for where the bytes go until then)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from robo_ray.episode import CanonicalEpisode, Frames
from robo_ray.errors import FrameCountMismatch
from robo_ray.formats.lerobot.video_copy import NotCopyable, copy_episode
from robo_ray.formats.ortf.layout import chunk_name, episode_id, parquet_bytes, steps_schema
from robo_ray.formats.ortf.video_encode import VideoEncoder
from robo_ray.stages.plan import Unit
from robo_ray.storage import join, write_bytes_atomic
from robo_ray.writers.base import UnitResult, UnitSink
from robo_ray.writers.unit_files import UnitFiles

if TYPE_CHECKING:
    from robo_ray.formats.ortf.writer import OrtfWriter

ORTF_CODECS = {"h264": "h264"}  # what ORTF's manifest says its colour videos are
REENCODE_FORCED = "target.options.reencode=true or lossless=true"
NOT_VIDEO = "the source's frames are not a video the target can take as it is (images, resized or converted)"


def _column(arr: np.ndarray, t: pa.DataType) -> pa.Array:
    """(T, ...) -> a fixed_size_list column (flattened per step), or a plain column for scalars."""
    if not pa.types.is_fixed_size_list(t):
        return pa.array(arr.reshape(len(arr)), type=t)
    flat = np.ascontiguousarray(arr.reshape(len(arr), -1))
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1), type=t.value_type), t.list_size)


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
        self._reencoded: dict[str, dict[str, int]] = {}  # camera -> why an episode was encoded -> episodes

    # ---- episodes ---------------------------------------------------------------------------------------------
    def add(self, episode: CanonicalEpisode) -> None:
        """Encode the episode's cameras (temp files), then buffer its rows; if anything fails the episode's temps
        are removed and the unit is as if it had never been offered."""
        w, n, idx = self.writer, episode.length, episode.episode_index
        fps = w.fps()  # resolved from the source by the driver (unit_options) into every worker's options
        made: list[str] = []
        copied: dict[str, str | None] = {}  # camera -> None (copied) or why it was encoded
        try:
            for cam, fm in w.layout.cameras.items():
                rel = w.video_rel(cam, self.chunk, idx)
                tmp = self.files.temp(rel)
                made.append(rel)
                frames: Frames = episode.cameras[fm.target]
                copied[cam] = self._copy(tmp, frames, n, fps, idx) if fm.dtype != "uint16" else "depth"
                if copied[cam] is None:
                    continue
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
                           "meta": json.dumps(episode.metadata, sort_keys=True, default=str),
                           "copied": [cam for cam, why in copied.items() if why is None]})
        for cam, why in copied.items():
            if why is not None:
                self._reencoded.setdefault(cam, {}).setdefault(why, 0)
                self._reencoded[cam][why] += 1
        self.result.episodes.append((idx, n))

    def _copy(self, tmp: str, frames: Frames, n: int, fps: float, idx: int) -> str | None:
        """Copy the source's H.264 packets of the camera into the episode's MP4 when they fit (None), else say why
        it is encoded (lerobot/video_copy.py decides; damage raises, the episode is quarantined)."""
        if frames.encoded is None or not self.writer.takes_encoded_video or self._resize is not None:
            return REENCODE_FORCED if self.writer.options.reencode or self.writer.options.lossless else NOT_VIDEO
        try:
            video = copy_episode(tmp, frames.encoded, n, Fraction(fps).limit_denominator(1001), None, idx, ORTF_CODECS)
        except NotCopyable as exc:
            return str(exc)
        try:
            video.save()  # the episode's MP4 at `tmp`
        finally:
            video.close()
        return None

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
                             "stats": {col: s.to_dict() for col, s in self._sums.items()},
                             "reencoded": self._reencoded}
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
