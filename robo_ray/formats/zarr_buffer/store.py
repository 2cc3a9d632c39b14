"""A zarr 2 store on any fsspec URL, read in place: a directory store (`*.zarr`) through the URL's filesystem, a
zip store (`*.zarr.zip`, zarr.ZipStore's layout) with zipfile over ranged reads of the zip (its central directory,
then the members a read needs: nothing is downloaded whole).

`StrictStore` is the mapping zarr reads through: a chunk the store lacks raises `ChunkMissing` instead of being
read as the array's fill value (zarr's rule), so a lost chunk is never converted as blank frames or zeros.
"""
from __future__ import annotations

import json
import posixpath
import threading
import zipfile
from typing import Any, Iterator

from zarr.storage import BaseStore

from robo_ray.errors import SourceFormatError, UnsafeInput
from robo_ray.storage import open_input

ZIP_MAGIC = b"PK\x03\x04"
META_NAMES = (".zarray", ".zgroup", ".zattrs")
MAX_META_BYTES = 1 << 20  # one .zarray / .zgroup / .zattrs


class ChunkMissing(Exception):
    """A chunk key the store does not hold (zarr would read the fill value)."""


def is_zip(fs: Any, path: str) -> bool:
    """A zip file (its first 4 bytes)."""
    with open_input(fs, path) as f:
        return f.read(4) == ZIP_MAGIC


class ZarrStore:
    """One zarr store, dir or zip: metadata reads bounded in size, listings, and the mapping zarr reads through.
    A zip store is read with zipfile over a ranged reader (its central directory once: ~0.5 KB a member; fsspec's
    zip filesystem keeps ~1.4 KB a member). `name` is the store as named in messages (its file or folder name)."""

    def __init__(self, fs: Any, path: str, name: str) -> None:
        self.name = name
        self._handle = None
        self.zip: zipfile.ZipFile | None = None
        self._lock = threading.Lock()
        self.fs, self.root = fs, path.rstrip("/")
        if fs.isfile(path):
            self._handle = open_input(fs, path, sequential=True)
            try:
                self.zip = zipfile.ZipFile(self._handle)
            except Exception as exc:  # noqa: BLE001 - BadZipFile, a truncated file, ...
                self.close()
                raise SourceFormatError(f"{name}: not a readable zip store ({_short(exc)})") from exc

    def _path(self, key: str) -> str:
        return posixpath.join(self.root, key)

    def has(self, key: str) -> bool:
        if self.zip is not None:
            return key in self.zip.NameToInfo
        return bool(self.fs.exists(self._path(key)))

    def _size(self, key: str) -> int | None:
        if self.zip is not None:
            info = self.zip.NameToInfo.get(key)
            return None if info is None else info.file_size
        try:
            return int(self.fs.size(self._path(key)) or 0)
        except FileNotFoundError:
            return None

    def listdir(self, key: str) -> list[str]:
        """Names directly under `key` ([] when it is not a folder)."""
        if self.zip is not None:
            prefix = key.rstrip("/") + "/"
            return sorted({n[len(prefix):].split("/", 1)[0] for n in self.zip.NameToInfo if n.startswith(prefix)}
                          - {""})
        try:
            return sorted(posixpath.basename(p.rstrip("/")) for p in self.fs.ls(self._path(key), detail=False))
        except FileNotFoundError:
            return []

    def read(self, key: str) -> bytes:
        """One member or file, whole (a chunk or metadata); KeyError when absent."""
        if self.zip is not None:
            with self._lock:  # one zip file object: reads one at a time
                return self.zip.read(key)
        try:
            return self.fs.cat_file(self._path(key))
        except FileNotFoundError:
            raise KeyError(key) from None

    def meta(self, key: str) -> dict[str, Any] | None:
        """A .zarray / .zgroup / .zattrs JSON object (None when absent), refused past MAX_META_BYTES."""
        size = self._size(key)
        if size is None:
            return None
        if size > MAX_META_BYTES:
            raise UnsafeInput(f"{self.name}: {key} is {size} bytes, over the {MAX_META_BYTES}-byte limit")
        try:
            value = json.loads(self.read(key))
        except (ValueError, UnicodeDecodeError) as exc:
            raise SourceFormatError(f"{self.name}: {key} is not valid JSON ({_short(exc)})") from exc
        if not isinstance(value, dict):
            raise SourceFormatError(f"{self.name}: {key} is not a JSON object")
        return value

    def mapping(self) -> "StrictStore":
        return StrictStore(self)

    def close(self) -> None:
        if self.zip is not None:
            self.zip.close()
            self.zip = None
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class StrictStore(BaseStore):
    """The read-only zarr store of a `ZarrStore`, in which a missing chunk is an error (`ChunkMissing`), not a
    KeyError (zarr reads a KeyError, or a key left out of `getitems`, as "fill value")."""

    _readable = True
    _writeable = False
    _erasable = False

    def __init__(self, store: ZarrStore) -> None:
        self._store = store

    def __getitem__(self, key: str) -> bytes:
        try:
            return self._store.read(key)
        except KeyError:
            if posixpath.basename(key) in META_NAMES:
                raise
            raise ChunkMissing(key) from None

    def getitems(self, keys: Any, *, contexts: Any = None) -> dict[str, bytes]:
        """Every key asked for, or `ChunkMissing` (zarr's own `getitems` drops the keys a store lacks)."""
        return {k: self[k] for k in keys}

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._store.has(key)

    def __iter__(self) -> Iterator[str]:
        raise TypeError("a replay buffer's store is not iterated (it may hold millions of chunks)")

    def __len__(self) -> int:
        raise TypeError("a replay buffer's store is not counted")

    def listdir(self, path: str = "") -> list[str]:
        return self._store.listdir(path)

    def __setitem__(self, key: str, value: Any) -> None:
        raise PermissionError("read-only store")

    def __delitem__(self, key: str) -> None:
        raise PermissionError("read-only store")


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]
