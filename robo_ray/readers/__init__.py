"""Source readers: REGISTRY maps a format name to a dotted class path (a `BaseReader` subclass); `open_reader`
detects the format by asking each registered reader, in order, whether it recognises the source (`sniff`).

A source is a dataset folder on any fsspec URL. Minari sources may also be given as their
`.../data/main_data.hdf5` path or as a dataset id (`pointmaze/umaze-random-v0`, or without `-vN` for the newest
version) resolved under `$MINARI_DATASETS_PATH` (default `~/.minari/datasets`), as minari itself does.
"""
from __future__ import annotations

import importlib
import logging
import os
import re
from typing import Any

from robo_ray.errors import ConfigError, SourceNotFound, UnknownFormat
from robo_ray.readers.base import BaseReader, check_fps
from robo_ray.storage import url_to_fs

# Detection asks the readers in this order: the first whose `sniff` says yes reads the source.
REGISTRY: dict[str, str] = {
    "lerobot": "robo_ray.formats.lerobot.reader:LeRobotReader",
    "ortf": "robo_ray.formats.ortf.reader:OrtfReader",
    "minari": "robo_ray.formats.minari.reader:MinariReader",
    # HDF5 recordings: each looks inside the file (Minari: root episode_N groups; robomimic: data/demo_N; ALOHA:
    # /observations + /action), so none takes another's file
    "robomimic": "robo_ray.formats.robomimic.reader:RobomimicReader",
    "aloha": "robo_ray.formats.aloha.reader:AlohaReader",
    # zarr replay buffers (Diffusion Policy, UMI): a .zgroup with meta/episode_ends/.zarray, or a zip store of one
    "zarr": "robo_ray.formats.zarr_buffer.reader:ZarrBufferReader",
    # ROS bags: a folder whose entries are *.mcap / *.bag files or rosbag2 folders (metadata.yaml), or one bag
    "rosbag": "robo_ray.formats.rosbag.reader:RosbagReader",
    "rlds": "robo_ray.formats.rlds.reader:RldsReader",
}
# What to install when a reader's module cannot be imported (shown with the ImportError; a format whose
# dependencies are missing is skipped by detection and named in its "unknown format" error).
INSTALL_HINTS: dict[str, str] = {
    "lerobot": "pip install pyarrow av",
    "ortf": "pip install pyarrow av",
    "minari": "pip install h5py (the minari package itself is not needed)",
    "robomimic": "pip install h5py",
    "aloha": "pip install h5py simplejpeg",
    "zarr": "pip install 'zarr>=2.18,<3' numcodecs imagecodecs",
    "rosbag": "pip install rosbags",
}

log = logging.getLogger("robo_ray.readers")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_MINARI_ID = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
_VERSION = re.compile(r"-v(\d+)$")


def _load(dotted: str) -> type:
    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


def reader_class(fmt: str) -> type[BaseReader]:
    """The reader class registered for `fmt`; a missing dependency is one ConfigError with the install hint."""
    if fmt not in REGISTRY:
        raise UnknownFormat(f"unknown source format {fmt!r}; known: {', '.join(sorted(REGISTRY))}")
    try:
        return _load(REGISTRY[fmt])
    except ImportError as exc:
        hint = INSTALL_HINTS.get(fmt)
        raise ConfigError(f"the {fmt} reader cannot be loaded ({exc})" + (f": {hint}" if hint else "")) from exc


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
    """Name the source format: the first registered reader whose `sniff` recognises the source (a reader whose
    dependencies are missing is skipped, and named in the error when no reader recognises the source)."""
    url = resolve_source(url, storage_options)
    fs, root = url_to_fs(url, storage_options)
    hints: list[str] = []
    file_hints: list[str] = []
    unloadable: list[str] = []
    for fmt in REGISTRY:
        try:
            cls = reader_class(fmt)
        except ConfigError as exc:
            unloadable.append(str(exc))
            continue
        if cls.sniff(fs, root):
            return fmt
        hints.append(getattr(cls, "sniff_hint", "") or f"{fmt} dataset files")
        if getattr(cls, "sniff_file_hint", None):
            file_hints.append(cls.sniff_file_hint)
    skipped = "".join(f"; not checked: {u}" for u in unloadable)
    if fs.isfile(root):
        what = f"a file, and not {' or '.join(file_hints)}" if file_hints else "a file, not a dataset folder"
        raise UnknownFormat(f"unknown source format at {url}: {what}{skipped}")
    listed = ", ".join(hints[:-1]) + f" or {hints[-1]}" if len(hints) > 1 else "".join(hints) or "dataset files"
    raise UnknownFormat(f"unknown source format at {url}: no {listed} found{skipped}")


def open_reader(url: str, fmt: str | None = None, storage_options: dict[str, Any] | None = None,
                options: dict[str, Any] | None = None) -> BaseReader:
    """The reader for the source at `url` (format detected unless given); `options` (config `source.options`, e.g.
    an RLDS source's `splits`, `name`, `fps`) go to the reader's constructor as keywords."""
    if fmt is not None:
        reader_class(fmt)  # an unknown name or a missing dependency, before touching the source
    url = resolve_source(url, storage_options)
    fmt = fmt or detect_format(url, storage_options)
    cls = reader_class(fmt)
    options = dict(options or {})
    import inspect

    params = inspect.signature(cls.__init__).parameters
    given_fps = options.pop("fps", None) if "fps" not in params else None  # the one fps rule (BaseReader)
    if given_fps is not None:
        check_fps(given_fps, "source.options.fps")
    if options:
        unknown = sorted(k for k in options if k not in params or k in ("self", "url", "storage_options"))
        if unknown:
            raise ConfigError(f"source.options: the {fmt} reader takes no option {', '.join(unknown)}")
    reader = cls(url, storage_options=storage_options, **options)
    if given_fps is not None:
        reader.apply_given_fps(given_fps)
        if reader.fps_ignored is not None:
            log.warning(reader.fps_findings()[0].message)
    return reader
