"""Canonical episode model shared by every reader and writer (no I/O here).

A reader turns a source dataset into `EpisodeRef`s (small, picklable, planned on the driver) and loads each ref
into an `Episode` (per-step columns as numpy, images as encoded bytes or a `VideoRef`). Video is never decoded by
a reader: the convert stage streams it.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal, Sequence

import numpy as np

FeatureKind = Literal["tensor", "image", "video", "string"]
# What a feature *is*, whatever the source calls it. Readers declare it; the Spec stage and the writers name and lay
# out features by role, never by a source's key:
#   state / observation: low-dim observations (the robot state; any other observation tensor)
#   action: the command of the step          camera / depth: per-step images (colour; 16-bit or single-channel depth)
#   reward, discount: per-step scalars        is_first / is_last / terminal: per-step episode-boundary flags
#   language: per-step instruction text       metadata: per-episode values
#   bookkeeping: index columns the target re-derives (frame index, timestamps, global index): not data
#   other: data with no standard place (kept under its canonical name)
Role = Literal["state", "observation", "action", "camera", "depth", "reward", "discount", "is_first", "is_last",
               "terminal", "language", "metadata", "bookkeeping", "other"]


@dataclass(frozen=True)
class FeatureSpec:
    """One source feature: what it is and its per-step shape (images always HWC here)."""

    key: str
    kind: FeatureKind
    dtype: str
    shape: tuple[int, ...]
    names: Any = None
    declared_shape: tuple[int, ...] | None = None  # as written in the source (may be CHW)
    codec: str | None = None
    role: Role | None = None  # None: not declared by the reader (the Spec stage infers it from the key)
    name: str | None = None  # canonical "/"-separated name (e.g. observation/state, observation/image_wrist)
    scalar: bool = False  # one value per step whatever `shape` says (LeRobot's shape [1] columns): canonical shape ()
    note: str | None = None  # why a bookkeeping/unmapped feature is left out (shown in mapping.md)


@dataclass(frozen=True)
class VideoRef:
    """Where an episode's frames of one camera live: a file and a time window inside it."""

    path: str  # relative to the dataset root
    from_timestamp: float = 0.0
    to_timestamp: float | None = None


@dataclass(frozen=True)
class EpisodeRef:
    """A planned episode: enough to load it, small enough to ship to a worker."""

    episode_index: int
    length: int
    data_path: str  # relative to the dataset root
    videos: tuple[tuple[str, VideoRef], ...] = ()
    tasks: tuple[str, ...] = ()
    global_from: int | None = None  # v3.0: dataset_from_index
    global_to: int | None = None
    source_id: str | None = None  # the source's own key for the episode (HDF5 group, ORTF episode_id), if any
    locator: tuple[int, int] | None = None  # (byte offset, byte length) of the episode inside data_path, if known
    split: str | None = None  # the source's split of the episode (train / val / test), if it has splits

    @property
    def video_map(self) -> dict[str, VideoRef]:
        return dict(self.videos)

    def source_files(self) -> tuple[str, ...]:
        """Files this episode reads, data first then videos (used to group episodes into units)."""
        return (self.data_path, *(v.path for _, v in self.videos))


class RawFrames(Sequence[bytes]):
    """Raw (N, H, W, C) uint8/uint16 frames that behave like a list of PNG bytes (encoded lazily, lossless).

    Readers whose source stores pixels uncompressed (Minari raw Box images, ORTF 16-bit depth) put one of these in
    `Episode.images`: the convert stage encodes `array` directly, anything else sees ordinary PNG bytes."""

    def __init__(self, array: np.ndarray) -> None:
        if array.ndim == 3:
            array = array[..., None]
        if array.ndim != 4 or array.dtype not in (np.uint8, np.uint16):
            raise ValueError(f"RawFrames needs (N, H, W[, C]) uint8/uint16, got {array.shape} {array.dtype}")
        self.array = array

    def __len__(self) -> int:
        return int(self.array.shape[0])

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return png_bytes(self.array[i])

    def __iter__(self) -> Iterator[bytes]:
        return (self[i] for i in range(len(self)))


def png_bytes(frame: np.ndarray, compress_level: int = 1) -> bytes:
    """One HxWxC (or HxW) uint8/uint16 frame -> PNG bytes (16-bit grey stays 16-bit)."""
    from PIL import Image

    arr = frame[:, :, 0] if frame.ndim == 3 and frame.shape[2] == 1 else frame
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(arr)).save(buf, format="PNG", compress_level=compress_level)
    return buf.getvalue()


@dataclass
class Episode:
    """A loaded episode: per-step arrays keyed by source feature key, images encoded, videos referenced."""

    ref: EpisodeRef
    length: int
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    images: dict[str, list[bytes]] = field(default_factory=dict)
    videos: dict[str, VideoRef] = field(default_factory=dict)
    timestamps: np.ndarray | None = None  # per-step, episode-relative seconds
    step_tasks: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def episode_index(self) -> int:
        return self.ref.episode_index


@dataclass
class QuarantineRecord:
    """An episode left out of the output, and why."""

    episode_index: int
    code: str
    reason: str
    file: str | None = None

    def line(self) -> str:
        where = f" file={self.file}" if self.file else ""
        return f"quarantined[{self.code}] episode={self.episode_index}{where}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"episode_index": self.episode_index, "code": self.code, "reason": self.reason, "file": self.file}
