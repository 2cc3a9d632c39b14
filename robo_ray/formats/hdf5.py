"""HDF5 access shared by the readers of HDF5 sources (Minari, robomimic family, ALOHA): opening a dataset file
from any fsspec URL, refusing what could reach outside the file (soft, external and user-defined links, virtual
and externally stored datasets), walking groups, bounding a dataset before it is read, and frames read lazily from
a (T, ...) dataset a few rows at a time.

The files are untrusted: no link is ever followed, and every dataset's shape and size are checked before a byte
of it is read (`check_dataset`).
"""
from __future__ import annotations

import posixpath
import re
from collections import OrderedDict
from typing import Any, Callable, ClassVar, Iterator

import numpy as np

from robo_ray.errors import DataCorrupt, EpisodeDataOutside, EpisodeTooLarge, SourceFormatError, UnsafeInput
from robo_ray.lfs_pointer import head_of, lfs_pointer_note
from robo_ray.readers.base import BaseReader
from robo_ray.safety import MAX_DIM, MAX_ELEMENTS_PER_STEP, MAX_EPISODE_LENGTH, MAX_EPISODES, check_count
from robo_ray.storage import is_local, open_input

MAX_EPISODE_BYTES = 4 << 30  # one episode's dataset, checked from its HDF5 shape before reading
MAX_LINKS_REPORTED = 16
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def open_h5(fs: Any, path: str, rel: str) -> tuple[Any, Any]:
    """(h5py.File, the underlying file object or None) for the file at `path` on `fs`: local files by name (no
    locking), remote ones through a seekable ranged reader. A missing or unreadable file is one SourceFormatError
    naming `rel` (a caller reading one episode's file maps it to the episode's error)."""
    import h5py

    handle = None
    try:
        if is_local(fs):
            return h5py.File(path, "r", locking=False), None
        handle = open_input(fs, path, sequential=True)
        return h5py.File(handle, "r"), handle
    except FileNotFoundError as exc:
        if handle is not None:
            handle.close()
        raise SourceFormatError(f"{rel}: file is missing") from exc
    except OSError as exc:
        if handle is not None:
            handle.close()
        note = lfs_pointer_note(head_of(fs, path))
        raise SourceFormatError(f"{rel}: not a readable HDF5 file ({_short(exc)}){note}") from exc


def peek_h5(fs: Any, path: str, test: Callable[[Any], bool]) -> bool:
    """`test(file)` on an HDF5 file (for `sniff`): False when the file is not HDF5 (its first 8 bytes); an HDF5
    file h5py cannot open (truncated, damaged) is one SourceFormatError naming it, not an "unknown format"."""
    with open_input(fs, path) as f:
        if f.read(8) != HDF5_MAGIC:
            return False
    h5, handle = open_h5(fs, path, path)
    try:
        return bool(test(h5))
    except Exception:  # noqa: BLE001 - an unexpected layout is "not this format"
        return False
    finally:
        h5.close()
        if handle is not None:
            handle.close()


def peek_any(fs: Any, paths: list[str], test: Callable[[Any], bool], tries: int = 3) -> bool:
    """`peek_h5` on the first of `paths` that opens (up to `tries` of them: one damaged file of a folder does not
    hide the folder's format); the first file's error when none opens."""
    first: SourceFormatError | None = None
    for path in paths[:tries]:
        try:
            return peek_h5(fs, path, test)
        except SourceFormatError as exc:
            first = first or exc
    if first is not None:
        raise first
    return False


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


def foreign_links(f: Any) -> list[tuple[str, str]]:
    """(path, what) of every link in the file that is not a hard link to an object of the file itself (external
    links to other files, soft links, user-defined links): every link is visited, none followed, no object opened
    (~10 us a link). At most MAX_LINKS_REPORTED are listed."""
    import h5py
    from h5py import h5l

    found: list[str] = []

    def visit(name: bytes, info: Any) -> int | None:
        if info.type != h5l.TYPE_HARD:
            found.append(name.decode("utf-8", "replace"))
            if len(found) >= MAX_LINKS_REPORTED:
                return 1  # stop
        return None

    f.id.links.visit(visit, info=True)
    out = []
    for name in found:
        link = f.get(name, getlink=True)
        what = f"an HDF5 external link (to {link.filename})" if isinstance(link, h5py.ExternalLink) else \
            f"an HDF5 soft link (to {link.path})" if isinstance(link, h5py.SoftLink) else "an HDF5 user-defined link"
        out.append((name, what))
    return out


def check_links(f: Any, where: str) -> None:
    """Refuse the whole file (UnsafeInput, RR301) when a link in it points anywhere but at an object of the file."""
    links = foreign_links(f)
    if links:
        name, what = links[0]
        raise UnsafeInput(f"{where}: /{name} is {what}; refused")


def children(group: Any, where: str) -> Iterator[tuple[str, Any]]:
    """(name, object) of a group's members; anything but a hard link is refused (files are checked when opened:
    this only guards a file that changed since)."""
    import h5py

    for name in group:
        link = group.get(name, getlink=True)
        if not isinstance(link, h5py.HardLink):
            raise UnsafeInput(f"{where}: {group.name}/{name} is an HDF5 {type(link).__name__}; refused")
        yield name, group[name]


def leaves(group: Any, prefix: str, where: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """(key, dataset) of every dataset under `group`, keys "/"-joined below `prefix`; at most 8 levels deep."""
    import h5py

    if depth > 8:
        raise UnsafeInput(f"{where}: groups nested deeper than 8 levels under {group.name}")
    for name, obj in children(group, where):
        key = f"{prefix}/{name}" if prefix else name
        if isinstance(obj, h5py.Group):
            yield from leaves(obj, key, where, depth + 1)
        else:
            yield key, obj


def check_dataset(ds: Any, where: str) -> None:
    """An episode's dataset must hold its own data and fit the limits before it is read (else the episode is
    quarantined: EP207, EP206)."""
    if ds.is_virtual:
        raise EpisodeDataOutside(f"{where}: {ds.name} is an HDF5 virtual dataset (data in other files); refused")
    if ds.external:
        raise EpisodeDataOutside(f"{where}: {ds.name} stores its data in external files; refused")
    shape = tuple(ds.shape or ())
    if not shape:
        return
    if shape[0] > MAX_EPISODE_LENGTH + 1 or any(d > MAX_DIM for d in shape[1:]):
        raise EpisodeTooLarge(f"{where}: dataset {ds.name} has shape {shape}, beyond the limits")
    per = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    if per > MAX_ELEMENTS_PER_STEP or shape[0] * per * max(ds.dtype.itemsize, 1) > MAX_EPISODE_BYTES:
        raise EpisodeTooLarge(f"{where}: dataset {ds.name} with shape {shape} is too large")


def jsonable(value: Any) -> Any:
    """Metadata (HDF5 attributes, JSON) as plain JSON types."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        return [jsonable(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    return value


def attr_text(attrs: Any, key: str, limit: int = 1 << 20) -> str | None:
    """A text attribute (str or bytes) of at most `limit` characters; None when absent or not text."""
    value = attrs.get(key)
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value.item()
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    if len(value) > limit:
        raise UnsafeInput(f"attribute {key!r} is {len(value)} characters, over the {limit}-character limit")
    return value


def read_steps(ds: Any, spec: Any, where: str, n: int) -> np.ndarray:
    """A per-step dataset read whole (bounded by `check_dataset` first), as (n, *spec.shape) of spec.dtype;
    anything else is the episode's DataCorrupt (EP202)."""
    try:
        value = np.asarray(ds[()])
    except OSError as exc:
        raise DataCorrupt(f"{where}: {ds.name} unreadable ({_short(exc)})") from exc
    per = int(np.prod(spec.shape)) if spec.shape else 1
    if value.dtype.kind not in "biuf" or value.size != n * per:
        raise DataCorrupt(f"{where}: {ds.name} is {value.dtype} {value.shape}, expected {n} rows of "
                          f"{list(spec.shape)} numbers")
    return value.astype(spec.dtype, copy=False).reshape((n, *spec.shape))


# ---- frames read lazily ----------------------------------------------------------------------------------------
RowReader = Callable[[int, int], np.ndarray]


class LazyFrames:
    """(N, H, W, C) frames that behave like the array `RawFrames` holds, read `chunk` rows at a time only when
    iterated or indexed: an episode of 1,000 steps from four 480x640 cameras is never whole in memory (the writer
    takes one frame at a time). `read(a, b)` returns frames a..b-1 as an (b-a, H, W, C) array (decoded, flipped:
    whatever the source needs); it raises the episode's error where the source turns out bad."""

    ndim = 4

    def __init__(self, length: int, hwc: tuple[int, int, int], read: RowReader, dtype: Any = np.uint8,
                 chunk: int = 16) -> None:
        self.shape = (int(length), *(int(d) for d in hwc))
        self.dtype = np.dtype(dtype)
        self._read = read
        self._chunk = max(1, int(chunk))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, i: Any) -> np.ndarray:
        if isinstance(i, (int, np.integer)):
            k = range(self.shape[0])[int(i)]
            return self._read(k, k + 1)[0]
        raise TypeError("LazyFrames is indexed by one frame at a time")

    def __iter__(self) -> Iterator[np.ndarray]:
        n = self.shape[0]
        for a in range(0, n, self._chunk):
            block = self._read(a, min(n, a + self._chunk))
            yield from block

    def astype(self, dtype: Any) -> "LazyFrames":
        """The same frames cast to `dtype`, still read lazily (the convert stage asks this of 16-bit frames)."""
        if np.dtype(dtype) == self.dtype:
            return self
        read = self._read
        return LazyFrames(self.shape[0], self.shape[1:], lambda a, b: read(a, b).astype(dtype), dtype, self._chunk)


# ---- a source of one HDF5 file or a folder of them -------------------------------------------------------------
_NUMBERED = re.compile(r"^(.*?)(\d{1,12})\.(hdf5|h5)$")


def _file_order(path: str) -> tuple[str, int, str]:
    """Name order, numbers compared as numbers (episode_2 before episode_10)."""
    name = posixpath.basename(path)
    m = _NUMBERED.match(name)
    return (m.group(1), int(m.group(2)), name) if m else (name, -1, name)


class Hdf5FilesReader(BaseReader):
    """A reader whose source is one HDF5 file or a folder of them (its own *.hdf5 / *.h5 files, numbered names in
    number order): detection by looking inside the first files (`sniff_files`), the dataset-relative file list, and
    a few files kept open (reopened after unpickling). `_checked(rel, h5)` (a subclass's) runs once per opening;
    what it raises closes the file and propagates."""

    file_test: ClassVar[Callable[[Any], bool]]
    open_files: ClassVar[int] = 4

    @staticmethod
    def folder_files(fs: Any, root: str) -> list[str]:
        paths = [p for p in fs.ls(root, detail=False) if p.endswith((".hdf5", ".h5")) and fs.isfile(p)]
        return sorted(paths, key=_file_order)

    @classmethod
    def sniff_files(cls, fs: Any, root: str) -> bool:
        """`file_test` on the file `root`, or on the first of the folder's files that opens (a reader's `sniff`)."""
        files = [root] if fs.isfile(root) else cls.folder_files(fs, root)
        return peek_any(fs, files, cls.file_test)

    def dataset_root(self, path: str) -> str:
        self._single = path if self.fs.isfile(path) else None
        return posixpath.dirname(path) if self._single else path

    def _list_files(self) -> list[str]:
        """Dataset-relative names of the files read (one when the URL names a file); none is a SourceFormatError."""
        self._open: OrderedDict[str, tuple[Any, Any]] = OrderedDict()
        if self._single:
            return [posixpath.basename(self._single)]
        paths = self._storage_call("listing", self.root, lambda: self.folder_files(self.fs, self.root))
        check_count("number of HDF5 files", len(paths), MAX_EPISODES)
        if not paths:
            raise SourceFormatError(f"{self.url}: no .hdf5 files")
        return [posixpath.relpath(p, self.root) for p in paths]

    def _checked(self, rel: str, h5: Any) -> None:
        """Checks on a file just opened (nothing by default)."""

    def _h5(self, rel: str) -> Any:
        """The open h5py.File of `rel` (the last `open_files` stay open)."""
        if rel in self._open:
            self._open.move_to_end(rel)
            return self._open[rel][0]
        h5, handle = open_h5(self.fs, self.path(rel), rel)
        try:
            self._checked(rel, h5)
        except BaseException:
            _close(h5, handle)
            raise
        self._open[rel] = (h5, handle)
        while len(self._open) > self.open_files:
            _close(*self._open.popitem(last=False)[1])
        return h5

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_open"] = OrderedDict()
        return state

    def close(self) -> None:
        super().close()
        for h5, handle in getattr(self, "_open", {}).values():
            _close(h5, handle)
        self._open = OrderedDict()


def _close(h5: Any, handle: Any) -> None:
    h5.close()
    if handle is not None:
        handle.close()
