"""Source readers: REGISTRY maps a format name to a dotted class path; `open_reader` detects the format.

A source is a dataset folder on any fsspec URL. Minari sources may also be given as their
`.../data/main_data.hdf5` path or as a dataset id (`pointmaze/umaze-random-v0`, or without `-vN` for the newest
version) resolved under `$MINARI_DATASETS_PATH` (default `~/.minari/datasets`), as minari itself does.
"""
from __future__ import annotations

import importlib
import os
import posixpath
import re
from typing import Any

from robo_ray.errors import SourceNotFound, UnknownFormat
from robo_ray.readers.base import Reader
from robo_ray.storage import join, url_to_fs

REGISTRY: dict[str, str] = {
    "lerobot": "robo_ray.formats.lerobot.reader:LeRobotReader",
    "minari": "robo_ray.formats.minari.reader:MinariReader",
    "ortf": "robo_ray.formats.ortf.reader:OrtfReader",
}

_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_MINARI_ID = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
_VERSION = re.compile(r"-v(\d+)$")


def _load(dotted: str) -> type:
    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


def minari_root() -> str:
    return os.path.abspath(os.environ.get("MINARI_DATASETS_PATH") or os.path.expanduser("~/.minari/datasets"))


def resolve_minari_id(dataset_id: str) -> str | None:
    """The folder of a Minari dataset id under MINARI_DATASETS_PATH (newest `-vN` when the version is left out)."""
    if not _MINARI_ID.match(dataset_id) or ".." in dataset_id.split("/"):
        return None
    root = minari_root()
    path = os.path.join(root, *dataset_id.split("/"))
    if os.path.isdir(os.path.join(path, "data")):
        return path
    if _VERSION.search(dataset_id):
        return None
    parent, base = os.path.split(path)
    if not os.path.isdir(parent):
        return None
    versions = [(int(m.group(1)), name) for name in os.listdir(parent)
                if name.startswith(base + "-v") and (m := _VERSION.search(name)) and name[:m.start()] == base
                and os.path.isdir(os.path.join(parent, name, "data"))]
    return os.path.join(parent, max(versions)[1]) if versions else None


def resolve_source(url: str, storage_options: dict[str, Any] | None = None) -> str:
    """The URL itself when it exists; else, for a plain relative name, the Minari dataset id it names."""
    fs, root = url_to_fs(url, storage_options)
    if fs.exists(root):
        return url
    if not _SCHEME.match(url) and not os.path.isabs(url):
        found = resolve_minari_id(url.strip("/"))
        if found:
            return found
    raise SourceNotFound(f"source not found: {url}" + ("" if _SCHEME.match(url) else
                         f" (nor a Minari dataset id under MINARI_DATASETS_PATH={minari_root()})"))


def detect_format(url: str, storage_options: dict[str, Any] | None = None) -> str:
    """Name the source format from its files: meta/info.json -> lerobot, meta/manifest.json -> ortf,
    data/main_data.hdf5 or data/metadata.json (or a .hdf5 file) -> minari."""
    url = resolve_source(url, storage_options)
    fs, root = url_to_fs(url, storage_options)
    if fs.isfile(root):
        if root.endswith(".hdf5"):
            return "minari"
        raise UnknownFormat(f"unknown source format at {url}: a file, and not a Minari main_data.hdf5")
    if fs.exists(join(root, "meta", "info.json")):
        return "lerobot"
    if fs.exists(join(root, "meta", "manifest.json")):
        return "ortf"
    for base in (join(root, "data"), root):
        if fs.exists(join(base, "main_data.hdf5")) or (fs.exists(join(base, "metadata.json"))
                                                       and posixpath.basename(base) == "data"):
            return "minari"
    raise UnknownFormat(f"unknown source format at {url}: no meta/info.json (LeRobot), meta/manifest.json (ORTF) "
                        "or data/main_data.hdf5 / data/metadata.json (Minari) found")


def open_reader(url: str, fmt: str | None = None, storage_options: dict[str, Any] | None = None) -> Reader:
    if fmt is not None and fmt not in REGISTRY:
        raise UnknownFormat(f"unknown source format {fmt!r}; known: {', '.join(sorted(REGISTRY))}")
    url = resolve_source(url, storage_options)
    fmt = fmt or detect_format(url, storage_options)
    return _load(REGISTRY[fmt])(url, storage_options=storage_options)
