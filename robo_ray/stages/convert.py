"""Convert: one work unit -> the writer's files for it. `UnitConverter` holds what an actor reuses across units
(reader, open video streams, writer); it imports no Ray and is called the same way in-process or in an actor.

It turns each planned episode into a `CanonicalEpisode` (typed tensors named by the mapping, explicit flags,
reward, discount, language, metadata, and per camera a lazy `Frames` stream: video is decoded while the writer
consumes it) and hands it to the writer's unit sink. It names no format: the writer encodes and lays out.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Union

import numpy as np

from robo_ray.activity import ACTIVITY
from robo_ray.episode import (CanonicalEpisode, EncodedVideo, Episode, EpisodeRef, Frames, QuarantineRecord,
                              RawFrames, VideoRef)
from robo_ray.errors import (DataCorrupt, EpisodeError, FrameCountMismatch, NonFiniteValue, StorageError,
                             TimestampMismatch, VideoDecodeError, VideoMissing)
from robo_ray.mapping import FieldMap, Mapping
from robo_ray.readers import open_reader
from robo_ray.readers.base import Reader
from robo_ray.stages.plan import Unit
from robo_ray.storage import is_local
from robo_ray.video import VideoPool
from robo_ray.writers import UnitResult, UnitSink, Writer

if TYPE_CHECKING:
    from robo_ray.stages.validate import UnitVerifySpec

log = logging.getLogger("robo_ray.convert")


@dataclass(frozen=True)
class ConvertOptions:
    """Per-run knobs that are not part of the mapping."""

    video_tolerance_s: float = 1e-4
    nan_policy: str = "quarantine"  # quarantine | fail | allow
    decoder_threads: int = 1
    decode_ahead: int = 8  # frames a camera's decoding thread may run ahead of the writer (0: no thread)
    decode_thread: bool | str = "auto"  # True | False | "auto": a thread only with a spare CPU (`decodes_in_thread`)
    source_storage_options: dict[str, Any] = field(default_factory=dict)
    target_storage_options: dict[str, Any] = field(default_factory=dict)
    source_options: dict[str, Any] = field(default_factory=dict)  # the reader's keywords (config source.options)


class ConvertHooks:
    """Explicit extension points around each episode (the watchdog's progress, test-only fault injection);
    the default does nothing. Hooks may raise to stop the unit."""

    def before_episode(self, ref: EpisodeRef) -> None:
        pass

    def after_episode(self, ref: EpisodeRef) -> None:
        pass

    def quarantined(self, ref: EpisodeRef) -> None:
        """The episode was quarantined (after `before_episode`; `after_episode` is not called for it)."""


class ChainedHooks(ConvertHooks):
    def __init__(self, *hooks: ConvertHooks) -> None:
        self.hooks = hooks

    def before_episode(self, ref: EpisodeRef) -> None:
        for h in self.hooks:
            h.before_episode(ref)

    def after_episode(self, ref: EpisodeRef) -> None:
        for h in self.hooks:
            h.after_episode(ref)

    def quarantined(self, ref: EpisodeRef) -> None:
        for h in self.hooks:
            _quarantined_hook(h, ref)


def _quarantined_hook(hooks: Any, ref: EpisodeRef) -> None:
    """`hooks.quarantined(ref)` for hooks that have it (hook objects may implement only the episode pair)."""
    fn = getattr(hooks, "quarantined", None)
    if fn is not None:
        fn(ref)


def machine_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


# the CPUs a converter may count on: a number, a function asked before each video episode (a Ray actor's share of
# its node, which grows when the other actors run out of units), or None (the whole machine)
CpuShare = Union[float, Callable[[], float], None]


def decodes_in_thread(options: ConvertOptions, cpus: CpuShare = None) -> bool:
    """Whether each camera is decoded in a thread of its own (`DecodeAhead`): `decode_thread` True / False, or auto:
    only when the converter has a second CPU to itself (`cpus`: its share, asked only here). The thread
    lets one process use two cores; where every core already runs a converter (2 actors on 2 CPUs) it only adds
    hand-offs and cache misses (g1 with 2 actors: 0.79 of the decode + JPEG limit with it, 0.81-0.84 without;
    docs/NOTES.md)."""
    if options.decode_ahead <= 0 or options.decode_thread is False:
        return False
    if options.decode_thread is True:
        return True
    share = cpus() if callable(cpus) else cpus
    return (machine_cpus() if share is None else share) >= 2


class UnitConverter:
    """Converts units of one source into one target's units; reusable across many units. `cpus` (a `CpuShare`)
    decides, episode by episode, whether cameras are decoded in threads of their own (`decodes_in_thread`)."""

    def __init__(self, source_url: str, source_format: str | None, mapping: Mapping, writer: Writer,
                 options: ConvertOptions | None = None, reader: Reader | None = None,
                 hooks: ConvertHooks | None = None, verify: "UnitVerifySpec | None" = None,
                 cpus: CpuShare = None) -> None:
        self.options = options or ConvertOptions()
        self.cpus = cpus
        self._owns_reader = reader is None
        self.reader = reader or open_reader(source_url, source_format, self.options.source_storage_options,
                                            self.options.source_options)
        self.mapping = mapping
        self.writer = writer
        self.hooks = hooks or ConvertHooks()
        self._unlabeled = 0  # this unit's written episodes without any instruction
        self.videos = VideoPool(threads=self.options.decoder_threads)
        self.verify = verify  # re-read each committed unit here, on the worker (Writer.verify_unit)

    def convert(self, unit: Unit, on_quarantine: Callable[[QuarantineRecord], None] | None = None) -> UnitResult:
        """Write the unit; bad episodes are quarantined (recorded in the result), never fatal."""
        sink = self.writer.open_unit(unit)
        self._unlabeled = 0
        self.reader.prepare(unit.refs)  # e.g. the row groups of the unit's episodes, read in one go
        try:
            for ref in unit.refs:
                rec = self._episode_into(sink, ref)
                if rec is not None:
                    sink.quarantine(rec.to_dict())
                    _quarantined_hook(self.hooks, ref)
                    if on_quarantine:
                        on_quarantine(rec)
            res = sink.commit()
            res.unlabeled = self._unlabeled
        except BaseException:
            sink.abort()
            raise
        if self.verify is not None:
            check = self.verify.check(self.writer, self.reader, unit, res)
            res.check = check.to_dict() if check is not None else None
        return res

    def _episode_into(self, sink: UnitSink, ref: EpisodeRef) -> QuarantineRecord | None:
        """Convert one episode into the unit; a bad episode comes back as its quarantine record."""
        self.hooks.before_episode(ref)
        episode: CanonicalEpisode | None = None
        try:
            episode = self.canonical_episode(ref)
            sink.add(episode)
            if episode.length and not any(episode.language):
                self._unlabeled += 1
        except EpisodeError as exc:
            return QuarantineRecord(ref.episode_index, exc.code, str(exc), _file_of(exc, ref))
        except StorageError:  # the store failed after its retries, not the episode: fail the unit
            raise  # (Ray retries it, bounded; in-process the run stops with one line naming the URL)
        except Exception as exc:  # a bug or an unexpected library error: still quarantine, loudly
            log.exception("episode %s: unexpected error", ref.episode_index)
            return QuarantineRecord(ref.episode_index, "EP999", f"unexpected {type(exc).__name__}: {exc}",
                                    ref.data_path)
        finally:
            if episode is not None:
                episode.close()
        self.hooks.after_episode(ref)
        return None

    # ---- one episode -------------------------------------------------------------------------------------------
    def canonical_episode(self, ref: EpisodeRef) -> CanonicalEpisode:
        """Load one episode and give it the mapping's names and types; cameras stay lazy `Frames`."""
        ep = self.reader.load_episode(ref)
        n = ep.length
        tensors: dict[str, np.ndarray] = {}
        texts: dict[str, list[str]] = {}
        for fm in self.mapping.steps:
            if fm.kind == "tensor":
                tensors[fm.target] = self._tensor(ep, fm)
            elif fm.kind == "text":
                texts[fm.target] = [str(x) for x in ep.columns[fm.source]]
        d = self.mapping.defaults
        reward = self._step_column(ep, d.reward_source, np.float32) if d.reward_source \
            else np.full(n, d.reward, dtype=np.float32)
        discount = self._step_column(ep, d.discount_source, np.float32) if d.discount_source \
            else np.full(n, d.discount, dtype=np.float32)
        first = np.zeros(n, dtype=np.bool_)
        last = np.zeros(n, dtype=np.bool_)
        if n:
            first[0] = True
            last[-1] = True
        is_first = self._step_column(ep, d.is_first_source, np.bool_) if d.is_first_source else first
        is_last = self._step_column(ep, d.is_last_source, np.bool_) if d.is_last_source else last
        is_terminal = self._step_column(ep, d.is_terminal_source, np.bool_) if d.is_terminal_source \
            else np.full(n, d.is_terminal, dtype=np.bool_)
        lang = d.step_language(ep.step_tasks, n)
        if len(lang) != n:
            raise DataCorrupt(f"{ep.ref.data_path}: episode {ep.episode_index} has {len(lang)} step tasks for "
                              f"{n} steps")
        metadata = {k: _metadata_value(ep.metadata.get(k), self.mapping.metadata_type(k))
                    for k in self.mapping.episode_metadata}
        cameras = {fm.target: self._frames(ep, fm) for fm in self.mapping.image_maps()}
        return CanonicalEpisode(ref, n, tensors, texts, cameras, reward, discount, is_first, is_last, is_terminal,
                                lang, metadata, ep.timestamps)

    def _step_column(self, ep: Episode, key: str, dtype: type) -> np.ndarray:
        """A per-step source column used for a step field (reward, discount, flags): one value a step."""
        col = ep.columns.get(key)
        if col is None or col.size != ep.length:
            got = "missing" if col is None else f"{col.size} values"
            raise DataCorrupt(f"{ep.ref.data_path}: episode {ep.episode_index} column {key!r} is {got}, "
                              f"expected one value for each of {ep.length} steps")
        arr = col.reshape(ep.length)
        if dtype is np.float32 and arr.dtype.kind == "f" and self.options.nan_policy != "allow" \
                and not np.isfinite(arr).all():
            raise NonFiniteValue(f"{ep.ref.data_path}: episode {ep.episode_index} column {key!r} has NaN/Inf")
        return arr.astype(dtype)

    def _tensor(self, ep: Episode, fm: FieldMap) -> np.ndarray:
        arr = ep.columns[fm.source]
        want = int(np.prod(fm.shape)) if fm.shape else 1
        per_step = int(np.prod(arr.shape[1:])) if arr.ndim > 1 else 1
        if per_step != want:
            raise EpisodeError(f"{ep.ref.data_path}: episode {ep.episode_index} feature {fm.source!r} has "
                               f"{per_step} values per step, mapping says shape {fm.shape}", code="EP205")
        if arr.dtype.kind == "f" and self.options.nan_policy != "allow" and not np.isfinite(arr).all():
            bad = int((~np.isfinite(arr)).reshape(len(arr), -1).any(axis=1).argmax())
            raise NonFiniteValue(f"{ep.ref.data_path}: episode {ep.episode_index} feature {fm.source!r} has "
                                 f"NaN/Inf (first at step {bad})")
        dtype = {"float32": np.float32, "int64": np.int64, "bool": np.bool_}.get(fm.dtype, np.float32)
        return arr.astype(dtype, copy=False)

    def _frames(self, ep: Episode, fm: FieldMap) -> Frames:
        """The camera's frames for the writer: embedded images as their bytes, raw pixels as arrays (channels as
        the mapping says; 16-bit stays 16-bit), video as decoded PyAV frames, produced while the writer reads."""
        channels = fm.shape[2]
        shape = tuple(fm.shape)
        if fm.source in ep.images:
            images = ep.images[fm.source]
            if len(images) != ep.length:
                raise FrameCountMismatch(f"{ep.ref.data_path}: episode {ep.episode_index} image {fm.source!r} has "
                                         f"{len(images)} frames for {ep.length} steps")
            if isinstance(images, RawFrames):  # uncompressed source pixels
                if fm.dtype == "uint16" or images.array.dtype == np.uint16:
                    arrays = images.array.astype(np.uint16)
                    return Frames(ep.length, (_beat(f) for f in arrays), shape, "uint16")
                return Frames(ep.length, (_beat(_channels(f, channels)) for f in images.array), shape)
            return Frames(ep.length, (_beat(b) for b in images), shape, fm.dtype)  # 16-bit PNG: "uint16"
        ref = ep.videos.get(fm.source)
        if ref is None:
            raise VideoMissing(f"episode {ep.episode_index}: no video reference for {fm.source}")
        encoded = self._encoded(ep, fm, ref)
        frames = self._decode_video(ep, fm, ref)
        if decodes_in_thread(self.options, self.cpus):
            # decoded in a thread while the writer encodes (both release the GIL); it starts at the first frame
            # (lazily when the writer may copy the encoded stream instead: then nothing is decoded)
            frames = DecodeAhead(frames, self.options.decode_ahead) if encoded is None \
                else DecodeAhead(frames, self.options.decode_ahead, lazy=True)
        return Frames(ep.length, frames, shape, fm.dtype, encoded)

    def _encoded(self, ep: Episode, fm: FieldMap, ref: VideoRef) -> EncodedVideo | None:
        """The source's encoded stream of the camera, offered to the writer when the mapping keeps the frames as
        they are (same size, 8-bit colour): a writer may copy its packets instead of taking decoded frames."""
        src = getattr(self.reader, "features", {}).get(fm.source)
        if not getattr(self.writer, "takes_encoded_video", False) or src is None or tuple(src.shape) != tuple(fm.shape) or fm.dtype != "uint8" or fm.shape[2] != 3:
            return None
        path, reader = ref.path, self.reader

        def open_source() -> Any:
            if not reader.exists(path):
                raise VideoMissing(f"missing video {path} for episode {ep.episode_index} camera {fm.source}")
            return reader.path(path) if is_local(reader.fs) else reader.open_binary(path)

        ts = ep.timestamps if ep.timestamps is not None else np.arange(ep.length) / self.reader.fps
        return EncodedVideo(path, open_source, ref.from_timestamp, ref.to_timestamp, np.asarray(ts, np.float64),
                            self.options.video_tolerance_s, int(fm.shape[0]), int(fm.shape[1]))

    def _open_video(self, ep: Episode, fm: FieldMap, ref: VideoRef) -> Any:
        path = ref.path
        local_path = self.reader.path(path)
        # one existence check per file, not per episode (v3.0 files hold many; on object stores it is a request)
        if local_path not in self.videos and not self.reader.exists(path):
            raise VideoMissing(f"missing video {path} for episode {ep.episode_index} camera {fm.source}")
        opener = None if is_local(self.reader.fs) else (lambda: self.reader.open_binary(path))
        try:
            stream = self.videos.get(local_path, opener)
        except EpisodeError as exc:
            raise type(exc)(f"{exc} (episode {ep.episode_index} camera {fm.source})") from exc
        src_h, src_w = self.reader.features[fm.source].shape[:2]
        if (stream.height, stream.width) != (src_h, src_w):
            self.videos.drop(local_path)  # ends its lease: a leased stream is never closed by the pool
            raise VideoDecodeError(f"{path}: video is {stream.width}x{stream.height}, the source declares "
                                   f"{src_w}x{src_h} (episode {ep.episode_index})")
        return stream

    def _decode_video(self, ep: Episode, fm: FieldMap, ref: VideoRef) -> Iterator[Any]:
        """Open the file when the writer asks for the first frame, decode the episode's window forward, matching
        each step's timestamp to a frame; yields the decoded frames; raises at the end when the window holds more
        or fewer frames than steps."""
        stream = self._open_video(ep, fm, ref)
        path = ref.path
        local_path = self.reader.path(path)
        ts = ep.timestamps if ep.timestamps is not None else np.arange(ep.length) / self.reader.fps
        tol = self.options.video_tolerance_s
        start = ref.from_timestamp
        frames = 0
        try:
            for t, frame in stream.window(start, ref.to_timestamp, tol):
                i = frames
                if i >= ep.length:
                    if ref.to_timestamp is None:
                        frames += 1  # count extra frames only
                        continue
                    break
                q = start + float(ts[i])
                if abs(t - q) > tol + 4e-7 * abs(q):
                    raise TimestampMismatch(f"{path}: episode {ep.episode_index} step {i} wants t={q:.4f}s, "
                                            f"the next frame is at {t:.4f}s (tolerance {tol}s)")
                yield frame
                frames += 1
        except EpisodeError:
            self.videos.drop(local_path)
            raise
        except GeneratorExit:  # the writer stopped early (another camera failed): the stream position is lost
            self.videos.drop(local_path)
            raise
        if frames != ep.length:
            self.videos.drop(local_path)
            raise FrameCountMismatch(f"{path}: episode {ep.episode_index} camera {fm.source} has {frames} "
                                     f"frames, the episode has {ep.length} steps")
        if ref.to_timestamp is None:
            self.videos.drop(local_path)  # one file per episode: close it now

    def close(self) -> None:
        """Close open videos and, when this converter opened it, the reader (e.g. an HDF5 file handle)."""
        self.videos.close()
        close_reader = getattr(self.reader, "close", None) if self._owns_reader else None
        if close_reader is not None:
            close_reader()


class DecodeAhead(Iterator[Any]):
    """A camera's frame generator run in its own thread, up to `depth` frames ahead of the writer: PyAV's decoding
    and the writer's JPEG encoding both release the GIL, so one converting process decodes one camera (or several,
    one thread each: they start when the episode is built) while it encodes another frame. The generator's errors
    (FrameCountMismatch, TimestampMismatch, ...) reach the writer where they would have without the thread; `close`
    stops the thread and closes the generator in it (the video stream's position is then dropped, as before)."""

    _END = object()

    def __init__(self, frames: Iterator[Any], depth: int, lazy: bool = False) -> None:
        self._frames = frames
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._done = False
        self._activity = ACTIVITY.export()  # the decoding thread reports to the converting thread's watchdog
        self._thread = threading.Thread(target=self._produce, name="robo-ray-decode", daemon=True)
        if not lazy:  # lazy: started by the first `next` (never, when the writer does not take the frames)
            self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        ACTIVITY.adopt(self._activity)
        try:
            for frame in self._frames:
                if not self._put((frame, None)):
                    break
            else:
                self._put((self._END, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            self._put((None, exc))
        finally:
            if self._stop.is_set():
                self._frames.close()  # GeneratorExit in the generator, in the thread that runs it

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        if self._thread.ident is None:
            self._thread.start()
        item, exc = self._queue.get()
        if exc is not None:
            self._done = True
            raise exc
        if item is self._END:
            self._done = True
            raise StopIteration
        ACTIVITY.beat()  # the decoding thread's progress is reported by the converting thread (the watchdog's)
        return item

    def close(self) -> None:
        self._stop.set()
        self._done = True
        if self._thread.ident is None:  # never started: the generator never ran
            self._frames.close()
            return
        while self._thread.is_alive():
            try:  # unblock a producer waiting on a full queue
                self._queue.get(timeout=0.05)
            except queue.Empty:
                pass
        self._thread.join()


def _beat(item: Any) -> Any:
    """Progress for the watchdog (embedded images report no decode): one clock read per image."""
    ACTIVITY.beat()
    return item


def _channels(frame: np.ndarray, channels: int) -> np.ndarray:
    """Raw HxWxC frame -> the mapping's channel count (grey <-> RGB)."""
    if frame.shape[2] == channels:
        return frame
    if channels == 3:
        return np.repeat(frame[:, :, :1], 3, axis=2)
    return np.asarray(np.rint(frame[:, :, :3].astype(np.float32) @ [0.299, 0.587, 0.114]), np.uint8)[:, :, None]


_META_DEFAULTS: dict[str, Any] = {"int": -1, "float": 0.0, "text": "", "bool": False}


def _metadata_value(value: Any, kind: str) -> Any:
    """An episode metadata value as the mapping's scalar type; a missing value becomes -1 / 0.0 / "" / False."""
    if value is None:
        return _META_DEFAULTS[kind]
    if isinstance(value, np.generic):
        value = value.item()
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "bool":
        return bool(value)
    return value if isinstance(value, str) else str(value)


def _file_of(exc: EpisodeError, ref: EpisodeRef) -> str | None:
    msg = str(exc)
    for path in ref.source_files():
        if path in msg:
            return path
    return ref.data_path
