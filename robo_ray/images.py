"""Image encoding for the output: JPEG (libjpeg-turbo via simplejpeg) or PNG, with an optional resize."""
from __future__ import annotations

import io
import threading
from dataclasses import dataclass

import av
from av.video.reformatter import VideoReformatter
import numpy as np
import simplejpeg
from PIL import Image

from robo_ray.errors import ImageDecodeError, VideoDecodeError

_REFORMAT = threading.local()  # one swscale context cache per thread (a VideoReformatter is not thread-safe)


def frame_array(frame: av.VideoFrame, fmt: str) -> np.ndarray:
    """`frame.to_ndarray(format=fmt)`, bit for bit, through one reusable VideoReformatter per thread: PyAV's
    `to_ndarray(format=)` sets up a new swscale context for every frame (0.74 of 0.84 CPU ms for a 240x320 frame,
    0.11 ms with the cached context)."""
    r = getattr(_REFORMAT, "r", None)
    if r is None:
        r = _REFORMAT.r = VideoReformatter()
    # threads=1: swscale's default (0, automatic) starts slice threads with every context, and a forked child
    # (subprocess with a preexec_fn, as Ray starts its GCS) frees the other threads' thread-local contexts: the
    # teardown of slice threads that do not exist in the child waited forever (tests/unit/test_images.py)
    return r.reformat(frame, format=fmt, threads=1).to_ndarray()


@dataclass(frozen=True)
class ImageEncoder:
    """Encodes HxWxC uint8 frames; `resize` is (height, width) or None."""

    fmt: str = "jpeg"
    quality: int = 95
    resize: tuple[int, int] | None = None
    png_compress_level: int = 3

    def out_shape(self, h: int, w: int, c: int) -> tuple[int, int, int]:
        return (*self.resize, c) if self.resize else (h, w, c)

    def encode_array(self, arr: np.ndarray) -> bytes:
        if arr.ndim == 2:
            arr = arr[:, :, None]
        if self.resize and arr.shape[:2] != tuple(self.resize):
            img = Image.fromarray(arr[:, :, 0] if arr.shape[2] == 1 else arr)
            img = img.resize((self.resize[1], self.resize[0]), Image.Resampling.BILINEAR)
            arr = np.asarray(img)
            if arr.ndim == 2:
                arr = arr[:, :, None]
        arr = np.ascontiguousarray(arr)
        if self.fmt == "jpeg":
            if arr.shape[2] == 1:
                return simplejpeg.encode_jpeg(arr, quality=self.quality, colorspace="GRAY", colorsubsampling="Gray")
            return simplejpeg.encode_jpeg(arr, quality=self.quality, colorspace="RGB", colorsubsampling="420")
        buf = io.BytesIO()
        Image.fromarray(arr[:, :, 0] if arr.shape[2] == 1 else arr).save(
            buf, format="PNG", compress_level=self.png_compress_level)
        return buf.getvalue()

    def encode_frame(self, frame: av.VideoFrame, channels: int = 3) -> bytes:
        """A decoded video frame -> encoded bytes. JPEG without resize goes straight from the decoder's YUV 4:2:0
        planes (range-expanded to JFIF full range); otherwise one RGB conversion (resized by swscale when asked)."""
        if self.fmt == "jpeg" and not self.resize and channels == 3 and _yuv_passthrough_ok(frame):
            return _jpeg_from_yuv420(frame, self.quality)
        if self.resize:
            h, w = self.resize
            frame = frame.reformat(width=w, height=h, interpolation="AREA")
        fmt = "gray" if channels == 1 else "rgb24"
        return self.encode_array(frame_array(frame, fmt))

    def encode_item(self, item: object, channels: int = 3) -> bytes:
        """Any frame a writer receives (robo_ray.episode.FrameItem) -> encoded bytes: a PyAV frame from its
        planes, a uint16 array as 16-bit PNG, a uint8 array as is, source bytes passed through when they fit."""
        if isinstance(item, av.VideoFrame):
            return self.encode_frame(item, channels)
        if isinstance(item, np.ndarray):
            if item.dtype == np.uint16:
                from robo_ray.episode import png_bytes

                return png_bytes(item, 3)
            return self.encode_array(item)
        return self.transcode(item, channels)  # type: ignore[arg-type]

    def transcode(self, data: bytes, channels: int = 3) -> bytes:
        """Encoded PNG/JPEG from the source -> our encoding (passed through when nothing would change)."""
        if not self.resize and _sniff(data) == self.fmt:
            return data
        return self.encode_array(decode_image(data, channels))


def _sniff(data: bytes) -> str | None:
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    return None


def decode_image(data: bytes, channels: int = 3) -> np.ndarray:
    """PNG/JPEG bytes -> HxWxC uint8. RGB from a JPEG through simplejpeg (libjpeg-turbo, the same pixels as PIL's
    decoder, 2.4x less CPU at 128x128: RLDS -> video targets decode every frame); anything else, and a JPEG
    simplejpeg refuses (CMYK, damaged: PIL's message names the fault), through PIL. Grayscale stays with PIL: its
    RGB -> L of a colour JPEG differs by 1 from libjpeg's luma."""
    if channels == 3 and data[:3] == b"\xff\xd8\xff":
        try:
            return simplejpeg.decode_jpeg(data, colorspace="RGB")
        except ValueError:
            pass
    try:
        with Image.open(io.BytesIO(data)) as im:
            arr = np.asarray(im.convert("L" if channels == 1 else "RGB"))
    except Exception as exc:  # PIL raises many types for bad data
        raise ImageDecodeError(f"cannot decode embedded image: {exc}") from exc
    return arr[:, :, None] if arr.ndim == 2 else arr


# Limited ("MPEG", 16..235 / 16..240) -> full ("JPEG", 0..255) range lookup tables for the YUV fast path.
_LUT_Y = np.clip(np.round((np.arange(256) - 16) * 255 / 219), 0, 255).astype(np.uint8)
_LUT_C = np.clip(np.round((np.arange(256) - 128) * 255 / 224 + 128), 0, 255).astype(np.uint8)
# Colorspaces whose matrix is the BT.601 one JPEG decoders assume (2 = unspecified, which swscale treats as 601).
_BT601_FAMILY = {2, 5, 6}


def _yuv_passthrough_ok(frame: av.VideoFrame) -> bool:
    return (frame.format.name in ("yuv420p", "yuvj420p") and frame.width % 2 == 0 and frame.height % 2 == 0
            and int(frame.colorspace) in _BT601_FAMILY)


def _pair_lut(lut: np.ndarray) -> np.ndarray:
    """The 8-bit table applied to both bytes of a uint16: one lookup for two pixels (about 2x faster)."""
    i = np.arange(1 << 16)
    return (lut[i & 0xFF].astype(np.uint16) | (lut[i >> 8].astype(np.uint16) << 8)).astype("=u2")


_LUT2_Y, _LUT2_C = _pair_lut(_LUT_Y), _pair_lut(_LUT_C)


def _plane(frame: av.VideoFrame, index: int, w: int, h: int,
           luts: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """One plane as an HxW array (contiguous), through the (8-bit, pair) lookup tables when given."""
    p = frame.planes[index]
    line = p.line_size
    raw = np.frombuffer(p, np.uint8)[:h * line]
    if luts is not None:
        lut, lut2 = luts
        raw = lut2.take(raw.view(np.uint16)).view(np.uint8) if line % 2 == 0 else lut.take(raw)
    arr = raw.reshape(h, line)
    return arr if line == w else np.ascontiguousarray(arr[:, :w])


def _jpeg_from_yuv420(frame: av.VideoFrame, quality: int) -> bytes:
    w, h = frame.width, frame.height
    expand = frame.format.name == "yuv420p" and int(frame.color_range) != 2  # 2 = JPEG/full range already
    ly, lc = ((_LUT_Y, _LUT2_Y), (_LUT_C, _LUT2_C)) if expand else (None, None)
    y, u, v = _plane(frame, 0, w, h, ly), _plane(frame, 1, w // 2, h // 2, lc), _plane(frame, 2, w // 2, h // 2, lc)
    return simplejpeg.encode_jpeg_yuv_planes(y, u, v, quality=quality)


def depth_array(item: object) -> np.ndarray:
    """A 16-bit depth frame as a writer receives it (PyAV frame, HxW[x1] array, 16-bit PNG bytes) -> HxW uint16."""
    if isinstance(item, av.VideoFrame):
        return item.to_ndarray(format="gray16le")
    if isinstance(item, (bytes, bytearray, memoryview)):
        try:
            with Image.open(io.BytesIO(bytes(item))) as im:
                arr = np.asarray(im)
        except Exception as exc:  # PIL raises many types for bad data
            raise VideoDecodeError(f"cannot decode a 16-bit depth image: {exc}") from exc
    else:
        arr = np.asarray(item)
    if arr.ndim == 3:
        arr = arr[:, :, 0]
    return np.ascontiguousarray(arr.astype("<u2", copy=False))


def decode_frame(data: bytes, channels: int, dtype: str = "uint8") -> np.ndarray:
    """Embedded image bytes -> HxWxC: 8-bit (`decode_image`), or for a 16-bit (depth) feature HxWx1 uint16 values."""
    if dtype == "uint16":
        return depth_array(data)[:, :, None]
    return decode_image(data, channels)
