"""ORTF v0.2 reader (../specs/ortf_v0.2.txt; no public implementation exists).

`meta/manifest.json` is validated first (`manifest_check.py`: required fields and types, `ortf_version` 0.2 only;
anything else is one clear `SourceFormatError`/`UnknownFormat` line, exit 2). `meta/episodes.parquet` indexes the
episodes, their rows live in `data/chunk-NNN/steps.parquet` (selected by `episode_id`, ordered by `step_index`),
each camera has one MP4 per episode (`video_files` or `videos/<camera>/chunk-NNN/episode_NNNNNN.mp4`), referenced,
not decoded. Depth cameras (16-bit) are decoded here (FFV1/PNG gray16 MP4, or NPZ), because the convert stage's
video path is 8-bit. Boundary flags and instruction come from the data (`is_first`/`is_last`/`is_terminal`,
`tasks.jsonl`); success, failure reason, operator notes and annotations become episode metadata.

Columns the spec does not name are kept: `reward`/`discount` feed RLDS reward/discount, `task_id` per step overrides
the episode's task, other numeric columns become step features.
"""
from __future__ import annotations

import json
import posixpath
import re
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from robo_ray.episode import Episode, EpisodeRef, FeatureSpec, RawFrames, VideoRef
from robo_ray.errors import (DataCorrupt, SourceFormatError, VideoDecodeError, VideoMissing)
from robo_ray.readers.base import (BaseReader, Finding, Inventory, MetaType, canonical_path, identifier,
                                   unique_names)
from robo_ray.formats.lerobot.reader import column_to_numpy
from robo_ray.formats.ortf.manifest_check import sensor_fps, sensor_resolution, validate_manifest
from robo_ray.safety import MAX_EPISODE_LENGTH, MAX_EPISODES, check_count, check_shape, check_relative_path
from robo_ray.storage import join
from robo_ray.readers.naming import LANGUAGE_TEXT

FLAGS = ("is_first", "is_last", "is_terminal")
BOOKKEEPING = ("episode_id", "step_index", "timestamp", "task_id")
_FRAME_INDEX = re.compile(r"^observation\.images\.(.+)\.frame_index$")
MAX_ANNOTATION_BYTES = 1 << 20
MANIFEST = "meta/manifest.json"
# Episode.metadata of every episode: meta/episodes.parquet's columns and the annotations folder
METADATA: dict[str, MetaType] = {
    "episode_id": "int", "file_path": "text", "ortf_episode_id": "text", "task_id": "int", "success": "int",
    "failure_reason": "text", "operator_notes": "text", "recorded_at": "text", "duration_seconds": "float",
    "annotations": "text"}
BOOKKEEPING_NOTE = "bookkeeping column (episode rows, step order, video frame index, task via language_instruction)"
STRING_NOTE = "string column (no RLDS tensor form); kept out"
_FLAG_ROLES = {"is_first": "is_first", "is_last": "is_last", "is_terminal": "terminal"}


def _arrow_feature(key: str, t: pa.DataType, shape_hint: int | None) -> FeatureSpec:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return FeatureSpec(key, "string", "string", ())
    if pa.types.is_fixed_size_list(t):
        return FeatureSpec(key, "tensor", _np_dtype(key, t.value_type), check_shape(key, [t.list_size]))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        if shape_hint is None:
            raise SourceFormatError(f"steps.parquet: column {key!r} is a variable list with no dimension in "
                                    "the manifest")
        return FeatureSpec(key, "tensor", _np_dtype(key, t.value_type), check_shape(key, [shape_hint]))
    return FeatureSpec(key, "tensor", _np_dtype(key, t), ())


def _np_dtype(key: str, t: pa.DataType) -> str:
    try:
        dt = np.dtype(t.to_pandas_dtype())
    except (NotImplementedError, TypeError) as exc:
        raise SourceFormatError(f"steps.parquet: column {key!r} has unsupported type {t}") from exc
    if dt.kind not in "biuf":
        raise SourceFormatError(f"steps.parquet: column {key!r} has non-numeric type {t}")
    return str(dt)


def _dotted(prefix: str, rest: str) -> str:
    return canonical_path(prefix, rest, ".")


def declare_features(features: dict[str, FeatureSpec]) -> dict[str, FeatureSpec]:
    """Each feature's role and canonical name: action -> action; observation.state (the concatenated state, or
    the single `state` component) -> observation/state, other components -> observation/<component>; one camera ->
    observation/image, several -> observation/image_<camera>; depth cameras -> observation/depth[_<camera>]; the
    boundary flags, `reward` and `discount` columns -> their roles; episode rows, step order, timestamps, task ids
    and video frame indices are bookkeeping; later duplicate names get `_2`, `_3`, ..."""
    cams = [k for k, f in features.items() if f.kind in ("image", "video")]
    depth = [k for k in cams if features[k].dtype == "uint16"]
    rgb = [k for k in cams if k not in depth]
    has_state = "observation.state" in features
    out: dict[str, FeatureSpec] = {}
    for key, feat in features.items():
        if key in _FLAG_ROLES:
            out[key] = replace(feat, role=_FLAG_ROLES[key], name=key)  # type: ignore[arg-type]
        elif key in BOOKKEEPING or key.endswith(".frame_index"):
            out[key] = replace(feat, role="bookkeeping", note=BOOKKEEPING_NOTE)
        elif key in ("reward", "discount") and feat.kind == "tensor":
            out[key] = replace(feat, role=key, name=key)  # type: ignore[arg-type]
        elif feat.kind == "string" and LANGUAGE_TEXT.match(key):  # more instructions, lerobot's language columns
            out[key] = replace(feat, role="language", name=key)
        elif feat.kind == "string":
            out[key] = replace(feat, role="other", note=STRING_NOTE)
        elif key in cams:
            group, base, role = (depth, "observation/depth", "depth") if key in depth else \
                (rgb, "observation/image", "camera")
            name = base if len(group) == 1 else f"{base}_{identifier(key.rsplit('.', 1)[-1])}"
            out[key] = replace(feat, role=role, name=name)  # type: ignore[arg-type]
        else:
            if key == "observation.state":
                role, name = "state", "observation/state"
            elif key.startswith("observation.state."):
                comp = key[len("observation.state."):]
                role, name = ("state", "observation/state") if comp == "state" and not has_state else \
                    ("observation", _dotted("observation", comp))
            elif key.startswith("observation."):
                role, name = "observation", _dotted("observation", key[len("observation."):])
            elif key == "action" or key.startswith("action."):
                role, name = "action", _dotted("", key)
            else:
                role, name = "other", _dotted("", key)
            out[key] = replace(feat, role=role, name=name)  # type: ignore[arg-type]
    return unique_names(out)


class OrtfReader(BaseReader):
    """Reads an ORTF v0.2 dataset from any fsspec URL."""

    format_name = "ortf"
    sniff_hint: ClassVar[str] = "meta/manifest.json (ORTF)"

    @classmethod
    def sniff(cls, fs: Any, root: str) -> bool:
        return bool(fs.exists(join(root, MANIFEST)))

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        super().__init__(url, storage_options)
        self.manifest = validate_manifest(self._read_json("meta/manifest.json"))
        self.version = self.manifest["ortf_version"]
        self.sensors = {s["name"]: s for s in self.manifest["sensors"]}
        self._episodes = self._read_parquet("meta/episodes.parquet", error=SourceFormatError)
        for col in ("episode_id", "length"):
            if col not in self._episodes.column_names:
                raise SourceFormatError(f"meta/episodes.parquet: required column `{col}` is missing")
        self.chunk_files = sorted(posixpath.relpath(p, self.root)
                                  for p in self.fs.glob(self.path("data/chunk-*/steps.parquet")))
        if not self.chunk_files:
            raise SourceFormatError("data/: no chunk-NNN/steps.parquet files")
        self.cameras: dict[str, dict[str, Any]] = {}  # camera -> sensor
        self.features = self._features()
        rates = {sensor_fps(s, "meta/manifest.json") for s in self.cameras.values()}
        if len(rates) > 1:
            raise SourceFormatError(f"meta/manifest.json: cameras at different fps {sorted(rates)} are not "
                                    "supported yet")
        hz = self.manifest["action_space"].get("control_frequency_hz")
        rate = rates.pop() if rates else float(hz) if isinstance(hz, (int, float)) and hz > 0 else 0.0
        if rate:  # held by the dataset: a --fps does not replace it
            self.set_fps(rate, "meta/manifest.json " + ("sensor fps" if self.cameras else "control_frequency_hz"))
        self._tasks: dict[int, str] | None = None

    @staticmethod
    def _is_depth(sensor: dict[str, Any]) -> bool:
        return sensor.get("type") == "depth_camera" or sensor.get("bit_depth") == 16

    # ---- features ----------------------------------------------------------------------------------------------
    def _features(self) -> dict[str, FeatureSpec]:
        try:
            with self.open_binary(self.chunk_files[0]) as f:
                schema = pq.read_schema(f)
        except (pa.ArrowException, OSError) as exc:
            raise SourceFormatError(f"{self.chunk_files[0]}: unreadable parquet ({exc})") from exc
        state = self.manifest["observation_space"].get("state", {})
        images = self.manifest["observation_space"].get("images", {})
        for col in ("episode_id", *FLAGS):
            if col not in schema.names:
                raise SourceFormatError(f"{self.chunk_files[0]}: required column `{col}` is missing")
        feats: dict[str, FeatureSpec] = {}
        comps: list[str] = []
        for name in schema.names:
            t = schema.field(name).type
            m = _FRAME_INDEX.match(name)
            if m:
                cam = m.group(1)
                sensor = self.sensors.get(images.get(cam, cam))
                if sensor is None:
                    raise SourceFormatError(f"{self.chunk_files[0]}: column {name!r} names camera {cam!r}, which "
                                            "no sensor in meta/manifest.json describes")
                self.cameras[cam] = sensor
                feats[name] = FeatureSpec(name, "tensor", "int64", ())
                continue
            hint = None
            if name.startswith("observation.state."):
                comp = name[len("observation.state."):]
                hint = state.get(comp, {}).get("dim")
                comps.append(name)
            elif name == "action":
                hint = len(self.manifest["action_space"].get("dimensions", [])) or None
            feat = _arrow_feature(name, t, hint)
            if hint is not None and feat.kind == "tensor" and int(np.prod(feat.shape or (1,))) != hint:
                raise SourceFormatError(f"{self.chunk_files[0]}: column {name!r} has {list(feat.shape)} values a "
                                        f"step, meta/manifest.json declares {hint}")
            if name in FLAGS and feat.dtype != "bool":
                raise SourceFormatError(f"{self.chunk_files[0]}: column {name!r} must be bool, is {t}")
            feats[name] = feat
        for cam in images:
            if cam not in self.cameras:
                raise SourceFormatError(f"meta/manifest.json: camera {cam!r} has no "
                                        f"observation.images.{cam}.frame_index column")
        if len(comps) > 1 and "observation.state.state" not in feats:
            width = sum(int(np.prod(feats[c].shape or (1,))) for c in comps)
            dtype = str(np.result_type(*[feats[c].dtype for c in comps]))
            feats["observation.state"] = FeatureSpec("observation.state", "tensor", dtype, (width,),
                                                     names=[c[len("observation.state."):] for c in comps])
        for cam, sensor in self.cameras.items():
            h, w = sensor_resolution(sensor, "meta/manifest.json")
            key = f"observation.images.{cam}"
            if self._is_depth(sensor):
                feats[key] = FeatureSpec(key, "image", "uint16", (h, w, 1), codec="depth16")
            else:
                feats[key] = FeatureSpec(key, "video", "uint8", (h, w, 3), codec=sensor.get("encoding"))
        return declare_features(feats)

    # ---- discover ----------------------------------------------------------------------------------------------
    def tasks(self) -> dict[int, str]:
        if self._tasks is None:
            self._tasks = {}
            if self.exists("meta/tasks.jsonl"):
                for lineno, obj in self._read_jsonl("meta/tasks.jsonl"):
                    tid = obj.get("task_id")
                    if not isinstance(tid, int) or not isinstance(obj.get("instruction", ""), str):
                        raise SourceFormatError(f"meta/tasks.jsonl:{lineno}: needs an integer task_id and a "
                                                "string instruction")
                    self._tasks[tid] = obj.get("instruction") or obj.get("description") or ""
        return self._tasks

    def _chunk_path(self, chunk: int) -> str:
        for digits in (3, 6):
            rel = f"data/chunk-{chunk:0{digits}d}/steps.parquet"
            if rel in self.chunk_files:
                return rel
        return f"data/chunk-{chunk:03d}/steps.parquet"

    def episode_rows(self) -> list[dict[str, Any]]:
        cols = [c for c in self._episodes.column_names]
        return self._episodes.select(cols).to_pylist()

    def episode_refs(self) -> list[EpisodeRef]:
        rows = self.episode_rows()
        check_count("number of episodes", len(rows), MAX_EPISODES)
        ids = [r.get("episode_id") for r in rows]
        if not all(isinstance(i, str) and i for i in ids) or len(set(ids)) != len(ids):
            raise SourceFormatError("meta/episodes.parquet: episode_id must be unique non-empty strings")
        numeric = all(i.isdigit() and len(i) <= 12 for i in ids)
        tasks = self.tasks()
        refs = []
        for pos, row in enumerate(rows):
            index = int(row["episode_id"]) if numeric else pos
            length = check_count(f"meta/episodes.parquet: episode {row['episode_id']} length", row.get("length"),
                                 MAX_EPISODE_LENGTH)
            chunk = row.get("chunk_id") if isinstance(row.get("chunk_id"), int) else 0
            files = row.get("video_files") or {}
            videos = []
            for cam in self.cameras:
                rel = files.get(cam) if isinstance(files, dict) else None
                rel = check_relative_path(rel) if isinstance(rel, str) and rel else \
                    f"videos/{cam}/chunk-{chunk:03d}/episode_{index:06d}.mp4"
                videos.append((f"observation.images.{cam}", VideoRef(rel)))
            tid = row.get("task_id")
            task = (tasks.get(tid, ""),) if isinstance(tid, int) else ()
            refs.append(EpisodeRef(index, length, self._chunk_path(chunk), tuple(videos), task,
                                   row.get("start_step"), row.get("end_step"), source_id=row["episode_id"]))
        refs.sort(key=lambda r: r.episode_index)
        return refs

    def discover(self) -> Inventory:
        refs = self.episode_refs()
        m = self.manifest
        robot = m.get("robot") or {}
        declared = {k: m.get(k) for k in ("dataset_id", "name", "description", "created_at", "license", "robot",
                                          "action_space", "observation_space", "sensors", "frames", "collection",
                                          "statistics", "timestamp_reference", "sync_tolerance_ms") if k in m}
        stats = m.get("statistics") or {}
        declared["total_episodes"] = stats.get("total_episodes")
        declared["total_steps"] = stats.get("total_steps")
        tasks = self.tasks()
        inv = Inventory(dataset_name=m.get("name") if isinstance(m.get("name"), str) and m.get("name")
                        else posixpath.basename(self.root), dataset_root=self.url, source_format="ortf",
                        source_version=self.version, episodes_count=len(refs), total_steps=sum(r.length for r in refs),
                        features=self.features, refs=refs, fps=self.fps,
                        robot_type=robot.get("name") if isinstance(robot.get("name"), str) else None,
                        tasks=[tasks[k] for k in sorted(tasks)], declared=declared,
                        metadata_types=dict(METADATA), language_source="task", step_storage="parquet")
        inv.findings = self._findings(inv) + self.fps_findings()
        return inv

    def _findings(self, inv: Inventory) -> list[Finding]:
        out: list[Finding] = []
        n_eps, n_steps = inv.declared.get("total_episodes"), inv.declared.get("total_steps")
        if isinstance(n_eps, int) and n_eps != inv.episodes_count:
            out.append(Finding("error", "O101", f"manifest statistics.total_episodes={n_eps} but "
                               f"meta/episodes.parquet lists {inv.episodes_count}", n_eps, inv.episodes_count))
        if isinstance(n_steps, int) and n_steps != inv.total_steps:
            out.append(Finding("error", "O102", f"manifest statistics.total_steps={n_steps} but the episode "
                               f"lengths sum to {inv.total_steps}", n_steps, inv.total_steps))
        for r in inv.refs:
            if r.global_from is not None and r.global_to is not None and r.global_to - r.global_from != r.length:
                out.append(Finding("error", "O104", f"episode {r.source_id}: end_step - start_step = "
                                   f"{r.global_to - r.global_from} but length = {r.length}"))
        wanted = {p for r in inv.refs for p in r.source_files()}
        missing = sorted(wanted - self.existing(wanted))  # one listing per folder
        for p in missing[:20]:
            out.append(Finding("error", "O103", f"missing file {p}", p, None))
        return out

    # ---- load one episode --------------------------------------------------------------------------------------
    def _episode_table(self, ref: EpisodeRef) -> pa.Table:
        table = self.last_table(ref.data_path)
        if "episode_id" not in table.column_names:
            raise DataCorrupt(f"{ref.data_path}: no episode_id column")
        ids = table["episode_id"].to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(ids == ref.source_id)
        part = table.take(pa.array(rows))
        if "step_index" in part.column_names and part.num_rows:
            order = np.argsort(part["step_index"].to_numpy(zero_copy_only=False), kind="stable")
            if (order != np.arange(len(order))).any():
                part = part.take(pa.array(order))
        return part

    def load_episode(self, ref: EpisodeRef) -> Episode:
        table = self._episode_table(ref)
        n = table.num_rows
        if n != ref.length:
            raise DataCorrupt(f"{ref.data_path}: episode {ref.source_id} has {n} rows, meta/episodes.parquet "
                              f"says {ref.length}")
        ep = Episode(ref=ref, length=n)
        rgb = {k: v for k, v in ref.videos if self.features[k].kind == "video"}
        ep.videos = rgb
        comps = []
        for key, spec in self.features.items():
            if key not in table.column_names:
                continue
            if spec.kind == "string":
                ep.columns[key] = np.asarray(table[key].to_pylist(), dtype=object)
            elif spec.kind == "tensor":
                ep.columns[key] = column_to_numpy(table[key], spec, ref)
                if key.startswith("observation.state."):
                    comps.append(key)
        if "observation.state" in self.features and "observation.state" not in table.column_names:
            ep.columns["observation.state"] = np.concatenate(
                [ep.columns[c].reshape(n, -1) for c in comps], axis=1).astype(self.features["observation.state"].dtype)
        ep.timestamps = self._timestamps(ep, table)
        for key, vref in ref.videos:
            if self.features[key].kind == "image":
                ep.images[key] = self._depth_frames(key, vref, ep)
        ep.step_tasks = self._step_tasks(table, ref)
        ep.metadata = self._metadata(ref)
        return ep

    def _timestamps(self, ep: Episode, table: pa.Table) -> np.ndarray:
        """Per-step video time: frame_index / fps (every camera must use the same frame indices)."""
        frame_cols = [f"observation.images.{c}.frame_index" for c in self.cameras]
        if frame_cols and self.fps > 0:
            idx = ep.columns[frame_cols[0]].reshape(-1)
            for col in frame_cols[1:]:
                if not np.array_equal(ep.columns[col].reshape(-1), idx):
                    raise DataCorrupt(f"{ep.ref.data_path}: episode {ep.ref.source_id}: cameras use different frame "
                                      "indices (not supported yet)")
            return idx.astype(np.float64) / self.fps
        if "timestamp" in table.column_names:
            return table["timestamp"].to_numpy(zero_copy_only=False).astype(np.float64)
        return np.arange(ep.length, dtype=np.float64) / (self.fps or 1.0)

    def _depth_frames(self, key: str, vref: VideoRef, ep: Episode) -> RawFrames:
        """16-bit depth frames of the episode's steps (MP4 with a gray16 stream, or NPZ with one array)."""
        cam = key[len("observation.images."):]
        h, w, _ = self.features[key].shape
        if not self.exists(vref.path):
            raise VideoMissing(f"missing depth file {vref.path} for episode {ep.ref.source_id} camera {cam}")
        if vref.path.endswith(".npz"):
            frames = self._npz_frames(vref.path)
        else:
            frames = self._mp4_gray16(vref.path)
        if frames.shape[1:3] != (h, w):
            raise VideoDecodeError(f"{vref.path}: depth frames are {frames.shape[2]}x{frames.shape[1]}, the "
                                   f"manifest declares {w}x{h}")
        idx = ep.columns[f"observation.images.{cam}.frame_index"].reshape(-1)
        if len(idx) and (idx.min() < 0 or idx.max() >= len(frames)):
            raise DataCorrupt(f"{vref.path}: frame_index up to {int(idx.max())} but the file holds "
                              f"{len(frames)} frames (episode {ep.ref.source_id})")
        return RawFrames(frames[idx].reshape(len(idx), h, w, 1))

    def _npz_frames(self, rel: str) -> np.ndarray:
        try:
            with self.open_binary(rel) as f, np.load(f, allow_pickle=False) as z:
                names = list(z.keys())
                arr = z["depth"] if "depth" in names else z[names[0]]
        except (OSError, ValueError, KeyError, IndexError) as exc:
            raise VideoDecodeError(f"{rel}: unreadable NPZ depth ({exc})") from exc
        if arr.ndim == 4 and arr.shape[-1] == 1:
            arr = arr[..., 0]
        if arr.ndim != 3 or arr.dtype != np.uint16:
            raise VideoDecodeError(f"{rel}: depth must be (N, H, W) uint16, is {arr.shape} {arr.dtype}")
        return arr

    def _mp4_gray16(self, rel: str) -> np.ndarray:
        import av

        try:
            with self.open_binary(rel) as f, av.open(f, "r") as c:
                if not c.streams.video:
                    raise VideoDecodeError(f"{rel}: no video stream")
                frames = [fr.to_ndarray(format="gray16le") for fr in c.decode(c.streams.video[0])]
        except (av.error.FFmpegError, OSError, ValueError) as exc:
            raise VideoDecodeError(f"{rel}: cannot decode 16-bit depth ({exc})") from exc
        if not frames:
            raise VideoDecodeError(f"{rel}: no frames")
        return np.stack(frames).astype(np.uint16)

    def _step_tasks(self, table: pa.Table, ref: EpisodeRef) -> list[str]:
        tasks = self.tasks()
        default = ref.tasks[0] if ref.tasks else ""
        if "task_id" not in table.column_names:
            return [default] * table.num_rows
        return [tasks.get(int(t), default) for t in table["task_id"].to_numpy(zero_copy_only=False)]

    def _metadata(self, ref: EpisodeRef) -> dict[str, Any]:
        rows = self._episodes.filter(pc.equal(self._episodes["episode_id"], ref.source_id)).to_pylist()
        row = rows[0] if rows else {}
        success = row.get("success")
        return {"episode_id": ref.episode_index, "file_path": ref.data_path, "ortf_episode_id": ref.source_id,
                "task_id": row.get("task_id"), "success": None if success is None else int(bool(success)),
                "failure_reason": row.get("failure_reason"), "operator_notes": row.get("operator_notes"),
                "recorded_at": row.get("recorded_at"), "duration_seconds": row.get("duration_seconds"),
                "annotations": self._annotations(ref)}

    def _annotations(self, ref: EpisodeRef) -> str | None:
        """annotations/episode_NNNNNN/: scene_objects.json (and the list of other files), as JSON text."""
        folder = f"annotations/episode_{ref.episode_index:06d}"
        if not self.exists(folder):
            return None
        files = sorted(posixpath.relpath(p, self.path(folder)) for p in self.fs.find(self.path(folder)))
        out: dict[str, Any] = {"files": files}
        if "scene_objects.json" in files:
            try:
                out["scene_objects"] = json.loads(self._read_bytes(f"{folder}/scene_objects.json",
                                                                   MAX_ANNOTATION_BYTES))
            except (json.JSONDecodeError, UnicodeDecodeError, SourceFormatError) as exc:
                raise DataCorrupt(f"{folder}/scene_objects.json: unreadable ({exc})".splitlines()[0]) from exc
        return json.dumps(out, sort_keys=True)
