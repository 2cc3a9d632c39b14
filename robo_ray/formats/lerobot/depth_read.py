"""Reading lerobot 0.6's depth videos back (the LeRobot reader): a feature whose `info` says `is_depth_map` is a 16-bit
depth camera; its 12-bit codes (HEVC gray12le) are decoded here, at the episode's frame times, and dequantized with
the feature's own `video.depth_min` / `video.depth_max` / `video.shift` / `video.use_log` to uint16 millimetres, the
canonical depth unit (what lerobot's `LeRobotDataset` returns with its default `depth_output_unit="mm"`, as float32;
robo-ray keeps uint16, the unit of RLDS / ROS 16UC1 / ORTF depth). The frames reach the writers as `RawFrames`."""
from __future__ import annotations

from typing import Any

import av
import numpy as np

from robo_ray.episode import Episode, RawFrames
from robo_ray.errors import EpisodeTooLarge, FrameCountMismatch, VideoDecodeError, VideoMissing
from robo_ray.formats.lerobot.depth import PIX_FMT, DepthQuant, is_depth_info

MAX_DEPTH_EPISODE_BYTES = 2 << 30  # one depth camera of one episode, decoded (uint16)
__all__ = ["depth_name", "is_depth_info", "quantizer", "read_depth"]


def depth_name(last: str) -> str:
    """A depth camera's canonical name from the last part of its key: `top_depth` -> observation/depth_top,
    `depth` -> observation/depth (the LeRobot writer turns them back into `<camera>_depth` / `depth`)."""
    base = last[:-len("_depth")] if last.endswith("_depth") else ("" if last == "depth" else last)
    return f"observation/depth_{base}" if base else "observation/depth"


def quantizer(info: dict[str, Any], key: str) -> DepthQuant:
    feat = (info.get("features") or {}).get(key) or {}
    block = feat.get("info") or feat.get("video_info") or {}
    return DepthQuant.from_info(block if isinstance(block, dict) else {})


def read_depth(reader: Any, key: str, ep: Episode) -> RawFrames:
    """The episode's frames of depth camera `key` (uint16 mm, N x H x W x 1): the frame within half a frame period of
    each step's time (from_timestamp + timestamp), as lerobot looks frames up."""
    h, w, _ = reader.features[key].shape
    n = ep.length
    vref = ep.videos.get(key)
    where = f"episode {ep.ref.episode_index} depth camera {key}"
    if vref is None or not reader.exists(vref.path):
        raise VideoMissing(f"missing depth video {getattr(vref, 'path', '?')} for {where}")
    if n * h * w * 2 > MAX_DEPTH_EPISODE_BYTES:
        raise EpisodeTooLarge(f"{vref.path}: {where}: {n} frames of {w}x{h} exceed "
                              f"{MAX_DEPTH_EPISODE_BYTES >> 20} MiB decoded")
    quant = quantizer(reader.info, key)
    wanted = vref.from_timestamp + np.asarray(ep.timestamps, np.float64)
    half = 0.5 / reader.fps
    out = np.zeros((n, h, w, 1), np.uint16)
    got = np.zeros(n, bool)
    try:
        with reader.open_binary(vref.path) as f, av.open(f, "r") as c:
            if not c.streams.video:
                raise VideoDecodeError(f"{vref.path}: no video stream ({where})")
            s = c.streams.video[0]
            if (s.codec_context.width, s.codec_context.height) != (w, h):
                raise VideoDecodeError(f"{vref.path}: {s.codec_context.width}x{s.codec_context.height}, info.json "
                                       f"says {w}x{h} ({where})")
            if n:
                c.seek(max(int((wanted.min() - half) / s.time_base), 0), stream=s, backward=True, any_frame=False)
            k = 0
            for frame in c.decode(s):
                t = float(frame.time)
                while k < n and wanted[k] <= t - half:
                    k += 1  # no frame at this step's time (named below)
                if k >= n:
                    break
                if abs(t - wanted[k]) < half:
                    out[k, :, :, 0] = quant.dequantize(frame.to_ndarray(format=PIX_FMT))
                    got[k] = True
                    k += 1
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        raise VideoDecodeError(f"{vref.path}: cannot decode the depth video ({where}): {exc}") from exc
    if not got.all():
        missing = np.flatnonzero(~got)
        raise FrameCountMismatch(f"{vref.path}: {where}: no frame within {half:.4f}s of step(s) "
                                 f"{missing[:5].tolist()} ({len(missing)} of {n})")
    return RawFrames(out)
