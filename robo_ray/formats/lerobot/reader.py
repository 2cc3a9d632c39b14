"""LeRobot v2.0 / v2.1 / v3.0 reader (as lerobot 0.3.x and 0.4.x write them; FORMATS.md part 2).

Discover reads metadata only (info.json, episodes index, tasks); `load_episode` reads one episode's parquet rows.
Video stays referenced (`VideoRef`): the convert stage decodes it.
"""
from __future__ import annotations

import posixpath
import re
from dataclasses import replace
from typing import Any, ClassVar, Sequence

import numpy as np
import pyarrow as pa

from robo_ray.arrow_lists import list_values
from robo_ray.episode import Episode, EpisodeRef, FeatureSpec, RefTable, VideoRef
from robo_ray.errors import DataCorrupt, SourceFormatError, UnknownFormat, UnsafeInput
from robo_ray.formats.lerobot.depth_read import depth_name, is_depth_info, read_depth
from robo_ray.formats.lerobot.language import column_json
from robo_ray.formats.lerobot.paths import BOOKKEEPING, INFO
from robo_ray.readers.naming import LANGUAGE_TEXT
from robo_ray.readers.base import BUILTIN_METADATA, BaseReader, Finding, Inventory
from robo_ray.safety import (MAX_EPISODE_LENGTH, MAX_EPISODES, check_count, check_declared_counts, check_shape,
                             render_path_template)
from robo_ray.storage import join

META_BATCH_ROWS = 8192  # meta/episodes rows turned into refs at a time
# declared totals: compared with the episode index (findings), but a value that is not a count is refused
DECLARED_LIMITS = {"total_episodes": MAX_EPISODES, "total_frames": MAX_EPISODES * MAX_EPISODE_LENGTH,
                   "total_tasks": MAX_EPISODES * 16, "total_videos": MAX_EPISODES * 64, "total_chunks": MAX_EPISODES}
BOOKKEEPING_NOTE = "bookkeeping column (step order, indices, task via language_instruction)"
STRING_NOTE = "string feature (no RLDS tensor form); kept out"

# non-standard spellings seen in real datasets (e.g. open50: `actions`, `state`): (role, canonical name)
ALIASES = {"actions": ("action", "action"), "state": ("state", "observation/state"),
           "observation.states": ("state", "observation/state")}
SUPPORTED_VERSIONS = ("v2.0", "v2.1", "v3.0")
_CHANNEL_NAMES = ("channel", "channels", "c")


def _parse_version(raw: Any) -> str:
    if not isinstance(raw, str) or not raw.startswith("v"):
        raise UnknownFormat(f"meta/info.json: codebase_version {raw!r} is not a LeRobot version")
    major_minor = ".".join(raw.lstrip("v").split(".")[:2])
    version = f"v{major_minor}"
    if version not in SUPPORTED_VERSIONS:
        raise UnknownFormat(f"meta/info.json: LeRobot codebase_version {raw!r} is not supported "
                            f"(supported: {', '.join(SUPPORTED_VERSIONS)})")
    return version


def _image_hwc(key: str, feat: dict[str, Any]) -> tuple[tuple[int, int, int], tuple[int, ...]]:
    """Return (HWC shape, declared shape) for an image/video feature, accepting CHW and legacy layouts."""
    declared = check_shape(key, feat.get("shape"), INFO)
    info = feat.get("info") or feat.get("video_info") or {}
    names = feat.get("names")
    if isinstance(names, dict):  # legacy {"axes": [...]}
        names = next(iter(names.values()), None)
    h = info.get("video.height") if isinstance(info, dict) else None
    w = info.get("video.width") if isinstance(info, dict) else None
    if len(declared) == 2:
        hwc = (declared[0], declared[1], 1)
    elif len(declared) != 3:
        raise SourceFormatError(f"meta/info.json: image feature {key!r} has shape {list(declared)}, expected 3 dims")
    elif isinstance(names, list) and names and str(names[0]).lower() in _CHANNEL_NAMES:
        hwc = (declared[1], declared[2], declared[0])
    elif isinstance(names, list) and len(names) == 3 and str(names[2]).lower() in _CHANNEL_NAMES:
        hwc = declared  # type: ignore[assignment]
    elif declared[0] in (1, 3, 4) and declared[2] not in (1, 3, 4):
        hwc = (declared[1], declared[2], declared[0])
    else:
        hwc = declared  # type: ignore[assignment]
    if isinstance(h, int) and isinstance(w, int) and (h, w) != hwc[:2]:
        raise SourceFormatError(f"meta/info.json: feature {key!r} shape {list(declared)} disagrees with "
                                f"video.height/width {h}x{w}")
    return (int(hwc[0]), int(hwc[1]), int(hwc[2])), declared


def parse_features(raw: Any) -> dict[str, FeatureSpec]:
    """Turn info.json `features` into FeatureSpecs (images HWC), refusing malformed entries."""
    if not isinstance(raw, dict) or not raw:
        raise SourceFormatError("meta/info.json: `features` is missing or empty")
    out: dict[str, FeatureSpec] = {}
    for key, feat in raw.items():
        if not isinstance(feat, dict) or "dtype" not in feat:
            raise SourceFormatError(f"meta/info.json: feature {key!r} has no dtype")
        dtype = feat["dtype"]
        if dtype in ("video", "image"):
            hwc, declared = _image_hwc(key, feat)
            info = feat.get("info") or feat.get("video_info") or {}
            codec = info.get("video.codec") if isinstance(info, dict) else None
            depth = is_depth_info(info)  # lerobot 0.6's 12-bit depth video: uint16 mm (depth_read.py)
            if depth and dtype != "video":
                raise SourceFormatError(f"meta/info.json: {key!r} is a depth map stored as images; robo-ray reads "
                                        "lerobot depth stored as video only")
            out[key] = FeatureSpec(key, dtype, "uint16" if depth else "uint8", hwc, feat.get("names"), declared, codec)
        elif dtype in ("string", "language"):  # language: lerobot 0.6's language columns (formats/lerobot/language.py)
            out[key] = FeatureSpec(key, "string", dtype, (), feat.get("names"))
        else:
            try:
                np.dtype(dtype)
            except TypeError as exc:
                raise SourceFormatError(f"meta/info.json: feature {key!r} has unknown dtype {dtype!r}") from exc
            shape = check_shape(key, feat.get("shape", [1]), INFO)
            out[key] = FeatureSpec(key, "tensor", str(np.dtype(dtype)), shape, feat.get("names"), shape)
    return declare_features(out)


def _ident(text: str) -> str:
    return re.sub(r"[^0-9a-zA-Z_]", "_", text)


def declare_features(features: dict[str, FeatureSpec]) -> dict[str, FeatureSpec]:
    """Each feature's role and canonical name (DESIGN §6): `observation.state` -> observation/state; `action` ->
    action; one camera -> observation/image, several -> observation/image_<last part of key>; other
    `observation.*` -> observation/<rest, dots as _>, any other key -> observation/<key, dots as _>;
    `next.reward` -> reward, `next.done` -> terminal; shape [1] columns other than action / observation.state are
    scalars; lerobot's index columns are bookkeeping; lerobot 0.6's language columns (JSON rows per frame) and
    instruction strings are language text (`LANGUAGE_TEXT`), other text features have no tensor form."""
    n_cams = sum(f.kind in ("image", "video") and f.dtype != "uint16" for f in features.values())
    out: dict[str, FeatureSpec] = {}
    for key, feat in features.items():
        if key in BOOKKEEPING:
            out[key] = replace(feat, role="bookkeeping", note=BOOKKEEPING_NOTE)
        elif feat.kind == "video" and feat.dtype == "uint16":  # `<camera>_depth` -> observation/depth_<camera>
            out[key] = replace(feat, role="depth", name=depth_name(_ident(key.split('.')[-1])))
        elif feat.kind in ("image", "video"):
            name = "observation/image" if n_cams == 1 else f"observation/image_{_ident(key.split('.')[-1]) or 'cam'}"
            out[key] = replace(feat, role="camera", name=name,
                               channels_first=bool(feat.declared_shape) and feat.declared_shape != feat.shape)
        elif key == "next.reward" and feat.kind == "tensor":
            out[key] = replace(feat, role="reward", name="reward")
        elif key == "next.done" and feat.kind == "tensor":
            out[key] = replace(feat, role="terminal", name="is_terminal")
        elif key == "discount" and feat.kind == "tensor":  # written by robo-ray for sources with a discount
            out[key] = replace(feat, role="discount", name="discount")
        elif feat.kind == "string" and (feat.dtype == "language" or LANGUAGE_TEXT.match(key)):
            out[key] = replace(feat, role="language", name=_ident(key))  # kept as text (the task: task_index)
        elif feat.kind == "string":
            out[key] = replace(feat, role="other", note=STRING_NOTE)
        else:
            if key in ALIASES:
                role, name = ALIASES[key]
            elif key == "action":
                role, name = "action", "action"
            elif key == "observation.state":
                role, name = "state", "observation/state"
            elif key.startswith("observation."):
                role, name = "observation", f"observation/{_ident(key[len('observation.'):])}"
            else:
                role, name = "other", f"observation/{_ident(key)}"
            out[key] = replace(feat, role=role, name=name,  # type: ignore[arg-type]
                               scalar=feat.shape == (1,) and key not in ("action", "observation.state"))
    return out


# the fields each path template may use (v2.x and v3.0 spellings), to check a template given in source.options
TEMPLATE_FIELDS = {"data_path": ("episode_chunk", "episode_index", "chunk_index", "file_index"),
                   "video_path": ("episode_chunk", "episode_index", "video_key", "chunk_index", "file_index")}


def _checked_template(key: str, template: Any) -> str:
    """A path template from source.options: a string that renders with its fields and stays under the root."""
    if not isinstance(template, str):
        raise UnsafeInput(f"source.options.{key}: a path template string, not {type(template).__name__}")
    try:
        render_path_template(template, {f: (0 if f != "video_key" else "key") for f in TEMPLATE_FIELDS[key]})
    except UnsafeInput as exc:
        raise UnsafeInput(f"source.options.{key}: {exc}") from exc
    return template


class LeRobotReader(BaseReader):
    """Reads a LeRobot dataset from any fsspec URL."""

    format_name = "lerobot"
    sniff_hint: ClassVar[str] = "meta/info.json (LeRobot)"

    @classmethod
    def sniff(cls, fs: Any, root: str) -> bool:
        return bool(fs.exists(join(root, INFO)))

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None, data_path: str | None = None,
                 video_path: str | None = None) -> None:
        """`data_path` / `video_path` (config `source.options`): path templates that replace info.json's, for a
        dataset whose files are not where its info.json says (e.g. `video/{video_key}/...` against
        `videos/{video_key}/...`); the same fields and checks as info.json's templates."""
        super().__init__(url, storage_options)
        self.info = self._read_json(INFO)
        if not isinstance(self.info, dict):
            raise SourceFormatError("meta/info.json is not a JSON object")
        self.path_overrides: dict[str, tuple[Any, str]] = {}  # template key -> (info.json's value, the given one)
        self.short_window: str | None = None  # the first video window read past its to_timestamp (D112)
        self.short_windows_count = 0
        for key, given in (("data_path", data_path), ("video_path", video_path)):
            if given is not None:
                self.path_overrides[key] = (self.info.get(key), _checked_template(key, given))
                self.info = {**self.info, key: given}
        self.version = _parse_version(self.info.get("codebase_version"))
        self.features = parse_features(self.info.get("features"))
        fps = self.info.get("fps")
        if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not (0 < fps <= 10_000):
            raise SourceFormatError(f"meta/info.json: fps {fps!r} is not a positive number")
        self.set_fps(float(fps), "meta/info.json fps")  # held by the dataset: a --fps does not replace it
        check_declared_counts(INFO, self.info, DECLARED_LIMITS)
        self._tasks: list[str] | None = None

    # ---- metadata ----------------------------------------------------------------------------------------------
    @property
    def video_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.kind == "video"]

    def tasks(self) -> list[str]:
        """Task strings indexed by task_index."""
        if self._tasks is None:
            self._tasks = self._read_tasks_v3() if self.version == "v3.0" else self._read_tasks_v2()
        return self._tasks

    def _read_tasks_v2(self) -> list[str]:
        if not self.exists("meta/tasks.jsonl"):
            return []
        by_index: dict[int, str] = {}
        for lineno, obj in self._read_jsonl("meta/tasks.jsonl"):
            idx, task = obj.get("task_index"), obj.get("task")
            if not isinstance(idx, int) or not isinstance(task, str):
                raise SourceFormatError(f"meta/tasks.jsonl:{lineno}: needs integer task_index and string task")
            by_index[idx] = task
        return [by_index.get(i, "") for i in range(max(by_index, default=-1) + 1)]

    def _read_tasks_v3(self) -> list[str]:
        if not self.exists("meta/tasks.parquet"):
            return []
        table = self._read_parquet("meta/tasks.parquet")
        names = table.column_names
        text_col = next((c for c in ("task", "__index_level_0__") if c in names), None)
        if "task_index" not in names or text_col is None:
            raise SourceFormatError(f"meta/tasks.parquet: expected task_index and task columns, found {names}")
        by_index = dict(zip(table["task_index"].to_pylist(), table[text_col].to_pylist()))
        return [str(by_index.get(i, "")) for i in range(max(by_index, default=-1) + 1)]

    def _render(self, template_key: str, **fields: Any) -> str:
        template = self.info.get(template_key)
        if not isinstance(template, str):
            raise SourceFormatError(f"meta/info.json: {template_key} is missing")
        try:
            return render_path_template(template, fields)
        except UnsafeInput as exc:
            where = f"source.options.{template_key}" if template_key in self.path_overrides else \
                f"{INFO}: {template_key}"
            raise UnsafeInput(f"{where}: {exc}") from exc

    def override_findings(self) -> list[Finding]:
        """D110 for each path template given in source.options instead of info.json's."""
        return [Finding("warning", "D110", f"{key} from source.options: {given!r} (meta/info.json says {was!r})",
                        was, given) for key, (was, given) in self.path_overrides.items()]

    # ---- discover ----------------------------------------------------------------------------------------------
    def episode_refs(self) -> Sequence[EpisodeRef]:
        refs = self._refs_v3() if self.version == "v3.0" else self._refs_v2()
        check_count("number of episodes", len(refs), MAX_EPISODES)
        return self._with_splits(refs)

    def _with_splits(self, refs: Sequence[EpisodeRef]) -> Sequence[EpisodeRef]:
        """Each episode's split from info.json `splits` ({name: "from:to"} episode ranges); malformed or
        overlapping entries are ignored (a finding of Discover's checks), episodes outside every range get none."""
        splits = self.info.get("splits")
        if not isinstance(splits, dict) or not splits:
            return refs
        ranges: list[tuple[int, int, str]] = []
        for name, value in splits.items():
            m = re.fullmatch(r"(\d{1,12}):(\d{1,12})", str(value)) if isinstance(name, str) else None
            if m and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,63}", name):
                ranges.append((int(m.group(1)), int(m.group(2)), name))
        ranges.sort()
        if any(a[1] > b[0] for a, b in zip(ranges, ranges[1:])):
            return refs
        def with_split(ref: EpisodeRef) -> EpisodeRef:
            split = next((name for lo, hi, name in ranges if lo <= ref.episode_index < hi), None)
            return replace(ref, split=split) if split else ref

        return RefTable(with_split(ref) for ref in refs)

    def _refs_v2(self) -> list[EpisodeRef]:
        chunks_size = check_count("chunks_size", self.info.get("chunks_size", 1000) or 1000, 1 << 30) or 1000
        refs: list[EpisodeRef] = []
        seen: set[int] = set()
        for lineno, obj in self._read_jsonl("meta/episodes.jsonl"):
            idx, length = obj.get("episode_index"), obj.get("length")
            if not isinstance(idx, int) or isinstance(idx, bool) or idx < 0:
                raise SourceFormatError(f"meta/episodes.jsonl:{lineno}: episode_index {idx!r} is not an integer")
            check_count(f"meta/episodes.jsonl:{lineno}: length", length, MAX_EPISODE_LENGTH)
            if idx in seen:
                raise SourceFormatError(f"meta/episodes.jsonl:{lineno}: duplicate episode_index {idx}")
            seen.add(idx)
            chunk = idx // chunks_size
            data_path = self._render("data_path", episode_chunk=chunk, episode_index=idx, chunk_index=chunk)
            videos = tuple(
                (key, VideoRef(self._render("video_path", episode_chunk=chunk, episode_index=idx, video_key=key,
                                            chunk_index=chunk)))
                for key in self.video_keys)
            tasks = obj.get("tasks") or []
            tasks = tuple(str(t) for t in (tasks if isinstance(tasks, list) else [tasks]))
            refs.append(EpisodeRef(idx, length, data_path, videos, tasks))
        refs.sort(key=lambda r: r.episode_index)
        return refs

    def _refs_v3(self) -> RefTable:
        """meta/episodes/*/*.parquet, read in batches without the per-episode statistics columns (most of the
        file's bytes, not needed to plan): memory stays about the refs themselves, whatever the file's size."""
        files = sorted(p for p in self.fs.glob(self.path("meta/episodes/*/*.parquet")))
        if not files:
            raise SourceFormatError("meta/episodes/: no episode metadata parquet files")
        refs = RefTable()  # built row by row: never a list of 200,000 ref objects
        seen: set[int] = set()
        shared: dict[Any, Any] = {}  # one object per distinct path / task tuple / video window
        for path in files:
            rel = posixpath.relpath(path, self.root)
            for batch in self._parquet_batches(rel, META_BATCH_ROWS, skip_prefix="stats/"):
                for row in batch.to_pylist():
                    refs.append(self._ref_v3_row(rel, row, seen, shared))
        return refs.sorted_by_episode()

    def _ref_v3_row(self, rel: str, row: dict[str, Any], seen: set[int],
                    shared: dict[Any, Any] | None = None) -> EpisodeRef:
        shared = {} if shared is None else shared
        idx = row.get("episode_index")
        if not isinstance(idx, int) or idx < 0:
            raise SourceFormatError(f"{rel}: episode_index {idx!r} is not an integer")
        if idx in seen:
            raise SourceFormatError(f"{rel}: duplicate episode_index {idx}")
        seen.add(idx)
        length = check_count(f"{rel}: episode {idx} length", row.get("length"), MAX_EPISODE_LENGTH)
        chunk, fileno = row.get("data/chunk_index"), row.get("data/file_index")
        if not isinstance(chunk, int) or not isinstance(fileno, int):
            raise SourceFormatError(f"{rel}: episode {idx} has no data/chunk_index or data/file_index")
        key = ("data", chunk, fileno)
        data_path = shared.get(key) or shared.setdefault(
            key, self._render("data_path", chunk_index=chunk, file_index=fileno))
        videos = []
        for vkey in self.video_keys:
            vc, vf = row.get(f"videos/{vkey}/chunk_index"), row.get(f"videos/{vkey}/file_index")
            t0, t1 = row.get(f"videos/{vkey}/from_timestamp"), row.get(f"videos/{vkey}/to_timestamp")
            if not isinstance(vc, int) or not isinstance(vf, int):
                raise SourceFormatError(f"{rel}: episode {idx} has no videos/{vkey}/chunk_index")
            pkey = ("video", vkey, vc, vf)
            path = shared.get(pkey) or shared.setdefault(
                pkey, self._render("video_path", video_key=vkey, chunk_index=vc, file_index=vf))
            videos.append((vkey, VideoRef(path, float(t0 or 0.0), self._window_end(idx, vkey, t0, t1, length))))
        tasks = row.get("tasks") or []
        tasks = tuple(str(t) for t in (tasks if isinstance(tasks, list) else [tasks]))
        tasks = shared.setdefault(("tasks", tasks), tasks)
        return EpisodeRef(idx, length, data_path, tuple(videos), tasks,
                          row.get("dataset_from_index"), row.get("dataset_to_index"))

    def _window_end(self, idx: int, vkey: str, t0: Any, t1: Any, length: int) -> float | None:
        """An episode's video window end: `to_timestamp`, or `from_timestamp + length / fps` when the given end
        falls half a frame or more before it (a tool that wrote the last frame's time there: lerobot reads frames by
        their timestamps and never looks at it). Counted for a D112 finding; frames still missing in the file are
        still an episode error (EP103) when read."""
        if t1 is None:
            return None
        end, full = float(t1), float(t0 or 0.0) + length / self.fps
        if end >= full - 0.5 / self.fps:
            return end
        if self.short_window is None:
            self.short_window = (f"episode {idx} {vkey}: to_timestamp {end:.6g}, {length} frames at {self.fps:g} fps "
                                 f"end at {full:.6g}")
        self.short_windows_count += 1
        return full

    def window_findings(self) -> list[Finding]:
        """D112 when video windows were read past a to_timestamp that cuts the episode's last frames."""
        if not self.short_windows_count:
            return []
        return [Finding("warning", "D112", f"{self.short_windows_count} episode video windows end before "
                        f"from_timestamp + length / fps ({self.short_window}): read to from_timestamp + length / "
                        "fps, as lerobot reads each frame at its timestamp", None, self.short_windows_count)]

    def discover(self) -> Inventory:
        """Build the inventory; consistency problems become findings (the caller decides what is fatal)."""
        from robo_ray.formats.lerobot.checks import check_inventory  # local import: checks depend on this module

        refs = self.episode_refs()
        name = posixpath.basename(self.root.rstrip("/")) or "dataset"
        inv = Inventory(
            dataset_name=name, dataset_root=self.url, source_format="lerobot", source_version=self.version,
            episodes_count=len(refs), total_steps=sum(r.length for r in refs), features=self.features, refs=refs,
            fps=self.fps, robot_type=self.info.get("robot_type"), tasks=self.tasks(),
            declared={k: self.info.get(k) for k in ("total_episodes", "total_frames", "total_tasks", "total_videos",
                                                    "total_chunks", "chunks_size", "splits")},
            metadata_types=dict(BUILTIN_METADATA), language_source="task", step_storage="parquet")
        inv.findings = (self.override_findings() + check_inventory(self, inv) + self.window_findings()
                        + self.fps_findings())
        return inv

    # ---- load one episode --------------------------------------------------------------------------------------
    # v3.0 files hold many episodes, and lerobot writes each episode as its own row group (a file of 20,000 short
    # episodes has 20,000 groups; reading it whole costs ~5 s). A unit reads the row groups of its episodes in one
    # go (`prepare`); a lone episode (the report, a sampled comparison) reads its own; a file whose row groups do
    # not follow the episodes (no statistics, or mixed) is read whole, once (`last_table`).
    _groups: tuple[str, list[tuple[int, int]] | None] | None = None  # (file, (min, max) episode per row group)
    _cover: tuple[str, int, int, pa.Table] | None = None  # (file, first, last episode, their rows)
    _planned: dict[str, tuple[int, int]] = {}  # file -> (first, last) episode of the unit being converted

    def prepare(self, refs: Sequence[EpisodeRef]) -> None:
        planned: dict[str, tuple[int, int]] = {}
        for r in refs:
            lo, hi = planned.get(r.data_path, (r.episode_index, r.episode_index))
            planned[r.data_path] = (min(lo, r.episode_index), max(hi, r.episode_index))
        self._planned, self._cover = planned, None

    def _file_rows(self, ref: EpisodeRef) -> pa.Table:
        """A table holding the episode's rows (and maybe others'): the unit's row groups, the episode's own, or
        the whole file."""
        rel, ep = ref.data_path, ref.episode_index
        if self.version != "v3.0":
            return self.last_table(rel)
        c = self._cover
        if c is not None and c[0] == rel and c[1] <= ep <= c[2]:
            return c[3]
        if self._groups is None or self._groups[0] != rel:
            self._groups = (rel, self.row_group_ranges(rel, "episode_index"))
        groups = self._groups[1]
        if groups is None or len(groups) < 2:
            return self.last_table(rel)
        lo, hi = self._planned.get(rel, (ep, ep))
        if not lo <= ep <= hi:
            lo = hi = ep
        picks = [g for g, (a, b) in enumerate(groups) if a <= hi and b >= lo]
        if not picks or len(picks) == len(groups):
            return self.last_table(rel)
        table = self._read_parquet(rel, row_groups=picks)
        self._cover = (rel, lo, hi, table)
        return table

    def _episode_table(self, ref: EpisodeRef) -> pa.Table:
        """The episode's rows."""
        table = self._file_rows(ref)
        if self.version != "v3.0" and "episode_index" not in table.column_names:
            return table
        if "episode_index" not in table.column_names:
            raise DataCorrupt(f"{ref.data_path}: no episode_index column")
        whole, ranges = self._episode_ranges(ref.data_path, table)
        if ranges is not None:  # the file's rows are grouped by episode (as lerobot writes them): O(1) per episode
            first, count = ranges.get(ref.episode_index, (0, 0))
            return table if count == table.num_rows and self.version != "v3.0" else whole.slice(first, count)
        col = table["episode_index"].to_numpy()
        rows = np.flatnonzero(col == ref.episode_index)
        if self.version != "v3.0" and len(rows) == table.num_rows:
            return table
        if len(rows) and (rows[-1] - rows[0] + 1) == len(rows):
            return table.slice(int(rows[0]), len(rows))
        return table.take(pa.array(rows))

    _ranges: tuple[str, pa.Table, pa.Table, dict[int, tuple[int, int]] | None] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        for cache in ("_ranges", "_cover", "_groups", "_planned"):  # caches of read rows: not shipped to workers
            state.pop(cache, None)
        return state

    def close(self) -> None:
        super().close()
        self._ranges = self._cover = None

    def _episode_ranges(self, rel: str, table: pa.Table) -> tuple[pa.Table, dict[int, tuple[int, int]] | None]:
        """The cached file's table in one chunk per column (slicing a table of many row groups walks every chunk:
        O(file) per episode) and {episode_index: (first row, rows)} when its episode_index column is sorted (each
        episode one run of rows), computed once per file; None otherwise (then each episode is searched)."""
        if self._ranges is None or self._ranges[0] != rel or self._ranges[1] is not table:
            col = table["episode_index"].to_numpy()
            ranges: dict[int, tuple[int, int]] | None = None
            if len(col) and bool(np.all(col[1:] >= col[:-1])):
                eps, first, counts = np.unique(col, return_index=True, return_counts=True)
                ranges = {int(e): (int(f), int(c)) for e, f, c in zip(eps, first, counts)}
            self._ranges = (rel, table, table.combine_chunks() if ranges is not None else table, ranges)
        return self._ranges[2], self._ranges[3]

    def load_episode(self, ref: EpisodeRef) -> Episode:
        table = self._episode_table(ref)
        if table.num_rows != ref.length:
            raise DataCorrupt(f"{ref.data_path}: episode {ref.episode_index} has {table.num_rows} rows, "
                              f"the episode index says {ref.length}")
        ep = Episode(ref=ref, length=table.num_rows, videos=ref.video_map)
        for key, spec in self.features.items():
            if spec.kind == "video":
                continue
            if key not in table.column_names:
                if key in BOOKKEEPING:
                    continue
                raise DataCorrupt(f"{ref.data_path}: column {key!r} declared in info.json is missing")
            column = table[key]
            if spec.kind == "image":
                ep.images[key] = _image_bytes(column, ref, key)
            elif spec.kind == "string":
                ep.columns[key] = np.asarray(column_json(column, key) if spec.dtype == "language" else
                                             column.to_pylist(), dtype=object)
            else:
                ep.columns[key] = column_to_numpy(column, spec, ref)
        if "timestamp" in table.column_names:
            ep.timestamps = table["timestamp"].to_numpy().astype(np.float64).reshape(-1)
        else:
            ep.timestamps = np.arange(ep.length, dtype=np.float64) / self.fps
        for key in (k for k, f in self.features.items() if f.kind == "video" and f.dtype == "uint16"):
            ep.images[key] = read_depth(self, key, ep)  # depth: decoded, dequantized to mm (depth_read.py)
        ep.step_tasks = self._step_tasks(table, ref)
        ep.metadata = {"episode_id": ref.episode_index, "file_path": ref.data_path}
        return ep

    def _step_tasks(self, table: pa.Table, ref: EpisodeRef) -> list[str]:
        tasks = self.tasks()
        default = ref.tasks[0] if ref.tasks else ""
        if "task_index" not in table.column_names or not tasks:
            return [default] * table.num_rows
        out = []
        for ti in table["task_index"].to_numpy().reshape(-1):
            ti = int(ti)
            out.append(tasks[ti] if 0 <= ti < len(tasks) else default)
        return out


def column_to_numpy(column: pa.ChunkedArray, spec: FeatureSpec, ref: EpisodeRef) -> np.ndarray:
    """A parquet column -> (T, *shape) numpy array of the declared dtype; list lengths must match the shape."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(arr)
    per_step = int(np.prod(spec.shape)) if spec.shape else 1
    while pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type):
        if arr.null_count:
            raise DataCorrupt(f"{ref.data_path}: column {spec.key!r} has null rows")
        arr = list_values(arr)
    if arr.null_count:
        raise DataCorrupt(f"{ref.data_path}: column {spec.key!r} has null values")
    values = arr.to_numpy(zero_copy_only=False)
    if values.size != n * per_step:
        raise DataCorrupt(f"{ref.data_path}: column {spec.key!r} holds {values.size} values for {n} rows, "
                          f"declared shape {list(spec.shape)} needs {n * per_step}")
    try:
        values = values.astype(spec.dtype, copy=False)
    except (TypeError, ValueError) as exc:
        raise DataCorrupt(f"{ref.data_path}: column {spec.key!r} is not {spec.dtype}") from exc
    shape = spec.shape if not (len(spec.shape) == 1 and spec.shape[0] == 1) else ()
    return values.reshape((n, *shape))


def _image_bytes(column: pa.ChunkedArray, ref: EpisodeRef, key: str) -> list[bytes]:
    """Image features are struct<bytes, path> with PNG/JPEG bytes embedded in the parquet."""
    out: list[bytes] = []
    for i, item in enumerate(column.to_pylist()):
        data = item.get("bytes") if isinstance(item, dict) else item
        if not isinstance(data, (bytes, bytearray)) or not data:
            raise DataCorrupt(f"{ref.data_path}: image {key!r} row {i} has no embedded bytes")
        out.append(bytes(data))
    return out

