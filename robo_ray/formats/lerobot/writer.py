"""LeRobot v3.0 writer (`--to lerobot`): any source robo-ray reads -> a LeRobot v3.0 dataset that lerobot 0.6.1's
`LeRobotDataset` loads and trains on (FORMATS.md parts 2 and 5). The dataset is the output root itself
(`dataset_rel` ""), beside robo-ray's reports.

Layout (one work unit = one file index; file index = unit index, chunk = index // chunks_size):
    data/chunk-CCC/file-FFF.parquet            the unit's episodes, one row group per episode
    videos/<camera key>/chunk-CCC/file-FFF.mp4  per camera, the unit's episodes concatenated
    meta/episodes/chunk-CCC/file-FFF.parquet   one row per episode of the unit (lerobot reads every file under
                                               meta/episodes/ in path order, so the parts form one table)
    meta/tasks.parquet  meta/stats.json  meta/info.json (written last: the commit)

Feature naming (by the mapping's role, else by the canonical target name):
    state  observation/state            -> observation.state
    camera observation/image_<name>     -> observation.images.<name>
           observation/image (one camera) -> observation.images.<last part of the source key> (top, image, ...)
           observation/<other>          -> observation.images.<other, / as _>
    action every action tensor          -> `action`, float32, the tensors concatenated in mapping order (RLDS
                                           world_vector[3] + rotation_delta[3] + open_gripper -> action[7]);
                                           `names` lists each component (the source's names for a single one)
    other  observation/<rest>           -> observation.<rest, / as .> (own feature, own shape; 2-D stay 2-D)
           <target>                     -> <target, / as .>           (e.g. Minari info/success -> info.success)
    reward (defaults.reward_source)     -> next.reward float32 [1]
    terminal (defaults.is_terminal_source) -> next.done bool [1]
    discount (defaults.discount_source) -> discount float32 [1] (only when the source has a per-step discount)
    language (the step's instruction)   -> the task: meta/tasks.parquet + task_index per frame
    text step features                  -> dtype "string" features
    bookkeeping                         -> timestamp (float32, k/fps), frame_index, episode_index, index, task_index
Not written: is_first / is_last (lerobot derives them from frame_index and the episode bounds), episode
metadata. Depth cameras (16-bit) are refused with a ConfigError (lerobot 0.6 quantizes depth to 12-bit HEVC; not
done here): drop them from mapping.yaml. Grey cameras are encoded as 3-channel video.

Numbering. Episode indices and the global `index` must be contiguous over the WRITTEN episodes, and task ids must
be a table of the written tasks; quarantine is only known after conversion. The plan gives each unit the numbering
it would have if nothing were quarantined (episode / row offsets from the source's lengths, task ids from the
source's per-episode task lists in episode order) and each unit writes its data and meta/episodes parquet with it.
`finalize` walks the units in order, computes the real numbering, and rewrites the data parquet and the
meta/episodes part of the units whose numbering differs (and only those: with no quarantine nothing is rewritten;
a quarantined episode in unit u rewrites the two small parquet files of every unit after u, never a video). The
rewritten files' ledger entries (bytes, sha256, numbering) are updated in place, so validate and resume see them,
with `extra["renumbered_from"]` = {file: the sha256 of the bytes finalize rewrote}: each unit is verified by the worker
that wrote it, before finalize (`verify_unit`), and the dataset-level verify hashes again only those files.
Task ids of a source whose episode index lists no tasks (RLDS) are provisional until finalize (rewrites likely).

Video: see robo_ray/formats/lerobot/video_encode.py (one encode per camera per episode, stream-copied into the
unit's MP4: frame k of an episode sits at from_timestamp + k/fps exactly). Statistics: robo_ray/formats/lerobot/
stats.py (per episode in meta/episodes, mergeable per unit in the ledger, merged into meta/stats.json).
"""
from __future__ import annotations

import hashlib
import io
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field

from robo_ray.episode import CanonicalEpisode, EpisodeRef, FeatureSpec
from robo_ray.errors import ConfigError, DataCorrupt, EpisodeError
from robo_ray.formats.lerobot.paths import (BOOKKEEPING, CODEBASE_VERSION, DATA_PATH, EMPTY_EPISODES, EPISODES_PATH,
                                            INFO, STATS, TASKS, VIDEO_PATH)
from robo_ray.formats.lerobot.stats import (Agg, array_stats, image_stats, image_stats_json, merge_aggs,
                                            merge_image_json, stats_json, to_list, STAT_KEYS)
from robo_ray.formats.lerobot.video_encode import (ENCODERS, ImageHistogram, UnitVideo, VideoSettings,
                                                   encode_episode)
from robo_ray.mapping import FieldMap, Mapping
from robo_ray.readers.base import Inventory
from robo_ray.stages.plan import MAX_UNIT_EPISODES, Unit, plan_split_units
from robo_ray.storage import join, write_bytes_atomic
from robo_ray.writers.base import UnitResult, UnitSink, VerifyContext, Writer, WriterOptions
from robo_ray.writers.unit_files import UnitFiles, remove_file

EMPTY_EPISODE = "EP208"  # an episode with no steps: LeRobot cannot hold it (no frame, no video)


class LeRobotOptions(WriterOptions):
    """`target.options` of a LeRobot run (`--set target.options.KEY=VALUE`)."""

    fps: int | None = Field(None, gt=0, le=10_000)  # default: the source's rate, when it is an integer
    vcodec: Literal["libsvtav1", "av1", "libx264", "h264"] = "libsvtav1"
    crf: int = Field(30, ge=0, le=63)
    g: int = Field(2, ge=1, le=10_000)  # GOP size (keyframe interval)
    preset: int | str | None = None  # None: 12 for libsvtav1 (lerobot's), the encoder's default for libx264
    encoder_threads: int = Field(1, ge=1, le=64)
    chunks_size: int = Field(1000, ge=1, le=1_000_000)
    data_files_size_in_mb: int = Field(100, gt=0)
    video_files_size_in_mb: int = Field(200, gt=0)
    robot_type: str | None = None  # default: the source's


# ---- layout: mapping targets -> LeRobot features --------------------------------------------------------------
@dataclass(frozen=True)
class Feature:
    """One LeRobot feature and the mapping targets it is made of."""

    key: str
    kind: Literal["action", "tensor", "string", "reward", "discount", "done", "video"]
    dtype: str  # float32 / int64 / bool / string / video
    shape: tuple[int, ...]  # LeRobot's shape ((1,) = a scalar column)
    targets: tuple[str, ...] = ()
    sizes: tuple[int, ...] = ()  # values per step of each target (action components)
    sources: tuple[str, ...] = ()

    @property
    def scalar(self) -> bool:
        return self.shape == (1,)

    @property
    def numeric(self) -> bool:
        return self.kind not in ("string", "video")


def _ident(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", text).strip("_")


def _role(fm: FieldMap) -> str:
    """The feature's role: the mapping's when declared, else from its canonical target name."""
    if fm.role:
        return fm.role
    if fm.kind == "image":
        return "depth" if fm.dtype == "uint16" else "camera"
    if fm.target == "observation/state":
        return "state"
    if fm.target == "action" or fm.target.startswith("action/"):
        return "action"
    return "observation" if fm.target.startswith("observation/") else "other"


def camera_key(fm: FieldMap) -> str:
    t = fm.target
    rest = t[len("observation/"):] if t.startswith("observation/") else t
    if rest == "image":
        name = _ident(re.split(r"[./]", fm.source.rstrip("./"))[-1]) or "image"
    elif rest.startswith("image_"):
        name = rest[len("image_"):]
    else:
        name = rest.replace("/", "_")
    return f"observation.images.{name}"


def data_key(fm: FieldMap, role: str) -> str:
    t = fm.target
    if role == "state" and t == "observation/state":
        return "observation.state"
    if t.startswith("observation/"):
        return "observation." + t[len("observation/"):].replace("/", ".")
    return t.replace("/", ".")


def _shape(fm_shape: list[int]) -> tuple[int, ...]:
    return (1,) if not fm_shape or list(fm_shape) == [1] else tuple(int(d) for d in fm_shape)


@dataclass
class Layout:
    features: list[Feature]  # info.json order (bookkeeping last)
    cameras: list[Feature]
    camera_maps: dict[str, FieldMap]  # feature key -> the image mapping

    @property
    def data_features(self) -> list[Feature]:
        return [f for f in self.features if f.kind != "video"]

    def feature(self, key: str) -> Feature:
        return next(f for f in self.features if f.key == key)


def plan_layout(mapping: Mapping) -> Layout:
    """The LeRobot features of a mapping (module docstring's naming table); ConfigError for what LeRobot cannot
    hold (depth, odd frame sizes)."""
    out: list[Feature] = []
    taken: set[str] = set(BOOKKEEPING) | {"next.reward", "next.done", "discount"}
    camera_maps: dict[str, FieldMap] = {}
    actions = [fm for fm in mapping.steps if fm.kind == "tensor" and _role(fm) == "action"]

    def unique(key: str) -> str:
        base, k = key, 2
        while key in taken:
            key, k = f"{base}_{k}", k + 1
        taken.add(key)
        return key

    action_done = False
    for fm in mapping.steps:
        role = _role(fm)
        if fm.kind == "image":
            if role == "depth" or fm.dtype != "uint8":
                raise ConfigError(f"mapping: {fm.source!r} is a {fm.dtype} depth image; the LeRobot target writes "
                                  "8-bit colour video only: remove it from mapping.yaml (pass it back with --mapping)")
            h, w = int(fm.shape[0]), int(fm.shape[1])
            if h % 2 or w % 2:
                raise ConfigError(f"mapping: camera {fm.source!r} is {w}x{h}; yuv420p video needs an even width and "
                                  "height: set images.resize (e.g. --set images.resize=[H,W])")
            key = unique(camera_key(fm))
            camera_maps[key] = fm
            out.append(Feature(key, "video", "video", (h, w, 3), (fm.target,), (), (fm.source,)))
        elif fm.kind == "text":
            out.append(Feature(unique(data_key(fm, role)), "string", "string", (1,), (fm.target,), (1,),
                               (fm.source,)))
        elif role == "action":
            if action_done:
                continue
            action_done = True
            sizes = tuple(int(np.prod(a.shape)) if a.shape else 1 for a in actions)
            taken.add("action")
            out.append(Feature("action", "action", "float32", _shape([sum(sizes)]), tuple(a.target for a in actions),
                               sizes, tuple(a.source for a in actions)))
        else:
            shape = _shape(fm.shape)
            size = int(np.prod(fm.shape)) if fm.shape else 1
            out.append(Feature(unique(data_key(fm, role)), "tensor", fm.dtype, shape, (fm.target,), (size,),
                               (fm.source,)))
    d = mapping.defaults
    if d.reward_source:
        out.append(Feature("next.reward", "reward", "float32", (1,), sources=(d.reward_source,)))
    if d.is_terminal_source:
        out.append(Feature("next.done", "done", "bool", (1,), sources=(d.is_terminal_source,)))
    if d.discount_source:  # a per-step discount (Minari: 0 after termination) is data: kept, not dropped
        out.append(Feature("discount", "discount", "float32", (1,), sources=(d.discount_source,)))
    out += [Feature("timestamp", "tensor", "float32", (1,)), *(Feature(k, "tensor", "int64", (1,))
                                                                for k in BOOKKEEPING[1:])]
    return Layout(out, [f for f in out if f.kind == "video"], camera_maps)


# ---- arrow schemas ---------------------------------------------------------------------------------------------
_PA = {"float32": pa.float32(), "float64": pa.float64(), "int64": pa.int64(), "bool": pa.bool_(),
       "int32": pa.int32(), "uint8": pa.uint8()}


def _nested(t: pa.DataType, shape: tuple[int, ...], fixed: bool = True) -> pa.DataType:
    for d in reversed(shape):
        t = pa.list_(t, d) if fixed else pa.list_(t)
    return t


def column_type(f: Feature) -> pa.DataType:
    if f.dtype == "string":
        return pa.string()
    base = _PA[f.dtype]
    return base if f.scalar else _nested(base, f.shape)


def hf_feature(f: Feature) -> dict[str, Any]:
    """The feature in the `huggingface` parquet metadata (datasets 4 style, as lerobot 0.4.4+ writes it)."""
    if f.dtype == "string" or f.scalar:
        return {"dtype": f.dtype, "_type": "Value"}
    if len(f.shape) == 1:
        return {"feature": {"dtype": f.dtype, "_type": "Value"}, "length": f.shape[0], "_type": "List"}
    return {"shape": list(f.shape), "dtype": f.dtype, "_type": f"Array{len(f.shape)}D"}


def data_schema(layout: Layout) -> pa.Schema:
    feats = layout.data_features
    meta = {"huggingface": json.dumps({"info": {"features": {f.key: hf_feature(f) for f in feats}}})}
    return pa.schema([pa.field(f.key, column_type(f)) for f in feats], metadata=meta)


def _stat_shape(f: Feature) -> tuple[int, ...]:
    return (3, 1, 1) if f.kind == "video" else f.shape


def stats_fields(f: Feature) -> list[pa.Field]:
    """meta/episodes `stats/<feature>/<stat>` columns, typed as lerobot's pa.Table.from_pydict infers them."""
    shape = _stat_shape(f)
    out = []
    for k in STAT_KEYS:
        if k == "count":
            t = pa.list_(pa.int64())
        elif k in ("min", "max") and f.kind != "video" and f.dtype in ("bool", "int64"):
            t = _nested(_PA[f.dtype], shape, fixed=False)
        else:
            t = _nested(pa.float64(), shape, fixed=False)
        out.append(pa.field(f"stats/{f.key}/{k}", t))
    return out


def episodes_schema(layout: Layout) -> pa.Schema:
    fields = [pa.field("episode_index", pa.int64()), pa.field("tasks", pa.list_(pa.string())),
              pa.field("length", pa.int64()), pa.field("data/chunk_index", pa.int64()),
              pa.field("data/file_index", pa.int64()), pa.field("dataset_from_index", pa.int64()),
              pa.field("dataset_to_index", pa.int64())]
    for cam in layout.cameras:
        fields += [pa.field(f"videos/{cam.key}/chunk_index", pa.int64()),
                   pa.field(f"videos/{cam.key}/file_index", pa.int64()),
                   pa.field(f"videos/{cam.key}/from_timestamp", pa.float64()),
                   pa.field(f"videos/{cam.key}/to_timestamp", pa.float64())]
    for f in layout.features:
        if f.numeric or f.kind == "video":
            fields += stats_fields(f)
    fields += [pa.field("meta/episodes/chunk_index", pa.int64()), pa.field("meta/episodes/file_index", pa.int64())]
    return pa.schema(fields)


def arrow_column(values: Any, f: Feature, n: int) -> pa.Array:
    if f.dtype == "string":
        return pa.array(list(values), type=pa.string())
    arr = np.ascontiguousarray(np.asarray(values).astype(f.dtype, copy=False))
    if f.scalar:
        return pa.array(arr.reshape(n), type=_PA[f.dtype])
    flat: pa.Array = pa.array(arr.reshape(-1), type=_PA[f.dtype])
    for d in reversed(f.shape):
        flat = pa.FixedSizeListArray.from_arrays(flat, d)
    return flat


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """Columns worth dictionary encoding: the repeating bookkeeping, flags and text (lerobot encodes every column
    so; on float data that only costs: ~3x the write time and +45% size on 1M rows of 2x26 float32)."""
    return [f.name for f in schema if f.name in ("timestamp", "frame_index", "episode_index", "task_index")
            or f.type in (pa.bool_(), pa.string())]


def parquet_writer(sink: Any, schema: pa.Schema) -> pq.ParquetWriter:
    return pq.ParquetWriter(sink, schema, compression="snappy", use_dictionary=dictionary_columns(schema))


def write_parquet(sink: Any, table: pa.Table, lengths: list[int]) -> None:
    """`table` with one row group per episode (lerobot's layout), snappy."""
    writer = parquet_writer(sink, table.schema)
    try:
        start = 0
        for n in lengths:
            writer.write_table(table.slice(start, n), row_group_size=max(n, 1))
            start += n
    finally:
        writer.close()


def parquet_bytes(table: pa.Table, lengths: list[int] | None = None) -> bytes:
    buf = io.BytesIO()
    write_parquet(buf, table, lengths if lengths is not None else [table.num_rows])
    return buf.getvalue()


def file_rel(template: str, index: int, chunks_size: int, **fields: Any) -> str:
    chunk, file = divmod(index, chunks_size)
    return template.format(chunk_index=chunk, file_index=file, **fields)


# ---- plan --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LeRobotUnit(Unit):
    """A unit with the numbering it writes if nothing is quarantined (finalize corrects it otherwise)."""

    episode_offset: int = 0
    index_offset: int = 0
    task_ids: tuple[tuple[str, int], ...] = ()  # planned ids of the tasks the unit's episodes list
    planned_tasks: int = 0  # size of the planned task table (provisional ids for unknown tasks start here)


# ---- one unit ------------------------------------------------------------------------------------------------------
class EpisodeFileSink(UnitSink):
    """Writes one unit: data parquet (row group per episode, streamed to a temp file), per camera one MP4 (episodes
    appended by stream copy), and its meta/episodes part at `commit`. Temps sit beside the final names on a local
    destination (`*.tmp-xxxxxxxx`), in a local scratch folder otherwise (uploaded by `commit`): `UnitFiles`."""

    def __init__(self, writer: "LeRobotWriter", unit: Unit) -> None:
        self.writer = writer
        self.unit = unit
        w = writer
        cs = w.options.chunks_size
        self.chunk_index, self.file_index = divmod(unit.index, cs)
        self.data_rel = file_rel(DATA_PATH, unit.index, cs)
        self.meta_rel = file_rel(EPISODES_PATH, unit.index, cs)
        self.video_rels = {c.key: file_rel(VIDEO_PATH, unit.index, cs, video_key=c.key) for c in w.layout.cameras}
        self.result = UnitResult(unit.index, "")
        self.files = UnitFiles(w.fs, w.dataset_dir, w.format_name)  # the unit's files until commit
        self._pq: pq.ParquetWriter | None = None
        self._videos: dict[str, UnitVideo] = {}
        self._rows: list[dict[str, Any]] = []
        self._extra_eps: list[dict[str, Any]] = []
        self._tasks: dict[str, int] = {}  # task -> id written (unit first-appearance order)
        self._provisional = 0
        self._aggs: dict[str, Agg] = {}
        self._hists: dict[str, list[dict[str, Any]]] = {}
        self.next_episode = getattr(unit, "episode_offset", 0)
        self.next_index = getattr(unit, "index_offset", 0)
        self._planned = dict(getattr(unit, "task_ids", ()))
        self._planned_tasks = getattr(unit, "planned_tasks", 0)
        self._broken: BaseException | None = None
        self._done = False

    # ---- episodes ----------------------------------------------------------------------------------------------
    def add(self, episode: CanonicalEpisode) -> None:
        w, n = self.writer, episode.length
        if n == 0:
            raise EpisodeError(f"{episode.ref.data_path}: episode {episode.episode_index} has no steps (a LeRobot "
                               "episode needs at least one frame)", code=EMPTY_EPISODE)
        if len(episode.language) != n:
            raise DataCorrupt(f"episode {episode.episode_index}: {len(episode.language)} instructions for {n} steps")
        columns = self._columns(episode)
        encoded: list[tuple[str, str, ImageHistogram]] = []
        try:
            for cam in w.layout.cameras:
                tmp = self.files.new_temp(self.video_rels[cam.key], "-episode")
                hist = ImageHistogram(3)
                encoded.append((cam.key, tmp, hist))
                h, wd = cam.shape[:2]
                encode_episode(tmp, episode.cameras[cam.targets[0]], n, h, wd, w.settings, hist)
        except BaseException:
            for _, tmp, _ in encoded:
                remove_file(tmp)
            raise
        try:  # every camera is encoded: from here on the episode goes into the unit's files
            self._append(episode, columns, encoded)
        except BaseException as exc:  # the unit's files may hold part of the episode: the unit cannot commit
            self._broken = exc
            raise
        finally:
            for _, tmp, _ in encoded:
                remove_file(tmp)

    def _columns(self, ep: CanonicalEpisode) -> dict[str, Any]:
        """The episode's data columns (everything but the bookkeeping and the task ids)."""
        n = ep.length
        out: dict[str, Any] = {}
        for f in self.writer.layout.data_features:
            if f.kind == "action":
                parts = []
                for target, size in zip(f.targets, f.sizes):
                    v = np.asarray(ep.tensors[target]).reshape(n, size)
                    if v.dtype.kind in "iu" and v.size and np.abs(v).max() > (1 << 24):
                        raise EpisodeError(f"episode {ep.episode_index}: integer action {target!r} exceeds float32's "
                                           "exact range (the LeRobot action is float32)", code="EP205")
                    parts.append(v.astype(np.float32))
                out[f.key] = np.concatenate(parts, axis=1) if parts else np.zeros((n, 0), np.float32)
            elif f.kind == "tensor" and f.targets:
                out[f.key] = np.asarray(ep.tensors[f.targets[0]])
            elif f.kind == "string":
                out[f.key] = list(ep.texts[f.targets[0]])
            elif f.kind == "reward":
                out[f.key] = np.asarray(ep.reward, np.float32)
            elif f.kind == "done":
                out[f.key] = np.asarray(ep.is_terminal, np.bool_)
            elif f.kind == "discount":
                out[f.key] = np.asarray(ep.discount, np.float32)
        return out

    def _task_id(self, task: str) -> int:
        if task not in self._tasks:
            if task in self._planned:
                self._tasks[task] = self._planned[task]
            else:
                self._tasks[task] = self._planned_tasks + self._provisional
                self._provisional += 1
        return self._tasks[task]

    def _append(self, ep: CanonicalEpisode, columns: dict[str, Any],
                encoded: list[tuple[str, str, ImageHistogram]]) -> None:
        w, n = self.writer, ep.length
        e, i0 = self.next_episode, self.next_index
        lang = [str(t) for t in ep.language]
        ep_tasks = list(dict.fromkeys(lang))
        ids = {t: self._task_id(t) for t in ep_tasks}
        frame_index = np.arange(n, dtype=np.int64)
        columns["timestamp"] = (frame_index / w.fps).astype(np.float32)
        columns["frame_index"] = frame_index
        columns["episode_index"] = np.full(n, e, dtype=np.int64)
        columns["index"] = i0 + frame_index
        columns["task_index"] = np.array([ids[t] for t in lang], dtype=np.int64)
        row: dict[str, Any] = {"episode_index": e, "tasks": ep_tasks, "length": n,
                               "data/chunk_index": self.chunk_index, "data/file_index": self.file_index,
                               "dataset_from_index": i0, "dataset_to_index": i0 + n}
        for key, tmp, hist in encoded:
            video = self._videos.get(key)
            if video is None:
                video = self._videos[key] = UnitVideo(self.files.temp(self.video_rels[key]), w.fps)
            t0, t1 = video.append(tmp, n)
            row.update({f"videos/{key}/chunk_index": self.chunk_index, f"videos/{key}/file_index": self.file_index,
                        f"videos/{key}/from_timestamp": t0, f"videos/{key}/to_timestamp": t1})
        table = pa.Table.from_arrays([arrow_column(columns[f.key], f, n) for f in w.layout.data_features],
                                     schema=w.data_schema)
        if self._pq is None:
            self._pq = parquet_writer(self.files.temp(self.data_rel), w.data_schema)
        self._pq.write_table(table, row_group_size=n)
        hists = {key: hist for key, _, hist in encoded}
        for f in w.layout.features:
            if f.kind == "video":
                st = hists[f.key].stats()
                self._hists.setdefault(f.key, []).append(image_stats_json(hists[f.key].hist, hists[f.key].frames))
            elif f.numeric:
                st = array_stats(np.asarray(columns[f.key]), f.scalar)
                agg = Agg.of_episode(st)
                self._aggs[f.key] = agg if f.key not in self._aggs else self._aggs[f.key].merge(agg)
            else:
                continue
            for k in STAT_KEYS:
                row[f"stats/{f.key}/{k}"] = to_list(st[k])
        row["meta/episodes/chunk_index"] = self.chunk_index
        row["meta/episodes/file_index"] = self.file_index
        self._rows.append(row)
        self._extra_eps.append({"source": ep.episode_index, "length": n,
                                "tasks": [list(self._tasks).index(t) for t in ep_tasks]})
        self.result.episodes.append((ep.episode_index, n))
        self.next_episode += 1
        self.next_index += n

    def quarantine(self, record: dict[str, Any]) -> None:
        self.result.quarantined.append(record)

    # ---- commit / abort ---------------------------------------------------------------------------------------
    def commit(self) -> UnitResult:
        w = self.writer
        if self._broken is not None:
            self.abort()
            raise RuntimeError(f"unit {self.unit.index}: writing an episode into the unit's files failed "
                               f"({type(self._broken).__name__}: {self._broken}); the unit is not committed")
        try:
            if self._rows:
                self._pq.close()  # type: ignore[union-attr]
                self._pq = None
                for v in self._videos.values():
                    v.close()
                meta = parquet_bytes(pa.Table.from_pylist(self._rows, schema=w.episodes_schema))
                with open(self.files.temp(self.meta_rel), "wb") as f:
                    f.write(meta)
                main, *others = self.files.publish_all(
                    [self.data_rel, self.meta_rel, *(self.video_rels[c.key] for c in w.layout.cameras)])
                self.result.filename, self.result.num_bytes, self.result.sha256 = \
                    self.data_rel, main["num_bytes"], main["sha256"]
                self.result.files = others
                self.result.extra = self._extra()
            else:
                self._close_all()
                # every episode quarantined: remove final-named files an earlier attempt of this unit committed
                # (lerobot loads every data parquet it finds)
                self.files.remove_finals([self.data_rel, self.meta_rel, *self.video_rels.values()])
        except BaseException:
            self.abort()
            raise
        self.files.close()
        self._done = True
        return self.result

    def _extra(self) -> dict[str, Any]:
        """What finalize needs of this unit (small: a few numbers per episode, the unit's stats aggregates)."""
        tasks = list(self._tasks)
        stats: dict[str, Any] = {k: a.to_json() for k, a in self._aggs.items()}
        for key, parts in self._hists.items():
            stats[key] = merge_image_json(parts)
        return {"episodes": self._extra_eps, "tasks": tasks,
                "numbering": {"episode_offset": getattr(self.unit, "episode_offset", 0),
                              "index_offset": getattr(self.unit, "index_offset", 0),
                              "task_ids": [self._tasks[t] for t in tasks]},
                "stats": stats}

    def _close_all(self) -> None:
        if self._pq is not None:
            try:
                self._pq.close()
            except Exception:  # noqa: BLE001 - being thrown away
                pass
            self._pq = None
        for v in self._videos.values():
            try:
                v.close()
            except Exception:  # noqa: BLE001
                pass

    def abort(self) -> None:
        self._done = True
        self._close_all()
        self.files.abort()


# ---- the writer ------------------------------------------------------------------------------------------------
class LeRobotWriter(Writer):
    """Writes a LeRobot v3.0 dataset at the output root (module docstring)."""

    format_name = "lerobot"
    title = "LeRobot v3.0"
    paired_reader = "lerobot"
    Options = LeRobotOptions
    OUTPUTS = ("data", "meta", "videos")

    def __init__(self, out_url: str, mapping: Mapping, storage_options: dict[str, Any] | None = None,
                 options: dict[str, Any] | None = None) -> None:
        super().__init__(out_url, mapping, storage_options, options)
        self.options: LeRobotOptions
        self.layout = plan_layout(mapping)
        self.data_schema = data_schema(self.layout)
        self.episodes_schema = episodes_schema(self.layout)

    # ---- options ----------------------------------------------------------------------------------------------
    @property
    def fps(self) -> int:
        if not self.options.fps:
            raise ConfigError("the LeRobot writer has no frame rate: the driver sets target.options.fps from the "
                              "source (Writer.unit_options); pass --set target.options.fps=N")
        return int(self.options.fps)

    @property
    def settings(self) -> VideoSettings:
        o = self.options
        return VideoSettings(o.vcodec, self.fps, o.g, o.crf, o.preset, o.encoder_threads)

    def resolve_fps(self, inv: Inventory) -> int:
        """target.options.fps, else the source's rate when it is a whole number; anything else is refused (a
        float rate truncated to an integer would put every frame at the wrong time)."""
        if self.options.fps:
            return int(self.options.fps)
        fps = inv.fps
        if not fps or fps <= 0:
            raise ConfigError(f"LeRobot needs an integer frame rate and the source ({inv.source_format}) records "
                              "none: pass --set target.options.fps=N")
        if abs(fps - round(fps)) > 1e-9:
            raise ConfigError(f"LeRobot needs an integer frame rate; the source's is {fps:g} fps. Pass "
                              "--set target.options.fps=N with an integer N: frames are then stamped k/N "
                              "(the source's own timing is not kept)")
        return int(round(fps))

    def unit_options(self, inv: Inventory) -> dict[str, Any]:
        """The options every unit's writer gets: the user's, with the frame rate resolved from the source."""
        opts = self.options.model_dump(exclude_unset=True)
        opts["fps"] = self.resolve_fps(inv)
        return opts

    # ---- where things go ----------------------------------------------------------------------------------------
    @property
    def dataset_rel(self) -> str:
        return ""

    def commit_files(self) -> list[str]:
        return [INFO]

    # ---- plan ---------------------------------------------------------------------------------------------------
    def plan(self, refs: list[EpisodeRef], features: dict[str, FeatureSpec], target_unit_mb: float,
             min_units: int, max_unit_episodes: int = MAX_UNIT_EPISODES) -> list[Unit]:
        """`plan_units` (episodes sharing source files stay together) with units capped by the file size limits
        (an estimate: video is sized as JPEG, so the real MP4s stay well under video_files_size_in_mb); each unit
        carries the numbering it writes when nothing is quarantined. Planned per split (`plan_split_units`), so each
        split is one episode range of info.json `splits` whatever order the source lists its episodes in."""
        cap = min(float(target_unit_mb), float(self.options.video_files_size_in_mb),
                  float(self.options.data_files_size_in_mb) * 10)
        units = plan_split_units(refs, features, cap, min_units, max_unit_episodes)
        planned: dict[str, int] = {}
        for r in refs:
            for t in r.tasks:
                planned.setdefault(str(t), len(planned))
        out: list[Unit] = []
        e = i = 0
        for u in units:
            tasks = {str(t) for r in u.refs for t in r.tasks}
            out.append(LeRobotUnit(u.index, u.num_shards, u.refs, split=u.split, split_shard=u.split_shard,
                                   episode_offset=e, index_offset=i,
                                   task_ids=tuple(sorted((t, planned[t]) for t in tasks)),
                                   planned_tasks=len(planned)))
            e += len(u.refs)
            i += sum(r.length for r in u.refs)
        return out

    def unit_filenames(self, unit: Unit) -> list[str]:
        return [file_rel(DATA_PATH, unit.index, self.options.chunks_size)]

    def open_unit(self, unit: Unit) -> EpisodeFileSink:
        return EpisodeFileSink(self, unit)

    # ---- finalize -----------------------------------------------------------------------------------------------
    def finalize(self, results: list[UnitResult], inv: Inventory) -> dict[str, Any]:
        """Renumber the units whose planned numbering is off (module docstring), then tasks.parquet, stats.json and
        info.json last (the commit)."""
        results = sorted(results, key=lambda r: r.shard_index)
        if not self.options.fps:  # the Publisher's writer is built from the user's options
            self.options = self.options.model_copy(update={"fps": self.resolve_fps(inv)})
        tasks: dict[str, int] = {}
        episodes = frames = 0
        for r in results:
            ex = r.extra or {}
            eps = ex.get("episodes") or []
            if not eps or not r.filename:
                continue
            new_ids = [tasks.setdefault(t, len(tasks)) for t in ex["tasks"]]
            num = ex["numbering"]
            if (num["episode_offset"], num["index_offset"], list(num["task_ids"])) != (episodes, frames, new_ids):
                self.renumber(r, episodes, frames, new_ids)
            episodes += len(eps)
            frames += sum(int(x["length"]) for x in eps)
        meta = self.build_meta(results, inv, tasks, episodes, frames)
        empty = join(self.dataset_dir, EMPTY_EPISODES)
        if not episodes:
            write_bytes_atomic(self.fs, empty, parquet_bytes(self.episodes_schema.empty_table(), []))
        elif self.fs.exists(empty) and EMPTY_EPISODES not in {n for r in results for n, _, _ in r.all_files()}:
            self.fs.rm_file(empty)  # a placeholder left by an earlier finalize of this output
        for name in (TASKS, STATS, INFO):
            write_bytes_atomic(self.fs, join(self.dataset_dir, name), meta[name])
        return json.loads(meta[INFO])

    def _read_parquet(self, rel: str, digests: dict[str, str]) -> pa.Table:
        """A unit's parquet file; the sha256 of the bytes read goes into `digests` under its name."""
        raw = self.fs.cat_file(join(self.dataset_dir, rel))
        digests[rel] = hashlib.sha256(raw).hexdigest()
        return pq.read_table(io.BytesIO(raw))

    def renumber(self, r: UnitResult, e0: int, i0: int, new_ids: list[int]) -> None:
        """Rewrite a unit's data parquet and meta/episodes part with episodes from `e0`, rows from `i0` and the
        global task ids; update its ledger entry (bytes, sha256, numbering, stats aggregates) in place."""
        ex = r.extra
        eps = ex["episodes"]
        lengths = [int(x["length"]) for x in eps]
        total = sum(lengths)
        remap = dict(zip(ex["numbering"]["task_ids"], new_ids))
        before: dict[str, str] = {}  # the digests of what is renumbered: Validate ties the units' re-reads to it
        data = self._read_parquet(r.filename, before)
        old_tasks = data["task_index"].to_numpy()
        ep_col = np.repeat(np.arange(e0, e0 + len(eps), dtype=np.int64), lengths)
        idx_col = np.arange(i0, i0 + total, dtype=np.int64)
        lut = np.zeros(max(remap) + 1, dtype=np.int64)
        lut[list(remap)] = list(remap.values())
        task_col = lut[old_tasks]
        cols = {"episode_index": ep_col, "index": idx_col, "task_index": task_col}
        for name, col in cols.items():
            i = data.schema.get_field_index(name)
            data = data.set_column(i, data.schema.field(i), pa.array(col, type=pa.int64()))
        data_bytes = parquet_bytes(data, lengths)
        meta_rel = next(f["name"] for f in r.files if f["name"].startswith("meta/episodes/"))
        meta = self._read_parquet(meta_rel, before)
        rows = meta.to_pylist()
        aggs: dict[str, list[Agg]] = {k: [] for k in cols}
        start = 0
        for k, (row, n) in enumerate(zip(rows, lengths)):
            row["episode_index"] = e0 + k
            row["dataset_from_index"] = i0 + start
            row["dataset_to_index"] = i0 + start + n
            for name, col in cols.items():
                st = array_stats(col[start:start + n], True)
                aggs[name].append(Agg.of_episode(st))
                for s in STAT_KEYS:
                    row[f"stats/{name}/{s}"] = to_list(st[s])
            start += n
        meta_bytes = parquet_bytes(pa.Table.from_pylist(rows, schema=self.episodes_schema))
        write_bytes_atomic(self.fs, join(self.dataset_dir, r.filename), data_bytes)
        write_bytes_atomic(self.fs, join(self.dataset_dir, meta_rel), meta_bytes)
        r.num_bytes, r.sha256 = len(data_bytes), hashlib.sha256(data_bytes).hexdigest()
        for f in r.files:
            if f["name"] == meta_rel:
                f["num_bytes"], f["sha256"] = len(meta_bytes), hashlib.sha256(meta_bytes).hexdigest()
        ex["numbering"] = {"episode_offset": e0, "index_offset": i0, "task_ids": list(new_ids)}
        ex["renumbered_from"] = before
        for name, parts in aggs.items():
            ex["stats"][name] = merge_aggs(parts).to_json()  # type: ignore[union-attr]

    def read_back_names(self) -> dict[str, str]:
        """What the LeRobot reader calls each written feature (its own naming rules, formats/lerobot/reader.py):
        flat dotted keys come back as `observation/<key, dots as _>`, cameras by their count. A concatenated
        `action` made of several targets has no per-target name back (it is read as one `action`)."""
        from robo_ray.formats.lerobot.reader import declare_features

        specs: dict[str, FeatureSpec] = {}
        for f in self.layout.features:
            if f.kind == "video":
                specs[f.key] = FeatureSpec(f.key, "video", "uint8", tuple(f.shape))
            elif f.kind != "string":
                specs[f.key] = FeatureSpec(f.key, "tensor", f.dtype, tuple(f.shape))
        names = declare_features(specs)
        out: dict[str, str] = {}
        for f in self.layout.features:
            if len(f.targets) == 1 and f.key in names and names[f.key].name:
                out[f.targets[0]] = str(names[f.key].name)
        return out

    def names_of(self, f: Feature, inv: Inventory | None) -> Any:
        """`names` of a feature in info.json: the source's when they fit, else generated per component."""
        if f.kind == "video":
            return ["height", "width", "channels"]
        if f.kind in ("string", "reward", "discount", "done") or f.key in BOOKKEEPING or \
                f.scalar and f.kind != "action":
            return None
        if len(f.shape) != 1:
            return None
        src = _source_names(inv, f.sources[0]) if inv is not None and len(f.sources) == 1 else None
        if src is not None and len(src) == f.shape[0]:
            return src
        if f.kind == "action":
            out: list[str] = []
            for target, size in zip(f.targets, f.sizes):
                base = target[len("action/"):].replace("/", ".") if target.startswith("action/") else target
                out += [base] if size == 1 and len(f.targets) > 1 else [f"{base}_{i}" for i in range(size)]
            return out
        base = f.key.rsplit(".", 1)[-1]
        return [f"{base}_{i}" for i in range(f.shape[0])]

    def info_json(self, inv: Inventory | None, episodes: int, frames: int, tasks: int,
                  results: list[UnitResult] | None = None) -> dict[str, Any]:
        feats: dict[str, Any] = {}
        for f in self.layout.features:
            d: dict[str, Any] = {"dtype": f.dtype, "shape": list(f.shape), "names": self.names_of(f, inv)}
            if f.kind == "video":
                d["info"] = self.settings.info(f.shape[0], f.shape[1])
            feats[f.key] = d
        o = self.options
        robot = o.robot_type or (inv.robot_type if inv is not None else None)
        return {"codebase_version": CODEBASE_VERSION, "robot_type": robot, "total_episodes": episodes,
                "total_frames": frames, "total_tasks": tasks, "chunks_size": o.chunks_size,
                "data_files_size_in_mb": o.data_files_size_in_mb, "video_files_size_in_mb": o.video_files_size_in_mb,
                "fps": self.fps, "splits": episode_splits(results or [], inv, episodes), "data_path": DATA_PATH,
                "video_path": VIDEO_PATH if self.layout.cameras else None, "features": feats}

    def build_meta(self, results: list[UnitResult], inv: Inventory | None, tasks: dict[str, int], episodes: int,
                   frames: int) -> dict[str, bytes]:
        """tasks.parquet, stats.json, info.json from the (renumbered) unit results."""
        import pandas as pd

        names = sorted(tasks, key=tasks.__getitem__)
        df = pd.DataFrame({"task_index": np.arange(len(names), dtype=np.int64)}, index=pd.Index(names, name="task"))
        buf = io.BytesIO()
        df.to_parquet(buf)
        merged: dict[str, dict[str, np.ndarray]] = {}
        for f in self.layout.features:
            parts = [r.extra["stats"][f.key] for r in results if (r.extra or {}).get("stats", {}).get(f.key)]
            if not parts:
                continue
            if f.kind == "video":
                merged[f.key] = image_stats(merge_image_json(parts))  # type: ignore[arg-type]
            elif f.numeric:
                agg = merge_aggs([Agg.from_json(p) for p in parts])
                if agg is not None:
                    merged[f.key] = agg.finish()
        info = self.info_json(inv, episodes, frames, len(names), results)
        return {TASKS: buf.getvalue(), STATS: json.dumps(stats_json(merged), indent=2).encode(),
                INFO: json.dumps(info, indent=4).encode()}

    # ---- validate -----------------------------------------------------------------------------------------------
    def verify_unit(self, result: UnitResult, ctx: VerifyContext) -> Any:
        """Re-read one committed unit (its data parquet, meta/episodes part and MP4s; formats/lerobot/verify.py)."""
        from robo_ray.formats.lerobot.verify import LeRobotVerifier

        return LeRobotVerifier(self, ctx).check_unit(result)

    def verify(self, ctx: VerifyContext, res: Any) -> bool:
        """The dataset-level checks (meta/, every file present, numbering across units, the merged unit checks, the
        paired reader's read-back)."""
        from robo_ray.formats.lerobot.verify import LeRobotVerifier

        return LeRobotVerifier(self, ctx).run(res)

    def usage(self) -> list[str]:
        return ["```python", "from lerobot.datasets.lerobot_dataset import LeRobotDataset  # lerobot >= 0.4", "",
                f"ds = LeRobotDataset('local/{self.mapping.dataset_name}', root='{self.out_url}')",
                "print(ds.num_episodes, ds.num_frames, ds.meta.camera_keys)", "frame = ds[0]  # tensors, task text",
                "```", "", "Codec: " + ENCODERS[self.options.vcodec][1] + f", crf {self.options.crf}, g "
                f"{self.options.g}; fps {self.options.fps}.", "",
                "Features: " + ", ".join(f"`{f.key}` ({', '.join(f.targets or f.sources)})"
                                         for f in self.layout.features if f.key not in BOOKKEEPING) + ".",
                "Not written (LeRobot has no field for them): is_first / is_last (frame_index and the episode "
                "bounds say it), episode metadata."]


def episode_splits(results: list[UnitResult], inv: Inventory | None, episodes: int) -> dict[str, str]:
    """info.json `splits` ({name: "from:to"}, lerobot's episode ranges) from the source split of each written
    episode, when every split's episodes are one contiguous run of the output (an RLDS source lists them split
    by split); else (or without splits) everything is `train`."""
    split_of = {r.episode_index: r.split for r in (inv.refs if inv is not None else [])}
    order = [split_of.get(int(e["source"])) or "train" for r in sorted(results, key=lambda r: r.shard_index)
             if r.filename for e in (r.extra or {}).get("episodes") or []]
    runs: dict[str, list[int]] = {}  # split -> [first, last + 1]
    for pos, split in enumerate(order):
        if split in runs and runs[split][1] != pos:
            return {"train": f"0:{episodes}"}  # a split in several runs: lerobot's ranges cannot say it
        runs.setdefault(split, [pos, pos])[1] = pos + 1
    if len(runs) <= 1 or len(order) != episodes:
        return {"train": f"0:{episodes}"}
    return {split: f"{a}:{b}" for split, (a, b) in runs.items()}


def _source_names(inv: Inventory, source: str) -> list[str] | None:
    feat = inv.features.get(source)
    names = feat.names if feat is not None else None
    if isinstance(names, dict):  # legacy {"motors": [...]}
        names = next(iter(names.values()), None)
    if isinstance(names, list) and names and all(isinstance(x, str) for x in names):
        return list(names)
    return None
