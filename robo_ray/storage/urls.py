"""Names of places: a URL's scheme, a filesystem's protocol, joins, URLs for messages, temp names. No I/O."""
from __future__ import annotations

import posixpath
import re
import uuid

import fsspec
from fsspec.implementations.local import LocalFileSystem

OBJECT_STORES = ("s3", "s3a", "gs", "gcs")

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def scheme_of(url: str) -> str:
    m = _SCHEME.match(url or "")
    return m.group(1).lower() if m else "file"


def protocol_of(fs: fsspec.AbstractFileSystem) -> str:
    p = fs.protocol
    return (p[0] if isinstance(p, (tuple, list)) else p) or "file"


def is_object_store(fs: fsspec.AbstractFileSystem) -> bool:
    return protocol_of(fs) in OBJECT_STORES


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def url_of(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """The URL of a filesystem path (`bucket/key` -> `s3://bucket/key`; local paths stay paths)."""
    if is_local(fs):
        return path
    try:
        return fs.unstrip_protocol(path)
    except Exception:  # noqa: BLE001 - only for messages
        return f"{protocol_of(fs)}://{path}"


def join(root: str, *parts: str) -> str:
    return posixpath.join(root, *parts)


def temp_name(path: str) -> str:
    """Where a write goes before it is renamed to `path` (robo-ray's temp names all contain `.tmp-`)."""
    return f"{path}.tmp-{uuid.uuid4().hex[:8]}"
