"""ORTF camera videos: one camera's frames of one episode -> one MP4 (`VideoEncoder`): H.264 yuv420p straight from
the decoder's frames, libx264rgb (lossless, or sizes 4:2:0 cannot hold), FFV1 gray16le for 16-bit depth."""
from __future__ import annotations

from fractions import Fraction
from typing import Any, Iterable

import av
import numpy as np

from robo_ray.errors import VideoDecodeError
from robo_ray.images import decode_image, depth_array

# x264 / FFV1 with one thread: the bytes do not depend on the machine's core count (actors are the parallelism)
ENCODER_THREADS = 1
# x264's macroblock-tree rate control made the last frames of short episodes encode to other bytes from one process
# to the next for identical frames and settings (~3 runs in 10 of the determinism tests; 0 in 12 without it)
X264_DETERMINISTIC = {"mbtree": "0"}


class VideoKind:
    DEPTH = "ffv1"  # 16-bit depth: FFV1 gray16le (lossless)
    RGB = "libx264rgb"  # lossless (crf 0), or frames whose size 4:2:0 cannot hold
    YUV = "libx264"  # H.264 yuv420p


def _rgb_array(arr: np.ndarray, resize: tuple[int, int] | None) -> np.ndarray:
    """HxW[xC] uint8 -> HxWx3 (grey repeated, alpha dropped), resized as the RLDS encoder resizes arrays."""
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if resize and arr.shape[:2] != tuple(resize):
        from PIL import Image

        img = Image.fromarray(arr[:, :, 0] if arr.shape[2] == 1 else arr)
        arr = np.asarray(img.resize((resize[1], resize[0]), Image.Resampling.BILINEAR))
        if arr.ndim == 2:
            arr = arr[:, :, None]
    if arr.shape[2] == 1:
        arr = np.repeat(arr, 3, axis=2)
    return np.ascontiguousarray(arr[:, :, :3], dtype=np.uint8)


class VideoEncoder:
    """One camera's frames of one episode -> one MP4 (frame k at pts k, time base 1/fps); decoded frames are
    encoded once, from the decoder's frame (PyAV), the array, or the decoded source bytes."""

    def __init__(self, fps: float, depth: bool, lossless: bool, crf: int, resize: tuple[int, int] | None) -> None:
        self.rate = Fraction(fps).limit_denominator(1001)
        self.depth, self.lossless, self.crf = depth, lossless, crf
        self.resize = None if depth else resize

    def frame(self, item: Any, kind: str | None) -> av.VideoFrame:
        """The item as a VideoFrame ready for `kind`'s encoder (None: not decided yet)."""
        if self.depth:
            return av.VideoFrame.from_ndarray(depth_array(item), format="gray16le")
        if isinstance(item, av.VideoFrame):
            frame = item
            if self.resize and (frame.height, frame.width) != tuple(self.resize):
                frame = frame.reformat(width=self.resize[1], height=self.resize[0], interpolation="AREA")
            if kind == VideoKind.RGB or (kind is None and (self.lossless or frame.width % 2 or frame.height % 2)):
                frame = frame.reformat(format="rgb24")  # the same conversion as to_ndarray(format="rgb24")
            return frame
        if isinstance(item, (bytes, bytearray, memoryview)):
            item = decode_image(bytes(item), 3)
        return av.VideoFrame.from_ndarray(_rgb_array(np.asarray(item), self.resize), format="rgb24")

    def _open_stream(self, c: Any, first: av.VideoFrame) -> tuple[Any, str]:
        w, h = first.width, first.height
        if self.depth:
            kind = VideoKind.DEPTH
            stream = c.add_stream("ffv1", rate=self.rate)
            stream.pix_fmt = "gray16le"
        elif self.lossless or w % 2 or h % 2:
            kind = VideoKind.RGB
            stream = c.add_stream("libx264rgb", rate=self.rate)
            stream.pix_fmt = "rgb24"
            stream.options = {"crf": "0" if self.lossless else str(self.crf), "preset": "veryfast", "g": "2",
                              "bf": "0", **X264_DETERMINISTIC}
        else:
            kind = VideoKind.YUV
            stream = c.add_stream("libx264", rate=self.rate)
            stream.pix_fmt = "yuv420p"
            stream.options = {"crf": str(self.crf), "preset": "veryfast", "g": "2", "bf": "0", **X264_DETERMINISTIC}
            if first.format.name == "yuv420p":  # the decoder's planes as they are: keep their colour tags
                stream.codec_context.colorspace = int(first.colorspace)
                stream.codec_context.color_range = int(first.color_range)
        stream.width, stream.height = w, h
        stream.time_base = 1 / self.rate
        stream.codec_context.thread_count = ENCODER_THREADS
        return stream, kind

    def encode(self, path: str, frames: Iterable[Any]) -> int:
        """Write the MP4 at `path`; returns the number of frames."""
        n = 0
        tb = 1 / self.rate
        with av.open(path, "w", format="mp4") as c:
            stream, kind = None, None
            for item in frames:
                frame = self.frame(item, kind)
                if stream is None:
                    stream, kind = self._open_stream(c, frame)
                elif (frame.width, frame.height) != (stream.width, stream.height):
                    raise VideoDecodeError(f"frame {n} is {frame.width}x{frame.height}, the first was "
                                           f"{stream.width}x{stream.height}")
                frame.pts = n
                frame.time_base = tb
                frame.pict_type = av.video.frame.PictureType.NONE  # the encoder's GOP, not the source's
                for p in stream.encode(frame):
                    c.mux(p)
                n += 1
            if stream is not None:
                for p in stream.encode():
                    c.mux(p)
        return n
