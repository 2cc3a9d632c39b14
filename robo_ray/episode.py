"""Canonical episode model shared by every reader and writer (no I/O here).

A reader turns a source dataset into `EpisodeRef`s (small, picklable, planned on the driver) and loads each ref
into an `Episode` (per-step columns as numpy, images as encoded bytes or a `VideoRef`). Video is never decoded by
a reader: the convert stage streams it.
"""
from __future__ import annotations

import io
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Literal, Sequence, overload

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
    """One source feature: what it is and its per-step shape (images always HWC here).

    `key`, `kind`, `dtype`, `shape` describe the data as the reader loads it (`Episode.columns[key]` is
    (T, *shape), or `Episode.images` / `Episode.videos` for images). The last five fields are the reader's
    declaration of what the feature *means*, so that the Spec stage (robo_ray/mapping.py) and the writers place it
    by role and canonical name without knowing the source format:

    * `role`: see `Role`; None = not declared (the Spec stage treats it as `other`, or `camera` / `depth` for
      images, under a name made from the key).
    * `name`: the canonical "/"-separated name of a data feature (state / observation / action / camera / depth
      / other): `observation/state`, `observation/image` (one camera) or `observation/image_<camera>`,
      `observation/depth[_<camera>]`, `action`, `observation/<rest>`, ... Unique among the data features of a
      source (the reader suffixes later duplicates `_2`, `_3`, ...). Step fields (reward, discount, is_first,
      is_last, terminal) may carry their RLDS-style name too; the Spec stage uses their role.
    * `scalar`: one value per step whatever `shape` says (LeRobot's shape [1] columns other than action and
      observation.state): canonical shape ().
    * `channels_first`: `declared_shape` is the frames' layout in the source and is not HWC (CHW): the frames are
      turned to HWC and mapping.md says "CHW->HWC".
    * `note`: why a feature that is not data (bookkeeping, text with no tensor form) is left out of the steps,
      shown in mapping.md's "Not Mapped" table.
    """

    key: str
    kind: FeatureKind
    dtype: str
    shape: tuple[int, ...]
    names: Any = None
    declared_shape: tuple[int, ...] | None = None  # as written in the source (may be CHW)
    codec: str | None = None
    role: Role | None = None  # None: not declared by the reader
    name: str | None = None  # canonical "/"-separated name (e.g. observation/state, observation/image_wrist)
    scalar: bool = False  # one value per step whatever `shape` says: canonical shape ()
    note: str | None = None  # why a bookkeeping / unmapped feature is left out (shown in mapping.md)
    channels_first: bool = False  # declared_shape is channel-first: frames become HWC ("CHW->HWC")


@dataclass(frozen=True, slots=True)
class VideoRef:
    """Where an episode's frames of one camera live: a file and a time window inside it."""

    path: str  # relative to the dataset root
    from_timestamp: float = 0.0
    to_timestamp: float | None = None


@dataclass(frozen=True, slots=True)
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


_NONE = -1  # RefTable's "None" in an integer column (episode indices and global offsets are never negative)


class RefTable(Sequence[EpisodeRef]):
    """Many `EpisodeRef`s held as columns: the integers in int64 arrays, the rest (data path, videos, tasks,
    source id, locator, split) as a code into the table's distinct combinations. ~40 bytes per episode instead of
    ~200 (an object and its integers): an inventory of 200,000 episodes is ~8 MB. Reads like a list of refs
    (index, slice, iterate: refs are built on access); `append` / `extend` add to it; pickles as its columns."""

    __slots__ = ("_ep", "_len", "_from", "_to", "_code", "_combos", "_combo_ids")

    def __init__(self, refs: Iterable[EpisodeRef] = ()) -> None:
        self._ep, self._len, self._from, self._to, self._code = (array("q") for _ in range(5))
        self._combos: list[tuple[Any, ...]] = []
        self._combo_ids: dict[tuple[Any, ...], int] = {}
        self.extend(refs)

    @staticmethod
    def of(refs: "Sequence[EpisodeRef] | RefTable") -> "RefTable":
        return refs if isinstance(refs, RefTable) else RefTable(refs)

    def append(self, ref: EpisodeRef) -> None:
        combo = (ref.data_path, ref.videos, ref.tasks, ref.source_id, ref.locator, ref.split)
        code = self._combo_ids.get(combo)
        if code is None:
            code = self._combo_ids[combo] = len(self._combos)
            self._combos.append(combo)
        self._ep.append(ref.episode_index)
        self._len.append(ref.length)
        self._from.append(_NONE if ref.global_from is None else ref.global_from)
        self._to.append(_NONE if ref.global_to is None else ref.global_to)
        self._code.append(code)

    def extend(self, refs: Iterable[EpisodeRef]) -> None:
        for ref in refs:
            self.append(ref)

    def __len__(self) -> int:
        return len(self._ep)

    @overload
    def __getitem__(self, i: int) -> EpisodeRef: ...

    @overload
    def __getitem__(self, i: slice) -> "RefTable": ...

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            if i.step in (None, 1):
                return self._rows(slice(i.start, i.stop))
            return self.take(range(len(self))[i])
        return self._ref(range(len(self))[i])

    def _ref(self, k: int) -> EpisodeRef:
        data_path, videos, tasks, source_id, locator, split = self._combos[self._code[k]]
        g0, g1 = self._from[k], self._to[k]
        return EpisodeRef(self._ep[k], self._len[k], data_path, videos, tasks, None if g0 == _NONE else g0,
                          None if g1 == _NONE else g1, source_id, locator, split)

    def _rows(self, sl: slice) -> "RefTable":
        out = RefTable()
        out._ep, out._len, out._from, out._to = self._ep[sl], self._len[sl], self._from[sl], self._to[sl]
        out._code, out._combos, out._combo_ids = self._code[sl], self._combos, self._combo_ids
        return out

    def take(self, positions: Iterable[int]) -> "RefTable":
        """The refs at `positions`, in that order."""
        out = RefTable()
        for k in positions:
            out._ep.append(self._ep[k])
            out._len.append(self._len[k])
            out._from.append(self._from[k])
            out._to.append(self._to[k])
            out._code.append(self._code[k])
        out._combos, out._combo_ids = self._combos, self._combo_ids
        return out

    def __iter__(self) -> Iterator[EpisodeRef]:
        return (self._ref(k) for k in range(len(self)))

    def episode_indices(self) -> list[int]:
        return self._ep.tolist()

    def lengths(self) -> list[int]:
        return self._len.tolist()

    def episode_array(self) -> np.ndarray:
        """The episode indices as an int64 array (a copy: 8 bytes per episode)."""
        return np.frombuffer(self._ep, dtype=np.int64).copy() if len(self) else np.zeros(0, np.int64)

    def length_array(self) -> np.ndarray:
        """The episodes' steps as an int64 array (a copy)."""
        return np.frombuffer(self._len, dtype=np.int64).copy() if len(self) else np.zeros(0, np.int64)

    def sorted_by_episode(self) -> "RefTable":
        """A copy ordered by episode index (stable)."""
        return self.take(sorted(range(len(self)), key=self._ep.__getitem__))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (RefTable, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"RefTable({len(self)} refs)"

    def __reduce__(self) -> tuple[Any, ...]:
        used = sorted(set(self._code))  # only the combinations these rows use travel
        remap = {c: k for k, c in enumerate(used)}
        codes = array("q", (remap[c] for c in self._code))
        return _ref_table_from, (self._ep.tobytes(), self._len.tobytes(), self._from.tobytes(),
                                 self._to.tobytes(), codes.tobytes(), [self._combos[c] for c in used])


def _ref_table_from(ep: bytes, length: bytes, g0: bytes, g1: bytes, code: bytes,
                    combos: list[tuple[Any, ...]]) -> RefTable:
    out = RefTable()
    for col, raw in ((out._ep, ep), (out._len, length), (out._from, g0), (out._to, g1), (out._code, code)):
        col.frombytes(raw)
    out._combos = combos
    out._combo_ids = {c: k for k, c in enumerate(combos)}
    return out


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


# ---- what writers receive ----------------------------------------------------------------------------------------
# A frame as it reaches a writer: a decoded video frame (PyAV, YUV planes untouched), a decoded HxWxC array
# (uint8, or uint16 depth), or the source's encoded image bytes (PNG/JPEG) that a writer may pass through unchanged.
FrameItem = Any  # av.VideoFrame | np.ndarray | bytes


@dataclass(frozen=True)
class EncodedVideo:
    """One camera's frames of one episode as the source holds them, encoded: a writer whose target can hold that
    stream as it is may copy its packets instead of iterating the decoded `Frames` (it then never iterates them).
    Frame k of the episode is the one at `from_timestamp + timestamps[k]` (within `tolerance_s`) in the file's
    first video stream; frames from `to_timestamp` on belong to other episodes (None: to the end of the file)."""

    path: str  # the file, as messages name it (relative to the source root)
    open: Callable[[], Any]  # -> a local path or a binary file object; raises VideoMissing when there is none
    from_timestamp: float
    to_timestamp: float | None
    timestamps: np.ndarray  # per step, episode-relative seconds
    tolerance_s: float
    height: int
    width: int


class Frames:
    """One camera's frames of one episode, produced lazily: the video is decoded while the writer iterates, so
    memory does not grow with the episode and no writer re-decodes what another encoded. Iterable once; iteration
    raises the episode's error (FrameCountMismatch, TimestampMismatch, ...) where the source turns out bad."""

    def __init__(self, length: int, items: Iterator[FrameItem], shape: tuple[int, ...], dtype: str = "uint8",
                 encoded: EncodedVideo | None = None) -> None:
        self.length = length
        self.encoded = encoded  # the source's encoded stream of these frames, when they come from a video
        self.shape = tuple(shape)  # HxWxC of the mapping (after a resize)
        self.dtype = dtype
        self._items: Iterator[FrameItem] | None = items
        self._source: Iterator[FrameItem] | None = items  # kept for `close`, also once iteration began

    def __len__(self) -> int:
        return self.length

    @property
    def channels(self) -> int:
        return int(self.shape[2]) if len(self.shape) == 3 else 1

    def __iter__(self) -> Iterator[FrameItem]:
        if self._items is None:
            raise RuntimeError("Frames can be iterated only once")
        items, self._items = self._items, None
        return items

    def close(self) -> None:
        """Stop producing (closes a video generator mid-stream, or stops a decoding thread), also when the writer
        stopped iterating early."""
        items, self._items, self._source = self._source, None, None
        close = getattr(items, "close", None)
        if close is not None:
            close()


@dataclass
class CanonicalEpisode:
    """One episode as every writer receives it: named by the mapping's targets, typed, with the episode's
    boundary flags, reward, discount and language made explicit (no target's layout rules here)."""

    ref: EpisodeRef
    length: int
    tensors: dict[str, np.ndarray]  # target -> (T, *shape), dtype as the mapping says
    texts: dict[str, list[str]]  # target -> one string per step
    cameras: dict[str, Frames]  # target -> frames (decoded lazily)
    reward: np.ndarray  # float32 (T,)
    discount: np.ndarray  # float32 (T,)
    is_first: np.ndarray  # bool (T,)
    is_last: np.ndarray  # bool (T,)
    is_terminal: np.ndarray  # bool (T,)
    language: list[str]  # the instruction of each step ("" when the source has none)
    metadata: dict[str, Any]  # episode metadata, typed as the mapping says
    timestamps: np.ndarray | None = None  # per-step source time (episode-relative seconds), when known

    @property
    def episode_index(self) -> int:
        return self.ref.episode_index

    def close(self) -> None:
        for frames in self.cameras.values():
            frames.close()
