"""Image encoding: the YUV 4:2:0 JPEG fast path gives the same picture as the RGB path (range and colours);
`frame_array` (one cached swscale context per thread) gives PyAV's `to_ndarray(format=)` bit for bit."""
from __future__ import annotations

import av
import numpy as np
import simplejpeg

from robo_ray.images import ImageEncoder, _yuv_passthrough_ok, decode_image, frame_array
from tests.conftest import psnr
from tests.fixtures.lerobot_gen import expected_frame


def _yuv_frame(rgb: np.ndarray, fmt: str = "yuv420p") -> av.VideoFrame:
    return av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format=fmt)


def test_yuv_fast_path_matches_rgb_conversion() -> None:
    enc = ImageEncoder("jpeg", 95)
    for ep in range(3):
        rgb = expected_frame(ep, 7, 1, 96, 128)
        frame = _yuv_frame(rgb)
        assert _yuv_passthrough_ok(frame)
        fast = simplejpeg.decode_jpeg(enc.encode_frame(frame))
        reference = frame.to_ndarray(format="rgb24")  # what PyAV's own conversion gives
        assert psnr(fast, reference) > 38.0
        assert np.abs(fast.astype(int).mean(axis=(0, 1)) - reference.astype(int).mean(axis=(0, 1))).max() < 2.0


def test_saturated_colours_survive_the_fast_path() -> None:
    rgb = np.zeros((32, 48, 3), np.uint8)
    rgb[:, :16] = (220, 20, 20)
    rgb[:, 16:32] = (20, 220, 20)
    rgb[:, 32:] = (20, 20, 220)
    out = decode_image(ImageEncoder("jpeg", 95).encode_frame(_yuv_frame(rgb)))
    for x, want in ((8, (220, 20, 20)), (24, (20, 220, 20)), (40, (20, 20, 220))):
        assert np.abs(out[16, x].astype(int) - np.array(want)).max() < 12, (x, out[16, x])


def test_odd_sizes_and_resize_take_the_rgb_path() -> None:
    rgb = expected_frame(0, 0, 0, 48, 64)
    frame = _yuv_frame(rgb)
    out = decode_image(ImageEncoder("jpeg", 95, resize=(24, 32)).encode_frame(frame))
    assert out.shape == (24, 32, 3)
    png = decode_image(ImageEncoder("png").encode_frame(frame))
    np.testing.assert_array_equal(png, frame.to_ndarray(format="rgb24"))


def test_range_expansion_on_padded_planes_equals_the_8bit_table() -> None:
    """Widths whose planes are padded (line_size > width) or whose chroma rows are odd still expand exactly."""
    from robo_ray.images import _LUT_C, _LUT_Y, _jpeg_from_yuv420

    for h, w in ((96, 128), (48, 100), (50, 70)):
        frame = _yuv_frame(expected_frame(1, 3, 0, h, w))
        planes = [np.frombuffer(p, np.uint8).reshape(-1, p.line_size)[:ph, :pw]
                  for p, (ph, pw) in zip(frame.planes, ((h, w), (h // 2, w // 2), (h // 2, w // 2)))]
        want = simplejpeg.encode_jpeg_yuv_planes(_LUT_Y[planes[0]], _LUT_C[planes[1]], _LUT_C[planes[2]], quality=95)
        assert _jpeg_from_yuv420(frame, 95) == want, (h, w, [p.line_size for p in frame.planes])


def test_frame_array_is_to_ndarray_bit_for_bit() -> None:
    """Frames of different sizes, formats, colour spaces and ranges, interleaved (the cached context is rebuilt
    when they change, never reused for a frame it does not fit), rgb24 and gray."""
    frames = []
    for k, (h, w, fmt, space, rng) in enumerate([(32, 48, "yuv420p", 2, 1), (32, 48, "yuv420p", 1, 2),
                                                 (30, 46, "yuv420p", 2, 0), (32, 48, "yuvj420p", 2, 2),
                                                 (24, 40, "yuv444p", 1, 1)]):
        f = _yuv_frame(expected_frame(k, 3, 1, h, w), fmt)
        f.colorspace, f.color_range = space, rng
        frames.append(f)
    for f in frames + frames[::-1] + frames:
        for fmt in ("rgb24", "gray"):
            got, want = frame_array(f, fmt), f.to_ndarray(format=fmt)
            assert got.shape == want.shape and np.array_equal(got, want), (f.format.name, f.colorspace, fmt)
    kept = [frame_array(f, "rgb24") for f in frames]  # arrays stay valid after later conversions
    assert all(np.array_equal(a, f.to_ndarray(format="rgb24")) for a, f in zip(kept, frames))


FORK_AFTER_FRAME_ARRAY = """
import subprocess, threading
import av, numpy as np
from robo_ray.images import frame_array
f = av.VideoFrame.from_ndarray(np.zeros((64, 64, 3), np.uint8), format="rgb24").reformat(format="yuv420p")
t = threading.Thread(target=frame_array, args=(f, "rgb24"))  # a thread-local swscale context in another thread
t.start(); t.join()
frame_array(f, "rgb24")
s = threading.Thread(target=subprocess.run, args=(["true"],), kwargs={"preexec_fn": lambda: None, "check": True})
s.start(); s.join()  # fork + Python in the child, from a thread: how Ray starts its GCS in RayExecutor's starter
print("ok")
"""


def test_a_fork_after_frame_array_does_not_hang() -> None:
    """The child of a fork frees the other threads' thread-local swscale contexts; with slice threads (swscale's
    default) that waited forever on threads the child does not have: test_discover_scan's Ray start hung so."""
    import subprocess
    import sys

    try:
        out = subprocess.run([sys.executable, "-c", FORK_AFTER_FRAME_ARRAY], capture_output=True, text=True,
                             timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("the fork's child hung freeing a swscale context") from None
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
