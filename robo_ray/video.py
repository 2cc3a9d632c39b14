"""Streaming PyAV decoding: one open container per video file, decoded forward once, shared by the episodes
that live in it (LeRobot v3.0 files hold many episodes one after another)."""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterator

import av

from robo_ray.activity import ACTIVITY
from robo_ray.errors import VideoDecodeError, VideoMissing
from robo_ray.lfs_pointer import head_of_source, lfs_pointer_note
from robo_ray.storage import is_transport_error, storage_error

# Seek instead of decoding forward when the next window starts this far past the current position.
SEEK_AHEAD_S = 2.0


def _transport_cause(exc: BaseException) -> BaseException | None:
    """The storage/network failure behind an exception PyAV raised from a Python file's read/seek, if any."""
    seen = 0
    while exc is not None and seen < 5:
        if is_transport_error(exc):
            return exc
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        seen += 1
    return None


class VideoStream:
    """A forward-only view of one file's video frames, with a one-frame lookahead.

    `open_file` (remote files) returns a seekable file object read in bounded ranged blocks
    (storage.open_input(sequential=True)); PyAV reads through it, so a remote MP4 is never downloaded whole.
    A storage failure while reading becomes a StorageError naming the URL, not a decode error.

    Every open and window start names the file to the watchdog (robo_ray.activity.ACTIVITY) before it may block,
    every decoded frame counts as progress."""

    def __init__(self, path: str, open_file: Callable[[], Any] | None, threads: int = 1) -> None:
        self.path = path
        self._open_file = open_file
        self._threads = threads
        self._file: Any = None
        self._container: av.container.InputContainer | None = None
        self._iter: Iterator[av.VideoFrame] | None = None
        self._peek: av.VideoFrame | None = None
        self.position = float("-inf")  # time of the last frame handed out
        self.leased = False  # handed out by a VideoPool and not yet done with: the pool never closes it then
        self._open()

    def _url(self) -> str:
        f = self._file
        try:
            return f.fs.unstrip_protocol(f.path) if f is not None else self.path
        except Exception:  # noqa: BLE001 - messages only
            return self.path

    def _storage_failure(self, exc: BaseException, action: str) -> Exception | None:
        cause = _transport_cause(exc)
        return storage_error(cause, self._url(), action) if cause is not None else None

    def _open(self) -> None:
        self.close()
        ACTIVITY.reading(self.path, "reading")
        try:
            if self._open_file is None:
                self._container = av.open(self.path, "r")
            else:
                self._file = self._open_file()
                self._container = av.open(self._file, "r")
        except FileNotFoundError as exc:
            raise VideoMissing(f"video file is missing: {self.path}") from exc
        except (av.error.FFmpegError, OSError, ValueError) as exc:
            failure = self._storage_failure(exc, "reading video")
            if failure is not None:
                raise failure from exc
            note = lfs_pointer_note(head_of_source(self.path if self._file is None else self._file))
            raise VideoDecodeError(f"cannot open video {self.path}: {exc}{note}") from exc
        except Exception as exc:  # noqa: BLE001 - a client library error raised through PyAV's read callback
            failure = self._storage_failure(exc, "reading video")
            if failure is not None:
                raise failure from exc
            raise
        if not self._container.streams.video:
            raise VideoDecodeError(f"no video stream in {self.path}")
        stream = self._container.streams.video[0]
        if stream.codec_context is None:  # a codec FFmpeg has no decoder for (unknown tag, missing library)
            codec = getattr(stream, "codec_tag", "") or "unknown"
            self.close()
            raise VideoDecodeError(f"cannot decode video {self.path}: no decoder for its codec ({codec})")
        stream.thread_type = "AUTO" if self._threads != 1 else "SLICE"
        stream.codec_context.thread_count = self._threads
        self._stream = stream
        self._iter = self._container.decode(stream)
        self._peek = None
        self.position = float("-inf")

    @property
    def width(self) -> int:
        return self._stream.codec_context.width

    @property
    def height(self) -> int:
        return self._stream.codec_context.height

    def _next(self) -> av.VideoFrame | None:
        if self._peek is not None:
            frame, self._peek = self._peek, None
            return frame
        try:
            frame = next(self._iter)  # type: ignore[arg-type]
            ACTIVITY.beat()
            return frame
        except StopIteration:
            return None
        except (av.error.FFmpegError, OSError, ValueError, EOFError) as exc:
            failure = self._storage_failure(exc, "reading video")
            if failure is not None:
                raise failure from exc
            where = f"after t={self.position:.3f}s" if self.position > float("-inf") else "before the first frame"
            raise VideoDecodeError(f"decode failed in {self.path} {where}: {exc}") from exc
        except Exception as exc:  # noqa: BLE001
            failure = self._storage_failure(exc, "reading video")
            if failure is not None:
                raise failure from exc
            raise

    def _seek(self, t: float) -> None:
        tb = self._stream.time_base
        ACTIVITY.reading(self.path, "seeking in")
        try:
            self._container.seek(int(t / tb), stream=self._stream, backward=True, any_frame=False)
        except (av.error.FFmpegError, OSError) as exc:
            failure = self._storage_failure(exc, "seeking in video")
            if failure is not None:
                raise failure from exc
            raise VideoDecodeError(f"seek to t={t:.3f}s failed in {self.path}: {exc}") from exc
        self._iter = self._container.decode(self._stream)
        self._peek = None

    def window(self, start: float, end: float | None, tol: float) -> Iterator[tuple[float, av.VideoFrame]]:
        """Frames with start - tol <= t < end - tol (end None = to the end of the file), in order."""
        if start < self.position - tol:
            self._open()
        if start - max(self.position, 0.0) > SEEK_AHEAD_S:
            self._seek(start)
        ACTIVITY.reading(self.path, "decoding")
        try:
            while True:
                frame = self._next()
                if frame is None:
                    return
                t = float(frame.time) if frame.time is not None else self.position + 1e-9
                if t < start - tol:
                    continue
                if end is not None and t >= end - tol:
                    self._peek = frame
                    return
                self.position = t
                yield t, frame
        finally:
            self.leased = False

    def close(self) -> None:
        if self._container is not None:
            self._container.close()
            self._container = None
        if self._file is not None:
            self._file.close()
            self._file = None


class VideoPool:
    """Open video streams keyed by path, reused across units by one actor; at most `max_open` open files, the least
    recently used closed first.

    Thread-safe: each camera of an episode may decode in its own thread (stages/convert.py DecodeAhead), all through
    this pool. A stream handed out by `get` is leased until its `window` ends; the pool never closes a leased stream
    (it may hold more than `max_open` until the lease ends). Closing a stream another thread was decoding crashed
    the process in FFmpeg (SIGSEGV: LeRobot v3.0, one episode per file, 2 cameras, more than 16 files)."""

    def __init__(self, threads: int = 1, max_open: int = 16) -> None:
        self.threads = threads
        self.max_open = max_open
        self._streams: dict[str, VideoStream] = {}  # least recently used first
        self._lock = threading.Lock()

    def get(self, path: str, open_file: Callable[[], Any] | None) -> VideoStream:
        with self._lock:
            stream = self._streams.pop(path, None)
            if stream is not None:
                stream.leased = True
                self._streams[path] = stream
                return stream
        stream = VideoStream(path, open_file, self.threads)  # outside the lock: opening a remote file may block
        stream.leased = True
        with self._lock:
            self._evict(room_for=1)
            self._streams[path] = stream
        return stream

    def _evict(self, room_for: int) -> None:
        for p in list(self._streams):
            if len(self._streams) + room_for <= self.max_open:
                return
            if not self._streams[p].leased:
                self._streams.pop(p).close()

    def __contains__(self, path: str) -> bool:
        with self._lock:
            return path in self._streams

    def __len__(self) -> int:
        with self._lock:
            return len(self._streams)

    def drop(self, path: str) -> None:
        with self._lock:
            stream = self._streams.pop(path, None)
        if stream is not None:
            stream.close()

    def close(self) -> None:
        with self._lock:
            streams, self._streams = list(self._streams.values()), {}
        for s in streams:
            s.close()
