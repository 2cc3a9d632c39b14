"""RetryingFileSystem: an fsspec filesystem over one whose client does not retry (memory://, sftp://, http(s)://,
abfs://, a test's faulty://...).

A call that fails with a transient error is retried (robo_ray.storage.retry); then one StorageError line naming
the URL. Reads are ranged `cat_file` calls, each retried on its own; a write is retried only whole (the whole
object again, never an append twice) and, unless the store replaces objects atomically (memory, Azure, OSS), goes
to `<name>.tmp-<random>` first, is checked to hold every byte, then renamed into place: an interrupted write never
leaves a partial file under the final name. exists/isdir/isfile come from `info`, whose errors are retried, not
read as "missing" (fsspec's `exists` says False on any error).

It subclasses fsspec's AbstractFileSystem (like fsspec's own wrappers): the methods robo-ray calls are delegated
to the wrapped filesystem with the retries above; the rest of fsspec's API (walk, read_text, head, put...) is the
base class's, built on those. Paths, `protocol` and `unstrip_protocol` are the wrapped filesystem's, so
`url_of`/`is_object_store` see through the wrapper. Instances are not cached by fsspec (`cachable = False`), compare
equal when they wrap the same filesystem, and pickle as (class, wrapped filesystem) for Ray."""
from __future__ import annotations

import io
import os
import posixpath
from typing import Any, Callable

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractBufferedFile, AbstractFileSystem
from fsspec.utils import tokenize

from robo_ray.errors import StorageError
from robo_ray.storage.retry import retry_call
from robo_ray.storage.urls import OBJECT_STORES, protocol_of, temp_name, url_of

# clients that retry on their own (botocore, gcsfs, huggingface_hub): handed out as they are
_OWN_RETRIES = (*OBJECT_STORES, "hf")
# stores whose PUT replaces an object whole or not at all: written in place; the others via temp + rename
ATOMIC_PUT = ("memory", "abfs", "abfss", "az", "oss")


def _retried(name: str, action: str) -> Callable[..., Any]:
    """A method calling the wrapped filesystem's `name`, retried whole on a transient error (safe to repeat:
    reads, listings, idempotent creates and copies); `action` names it in messages."""

    def method(self: RetryingFileSystem, *args: Any, **kwargs: Any) -> Any:
        path = args[0] if args and isinstance(args[0], str) else str(kwargs.get("path", ""))
        return self._retry(action, path, lambda _: getattr(self.fs, name)(*args, **kwargs))

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"The wrapped filesystem's `{name}`, retried on a transient error."
    return method


class RetryingFileSystem(AbstractFileSystem):
    """A filesystem whose calls are retried on transient errors (see the module docstring). Writes are
    whole-object and never visible partial under their final name."""

    protocol = "retrying"  # each instance takes the wrapped filesystem's
    cachable = False  # a wrapper is cheap; the wrapped filesystem is fsspec's cached instance

    def __init__(self, fs: fsspec.AbstractFileSystem, **storage_options: Any) -> None:
        super().__init__(**storage_options)
        self.fs = fs
        self.protocol = fs.protocol
        self.sep, self.root_marker, self.blocksize = fs.sep, fs.root_marker, fs.blocksize
        self.atomic_put = protocol_of(fs) in ATOMIC_PUT

    @property
    def _fs_token(self) -> str:
        return tokenize(type(self).__name__, self.fs._fs_token)

    def __repr__(self) -> str:
        return f"RetryingFileSystem({self.fs!r})"

    # ---- names are the wrapped filesystem's -------------------------------------------------------------------
    def _strip_protocol(self, path: Any) -> Any:  # type: ignore[override]  # a classmethod in fsspec
        return self.fs._strip_protocol(path)

    def _parent(self, path: str) -> str:  # type: ignore[override]
        return self.fs._parent(path)

    def unstrip_protocol(self, name: str) -> str:
        return self.fs.unstrip_protocol(name)

    @property
    def fsid(self) -> str:
        return self.fs.fsid

    def invalidate_cache(self, path: str | None = None) -> None:
        self.fs.invalidate_cache(path)

    def sign(self, path: str, expiration: int = 100, **kwargs: Any) -> str:
        return self.fs.sign(path, expiration=expiration, **kwargs)

    def _retry(self, action: str, path: str, fn: Callable[[int], Any]) -> Any:
        return retry_call(fn, self.fs, path, action)

    # ---- safe to repeat whole ---------------------------------------------------------------------------------
    info = _retried("info", "checking")
    checksum = _retried("checksum", "checking")
    ukey = _retried("ukey", "checking")
    modified = _retried("modified", "checking")
    created = _retried("created", "checking")
    ls = _retried("ls", "listing")
    find = _retried("find", "listing")
    glob = _retried("glob", "listing")
    du = _retried("du", "listing")
    expand_path = _retried("expand_path", "listing")
    cat_file = _retried("cat_file", "reading")
    cat = _retried("cat", "reading")
    cat_ranges = _retried("cat_ranges", "reading")
    get_file = _retried("get_file", "downloading")
    get = _retried("get", "downloading")
    makedirs = _retried("makedirs", "creating")
    touch = _retried("touch", "writing")
    cp_file = _retried("cp_file", "copying")
    copy = _retried("copy", "copying")

    # ---- questions answered from `info`, whose errors are not swallowed (fsspec's `exists` says False on any) --
    def exists(self, path: str, **kwargs: Any) -> bool:
        try:
            self.info(path)
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    lexists = exists

    def isdir(self, path: str) -> bool:
        try:
            return self.info(path)["type"] == "directory"
        except (FileNotFoundError, NotADirectoryError):
            return False

    def isfile(self, path: str) -> bool:
        try:
            return self.info(path)["type"] == "file"
        except (FileNotFoundError, NotADirectoryError):
            return False

    def size(self, path: str) -> int | None:
        return self.info(path).get("size")

    # ---- files ---------------------------------------------------------------------------------------------
    def open(self, path: str, mode: str = "rb", block_size: int | None = None, cache_options: dict | None = None,
             compression: str | None = None, **kwargs: Any) -> Any:
        """"rb": a buffered file whose every fetch is one retried ranged read; "wb"/"xb": a buffer written whole
        (and atomically) on close; other modes (append): the wrapped filesystem's file, not retried."""
        if mode == "rb" and compression is None:
            info = self.info(path)
            if info.get("type") == "directory":
                raise IsADirectoryError(url_of(self.fs, path))
            if info.get("size") is not None:
                return _RetryingReadFile(self, path, block_size=block_size or "default",
                                         cache_type=kwargs.get("cache_type", "readahead"),
                                         cache_options=cache_options, size=info["size"])
        if mode in ("wb", "xb") and compression is None:
            return _WholeWriteFile(self, path, exclusive=mode == "xb")
        return self.fs.open(path, mode, block_size=block_size, cache_options=cache_options,
                            compression=compression, **kwargs)

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        data = bytes(value)
        if mode == "create" and self.exists(path):
            raise FileExistsError(url_of(self.fs, path))
        if self.atomic_put:
            self._retry("writing", path, lambda _: self.fs.pipe_file(path, data, **kwargs))
            return
        self._via_temp(path, len(data), lambda tmp: self.fs.pipe_file(tmp, data, **kwargs))

    def pipe(self, path: str | dict[str, bytes], value: bytes | None = None, **kwargs: Any) -> None:
        items = path.items() if isinstance(path, dict) else [(path, value)]
        for p, v in items:
            self.pipe_file(p, v, **kwargs)

    def put_file(self, lpath: str, rpath: str, **kwargs: Any) -> None:
        if self.atomic_put:
            self._retry("uploading", rpath, lambda _: self.fs.put_file(lpath, rpath, **kwargs))
            return
        self._via_temp(rpath, os.path.getsize(lpath), lambda tmp: self.fs.put_file(lpath, tmp, **kwargs))

    def _via_temp(self, path: str, nbytes: int, write: Callable[[str], Any]) -> None:
        """Write a temp sibling (each attempt rewrites it whole), check it holds `nbytes`, rename it to `path`;
        then remove temps of `path` left by writers that were killed."""
        tmp = temp_name(path)
        try:
            self._retry("writing", path, lambda _: write(tmp))
            kept = self._retry("writing", path, lambda _: self.fs.info(tmp).get("size"))
            if kept is not None and kept != nbytes:
                raise StorageError(f"writing {url_of(self.fs, path)} failed: the store kept {kept} of {nbytes} bytes")
            self._retry("writing", path, lambda attempt: self._rename(tmp, path, attempt, nbytes))
        except Exception:
            try:
                self.fs.rm_file(tmp)
            except Exception:  # noqa: BLE001 - best effort: a temp name is never taken for the file
                pass
            raise
        self._sweep_temps(path)

    def _rename(self, tmp: str, path: str, attempt: int, nbytes: int) -> None:
        try:
            self.fs.mv(tmp, path)
        except FileNotFoundError:  # an earlier attempt renamed it and then lost the answer?
            if attempt == 1 or self.fs.exists(tmp) or self.fs.info(path).get("size") != nbytes:
                raise

    def _sweep_temps(self, path: str) -> None:
        parent, _, base = path.rpartition("/")
        try:
            names = self._retry("listing", parent or "/", lambda _: self.fs.ls(parent or "/", detail=False))
            for p in names:
                if posixpath.basename(p.rstrip("/")).startswith(f"{base}.tmp-"):
                    self.rm_file(p)
        except Exception:  # noqa: BLE001 - best effort: stale temps never count as output
            pass

    # ---- deletes and renames: repeating one that went through must not fail --------------------------------
    def _gone_ok(self, action: str, path: str, fn: Callable[[], Any]) -> None:
        def once(attempt: int) -> None:
            try:
                fn()
            except FileNotFoundError:
                if attempt == 1:
                    raise
        self._retry(action, path, once)

    def rm_file(self, path: str) -> None:
        self._gone_ok("deleting", path, lambda: self.fs.rm_file(path))

    _rm = rm_file

    def rm(self, path: str, recursive: bool = False, maxdepth: int | None = None) -> None:
        self._gone_ok("deleting", path, lambda: self.fs.rm(path, recursive=recursive, maxdepth=maxdepth))

    def rmdir(self, path: str) -> None:
        self._gone_ok("deleting", path, lambda: self.fs.rmdir(path))

    def mv(self, path1: str, path2: str, **kwargs: Any) -> None:
        self._gone_ok("renaming", path1, lambda: self.fs.mv(path1, path2, **kwargs))

    rename = mv

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        def once(attempt: int) -> None:
            try:
                self.fs.mkdir(path, create_parents=create_parents, **kwargs)
            except FileExistsError:
                if attempt == 1:
                    raise
        self._retry("creating", path, once)


def with_retries(fs: fsspec.AbstractFileSystem) -> Any:
    """`fs` wrapped in RetryingFileSystem, unless it is local, already wrapped, or its client retries itself."""
    if isinstance(fs, (LocalFileSystem, RetryingFileSystem)) or protocol_of(fs) in _OWN_RETRIES:
        return fs
    return RetryingFileSystem(fs)


class _RetryingReadFile(AbstractBufferedFile):
    """Read-only buffered file of a RetryingFileSystem: each block is one ranged `cat_file`, retried on its own."""

    def _fetch_range(self, start: int, end: int) -> bytes:
        fs: RetryingFileSystem = self.fs
        return fs._retry("reading", self.path, lambda _: fs.fs.cat_file(self.path, start=start, end=end))


class _WholeWriteFile(io.BytesIO):
    """Collects a file written through a RetryingFileSystem and stores it whole on `close` (exclusively for "xb");
    an exception inside `with`, or garbage collection, stores nothing."""

    def __init__(self, fs: RetryingFileSystem, path: str, exclusive: bool) -> None:
        super().__init__()
        self.fs, self.path, self.exclusive = fs, path, exclusive

    def close(self) -> None:
        if self.closed:
            return
        data = self.getvalue()
        super().close()
        self.fs.pipe_file(self.path, data, mode="create" if self.exclusive else "overwrite")

    def discard(self) -> None:
        super().close()

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        if exc_type is not None:
            self.discard()
        else:
            self.close()

    def __del__(self) -> None:
        if not self.closed:
            self.discard()
