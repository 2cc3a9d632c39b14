"""Depth cameras as lerobot 0.6.1 writes them (lerobot/datasets/depth_utils.py, configs/video.py): 16-bit depth in
millimetres is quantized to 12-bit codes (0..4095) and encoded as HEVC (libx265, Main 12) `gray12le`, lossless
(`x265-params lossless=1`), so the quantization is the only loss. The feature is a `video` of shape (H, W, 1) whose
`info` carries `is_depth_map: true`, `depth_unit: "mm"` and the quantizer's `video.depth_min` / `video.depth_max` /
`video.shift` (metres) and `video.use_log`; lerobot dequantizes with those on read (`depth_output_unit`, "mm" by
default: float32 millimetres, rounded).

Quantization (log mode, lerobot's default; all lengths in mm here, the info fields in metres):
    code = rint((ln(d + shift) - ln(min + shift)) / (ln(max + shift) - ln(min + shift)) * 4095), clipped to 0..4095
    d'   = rint(clip(exp(code * s + ln(min + shift)) - shift, min, max)),
    s    = (ln(max + shift) - ln(min + shift)) / 4095
Linear mode: code = rint((d - min) / (max - min) * 4095). `DepthQuant.bound` is the largest |d' - d| per pixel:
half a code step through the inverse's slope, plus the final rounding to whole mm, plus the clipping of values
outside [min, max] (0, "no depth", comes back as `min`, 10 mm by default). With the defaults (0.01 m .. 10 m,
shift 3.5 m) one code is 1.25 mm wide at 0.3 m and 4.4 mm at 10 m; over every uint16 value in [10, 10000] mm the
round trip's largest error is 2 mm (linear mode: 2.44 mm codes, 1 mm largest error). `quantize` / `dequantize` give
lerobot's exact numbers (checked against lerobot's functions for all 65,536 values, tests/unit/test_lerobot_depth.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Iterable

import av
import numpy as np

from robo_ray.errors import ConfigError, DataCorrupt, FrameCountMismatch
from robo_ray.formats.lerobot.stats import array_stats
from robo_ray.formats.lerobot.video_encode import downsample, flush_stream, mux_frame, stats_sample_indices
from robo_ray.images import depth_array

QMAX = 4095  # 12-bit codes
PIX_FMT = "gray12le"
ENCODER, CODEC = "libx265", "hevc"  # the encoder PyAV opens; the codec name info.json and decoders report
MM_PER_METRE = 1000.0
# lerobot's extra_options is {"x265-params": "lossless=1"}; one thread pool-less encoder and no B-frames keep our
# bytes independent of the machine and every packet's pts at k/fps (lossless either way)
X265_PARAMS = "lossless=1:pools=none:frame-threads=1:bframes=0:log-level=error"
LEROBOT_EXTRA_OPTIONS = {"x265-params": "lossless=1"}


@dataclass(frozen=True)
class DepthQuant:
    """lerobot's depth quantizer (`DepthEncoderConfig` defaults); depth_min / depth_max / shift in metres."""

    depth_min: float = 0.01
    depth_max: float = 10.0
    shift: float = 3.5
    use_log: bool = True

    def __post_init__(self) -> None:
        if not self.depth_max > self.depth_min:
            raise ConfigError(f"depth quantizer: depth_max {self.depth_max} must exceed depth_min {self.depth_min}")
        if self.use_log and self.depth_min + self.shift <= 0:
            raise ConfigError(f"depth quantizer: depth_min + shift must be positive for log quantization "
                              f"({self.depth_min} + {self.shift})")

    @classmethod
    def from_info(cls, info: dict[str, Any]) -> "DepthQuant":
        """The quantizer of a feature's `info` block (missing keys: lerobot's defaults, as lerobot reads them)."""
        d = cls()
        return cls(float(info.get("video.depth_min", d.depth_min)), float(info.get("video.depth_max", d.depth_max)),
                   float(info.get("video.shift", d.shift)), bool(info.get("video.use_log", d.use_log)))

    def info(self) -> dict[str, Any]:
        return {"video.depth_min": self.depth_min, "video.depth_max": self.depth_max, "video.shift": self.shift,
                "video.use_log": self.use_log}

    def _scale_offset(self) -> tuple[float, float]:
        """Code -> log depth (log mode) or metres (linear): value = code * scale + offset (lerobot's inverse)."""
        if self.use_log:
            lo, hi = math.log(self.depth_min + self.shift), math.log(self.depth_max + self.shift)
            return (hi - lo) / QMAX, lo
        return (self.depth_max - self.depth_min) / QMAX, self.depth_min

    def quantize(self, mm: np.ndarray) -> np.ndarray:
        """uint16 millimetres -> uint16 codes 0..4095, in float32 as lerobot computes them."""
        d = np.asarray(mm).astype(np.float32)
        lo_mm, hi_mm = np.float32(self.depth_min * MM_PER_METRE), np.float32(self.depth_max * MM_PER_METRE)
        if self.use_log:
            shift = np.float32(self.shift * MM_PER_METRE)
            log_min, log_max = math.log(float(lo_mm + shift)), math.log(float(hi_mm + shift))
            norm = (np.log(d + shift) - log_min) / (log_max - log_min)
        else:
            norm = (d - lo_mm) / (hi_mm - lo_mm)
        return np.rint(norm * QMAX).clip(0, QMAX).astype(np.uint16)

    def dequantize(self, codes: np.ndarray) -> np.ndarray:
        """uint16 codes -> uint16 millimetres (lerobot's numpy path: float32, clipped to [min, max], rounded)."""
        scale, offset = self._scale_offset()
        buf = (np.asarray(codes).astype(np.float64) * scale).astype(np.float32) + np.float32(offset)
        if self.use_log:
            buf = np.exp(buf) - np.float32(self.shift)
        buf = np.clip(buf, self.depth_min, self.depth_max).astype(np.float32) * np.float32(MM_PER_METRE)
        return np.clip(np.rint(buf), 0, 65535).astype(np.uint16)

    def bound(self, mm: np.ndarray) -> np.ndarray:
        """The largest |dequantize(quantize(mm)) - mm| per pixel, in mm (see the module docstring)."""
        d = np.asarray(mm, np.float64)
        lo_mm, hi_mm = self.depth_min * MM_PER_METRE, self.depth_max * MM_PER_METRE
        inside = np.clip(d, lo_mm, hi_mm)
        scale, _ = self._scale_offset()
        half = 0.5 * scale * (1 + 1e-3)  # half a code step (float32 slack)
        if self.use_log:
            step = (inside + self.shift * MM_PER_METRE) * math.expm1(half)
        else:
            step = np.full_like(inside, half * MM_PER_METRE)
        return np.abs(d - inside) + step + 0.5 + 1e-3

    def step_mm(self, mm: float) -> float:
        """One code's width in mm at depth `mm` (for the notes and reports)."""
        scale, _ = self._scale_offset()
        return (mm + self.shift * MM_PER_METRE) * math.expm1(scale) if self.use_log else scale * MM_PER_METRE


def encoder_options(g: int, crf: int) -> dict[str, str]:
    """libx265 options: lerobot's (g, crf; crf is moot when lossless) and the x265 parameters above."""
    return {"g": str(g), "crf": str(crf), "x265-params": X265_PARAMS}


def video_info(height: int, width: int, fps: int, g: int, crf: int, quant: DepthQuant) -> dict[str, Any]:
    """features[key]["info"] of a depth camera, the keys lerobot 0.6.1 records (`get_video_info` with a
    DepthEncoderConfig, plus `depth_unit` from the frames' dtype)."""
    return {"is_depth_map": True, "depth_unit": "mm", "video.height": height, "video.width": width,
            "video.codec": CODEC, "video.pix_fmt": PIX_FMT, "video.fps": fps, "video.channels": 1,
            "has_audio": False, "video.g": g, "video.crf": crf, "video.preset": None, "video.fast_decode": 0,
            "video.video_backend": "pyav", "video.extra_options": dict(LEROBOT_EXTRA_OPTIONS), **quant.info()}


def is_depth_info(info: Any) -> bool:
    """lerobot's `depth_keys` rule: `is_depth_map` (or the legacy `video.is_depth_map`) in a feature's info."""
    return isinstance(info, dict) and bool(info.get("is_depth_map") or info.get("video.is_depth_map"))


def encode_depth_episode(path: str, frames: Iterable[Any], length: int, height: int, width: int, fps: int,
                         g: int, crf: int, quant: DepthQuant, sampled: dict[int, np.ndarray] | None = None,
                         clipped: list[int] | None = None) -> int:
    """Quantize and encode one depth camera of one episode into the MP4 at `path` (frame k at pts k, time base
    1/fps). Frames whose index is a key of `sampled` are stored there (uint16 mm, HxW) for the statistics;
    `clipped` (3 counters) gets the pixels below depth_min (0 = no depth among them), above depth_max, and all.
    Returns the frame count; FrameCountMismatch when it is not `length`."""
    tb = Fraction(1, fps)
    n = 0
    lo, hi = quant.depth_min * MM_PER_METRE, quant.depth_max * MM_PER_METRE
    with av.open(path, "w", format="mp4") as out:
        stream = out.add_stream(ENCODER, rate=fps, options=encoder_options(g, crf))
        stream.width, stream.height, stream.pix_fmt = width, height, PIX_FMT
        stream.time_base = tb
        for item in frames:
            if n >= length:
                n += 1
                continue
            mm = depth_array(item)
            if mm.shape != (height, width):
                raise DataCorrupt(f"depth frame {n} is {mm.shape[1]}x{mm.shape[0]}, the camera is {width}x{height} "
                                  "(depth is never resized)")
            if sampled is not None and n in sampled:
                sampled[n] = mm
            if clipped is not None:
                clipped[0] += int((mm < lo).sum())
                clipped[1] += int((mm > hi).sum())
                clipped[2] += mm.size
            mux_frame(out, stream, av.VideoFrame.from_ndarray(quant.quantize(mm), format=PIX_FMT), n, tb)
            n += 1
        flush_stream(out, stream)
    if n != length:
        raise FrameCountMismatch(f"depth camera yielded {n} frames for an episode of {length} steps")
    return n


def decode_depth(frame: av.VideoFrame, quant: DepthQuant) -> np.ndarray:
    """A decoded gray12le frame -> HxWx1 uint16 millimetres."""
    return quant.dequantize(frame.to_ndarray(format=PIX_FMT))[:, :, None]


def depth_stats(frames: list[np.ndarray]) -> dict[str, np.ndarray]:
    """lerobot's statistics of one episode's sampled depth frames (`sample_indices`, downsampled as lerobot does):
    over every pixel, in the stored unit (mm, not divided by 255), each stat of shape (1, 1, 1); count = frames."""
    values = np.concatenate([downsample(f.reshape(f.shape[0], f.shape[1], 1)).reshape(-1) for f in frames])
    st = array_stats(values.astype(np.float64).reshape(-1, 1), scalar=False)
    out = {k: np.asarray(v, np.float64).reshape(1, 1, 1) for k, v in st.items() if k != "count"}
    out["count"] = np.asarray([len(frames)], np.int64)
    return out


DEPTH_ENCODED = "a depth camera: quantized to 12-bit codes and encoded (lerobot's depth encoding)"


def encode_depth_camera(path: str, frames: Iterable[Any], length: int, height: int, width: int,
                        writer: Any) -> tuple[dict[str, np.ndarray], list[int]]:
    """One depth camera of one episode into `path` with the writer's settings and quantizer; returns the episode's
    statistics of the source millimetres (`depth_stats`) and its clipped pixels [below, above, all]."""
    sampled: dict[int, np.ndarray] = dict.fromkeys(stats_sample_indices(length))  # type: ignore[arg-type]
    s, clipped = writer.settings, [0, 0, 0]
    encode_depth_episode(path, frames, length, height, width, s.fps, s.g, s.crf, writer.depth_quant, sampled,
                         clipped)
    return depth_stats([f for f in sampled.values() if f is not None]), clipped


def clipped_json(counts: list[int]) -> dict[str, int]:
    """A depth camera's clipped pixels as the unit's `extra["clipped_depth"]` holds them (run_warnings reads it)."""
    return {"below": counts[0], "above": counts[1], "pixels": counts[2]}
