"""Video for the LeRobot v3.0 writer: each camera of each episode is encoded ONCE with PyAV from the frames the
convert stage decodes (AV1 with libsvtav1 or H.264 with libx264, yuv420p, GOP `g`, crf), at an exact constant frame
rate (frame k has pts k in time base 1/fps: it sits at exactly k/fps), into a scratch MP4 of its own; when every
camera of the episode is encoded, each episode MP4 is appended to the unit's MP4 of that camera by stream copy
(packets re-stamped by the frames already in the file), so frame k of episode e decodes at
`from_timestamp(e) + k/fps` exactly. That is what lerobot itself does (encode per episode, concatenate by stream
copy), and it keeps `add` all-or-nothing: a camera that fails mid-episode never touched the unit's file.

Camera statistics are taken from the frames being encoded, the way lerobot samples them (`sample_indices`:
100 frames for an episode of up to ~500, len**0.75 above; frames of 300 px or more strided to ~150 px), as one
256-bin histogram per channel: exact min / max / mean / std / quantiles of the sampled pixels on the 0..1 scale,
and mergeable across episodes and units by adding histograms.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Iterable

# SVT-AV1 logs to stderr itself: a banner per encoder (level 3), and "deinit called without sending EOS!" (level 1)
# whenever an episode's encoder is dropped because the episode was quarantined mid-way; fatal only (0): the errors
# that matter come back through FFmpeg as exceptions, and the quarantine line says what happened
os.environ.setdefault("SVT_LOG", "0")

import av  # noqa: E402
import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

from robo_ray.activity import ACTIVITY  # noqa: E402
from robo_ray.errors import FrameCountMismatch, VideoDecodeError  # noqa: E402
from robo_ray.images import decode_image, frame_array  # noqa: E402

# target.options.vcodec -> (PyAV encoder, codec name as info.json's video.codec and a decoder reports it)
ENCODERS: dict[str, tuple[str, str]] = {
    "libsvtav1": ("libsvtav1", "av1"), "av1": ("libsvtav1", "av1"),
    "libx264": ("libx264", "h264"), "h264": ("libx264", "h264"),
}
PIX_FMT = "yuv420p"
# Colorspaces whose matrix is the BT.601 one swscale assumes for "unspecified" (as robo_ray.images decides): a
# decoded yuv420p frame in one of them is handed to the encoder as it is (no RGB round trip, no loss).
_BT601_FAMILY = {2, 5, 6}
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}


@dataclass(frozen=True)
class VideoSettings:
    """How every camera is encoded (from target.options)."""

    vcodec: str = "libsvtav1"
    fps: int = 30
    g: int = 2
    crf: int = 30
    preset: int | str | None = None  # None: lerobot's choice (12 for libsvtav1, the codec's default otherwise)
    threads: int = 1  # encoder threads; 1 = bytes independent of the machine (the actors are the parallelism)

    @property
    def encoder(self) -> str:
        return ENCODERS[self.vcodec][0]

    @property
    def codec(self) -> str:
        return ENCODERS[self.vcodec][1]

    @property
    def effective_preset(self) -> int | str | None:
        if self.preset is None and self.encoder == "libsvtav1":
            return 12
        return self.preset

    def options(self) -> dict[str, str]:
        """The encoder options (lerobot's `VideoEncoderConfig.get_codec_options`, plus no B-frames for x264)."""
        opts = {"g": str(self.g), "crf": str(self.crf)}
        preset = self.effective_preset
        if preset is not None:
            opts["preset"] = str(preset)
        if self.encoder == "libsvtav1":
            opts["svtav1-params"] = f"fast-decode=0:lp={self.threads}"
        else:  # B-frames would delay pts behind dts (edit lists); lerobot's 1e-4 s lookup wants pts = k/fps
            opts["bf"] = "0"
            opts["threads"] = str(self.threads)
        return opts

    def info(self, height: int, width: int) -> dict[str, Any]:
        """features[key]["info"] of an encoded camera (lerobot 0.4 keys, plus 0.6's encoder keys)."""
        return {"video.height": height, "video.width": width, "video.codec": self.codec, "video.pix_fmt": PIX_FMT,
                "video.is_depth_map": False, "video.fps": self.fps, "video.channels": 3, "has_audio": False,
                "video.g": self.g, "video.crf": self.crf, "video.preset": self.effective_preset,
                "video.fast_decode": 0, "video.video_backend": "pyav", "video.extra_options": {},
                "is_depth_map": False}


# ---- statistics of the encoded frames (lerobot's sampling) ------------------------------------------------------
def estimate_num_samples(n: int, min_num: int = 100, max_num: int = 10_000, power: float = 0.75) -> int:
    if n < min_num:
        min_num = n
    return max(min_num, min(int(n ** power), max_num))


def stats_sample_indices(n: int) -> list[int]:
    """lerobot's `sample_indices`: the frames of an episode of `n` frames its image statistics look at."""
    if n <= 0:
        return []
    return np.round(np.linspace(0, n - 1, estimate_num_samples(n))).astype(int).tolist()


def downsample(arr: np.ndarray, target: int = 150, threshold: int = 300) -> np.ndarray:
    """lerobot's `auto_downsample_height_width` on an HxWxC frame."""
    h, w = arr.shape[:2]
    if max(w, h) < threshold:
        return arr
    f = int(w / target) if w > h else int(h / target)
    return arr[::f, ::f]


_COUNTER: ThreadPoolExecutor | None = None  # the thread that counts histogram batches (one per process)
_COUNTER_LOCK = threading.Lock()


def _counter() -> ThreadPoolExecutor:
    global _COUNTER
    with _COUNTER_LOCK:
        if _COUNTER is None:
            _COUNTER = ThreadPoolExecutor(1, thread_name_prefix="robo-ray-histogram")
        return _COUNTER


def _forget_counter() -> None:  # a forked child has no threads: it starts its own counter when it needs one
    global _COUNTER, _COUNTER_LOCK
    _COUNTER, _COUNTER_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_counter)


def _pil_counts(frames: list[np.ndarray]) -> np.ndarray:
    """The per-channel counts of same-sized uint8 frames (HxWx1 or HxWx3), stacked: PIL's C histogram."""
    block = np.concatenate(frames, axis=0) if len(frames) > 1 else frames[0]
    if block.shape[2] == 1:
        block = block[:, :, 0]
    return np.asarray(Image.fromarray(block).histogram(), dtype=np.int64)  # mode L / RGB from the shape


class ImageHistogram:
    """Per-channel 256-bin histogram of sampled uint8 frames: exact statistics on the 0..1 scale, mergeable.

    8-bit RGB / gray frames are copied as they are sampled and counted by PIL's C histogram a batch at a time (the
    frames of one size stacked: one call and one list of 768 counts per batch; per frame that list's conversion
    cost as much as the count), in the process's counting thread, while the caller decodes and encodes the next
    frames (PIL and numpy count and copy without the GIL); other frames by a bincount per channel, at once.
    `hist` waits for the batches handed over and is current whenever it is read."""

    BATCH_BYTES = 256 << 10  # sampled (downsampled) frames held before they are counted (larger blocks: page faults)

    def __init__(self, channels: int = 3) -> None:
        self._hist = np.zeros((channels, 256), dtype=np.int64)
        self.frames = 0
        self._pending: list[np.ndarray] = []
        self._pending_bytes = 0
        self._counting: list[Future[np.ndarray]] = []

    @property
    def hist(self) -> np.ndarray:
        self._count_pending()
        for fut in self._counting:
            self._hist += fut.result().reshape(self._hist.shape)
        self._counting = []
        return self._hist

    def add(self, rgb: np.ndarray) -> None:
        small = downsample(rgb)
        channels = self._hist.shape[0]
        self.frames += 1
        if small.dtype == np.uint8 and small.ndim == 3 and small.shape[2] == channels and channels in (1, 3):
            if self._pending and self._pending[0].shape != small.shape:
                self._count_pending()
            self._pending.append(np.array(small, order="C"))  # a copy: the caller may reuse its frame's memory
            self._pending_bytes += small.nbytes
            if self._pending_bytes >= self.BATCH_BYTES:
                self._count_pending()
            return
        for c in range(channels):
            self._hist[c] += np.bincount(small[:, :, c].ravel(), minlength=256)

    def _count_pending(self) -> None:
        if self._pending:
            self._counting.append(_counter().submit(_pil_counts, self._pending))
            self._pending, self._pending_bytes = [], 0

    def merge(self, hist: np.ndarray, frames: int) -> None:
        self.hist[...] += np.asarray(hist, dtype=np.int64)
        self.frames += int(frames)

    def stats(self) -> dict[str, np.ndarray]:
        """min/max/mean/std/q.. as (C, 1, 1) arrays on the 0..1 scale, count = sampled frames (lerobot's shapes)."""
        return hist_stats(self.hist, self.frames)


def hist_stats(hist: np.ndarray, frames: int) -> dict[str, np.ndarray]:
    hist = np.asarray(hist, dtype=np.int64)
    values = np.arange(256, dtype=np.float64) / 255.0
    c = hist.shape[0]
    out: dict[str, list[float]] = {k: [] for k in ("min", "max", "mean", "std", *QUANTILES)}
    for ch in range(c):
        h = hist[ch]
        total = int(h.sum())
        if total == 0:
            for k in out:
                out[k].append(0.0)
            continue
        nz = np.flatnonzero(h)
        mean = float((h * values).sum() / total)
        var = float((h * (values - mean) ** 2).sum() / total)
        out["min"].append(float(values[nz[0]]))
        out["max"].append(float(values[nz[-1]]))
        out["mean"].append(mean)
        out["std"].append(var ** 0.5)
        cum = np.cumsum(h)
        for name, q in QUANTILES.items():
            out[name].append(_hist_quantile(cum, values, q, total))
    res = {k: np.asarray(v, dtype=np.float64).reshape(c, 1, 1) for k, v in out.items()}
    res["count"] = np.asarray([frames], dtype=np.int64)
    return res


def _hist_quantile(cum: np.ndarray, values: np.ndarray, q: float, total: int) -> float:
    """numpy's default ('linear') quantile of the values the histogram counts."""
    pos = q * (total - 1)
    lo, hi = int(np.floor(pos)), int(np.ceil(pos))
    v_lo = values[int(np.searchsorted(cum, lo, side="right"))]
    v_hi = values[int(np.searchsorted(cum, hi, side="right"))]
    return float(v_lo + (v_hi - v_lo) * (pos - lo))


# ---- frames in, packets out ---------------------------------------------------------------------------------------
def _rgb_array(item: Any) -> np.ndarray:
    """An HxWx3 uint8 array of any frame the convert stage yields (PyAV frame, array, PNG/JPEG bytes)."""
    if isinstance(item, av.VideoFrame):
        return frame_array(item, "rgb24")
    if isinstance(item, np.ndarray):
        arr = item
    else:
        arr = decode_image(bytes(item), 3)
    if arr.dtype != np.uint8:
        raise VideoDecodeError(f"camera frame has dtype {arr.dtype}; the LeRobot target encodes 8-bit colour only")
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.shape[2] == 1:
        arr = np.repeat(arr, 3, axis=2)
    elif arr.shape[2] == 4:
        arr = arr[:, :, :3]
    return np.ascontiguousarray(arr)


def _resized(arr: np.ndarray, height: int, width: int) -> np.ndarray:
    if arr.shape[:2] == (height, width):
        return arr
    from PIL import Image

    return np.asarray(Image.fromarray(arr).resize((width, height), Image.Resampling.BILINEAR))


def rgb_frame(rgb: np.ndarray) -> av.VideoFrame:
    """An rgb24 frame over the array's own memory (no copy: 10 us instead of from_ndarray's 39 at 128x128). The
    frame's buffer holds a reference to the array (PyAV's from_numpy_buffer), and no caller writes the array
    after: an encoder that keeps the frame sees the pixels it was given."""
    if rgb.strides[1:] == (3, 1):
        return av.VideoFrame.from_numpy_buffer(rgb, format="rgb24")
    return av.VideoFrame.from_ndarray(rgb, format="rgb24")


def _passthrough_ok(frame: av.VideoFrame) -> bool:
    return (frame.format.name == PIX_FMT and int(frame.colorspace) in _BT601_FAMILY
            and int(frame.color_range) != 2)


def encode_episode(path: str, frames: Iterable[Any], length: int, height: int, width: int,
                   settings: VideoSettings, hist: ImageHistogram | None = None) -> int:
    """Encode one camera of one episode into the MP4 at `path` (frame k at pts k, time base 1/fps); the sampled
    frames go into `hist`. Returns the frame count; raises FrameCountMismatch when it is not `length`."""
    sample = set(stats_sample_indices(length))
    tb = Fraction(1, settings.fps)
    n = 0
    with av.open(path, "w", format="mp4") as out:
        stream = out.add_stream(settings.encoder, rate=settings.fps, options=settings.options())
        stream.width, stream.height, stream.pix_fmt = width, height, PIX_FMT
        stream.time_base = tb
        for item in frames:
            if n >= length:
                n += 1
                continue
            if isinstance(item, av.VideoFrame):
                if (item.height, item.width) != (height, width):
                    item = item.reformat(width=width, height=height, interpolation="AREA")
                if _passthrough_ok(item):
                    frame = item
                    rgb = frame_array(item, "rgb24") if (hist is not None and n in sample) else None
                else:
                    rgb = frame_array(item, "rgb24")
                    frame = rgb_frame(rgb)
            else:
                rgb = _resized(_rgb_array(item), height, width)
                frame = rgb_frame(rgb)
            if hist is not None and n in sample and rgb is not None:
                hist.add(rgb)
            mux_frame(out, stream, frame, n, tb)
            n += 1
        flush_stream(out, stream)
    if n != length:
        raise FrameCountMismatch(f"camera yielded {n} frames for an episode of {length} steps")
    return n


def mux_frame(out: Any, stream: Any, frame: av.VideoFrame, n: int, tb: Fraction) -> None:
    """Encode frame `n` (pts n, time base `tb`; the GOP is ours (g), not the source's) and mux its packets."""
    frame.pts, frame.time_base = n, tb
    frame.pict_type = av.video.frame.PictureType.NONE
    for packet in stream.encode(frame):
        out.mux(packet)
    ACTIVITY.beat()


def flush_stream(out: Any, stream: Any) -> None:
    """The encoder's delayed packets muxed at the end of an episode."""
    for packet in stream.encode(None):
        out.mux(packet)


class UnitVideo:
    """One camera's MP4 of a unit: episode MP4s appended by stream copy, pts shifted by the frames before."""

    def __init__(self, path: str, fps: int) -> None:
        self.path = path
        self.fps = fps
        self.frames = 0
        self._out: Any = None
        self._stream: Any = None

    def append(self, episode_path: str, length: int) -> tuple[float, float]:
        """Append an encoded episode's MP4; returns its (from_timestamp, to_timestamp) in this file."""
        with av.open(episode_path, "r") as src:
            s = src.streams.video[0]
            return self.append_packets(s, (p for p in src.demux(s) if p.dts is not None), length, episode_path)

    def append_packets(self, template: Any, packets: Iterable[Any], length: int, what: str) -> tuple[float, float]:
        """Append an episode's packets (decode order, timestamps from 0 in `template`'s time base, `template` the
        stream they come from); returns the episode's (from_timestamp, to_timestamp) in this file."""
        start = self.frames
        if self._out is None:
            self._out = av.open(self.path, "w", format="mp4", options={"movflags": "faststart"})
            self._stream = self._out.add_stream_from_template(template, opaque=True)
        ticks = Fraction(1, self.fps) / template.time_base
        if ticks.denominator != 1:
            raise RuntimeError(f"{what}: time base {template.time_base} is not a multiple of 1/{self.fps}")
        shift = start * int(ticks)
        count = 0
        for packet in packets:
            packet.pts += shift
            packet.dts += shift
            packet.stream = self._stream
            self._out.mux(packet)
            count += 1
        if count != length:
            raise RuntimeError(f"{what}: {count} packets for {length} frames")
        self.frames += length
        return start / self.fps, self.frames / self.fps

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None

    @property
    def empty(self) -> bool:
        return self.frames == 0
