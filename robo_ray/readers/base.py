"""The reader plug-in contract: one base class for every source format, and the inventory it produces.

`BaseReader` does what every reader needs and must do the same way: the filesystem and root of the source URL,
dataset-relative paths, size-limited metadata reads (JSON, JSON lines, parquet), and turning a storage failure
(network, credentials, a bucket that is gone) into one clear error naming the URL. A format subclasses it and
declares `format_name`, how its datasets are recognised (`sniff`), and what each feature is (`FeatureSpec.role`,
`name`, `scalar`, `note`): the Spec stage maps features by those declarations, never by a format's name.

The file access is `DatasetFiles` (readers/dataset_files.py), the inventory and the `Reader` protocol
readers/inventory.py, the canonical-name rules readers/naming.py; this module re-exports their names.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, Sequence

from robo_ray.episode import Episode, EpisodeRef, FeatureSpec
from robo_ray.errors import ConfigError, SourceNotFound
from robo_ray.readers.dataset_files import DatasetFiles
from robo_ray.readers.inventory import BUILTIN_METADATA, Finding, Inventory, MetaType, Reader, ScanTask, spread
from robo_ray.readers.naming import DATA_ROLES, canonical_path, identifier, is_step_data, unique_names
from robo_ray.storage import url_to_fs

# The reader contract's names, importable from here as from their modules (inventory, naming, dataset_files).
__all__ = ["BUILTIN_METADATA", "DATA_ROLES", "MAX_FPS", "BaseReader", "DatasetFiles", "Finding", "Inventory",
           "MetaType", "Reader", "ScanTask", "canonical_path", "check_fps", "held_fps", "identifier", "is_step_data",
           "spread", "unique_names"]

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
