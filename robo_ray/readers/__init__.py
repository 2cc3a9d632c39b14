"""Source readers: REGISTRY maps a format name to a dotted class path; `open_reader` detects the format."""
from __future__ import annotations

import importlib
from typing import Any

from robo_ray.errors import SourceNotFound, UnknownFormat
from robo_ray.readers.base import Reader
from robo_ray.storage import join, url_to_fs

REGISTRY: dict[str, str] = {
    "lerobot": "robo_ray.readers.lerobot:LeRobotReader",
}


def _load(dotted: str) -> type:
    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


def detect_format(url: str, storage_options: dict[str, Any] | None = None) -> str:
    """Name the source format from its files (meta/info.json -> lerobot)."""
    fs, root = url_to_fs(url, storage_options)
    if not fs.exists(root):
        raise SourceNotFound(f"source not found: {url}")
    if fs.exists(join(root, "meta", "info.json")):
        return "lerobot"
    raise UnknownFormat(f"unknown source format at {url}: no meta/info.json (LeRobot) found")


def open_reader(url: str, fmt: str | None = None, storage_options: dict[str, Any] | None = None) -> Reader:
    fmt = fmt or detect_format(url, storage_options)
    if fmt not in REGISTRY:
        raise UnknownFormat(f"unknown source format {fmt!r}; known: {', '.join(sorted(REGISTRY))}")
    return _load(REGISTRY[fmt])(url, storage_options=storage_options)
