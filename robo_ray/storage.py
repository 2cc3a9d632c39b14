"""fsspec URLs -> filesystems, joins, atomic writes, sha256. Every dataset path goes through here."""
from __future__ import annotations

import hashlib
import os
import posixpath
import uuid
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem


def url_to_fs(url: str, storage_options: dict[str, Any] | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """Resolve a URL (local path, s3://, gs://, hf://, memory://) to (filesystem, root path)."""
    fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    if isinstance(fs, LocalFileSystem):
        path = os.path.abspath(path)
    return fs, path.rstrip("/") or "/"


def join(root: str, *parts: str) -> str:
    return posixpath.join(root, *parts)


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def write_bytes_atomic(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> None:
    """Write so a reader never sees a partial file: temp + rename locally, one PUT on object stores."""
    parent = posixpath.dirname(path)
    if is_local(fs):
        os.makedirs(parent, exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    else:
        fs.pipe_file(path, data)


def write_text_atomic(fs: fsspec.AbstractFileSystem, path: str, text: str) -> None:
    write_bytes_atomic(fs, path, text.encode("utf-8"))


def sha256_file(fs: fsspec.AbstractFileSystem, path: str, chunk: int = 4 << 20) -> str:
    h = hashlib.sha256()
    with fs.open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def is_empty_dir(fs: fsspec.AbstractFileSystem, path: str) -> bool:
    if not fs.exists(path):
        return True
    if not fs.isdir(path):
        return False
    return len(fs.ls(path, detail=False)) == 0
