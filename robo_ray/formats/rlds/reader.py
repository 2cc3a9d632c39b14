"""RLDS source reader: TFDS-written RLDS datasets (Open X-Embodiment style; FORMATS Part 1 and Part 6), without
TensorFlow or tfds.

Source forms (`RldsReader(url, name=None, version=None, splits=None, fps=None)`):
* the version folder `<data_dir>/<name>/<x.y.z>` (dataset_info.json, features.json, shards);
* the dataset folder `<data_dir>/<name>`: the newest x.y.z folder, or `version=`;
* a tfds data_dir with `name=` (`"bridge"` or `"bridge:0.1.0"`), as `tfds.builder(name, data_dir=...)` finds it.
The same keywords may ride on the URL as a query: `<data_dir>?name=bridge:0.1.0&splits=train,val`.

Discover reads dataset_info.json and features.json, then scans each shard's TFRecord framing with seeks (12 bytes
per record: length + its CRC) and finds each episode's length by walking the Example's protobuf headers to one
small per-step feature (`steps/is_first`), skipping everything else (images) unread; a record the walk cannot
read is parsed whole. Each episode is an `EpisodeRef` located by (shard, byte range): `data_path` is the shard,
`locator` = (offset, length) of the framed record, `split` its split, `source_id` = `<split>[<index in split>]`
(tfds' own `split[i:i+1]`). `load_episode` reads exactly that range, checks both CRCs, and decodes it; anything
wrong is an EpisodeError naming the shard and the episode (quarantined, the run goes on).

Features are keyed by their path under `steps` (`observation/image`, `action/world_vector`, kuka's
`observation/clip_function_input/base_pose_tool_reached`); episode-level features by their full path
(`episode_metadata/file_path`, bridge's `episode_id`) and land, typed, in `Episode.metadata` under their path
below `episode_metadata` (`file_path`, `episode_id`); `episode_id` (the episode index) and `file_path` (the shard)
are added when the source has none of its own. Canonical names are the same paths with identifier segments.
Images stay encoded exactly as stored.

dataset_info.json is read by `dataset_info.py`, the header walk is `record_walk.py`; the leaves' FeatureSpecs,
roles and names `leaf_specs.py`; the decoding of their values `leaf_values.py`.
"""
from __future__ import annotations

import posixpath
import re
import struct
from dataclasses import replace
from typing import Any, ClassVar, Sequence
from urllib.parse import parse_qs

import numpy as np

from robo_ray.episode import Episode, EpisodeRef
from robo_ray.errors import (ConfigError, DataCorrupt, DataMissing, EpisodeTooLarge, RoboRayError, SourceFormatError,
                             SourceNotFound)
from robo_ray.formats.rlds.dataset_info import INFO, file_format, split_shards
from robo_ray.formats.rlds.example import decode_example
from robo_ray.formats.rlds.features import Leaf, Unsupported, parse_features
from robo_ray.formats.rlds.leaf_specs import build_specs, meta_type
from robo_ray.formats.rlds.leaf_values import (decode_numbers, decode_strings, image_frames, image_info,
                                               metadata_value, n_values)
from robo_ray.formats.rlds.record_walk import (Malformed, Window, count_values, entries, first_item, record_example,
                                               record_length, verified_payload)
from robo_ray.readers.base import BUILTIN_METADATA, BaseReader, Finding, Inventory, MetaType, ScanTask, held_fps, spread
from robo_ray.readers.naming import TASK_NAME
from robo_ray.safety import MAX_EPISODE_LENGTH, MAX_EPISODES, check_count
from robo_ray.storage import is_local, join, url_of

FEATURES, METADATA = "features.json", "metadata.json"
MAX_RECORD_BYTES = 4 << 30  # one episode is one record, held in memory by load_episode (as by tfds)
SCAN_BLOCK_LOCAL = 512  # discover reads the protobuf headers in blocks of this size...
SCAN_BLOCK_REMOTE = 64 << 10  # ...or this on object stores (fewer requests)
SCAN_THREADS = 16  # shards scanned at once on object stores
FPS_KEYS = ("fps", "control_frequency", "control_frequency_hz", "frequency_hz")
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
_NAME = re.compile(r"^[A-Za-z]\w*$")
_LENGTH_PREFERENCE = ("is_first", "is_last", "is_terminal", "reward", "discount")
_QUERY_KEYS = {"name", "version", "splits", "split"}


def parse_source_url(url: str) -> tuple[str, dict[str, str]]:
    """`<url>?name=..&version=..&splits=a,b` -> (url, {name, version, splits}); a query naming anything else is
    left on the URL (it is then part of the path, or the store's own)."""
    base, sep, query = url.partition("?")
    if not sep:
        return url, {}
    params = parse_qs(query, keep_blank_values=True)
    if not params or set(params) - _QUERY_KEYS or any(len(v) != 1 for v in params.values()):
        return url, {}
    out = {k: v[0] for k, v in params.items()}
    if "split" in out:
        out["splits"] = out.pop("split")
    return base, out


def _versions_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


class RldsReader(BaseReader):
    """Reads a TFDS-written RLDS dataset (TFRecord shards) from any fsspec URL, without TensorFlow."""

    format_name: ClassVar[str] = "rlds"
    sniff_hint: ClassVar[str] = "dataset_info.json + features.json (RLDS / tfds)"

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None, *, name: str | None = None,
                 version: str | None = None, splits: list[str] | str | None = None,
                 fps: float | None = None) -> None:
        """`name` (`"bridge"` or `"bridge:0.1.0"`), `splits` (a list or `"a,b"`) and `fps` are the CLI's
        `--source-name`, `--split` and `--fps` (config `source.options`); they may also ride on the URL's query."""
        url, query = parse_source_url(url)
        name = name or query.get("name")
        version = version or query.get("version")
        splits = splits if splits is not None else query.get("splits")
        if name and ":" in name:
            name, _, tail = name.partition(":")
            version = version or tail
        self._wanted = (name, version)
        super().__init__(url, storage_options)
        del self._wanted
        self._block = SCAN_BLOCK_LOCAL if is_local(self.fs) else SCAN_BLOCK_REMOTE
        self.scan_threads = 1 if is_local(self.fs) else SCAN_THREADS  # object stores: shards scanned at once
        self.version = posixpath.basename(self.root)
        self.info = self._read_json(INFO)
        if not isinstance(self.info, dict):
            raise SourceFormatError(f"{INFO}: expected a JSON object")
        self.dataset_name = self.info.get("name")
        if not isinstance(self.dataset_name, str) or not _NAME.match(self.dataset_name):
            raise SourceFormatError(f"{INFO}: `name` {self.dataset_name!r:.60} is not a tfds dataset name")
        self.file_format = file_format(self.info)
        self.split_shards = split_shards(self.info, self.dataset_name, self.file_format)
        self.splits = self._select(splits)
        parsed = parse_features(self._read_json(FEATURES))
        self._unsupported = [u for u in parsed if isinstance(u, Unsupported)]
        leaves = [leaf for leaf in parsed if isinstance(leaf, Leaf)]
        self._probe_findings: list[Finding] = []
        leaves = self._resolve_images(leaves)
        self.features, self._leaves, self._meta_names = build_specs(leaves)
        self._length_leaf = self._pick_length_leaf()
        self._task_key = next((k for k in ("language_instruction", "observation/natural_language_instruction")
                               if k in self.features and self.features[k].role == "language"),
                              next((k for k, f in self.features.items() if f.role == "language"), None))
        self._fps_from_metadata()
        if fps is not None:  # the one rule (BaseReader): the rate metadata.json records wins over --fps
            self.apply_given_fps(fps)
        self.metadata_types: dict[str, MetaType] = dict(BUILTIN_METADATA)  # Episode.metadata: keys, how stored
        for key, name in self._meta_names.items():
            if (t := meta_type(self._leaves[key])) is not None:
                self.metadata_types[name] = t
        for key, spec in self.features.items():  # where the values that are not step data go (mapping.md)
            note = f"episode metadata `{self._meta_names[key]}`" if spec.role == "metadata" else \
                "the step's language instruction (Episode.step_tasks)" if key == self._task_key else None
            if note:
                self.features[key] = replace(spec, note="; ".join(filter(None, (note, spec.note))),
                                             name=TASK_NAME if key == self._task_key else spec.name)

    # ---- where the dataset is ---------------------------------------------------------------------------------
    @classmethod
    def sniff(cls, fs: Any, root: str) -> bool:
        """A tfds version folder (dataset_info.json + features.json), or a dataset folder holding one."""
        def is_version(p: str) -> bool:
            return fs.exists(join(p, INFO)) and fs.exists(join(p, FEATURES))
        try:
            if is_version(root):
                return True
            return any(_VERSION.match(posixpath.basename(p.rstrip("/"))) and is_version(p)
                       for p in fs.ls(root, detail=False))
        except (OSError, ValueError):
            return False

    def dataset_root(self, path: str) -> str:
        """The version folder: `path` itself, its newest (or `version`) x.y.z folder, or that of dataset `name` in
        the tfds data_dir `path`; the reader's URL then names that folder."""
        root = self._version_folder(path, *self._wanted)
        if root != path:
            self.url = url_of(self.fs, root)
        return root

    def _version_folder(self, root: str, name: str | None, version: str | None) -> str:
        self.root = root  # exists() / _listdir() below look inside it
        if version is not None and not _VERSION.match(version):
            raise ConfigError(f"RLDS version {version!r} is not x.y.z")
        if name:
            if not _NAME.match(name):
                raise ConfigError(f"RLDS dataset name {name!r} is not a tfds name ([A-Za-z]\\w*)")
            self.root = root = join(root, name)
            if not self._exists(root):
                raise SourceNotFound(f"no dataset {name!r} in {url_of(self.fs, posixpath.dirname(root))}")
        if self.exists(INFO):
            base = posixpath.basename(root)
            if version and _VERSION.match(base) and base != version:
                raise ConfigError(f"{url_of(self.fs, root)} is version {base}, not {version}")
            return root
        found = sorted((v for v in self._listdir("") if _VERSION.match(v) and self.exists(join(v, INFO))),
                       key=_versions_key)
        if version:
            if version not in found:
                raise SourceNotFound(f"{url_of(self.fs, root)}: no version {version} (found: "
                                     f"{', '.join(found) or 'none'})")
            return join(root, version)
        if not found:
            raise SourceFormatError(f"{url_of(self.fs, root)}: no {INFO} here nor in an x.y.z version folder "
                                    "(for a tfds data_dir, pass the dataset name: name=... or ?name=...)")
        return join(root, found[-1])

    def _select(self, splits: list[str] | str | None) -> list[str]:
        if splits is None:
            return list(self.split_shards)
        wanted = [s.strip() for s in splits.split(",")] if isinstance(splits, str) else list(splits)
        unknown = [s for s in wanted if s not in self.split_shards]
        if unknown or not wanted:
            raise ConfigError(f"RLDS split(s) {unknown or wanted} not in {self.dataset_name} (it has "
                              f"{', '.join(self.split_shards)})")
        return [s for s in self.split_shards if s in wanted]

    def _fps_from_metadata(self) -> None:
        """The rate metadata.json records (fps, control_frequency, ...), when it holds a plausible one."""
        if self.exists(METADATA):
            meta = self._read_json(METADATA)
            for key in FPS_KEYS:
                v = held_fps(meta.get(key)) if isinstance(meta, dict) else None
                if v:
                    self.set_fps(v, f"{METADATA} {key}")
                    return

    # ---- images whose shape or encoding features.json leaves open: read from the first stored image ----------
    def _resolve_images(self, leaves: list[Leaf]) -> list[Leaf]:
        open_ = [leaf for leaf in leaves if leaf.cls == "Image" and (-1 in leaf.shape or not leaf.encoding)]
        if not open_:
            return leaves
        heads = self._first_images({leaf.flat_key for leaf in open_})
        out = []
        for leaf in leaves:
            if leaf not in open_:
                out.append(leaf)
                continue
            fmt, hwc = image_info(heads.get(leaf.flat_key, b""))
            if -1 in leaf.shape:
                if hwc is None:
                    self._unsupported.append(Unsupported(leaf.path, f"image shape {list(leaf.shape)} is open and "
                                                                    "no stored image tells it"))
                    continue
                shape = tuple(d if d != -1 else s for d, s in zip(leaf.shape, hwc))
                self._probe_findings.append(Finding("warning", "R106", f"{FEATURES}: image {leaf.flat_key!r} "
                                                    f"declares shape {list(leaf.shape)}: {list(shape)} read from "
                                                    "the first stored image", list(leaf.shape), list(shape)))
                leaf = Leaf(leaf.path, leaf.cls, leaf.dtype, shape, leaf.encoding, leaf.doc)
            if not leaf.encoding and fmt in ("jpeg", "png"):
                leaf = Leaf(leaf.path, leaf.cls, leaf.dtype, leaf.shape, fmt, leaf.doc)
            out.append(leaf)
        return out

    def _first_images(self, keys: set[str]) -> dict[str, bytes]:
        """The first 64 KiB of the first image of each key, from the first non-empty shard."""
        for split in self.split_shards:
            for rel, declared in self.split_shards[split]:
                if not declared or not self.exists(rel):
                    continue
                size = self._file_size(rel)
                if size < 16:
                    continue
                with self.open_binary(rel, sequential=False) as f:
                    win = Window(f, size, self._block)
                    (n,) = struct.unpack("<Q", win.read(0, 8))
                    heads: dict[str, bytes] = {}
                    try:
                        for key, value in entries(win, 12, min(12 + n, size)):
                            k = key.decode("utf-8", "replace")
                            if k in keys and value is not None:
                                heads[k] = first_item(win, *value, 64 << 10) or b""
                    except Malformed:
                        pass
                    return heads
        return {}

    def _pick_length_leaf(self) -> Leaf | None:
        steps = [leaf for leaf in self._leaves.values() if leaf.per_step]
        for name in _LENGTH_PREFERENCE:
            for leaf in steps:
                if leaf.path == ("steps", name) and leaf.dtype != "string" and leaf.encoding == "none" \
                        and leaf.cls != "Image":
                    return leaf
        plain = [leaf for leaf in steps if leaf.cls != "Image" and leaf.encoding == "none"]
        if plain:
            return min(plain, key=lambda leaf: (leaf.dtype == "string", int(np.prod(leaf.shape or (1,)))))
        return steps[0] if steps else None

    # ---- discover ---------------------------------------------------------------------------------------------
    def discover(self) -> Inventory:
        return self.merge_scans(self.scan_all(self.scan_tasks()))

    def scan_tasks(self) -> list[ScanTask]:
        """One task per shard of the selected splits, in dataset_info.json order."""
        jobs = [(split, rel, declared) for split in self.splits for rel, declared in self.split_shards[split]]
        return [ScanTask(i, (rel,), (split, declared)) for i, (split, rel, declared) in enumerate(jobs)]

    def scan(self, task: ScanTask) -> tuple[list[tuple[int, int | None, int | None]], list[Finding]]:
        """The shard's records and findings (`_scan_shard`)."""
        return self._scan_shard(task.files[0], task.params[1])

    def merge_scans(self, rows: Sequence[tuple[list[tuple[int, int | None, int | None]], list[Finding]]]
                    ) -> Inventory:
        """The inventory from each shard's (records, findings), in `scan_tasks()` order (the selected splits' shards,
        as `split_shards` lists them)."""
        wanted = sum(len(self.split_shards[split]) for split in self.splits)
        if len(rows) != wanted:
            raise ValueError(f"merge_scans: {len(rows)} scanned shards for {wanted} tasks")
        scans = iter(rows)
        refs: list[EpisodeRef] = []
        findings = list(self._probe_findings)
        next_index = 0
        for split, shards in self.split_shards.items():
            if split not in self.splits:  # indices stay those of a run over every split (declared counts)
                next_index += sum(n for _, n in shards)
                continue
            in_split = 0
            for rel, _ in shards:
                records, problems = next(scans)
                findings += problems
                for offset, framed, steps in records:
                    refs.append(EpisodeRef(next_index, steps or 0, rel, source_id=f"{split}[{in_split}]",
                                           locator=None if framed is None else (offset, framed), split=split))
                    next_index += 1
                    in_split += 1
        check_count("number of episodes", len(refs), MAX_EPISODES)
        for u in self._unsupported:
            findings.append(Finding("warning", "R105", f"{FEATURES}: feature {u.flat_key!r} left out: {u.reason}"))
        if str(self.info.get("version")) != self.version:
            findings.append(Finding("warning", "R107", f"{INFO} says version {self.info.get('version')!r:.40}, "
                                    f"its folder is {self.version} (the folder's is used)"))
        if not self.fps:
            findings.append(Finding("warning", "R101", "the dataset records no control rate (fps): pass --fps "
                                    "(needed by targets with timestamps, e.g. LeRobot)"))
        findings += [f for f in self.fps_findings() if f.code != "F101"]  # F102: a --fps the metadata overrode
        declared = {"name": self.dataset_name, "version": self.info.get("version"), "file_format": self.file_format,
                    "splits": {s: sum(n for _, n in sh) for s, sh in self.split_shards.items()},
                    "selected_splits": self.splits, "fps_source": self.fps_source,
                    "description": str(self.info.get("description") or "")[:2000]}
        return self._inventory(refs, len(refs), declared=declared, findings=findings)

    def _inventory(self, refs: list[EpisodeRef], count: int, **more: Any) -> Inventory:
        return Inventory(dataset_name=self.dataset_name, dataset_root=self.url, source_format="rlds",
                         source_version=self.version, episodes_count=count, total_steps=sum(r.length for r in refs),
                         features=self.features, refs=refs, fps=self.fps, metadata_types=dict(self.metadata_types),
                         language_source="task" if self._task_key else "", step_storage="tfrecord", **more)

    def discover_spread(self, k: int) -> tuple[Inventory, list[int]]:
        """`k` spread episodes, scanning only the shards that hold them (their positions follow the declared shard
        lengths); the full `discover` when a scanned shard does not hold what dataset_info.json declares."""
        located: list[tuple[str, int, str, int, int]] = []  # (split, first index, rel, declared, index in split)
        next_index = 0
        for split, shards in self.split_shards.items():
            in_split = 0
            for rel, declared in shards:
                if split in self.splits:
                    located.append((split, next_index, rel, declared, in_split))
                next_index += declared
                in_split += declared
        total = sum(d for _, _, _, d, _ in located)
        positions = spread(total, k)
        refs: list[EpisodeRef] = []
        scans: dict[str, list[tuple[int, int | None, int | None]]] = {}
        start = 0
        for split, first, rel, declared, in_split in located:
            for pos in (p for p in positions if start <= p < start + declared):
                if rel not in scans:
                    records, _ = self._scan_shard(rel, declared)
                    if len(records) != declared:
                        return super().discover_spread(k)
                    scans[rel] = records
                offset, framed, steps = scans[rel][pos - start]
                refs.append(EpisodeRef(first + pos - start, steps or 0, rel,
                                       source_id=f"{split}[{in_split + pos - start}]",
                                       locator=None if framed is None else (offset, framed), split=split))
            start += declared
        return self._inventory(refs, total), positions

    def _scan_shard(self, rel: str, declared: int
                    ) -> tuple[list[tuple[int, int | None, int | None]], list[Finding]]:
        """(offset, framed length, steps) of each record, reading only the framing and a few headers, and what was
        wrong. A record that cannot be read is still listed (its episode is quarantined at load); a missing shard
        lists its declared episodes with no location."""
        if not self.exists(rel):
            return [(0, None, None)] * declared, [Finding(
                "error", "R103", f"missing shard {rel} ({declared} episodes declared in {INFO}; they will be "
                "quarantined)", rel, None)]
        records: list[tuple[int, int | None, int | None]] = []
        problems: list[Finding] = []

        def bad(pos: int, framed: int, problem: str) -> None:
            records.append((pos, framed, None))
            problems.append(Finding("error", "R104", f"{rel}: record {len(records) - 1} at byte {pos}: {problem}; "
                                    "the episode will be quarantined"))
        size = self._file_size(rel)
        with self.open_binary(rel, sequential=False) as f:
            win = Window(f, size, self._block)
            pos = 0
            while pos < size:
                n, framing = record_length(win, pos, size)
                if framing:
                    hidden = max(0, declared - len(records) - 1)
                    bad(pos, size - pos, framing + (f"; the {hidden} episode(s) declared after it too" * bool(hidden)))
                    # the episodes declared after it cannot be located: listed (length 0 = unreadable) so they
                    # are quarantined by name and the following shards keep their indices
                    records += [(pos, 0, None)] * max(0, declared - len(records))
                    break
                steps, problem = self._record_steps(win, pos, n)
                if problem:
                    bad(pos, n + 16, problem)
                else:
                    records.append((pos, n + 16, steps))
                pos += n + 16
        if len(records) != declared:
            problems.append(Finding("error", "R102", f"{rel} holds {len(records)} records, {INFO} declares "
                                    f"{declared} (tfds refuses to read this split)", declared, len(records)))
        return records, problems

    def _record_steps(self, win: Window, pos: int, n: int) -> tuple[int | None, str | None]:
        """The episode length from one small per-step feature, found by walking headers; else a full parse."""
        leaf = self._length_leaf
        if leaf is None:
            return 0, None
        want = leaf.flat_key.encode()
        try:
            for key, value in entries(win, pos + 12, pos + 12 + n):
                if key == want:
                    count = count_values(win, *value) if value else 0
                    per = 1 if leaf.cls == "Image" or leaf.encoding != "none" else int(np.prod(leaf.shape or (1,)))
                    if count % per:
                        break
                    return self._check_length(count // per), None
        except Malformed:
            pass
        except RoboRayError as exc:  # an absurd length: this episode is quarantined, not the whole dataset
            return None, str(exc)
        if n > MAX_RECORD_BYTES:
            return None, f"a record of {n} bytes is over the {MAX_RECORD_BYTES}-byte limit"
        try:
            flat = decode_example(verified_payload(win.read(pos, n + 16)))
            return self._steps_of(flat, "record"), None
        except (ValueError, IndexError, RoboRayError) as exc:
            return None, str(exc).splitlines()[0] if str(exc) else type(exc).__name__

    @staticmethod
    def _check_length(steps: int) -> int:
        return check_count("episode length", steps, MAX_EPISODE_LENGTH)

    def _steps_of(self, flat: dict[str, Any], where: str) -> int:
        """T from a decoded Example: the length feature, else any per-step feature."""
        leaf = self._length_leaf
        cands = [leaf] if leaf is not None and leaf.flat_key in flat else \
            [lf for lf in self._leaves.values() if lf.per_step and lf.flat_key in flat]
        if not cands:
            return 0
        leaf = cands[0]
        per = 1 if leaf.cls == "Image" or leaf.encoding != "none" else int(np.prod(leaf.shape or (1,)))
        count = n_values(flat[leaf.flat_key])
        if count % per:
            raise DataCorrupt(f"{where}: feature {leaf.flat_key!r} holds {count} values, not a multiple of its "
                              f"shape {list(leaf.shape)}")
        return self._check_length(count // per)

    # ---- load one episode --------------------------------------------------------------------------------------
    def _where(self, ref: EpisodeRef) -> str:
        at = f", record at byte {ref.locator[0]}" if ref.locator else ""
        return f"{ref.data_path}: episode {ref.episode_index} ({ref.source_id}{at})"

    def load_episode(self, ref: EpisodeRef) -> Episode:
        where = self._where(ref)
        if ref.locator is None:
            raise DataMissing(f"{where}: the shard is missing")
        offset, length = ref.locator
        if length == 0:
            raise DataCorrupt(f"{where}: unreadable: a corrupt record header at byte {offset} hides the rest of "
                              "the shard")
        if length - 16 > MAX_RECORD_BYTES:
            raise EpisodeTooLarge(f"{where}: a record of {length} bytes is over the {MAX_RECORD_BYTES}-byte limit")
        try:
            flat = record_example(lambda at, n: self._read_range(ref.data_path, at, n),
                                  lambda: self.open_binary(ref.data_path), offset, length)
        except FileNotFoundError as exc:
            raise DataMissing(f"{where}: the shard is missing") from exc
        except (ValueError, IndexError) as exc:  # framing/CRC, or a malformed Example
            raise DataCorrupt(f"{where}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
        steps = self._steps_of(flat, where)
        if steps != ref.length:
            raise DataCorrupt(f"{where}: holds {steps} steps, discover found {ref.length}")
        ep = Episode(ref=ref, length=steps)
        for key, spec in self.features.items():
            leaf = self._leaves[key]
            rows = steps if leaf.per_step else 1
            value = flat.get(leaf.flat_key)
            if value is None:
                if rows:
                    raise DataCorrupt(f"{where}: feature {leaf.flat_key!r} is missing")
                value = []
            if spec.kind == "image":
                ep.images[key] = image_frames(leaf, value, rows, where)
                continue
            arr = decode_strings(leaf, value, rows, where) if spec.kind == "string" else \
                decode_numbers(leaf, value, rows, where)
            if leaf.per_step:
                ep.columns[key] = arr
            else:
                ep.metadata[self._meta_names[key]] = metadata_value(arr, leaf)
        tasks = ep.columns.get(self._task_key) if self._task_key else None
        ep.step_tasks = [t if isinstance(t, str) else t.decode("utf-8", "replace") for t in tasks] \
            if tasks is not None else [""] * steps
        ep.timestamps = np.arange(steps, dtype=np.float64) / self.fps if self.fps else None
        ep.metadata.setdefault("episode_id", ref.episode_index)
        ep.metadata.setdefault("file_path", ref.data_path)
        return ep
