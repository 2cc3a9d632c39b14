"""A zarr 2 store on any fsspec URL, read in place: a directory store (`*.zarr`) through the URL's filesystem, a
zip store (`*.zarr.zip`, zarr.ZipStore's layout) through fsspec's zip filesystem over ranged reads of the zip (its
central directory, then the members a read needs: nothing is downloaded whole).

`StrictStore` is the mapping zarr reads through: a chunk the store lacks raises `ChunkMissing` instead of being
read as the array's fill value (zarr's rule), so a lost chunk is never converted as blank frames or zeros.
"""
from __future__ import annotations

import json
import posixpath
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
    """One zarr store, dir or zip: its filesystem and root inside it, metadata reads bounded in size, the mapping
    zarr reads through. `name` is the store as named in messages (its file or folder name)."""

    def __init__(self, fs: Any, path: str, name: str) -> None:
        self.name = name
        self._handle = None
        if fs.isfile(path):
            from fsspec.implementations.zip import ZipFileSystem

            self._handle = open_input(fs, path, sequential=True)
            try:
                self.fs: Any = ZipFileSystem(fo=self._handle)
            except Exception as exc:  # noqa: BLE001 - zipfile's BadZipFile, a truncated file, ...
                self.close()
                raise SourceFormatError(f"{name}: not a readable zip store ({_short(exc)})") from exc
            self.root = ""
        else:
            self.fs, self.root = fs, path.rstrip("/")

    def _path(self, key: str) -> str:
        return posixpath.join(self.root, key) if self.root else key

    def has(self, key: str) -> bool:
        return bool(self.fs.exists(self._path(key)))

    def listdir(self, key: str) -> list[str]:
        """Names directly under `key` ([] when it is not a folder)."""
        try:
            return sorted(posixpath.basename(p.rstrip("/")) for p in self.fs.ls(self._path(key), detail=False))
        except FileNotFoundError:
            return []

    def meta(self, key: str) -> dict[str, Any] | None:
        """A .zarray / .zgroup / .zattrs JSON object (None when absent), refused past MAX_META_BYTES."""
        path = self._path(key)
        try:
            size = int(self.fs.size(path) or 0)
        except FileNotFoundError:
            return None
        if size > MAX_META_BYTES:
            raise UnsafeInput(f"{self.name}: {key} is {size} bytes, over the {MAX_META_BYTES}-byte limit")
        try:
            value = json.loads(self.fs.cat_file(path))
        except (ValueError, UnicodeDecodeError) as exc:
            raise SourceFormatError(f"{self.name}: {key} is not valid JSON ({_short(exc)})") from exc
        if not isinstance(value, dict):
            raise SourceFormatError(f"{self.name}: {key} is not a JSON object")
        return value

    def mapping(self) -> "StrictStore":
        from zarr.storage import FSStore

        return StrictStore(FSStore(self.root, fs=self.fs, mode="r"))

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class StrictStore(BaseStore):
    """A read-only store over an FSStore in which a missing chunk is an error (`ChunkMissing`), not a KeyError
    (zarr reads a KeyError, or a key left out of `getitems`, as "fill value")."""

    _readable = True
    _writeable = False
    _erasable = False

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getitem__(self, key: str) -> bytes:
        try:
            return self._inner[key]
        except KeyError:
            if posixpath.basename(key) in META_NAMES:
                raise
            raise ChunkMissing(key) from None

    def getitems(self, keys: Any, *, contexts: Any = None) -> dict[str, bytes]:
        """Every key asked for, or `ChunkMissing` (zarr's own `getitems` drops the keys a store lacks)."""
        return {k: self[k] for k in keys}

    def __contains__(self, key: object) -> bool:
        return key in self._inner

    def __iter__(self) -> Iterator[str]:
        return iter(self._inner)

    def __len__(self) -> int:
        return len(self._inner)

    def listdir(self, path: str = "") -> list[str]:
        return self._inner.listdir(path)

    def __setitem__(self, key: str, value: Any) -> None:
        raise PermissionError("read-only store")

    def __delitem__(self, key: str) -> None:
        raise PermissionError("read-only store")


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]
