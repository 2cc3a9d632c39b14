"""Episodes <-> Ray Dataset rows. Columns are named by the source's canonical names (the default mapping's
targets: `observation/state`, `action`, `observation/image_<camera>`, ...) plus the step fields, the language, the
metadata and the bookkeeping of `robo_ray.data.spec`.

* `episode_row` / `step_rows`: a `CanonicalEpisode` (what every writer receives) as one row, or one row a step.
  Cameras are encoded frames (the bytes the default mapping's encoder makes: a video frame as JPEG from its YUV
  planes, exactly what a writer would make of it; an embedded image as its source bytes) or, decoded, HxWxC arrays.
* `row_episode`: a row back as the `Episode` the source's reader would have loaded (keys of the source features,
  encoded frames as images), so the Convert stage turns it into the same `CanonicalEpisode`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from robo_ray.data.spec import (EPISODE, LANGUAGE, LENGTH, METADATA, QUARANTINE, REF, SOURCE, SPEC, SPLIT, STEP,
                                STEP_FIELDS, TIMESTAMP, TIMESTAMPS)
from robo_ray.episode import CanonicalEpisode, Episode, EpisodeRef, Frames, QuarantineRecord, RawFrames
from robo_ray.errors import RowUnreadable
from robo_ray.images import ImageEncoder, decode_image
from robo_ray.mapping import SOURCE_ROLES, FieldMap, Mapping

_DTYPES = {"float32": np.float32, "int64": np.int64, "bool": np.bool_, "uint8": np.uint8, "uint16": np.uint16}
# a Defaults field naming a step column's source -> the row column holding the step field
_STEP_SOURCES = {"reward_source": "reward", "discount_source": "discount", "is_first_source": "is_first",
                 "is_last_source": "is_last", "is_terminal_source": "is_terminal"}
assert set(_STEP_SOURCES) == set(SOURCE_ROLES.values())


@dataclass(frozen=True)
class RowLayout:
    """Which columns a row has (the mapping's tensors and cameras) and whether cameras are decoded."""

    mapping: Mapping
    decode_images: bool = False

    def tensors(self) -> list[FieldMap]:
        return [fm for fm in self.mapping.steps if fm.kind == "tensor"]

    def cameras(self) -> list[FieldMap]:
        return self.mapping.image_maps()

    def texts(self) -> list[FieldMap]:
        """Per-step text features (e.g. a second instruction): one string a step."""
        return [fm for fm in self.mapping.steps if fm.kind == "text"]

    def encoder(self, fm: FieldMap) -> ImageEncoder:
        return ImageEncoder(fmt=self.mapping.encoding_of(fm), quality=self.mapping.images.jpeg_quality)

    def frames(self, fm: FieldMap, frames: Frames) -> Iterator[Any]:
        """A camera's frames as the row holds them: encoded bytes, or decoded HxWxC arrays."""
        channels = frames.channels
        enc = None if self.decode_images else self.encoder(fm)
        for item in frames:
            if enc is not None:
                yield item if isinstance(item, bytes) else enc.encode_item(item, channels)
            elif isinstance(item, bytes):
                yield decode_image(item, channels)
            elif isinstance(item, np.ndarray):
                yield item
            else:  # a decoded video frame
                arr = item.to_ndarray(format="gray" if channels == 1 else "rgb24")
                yield arr[:, :, None] if arr.ndim == 2 else arr


def episode_row(ep: CanonicalEpisode, layout: RowLayout, source: str, ref_json: str, spec_json: str) -> dict:
    """One episode as one row (see the module docstring)."""
    row = _header(ep.ref, source, ref_json, spec_json)
    row.update({LENGTH: ep.length, METADATA: json.dumps(ep.metadata, sort_keys=True), QUARANTINE: None,
                LANGUAGE: list(ep.language),
                TIMESTAMPS: np.zeros(0) if ep.timestamps is None else np.asarray(ep.timestamps, np.float64)})
    for name in STEP_FIELDS:
        row[name] = getattr(ep, name)
    for fm in layout.tensors():
        row[fm.target] = ep.tensors[fm.target]
    for fm in layout.texts():
        row[fm.target] = list(ep.texts[fm.target])
    for fm in layout.cameras():
        frames = list(layout.frames(fm, ep.cameras[fm.target]))
        row[fm.target] = np.stack(frames) if layout.decode_images and frames else \
            frames if not layout.decode_images else _no_frames(fm)
    return row


def quarantine_row(ref: EpisodeRef, rec: QuarantineRecord, layout: RowLayout, source: str, ref_json: str,
                   spec_json: str) -> dict:
    """An episode the source could not give: its reason in `quarantine`, its data columns empty (`write`
    quarantines it with that reason; nothing is dropped)."""
    row = _header(ref, source, ref_json, spec_json)
    row.update({LENGTH: ref.length, METADATA: "{}", QUARANTINE: json.dumps(rec.to_dict()), LANGUAGE: [],
                TIMESTAMPS: np.zeros(0)})
    for name in STEP_FIELDS:
        row[name] = np.zeros(0, np.bool_ if name.startswith("is_") else np.float32)
    for fm in layout.tensors():
        row[fm.target] = np.zeros((0, *fm.shape), _DTYPES.get(fm.dtype, np.float32))
    for fm in layout.texts():
        row[fm.target] = []
    for fm in layout.cameras():
        row[fm.target] = _no_frames(fm) if layout.decode_images else []
    return row


def _header(ref: EpisodeRef, source: str, ref_json: str, spec_json: str) -> dict:
    return {SOURCE: source, EPISODE: ref.episode_index, SPLIT: ref.split or "", REF: ref_json, SPEC: spec_json}


def _no_frames(fm: FieldMap) -> np.ndarray:
    return np.zeros((0, *fm.shape), _DTYPES.get(fm.dtype, np.uint8))


def step_rows(ep: CanonicalEpisode, layout: RowLayout, source: str, chunk: int) -> Iterator[dict[str, Any]]:
    """The episode's steps as batches (column -> values) of at most `chunk` steps; cameras decoded or encoded
    while the batches are made, so memory holds one batch of frames."""
    n = ep.length
    ts = ep.timestamps if ep.timestamps is not None else np.full(n, np.nan)
    cams = {fm.target: layout.frames(fm, ep.cameras[fm.target]) for fm in layout.cameras()}
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        batch: dict[str, Any] = {SOURCE: np.array([source] * (b - a), dtype=object),
                                 EPISODE: np.full(b - a, ep.ref.episode_index, np.int64),
                                 STEP: np.arange(a, b, dtype=np.int64),
                                 LANGUAGE: np.array(ep.language[a:b], dtype=object),
                                 TIMESTAMP: np.asarray(ts[a:b], np.float64)}
        for name in STEP_FIELDS:
            batch[name] = getattr(ep, name)[a:b]
        for fm in layout.tensors():
            batch[fm.target] = ep.tensors[fm.target][a:b]
        for fm in layout.texts():
            batch[fm.target] = np.array(ep.texts[fm.target][a:b], dtype=object)
        for target, it in cams.items():
            frames = [next(it) for _ in range(b - a)]
            batch[target] = np.stack(frames) if layout.decode_images else _objects(frames)
        yield batch


def _objects(values: Sequence[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def row_episode(row: dict[str, Any], ref: EpisodeRef, mapping: Mapping, metadata: dict[str, Any]) -> Episode:
    """A row as the `Episode` its source's reader would have loaded: `mapping` is the source's default mapping
    (its targets are the row's columns, its sources the keys the Convert stage looks up). Raises `RowUnreadable`
    naming the column when a value does not fit (a map edited it into another length or type)."""
    q = row.get(QUARANTINE)
    if q:
        rec = json.loads(q)
        raise RowUnreadable(str(rec.get("reason", "unreadable in its source")), code=str(rec.get("code") or "EP000"))
    n = _length(row, ref)
    columns: dict[str, np.ndarray] = {}
    images: dict[str, Any] = {}
    for fm in mapping.steps:
        value = _column(row, fm.target, ref)
        if fm.kind == "tensor":
            columns[fm.source] = _steps(value, n, fm.target, ref)
        elif fm.kind == "image":
            images[fm.source] = _frames(value, n, fm.target, ref)
        elif fm.kind == "text":
            columns[fm.source] = _texts(value, n, fm.target, ref)
    for field, col in _STEP_SOURCES.items():
        key = getattr(mapping.defaults, field)
        if key:
            columns[key] = _steps(_column(row, col, ref), n, col, ref)
    language = [str(x) for x in _column(row, LANGUAGE, ref)]
    if len(language) != n:
        raise RowUnreadable(f"episode {ref.episode_index}: column {LANGUAGE!r} has {len(language)} values for "
                            f"{n} steps")
    ts = np.asarray(row.get(TIMESTAMPS) if row.get(TIMESTAMPS) is not None else [], np.float64)
    return Episode(ref, n, columns, images, {}, ts if len(ts) == n and n else None, language, metadata)


def _length(row: dict[str, Any], ref: EpisodeRef) -> int:
    try:
        return int(row[LENGTH])
    except (KeyError, TypeError, ValueError):
        raise RowUnreadable(f"episode {ref.episode_index}: column {LENGTH!r} is not a step count") from None


def _column(row: dict[str, Any], name: str, ref: EpisodeRef) -> Any:
    value = row.get(name)
    if value is None:
        raise RowUnreadable(f"episode {ref.episode_index}: column {name!r} is missing or empty")
    return value


def _steps(value: Any, n: int, name: str, ref: EpisodeRef) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise RowUnreadable(f"episode {ref.episode_index}: column {name!r} is not an array ({exc})") from None
    if arr.dtype == object or arr.ndim == 0 or len(arr) != n:
        got = "not a numeric array" if arr.dtype == object or arr.ndim == 0 else f"{len(arr)} steps"
        raise RowUnreadable(f"episode {ref.episode_index}: column {name!r} has {got}, the episode {n}")
    return arr


def _texts(value: Any, n: int, name: str, ref: EpisodeRef) -> np.ndarray:
    """A per-step text column: n strings."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != n:
        got = len(value) if hasattr(value, "__len__") and not isinstance(value, (str, bytes)) else "not a list of"
        raise RowUnreadable(f"episode {ref.episode_index}: column {name!r} has {got} strings for {n} steps")
    return _objects([str(x) for x in value])  # as the Convert stage makes them (str of each value)


def _frames(value: Any, n: int, name: str, ref: EpisodeRef) -> Any:
    """Encoded frames stay bytes (a writer passes its own encoding through); decoded ones become `RawFrames`."""
    if isinstance(value, np.ndarray) and value.dtype != object:
        if value.ndim != 4 or len(value) != n or value.dtype not in (np.uint8, np.uint16):
            raise RowUnreadable(f"episode {ref.episode_index}: column {name!r} holds {value.dtype} frames of shape "
                                f"{value.shape}, expected {n} HxWxC uint8/uint16 frames")
        return RawFrames(value)
    frames = list(value)
    if len(frames) != n or not all(isinstance(f, bytes) for f in frames):
        raise RowUnreadable(f"episode {ref.episode_index}: column {name!r} holds {len(frames)} values, expected "
                            f"{n} encoded frames (bytes)")
    return frames
