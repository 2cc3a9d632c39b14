"""The reader plug-in contract: one base class for every source format, and the inventory it produces.

`BaseReader` does what every reader needs and must do the same way: the filesystem and root of the source URL,
dataset-relative paths, size-limited metadata reads (JSON, JSON lines, parquet), and turning a storage failure
(network, credentials, a bucket that is gone) into one clear error naming the URL. A format subclasses it and
declares `format_name`, how its datasets are recognised (`sniff`), and what each feature is (`FeatureSpec.role`,
`name`, `scalar`, `note`): the Spec stage maps features by those declarations, never by a format's name.
"""
from __future__ import annotations

import json
import posixpath
import re
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, Iterable, Iterator, Literal, Protocol, Sequence

from robo_ray.episode import Episode, EpisodeRef, FeatureSpec, RefTable
from robo_ray.errors import (ConfigError, DataCorrupt, DataMissing, RoboRayError, SourceFormatError, SourceNotFound,
                             UnsafeInput)
from robo_ray.safety import MAX_JSON_BYTES
from robo_ray.storage import is_transport_error, join, ls_or_empty, open_input, storage_error, url_of, url_to_fs

# Episode metadata: the type of each key a reader puts in `Episode.metadata` (targets store int / float / text /
# bool). `episode_id` (the episode index) and `file_path` (its data file, relative to the source root) every reader
# gives.
MetaType = Literal["int", "float", "text", "bool"]
BUILTIN_METADATA: dict[str, MetaType] = {"episode_id": "int", "file_path": "text"}

# Roles whose features are per-step data placed under their canonical name; the others are RLDS-style step fields
# (reward, discount, is_first, is_last, terminal), or not step data (language, metadata, bookkeeping).
DATA_ROLES = frozenset({"state", "observation", "action", "camera", "depth", "other"})
MAX_FPS = 10_000.0


def check_fps(value: Any, where: str = "--fps") -> float:
    """A frame rate given by the user: a positive number of at most MAX_FPS (ConfigError otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_FPS:
        raise ConfigError(f"{where}: fps {value!r} is not a positive number (at most {MAX_FPS:g})")
    return float(value)


def held_fps(value: Any) -> float | None:
    """A frame rate found in a source's metadata, or None when it is not a plausible one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_FPS:
        return None
    return float(value)


def identifier(part: str) -> str:
    """One part of a canonical name as an identifier: other characters -> `_`, outer `_` stripped, a leading
    digit prefixed (`_index_0` -> `index_0`, `0` -> `f0`, `a-b` -> `a_b`)."""
    s = re.sub(r"[^0-9A-Za-z_]", "_", part).strip("_") or "f"
    return s if s[0].isalpha() else f"f{s}"


def canonical_path(prefix: str, rest: str, sep: str = "/") -> str:
    """`prefix` and the `sep`-separated parts of `rest` as a "/"-separated canonical name of identifiers."""
    parts = [identifier(p) for p in rest.split(sep) if p]
    return "/".join([prefix, *parts]) if prefix else "/".join(parts)


def is_step_data(feat: FeatureSpec) -> bool:
    """A feature that becomes a step feature under its canonical name (text has no tensor form: it never does)."""
    return feat.kind != "string" and (feat.role is None or feat.role in DATA_ROLES)


def unique_names(features: dict[str, FeatureSpec]) -> dict[str, FeatureSpec]:
    """`features` with later duplicate canonical names among the step data suffixed `_2`, `_3`, ... in feature
    order (sanitised names collide: `a.b` and `a_b` both give `a_b`)."""
    seen: dict[str, int] = {}
    out: dict[str, FeatureSpec] = {}
    for key, feat in features.items():
        if feat.name and is_step_data(feat):
            n = seen.get(feat.name, 0)
            seen[feat.name] = n + 1
            if n:
                feat = replace(feat, name=f"{feat.name}_{n + 1}")
        out[key] = feat
    return out


@dataclass
class Finding:
    """A Discover check result: `level` is "error" or "warning"; `expected`/`actual` name the disagreeing numbers."""

    level: str
    code: str
    message: str
    expected: Any = None
    actual: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "code": self.code, "message": self.message,
                "expected": self.expected, "actual": self.actual}


@dataclass
class Inventory:
    """What a source holds, before any conversion."""

    dataset_name: str
    dataset_root: str
    source_format: str
    source_version: str
    episodes_count: int
    total_steps: int
    features: dict[str, FeatureSpec]  # each with the reader's role / canonical name (FeatureSpec)
    refs: RefTable  # a list of refs is converted
    fps: float
    robot_type: str | None = None
    tasks: list[str] = field(default_factory=list)
    declared: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    # the keys of every episode's `Episode.metadata`, in order, with their types
    metadata_types: dict[str, MetaType] = field(default_factory=lambda: dict(BUILTIN_METADATA))
    # where each step's language comes from: "task" = `Episode.step_tasks` (the source's task text), "" = none
    language_source: str = "task"
    # what holds the features other than videos, as inventory.json's `source` says (e.g. the file format)
    step_storage: str = "data"

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "refs" and not isinstance(value, RefTable):  # held as columns (~40 bytes per episode)
            value = RefTable(value)
        object.__setattr__(self, name, value)


@dataclass(frozen=True)
class ScanTask:
    """One piece of a reader's Discover scan, small and picklable: `index` is its place in file order, `files` the
    dataset-relative file(s) it reads, `params` what else the reader needs to scan them (e.g. a declared count)."""

    index: int
    files: tuple[str, ...]
    params: tuple[Any, ...] = ()


def spread(n: int, k: int) -> list[int]:
    """Up to k positions spread over range(n): first, middle(s), last."""
    if n <= k:
        return list(range(n))
    if k == 1:
        return [0]
    return sorted({round(j * (n - 1) / (k - 1)) for j in range(k)})


class Reader(Protocol):
    """What the stages use of a reader (`BaseReader` implements it)."""

    format_name: str
    features: dict[str, FeatureSpec]

    def discover(self) -> Inventory: ...

    def discover_spread(self, k: int) -> tuple[Inventory, list[int]]: ...

    def scan_tasks(self) -> list[ScanTask]: ...

    def scan_all(self, tasks: Sequence[ScanTask]) -> list[Any]: ...

    def merge_scans(self, rows: Sequence[Any]) -> Inventory: ...

    def prepare(self, refs: Sequence[EpisodeRef]) -> None: ...

    def load_episode(self, ref: EpisodeRef) -> Episode: ...

    def open_binary(self, rel: str, sequential: bool = True): ...

    def exists(self, rel: str) -> bool: ...

    def close(self) -> None: ...


class DatasetFiles:
    """Dataset-relative file access with guarded reads (needs `self.fs` and `self.root`).

    Every call that touches storage maps a transport failure that survived the client's retries (connection,
    timeout, 5xx, access denied) to one `StorageError` naming the URL (robo_ray.storage.storage_error): a failing
    store is never mistaken for a missing or corrupt file."""

    fs: Any
    root: str

    def path(self, rel: str) -> str:
        return join(self.root, rel)

    def url_for(self, rel: str) -> str:
        """The full URL of a dataset file (for messages)."""
        return url_of(self.fs, self.path(rel))

    def _storage_error(self, exc: BaseException, path: str, action: str) -> BaseException:
        """`exc` as one StorageError naming the URL when it is a storage failure; else `exc` itself."""
        if is_transport_error(exc):
            return storage_error(exc, url_of(self.fs, path), action, self.fs)
        return exc

    def _storage_call(self, action: str, p: str, fn: Callable[[], Any]) -> Any:
        """`fn()`, one storage call on the full path `p`; a transport failure becomes one StorageError naming the
        URL, anything else propagates as it is."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - a transport failure names the URL; anything else is a bug
            mapped = self._storage_error(exc, p, action)
            if mapped is exc:
                raise
            raise mapped from exc

    def _exists(self, p: str) -> bool:
        """Whether a full path exists; a storage failure is an error, not False."""
        return bool(self._storage_call("checking", p, lambda: self.fs.exists(p)))

    def exists(self, rel: str) -> bool:
        return self._exists(self.path(rel))

    def _listdir(self, rel: str = "") -> list[str]:
        """The names in a dataset folder (`""`: the root)."""
        p = self.path(rel) if rel else self.root
        return [posixpath.basename(q.rstrip("/")) for q in self._storage_call("listing", p, lambda: self.fs.ls(
            p, detail=False))]

    def existing(self, rels: Iterable[str]) -> set[str]:
        """Which of the dataset-relative paths `rels` exist: one listing per distinct folder (paginated by the
        filesystem), not one existence call per file; a missing folder means its files are missing."""
        by_folder: dict[str, set[str]] = {}
        for rel in rels:
            by_folder.setdefault(posixpath.dirname(rel), set()).add(posixpath.basename(rel))
        found: set[str] = set()
        for folder, names in by_folder.items():
            p = self.path(folder) if folder else self.root
            listed = self._storage_call("listing", p, lambda p=p: ls_or_empty(self.fs, p))
            found |= {posixpath.join(folder, n) for n in names & {posixpath.basename(q.rstrip("/")) for q in listed}}
        return found

    def _file_size(self, rel: str) -> int:
        p = self.path(rel)
        return int(self._storage_call("checking", p, lambda: self.fs.size(p)) or 0)

    def _read_range(self, rel: str, start: int, length: int) -> bytes:
        """Exactly the bytes [start, start + length) of a file, in one ranged read (the caller bounds `length`)."""
        p = self.path(rel)
        return self._storage_call("reading", p, lambda: self.fs.cat_file(p, start=start, end=start + length))

    def open_binary(self, rel: str, sequential: bool = True):
        """A seekable binary file: local files as they are; remote ones read in bounded ranged blocks (`sequential`,
        for PyAV, HDF5, parquet footers) or one ranged read per call. FileNotFoundError is left to the caller
        (missing video, missing data: each its own code)."""
        try:
            return open_input(self.fs, self.path(rel), sequential=sequential)
        except FileNotFoundError:
            raise
        except Exception as exc:  # noqa: BLE001
            mapped = self._storage_error(exc, self.path(rel), "opening")
            if mapped is exc:
                raise
            raise mapped from exc

    def _read_bytes(self, rel: str, limit: int = MAX_JSON_BYTES) -> bytes:
        """A whole (metadata) file, refused (RR301) when larger than `limit` before anything is read; a missing
        file is a SourceFormatError (RR300)."""
        p = self.path(rel)
        if not self._exists(p):
            raise SourceFormatError(f"{rel}: file is missing")
        try:
            size = self.fs.size(p)
            if size is not None and size > limit:
                raise UnsafeInput(f"{rel}: {size} bytes exceeds the {limit}-byte metadata limit")
            with open_input(self.fs, p) as f:
                data = f.read(limit + 1)
        except Exception as exc:  # noqa: BLE001
            mapped = self._storage_error(exc, p, "reading")
            if mapped is exc:
                raise
            raise mapped from exc
        if len(data) > limit:  # the file grew since `size`
            raise UnsafeInput(f"{rel}: more than {limit} bytes exceeds the {limit}-byte metadata limit")
        return data

    def _read_json(self, rel: str, limit: int = MAX_JSON_BYTES) -> Any:
        """A JSON file read with `_read_bytes`; invalid JSON or text is one SourceFormatError naming the file."""
        try:
            return json.loads(self._read_bytes(rel, limit))
        except json.JSONDecodeError as exc:
            raise SourceFormatError(f"{rel}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
        except UnicodeDecodeError as exc:
            raise SourceFormatError(f"{rel}: not valid JSON (not UTF-8 text: {exc.reason} at byte {exc.start})") \
                from exc

    def _read_jsonl(self, rel: str) -> Iterator[tuple[int, dict[str, Any]]]:
        """(line number, object) of each non-blank line of a JSON-lines file read with `_read_bytes` (size-limited);
        a line that is not a JSON object is one SourceFormatError naming file and line."""
        try:
            text = self._read_bytes(rel).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SourceFormatError(f"{rel}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SourceFormatError(f"{rel}:{lineno}: not valid JSON ({exc.msg})") from exc
            if not isinstance(obj, dict):
                raise SourceFormatError(f"{rel}:{lineno}: expected a JSON object")
            yield lineno, obj

    def _read_parquet(self, rel: str, columns: list[str] | None = None,
                      error: type[RoboRayError] = DataCorrupt, row_groups: list[int] | None = None) -> Any:
        """A parquet file (or some of its row groups) as a pyarrow Table; on object stores through ranged reads
        (footer, then the column chunks). An unreadable file raises `error` (DataCorrupt EP202 for episode data;
        SourceFormatError for metadata a dataset cannot be opened without), a missing one DataMissing (EP201), or
        SourceFormatError when `error` is one."""
        import pyarrow.parquet as pq

        with self._parquet_errors(rel, error) as p, open_input(self.fs, p) as f:
            if row_groups is not None:
                return pq.ParquetFile(f, metadata=self._footer(rel, f)).read_row_groups(row_groups, columns=columns)
            return pq.read_table(f, columns=columns)

    def _parquet_batches(self, rel: str, batch_rows: int, skip_prefix: str | None = None,
                         error: type[RoboRayError] = DataCorrupt) -> Iterator[Any]:
        """Record batches of parquet file `rel` (`batch_rows` rows each), its columns named `skip_prefix...` left
        unread: a metadata table of 200,000 rows is never whole in memory. Errors as `_read_parquet`."""
        import pyarrow.parquet as pq

        with self._parquet_errors(rel, error) as p, open_input(self.fs, p) as f:
            pf = pq.ParquetFile(f)
            names = pf.schema_arrow.names
            cols = [c for c in names if not c.startswith(skip_prefix)] if skip_prefix else names
            yield from pf.iter_batches(batch_size=batch_rows, columns=cols)

    @contextmanager
    def _parquet_errors(self, rel: str, error: type[RoboRayError]) -> Iterator[str]:
        """Yields the file's path; maps what reading it raises to our errors (see `_read_parquet`)."""
        import pyarrow as pa

        missing = SourceFormatError if issubclass(error, SourceFormatError) else DataMissing
        p = self.path(rel)
        if not self._exists(p):
            raise missing(f"{rel}: parquet file is missing")
        try:
            yield p
        except FileNotFoundError as exc:
            raise missing(f"{rel}: parquet file is missing") from exc
        except RoboRayError:
            raise
        except Exception as exc:  # noqa: BLE001
            mapped = self._storage_error(exc, p, "reading")
            if mapped is not exc:  # the store failed after its retries: not a property of the episode
                raise mapped from exc
            if isinstance(exc, (pa.ArrowException, OSError)):
                raise error(f"{rel}: unreadable parquet ({exc})") from exc
            raise

    def row_group_ranges(self, rel: str, column: str) -> list[tuple[int, int]] | None:
        """(min, max) of `column` in each row group of parquet file `rel`, from the footer's statistics (no data
        read); None when a row group has no statistics or the footer cannot be read (the caller reads the file)."""
        try:
            with open_input(self.fs, self.path(rel)) as f:
                meta = self._footer(rel, f)
            names = [meta.schema.column(i).path for i in range(meta.num_columns)]
            col = names.index(column)
            out: list[tuple[int, int]] = []
            for g in range(meta.num_row_groups):
                st = meta.row_group(g).column(col).statistics
                if st is None or not st.has_min_max:
                    return None
                out.append((int(st.min), int(st.max)))
            return out
        except Exception:  # noqa: BLE001 - no usable index: the whole file is read (and its errors reported then)
            return None

    _last_footer: tuple[str, Any] | None = None

    def _footer(self, rel: str, f: Any) -> Any:
        """The parquet footer (FileMetaData) of `rel`, open as `f`, parsed once for the last file asked: a file of
        20,000 row groups has a footer of megabytes (0.1 s to parse), and its episodes are read one by one."""
        import pyarrow.parquet as pq

        if self._last_footer is None or self._last_footer[0] != rel:
            self._last_footer = (rel, pq.ParquetFile(f).metadata)
        return self._last_footer[1]

    _last_table: tuple[str, Any] | None = None

    def last_table(self, rel: str) -> Any:
        """`rel` read with `_read_parquet`, keeping only the last file read: units are file-ordered, so a file
        holding many episodes (LeRobot v3.0, ORTF chunks) is read once per unit, not once per episode."""
        if self._last_table is None or self._last_table[0] != rel:
            self._last_table = (rel, self._read_parquet(rel))
        return self._last_table[1]


class BaseReader(DatasetFiles):
    """The base of every source reader.

    A subclass declares `format_name`, `sniff_hint` (what `sniff` looks for, for the "unknown format" message) and
    `sniff`, builds `self.features` (with roles and canonical names) in its `__init__` after calling this one, and
    implements `discover` and `load_episode`. Readers are pickled to workers: state that cannot be (open files)
    is dropped by `__getstate__` and reopened on use."""

    format_name: ClassVar[str] = ""
    sniff_hint: ClassVar[str] = ""  # e.g. "meta/info.json (LeRobot)"
    sniff_file_hint: ClassVar[str | None] = None  # when the source may be a single file: e.g. "a Minari main_data.hdf5"

    features: dict[str, FeatureSpec]
    # The frame rate, one rule for every reader: the rate the source itself records (`fps_held`); else the user's
    # `--fps` (config `source.options.fps`, `apply_given_fps`); else what the recorder is known to run at; else 0
    # (unknown: `fps_findings` asks for --fps). `fps_source` says where the rate came from (inventory `declared`).
    fps: float = 0.0
    fps_source: str = ""
    fps_held: bool = False
    fps_ignored: float | None = None  # a --fps that disagreed with the rate the source records

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.fs, path = url_to_fs(url, storage_options)
        if not self._exists(path):
            raise SourceNotFound(f"source not found: {url}")
        self.root = self.dataset_root(path)

    def dataset_root(self, path: str) -> str:
        """The dataset folder for the path the URL names (a reader may accept a file inside it)."""
        return path

    def set_fps(self, fps: float, source: str, held: bool = True) -> None:
        """The rate the source records (`held`), or the rate its recorder is known to run at (not held: a --fps
        replaces it)."""
        self.fps, self.fps_source, self.fps_held = float(fps), source, held

    def apply_given_fps(self, given: Any) -> None:
        """The user's --fps: used unless the source records its own rate (then kept aside and reported when it
        disagrees: `fps_findings`)."""
        fps = check_fps(given)
        if self.fps_held and self.fps > 0:
            if abs(fps - self.fps) > 1e-9 * self.fps:
                self.fps_ignored = fps
            return
        self.set_fps(fps, "--fps", held=False)

    def fps_findings(self) -> list[Finding]:
        """F101 when the rate is unknown (targets that store timestamps need one: pass --fps), F102 when a --fps
        disagreed with the rate the source records (the source's is used)."""
        if self.fps_ignored is not None:
            return [Finding("warning", "F102", f"--fps {self.fps_ignored:g} ignored: the source records "
                            f"{self.fps:g} fps ({self.fps_source})", self.fps, self.fps_ignored)]
        if not self.fps:
            return [Finding("warning", "F101", f"the {self.format_name} source records no frame rate: pass --fps "
                            "(targets that store timestamps need one)")]
        return []

    @classmethod
    def sniff(cls, fs: Any, root: str) -> bool:
        """Whether the folder (or file) `root` on `fs` holds a dataset of this format: a few existence checks, no
        parsing. Storage failures propagate."""
        raise NotImplementedError

    def discover(self) -> Inventory:
        raise NotImplementedError

    # ---- Discover as a map over the files (optional): discover() == merge_scans(scan_all(scan_tasks())) ----------
    scan_threads: int = 1  # scan tasks one process runs at once (object stores: the scan waits on requests)

    def scan_tasks(self) -> list[ScanTask]:
        """The pieces of Discover's scan, in file order, for a pool of workers to run (`scan`) and the driver to
        merge (`merge_scans`). [] (the default): not splittable, `discover()` runs."""
        return []

    def scan(self, task: ScanTask) -> Any:
        """The small, picklable row of one scan task (what `merge_scans` needs of its files, findings included)."""
        raise NotImplementedError(f"{type(self).__name__} does not split its Discover scan")

    def scan_all(self, tasks: Sequence[ScanTask]) -> list[Any]:
        """`scan(t)` of each task, in order, `scan_threads` at a time."""
        workers = min(self.scan_threads, len(tasks))
        if workers <= 1:
            return [self.scan(t) for t in tasks]
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(self.scan, tasks))

    def merge_scans(self, rows: Sequence[Any]) -> Inventory:
        """The inventory from the rows of every task of `scan_tasks()`, in task order: the same as `discover()`."""
        raise NotImplementedError(f"{type(self).__name__} does not split its Discover scan")

    def discover_spread(self, k: int) -> tuple[Inventory, list[int]]:
        """An inventory whose refs are only `k` episodes spread evenly over the dataset (`spread`), and their
        positions among all the episodes (`episodes_count` stays the dataset's). For a few sampled episodes (the
        report): a reader whose `discover` reads every file overrides it to read only what those need."""
        inv = self.discover()
        positions = spread(len(inv.refs), k)
        inv.refs = [inv.refs[j] for j in positions]
        return inv, positions

    def load_episode(self, ref: EpisodeRef) -> Episode:
        raise NotImplementedError

    def prepare(self, refs: Sequence[EpisodeRef]) -> None:
        """These episodes are about to be loaded, in this order (a unit): a reader may read what they share in
        one go (e.g. the row groups of a file holding them). Nothing by default."""

    def close(self) -> None:
        """Release open files and caches (the reader stays usable: files are reopened on use)."""
        self._last_table = self._last_footer = None

    def __enter__(self) -> "BaseReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_last_table", None)  # caches: not shipped to workers
        state.pop("_last_footer", None)
        return state
