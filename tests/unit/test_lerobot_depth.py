"""LeRobot depth (robo_ray/formats/lerobot/depth.py, depth_read.py): the quantizer's bound over every uint16 value,
a lossless HEVC gray12le round trip of the codes, the feature naming and refusals of the layout, and the sampled
comparison of 16-bit frames (stages/sample_compare.py). That `quantize` / `dequantize` give lerobot 0.6.1's own
numbers is checked against lerobot in its venv (tests/integration/test_lerobot_depth.py)."""
from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from robo_ray.errors import ConfigError, FrameCountMismatch
from robo_ray.formats.lerobot.depth import DepthQuant, decode_depth, encode_depth_episode, video_info
from robo_ray.formats.lerobot.depth_read import depth_name
from robo_ray.formats.lerobot.layout import plan_layout
from robo_ray.mapping import FieldMap, Mapping
from robo_ray.stages.sample_compare import _depth_mismatch

ALL_MM = np.arange(65536, dtype=np.uint16).reshape(256, 256)


@pytest.mark.parametrize("quant", [DepthQuant(), DepthQuant(use_log=False), DepthQuant(0.2, 4.0, 0.5, True)],
                         ids=["lerobot-default", "linear", "near-range"])
def test_bound_holds_for_every_uint16_value(quant: DepthQuant) -> None:
    back = quant.dequantize(quant.quantize(ALL_MM))
    assert back.dtype == np.uint16 and back.shape == ALL_MM.shape
    err = np.abs(back.astype(np.float64) - ALL_MM)
    bound = quant.bound(ALL_MM)
    assert (err <= bound).all(), f"{int((err > bound).sum())} values beyond the bound"
    inside = (ALL_MM >= quant.depth_min * 1000) & (ALL_MM <= quant.depth_max * 1000)
    # the bound is tight: within half a code step (+ rounding) of the worst error actually seen in range
    if quant.use_log:
        assert (bound - err)[inside].min() < 0.05
    assert err[inside].max() >= 1 and bound[inside].max() < 0.5 * quant.step_mm(quant.depth_max * 1000) + 0.6


def test_default_quantizer_facts() -> None:
    q = DepthQuant()
    back = q.dequantize(q.quantize(np.array([0, 10, 300, 10_000, 12_000], np.uint16)))
    assert back[0] == 10 and back[-1] == 10_000, back  # 0 ("no depth") -> depth_min, beyond depth_max clipped
    assert abs(int(back[2]) - 300) <= 1
    inside = ALL_MM[(ALL_MM >= 10) & (ALL_MM <= 10_000)]
    assert int(np.abs(q.dequantize(q.quantize(inside)).astype(int) - inside).max()) == 2  # NOTES: "2 mm"
    assert round(q.step_mm(300), 2) == 1.25 and round(q.step_mm(10_000), 1) == 4.4


@pytest.mark.parametrize("bad", [dict(depth_min=1.0, depth_max=1.0), dict(depth_min=0.0, shift=0.0)])
def test_bad_quantizer_is_a_config_error(bad: dict) -> None:
    with pytest.raises(ConfigError):
        DepthQuant(**bad)


def test_info_round_trips_the_quantizer() -> None:
    q = DepthQuant(0.1, 5.0, 1.0, False)
    info = video_info(24, 32, 10, 2, 30, q)
    assert info["is_depth_map"] is True and info["video.pix_fmt"] == "gray12le" and info["video.channels"] == 1
    assert DepthQuant.from_info(info) == q and DepthQuant.from_info({}) == DepthQuant()


def _frames(n: int, h: int = 24, w: int = 32) -> list[np.ndarray]:
    y, x = np.mgrid[0:h, 0:w]
    return [(300 + 200 * x + 97 * y + 13 * t).astype(np.uint16)[:, :, None] for t in range(n)]


def test_hevc_gray12le_round_trip_is_exactly_the_quantized_codes(tmp_path: Path) -> None:
    q, frames = DepthQuant(), _frames(7)
    path = str(tmp_path / "depth.mp4")
    sampled: dict[int, np.ndarray] = {0: None, 6: None}  # type: ignore[dict-item]
    frames[2][0, 0, 0], frames[3][1, 1, 0] = 0, 11_000  # no depth; beyond depth_max
    clipped = [0, 0, 0]
    assert encode_depth_episode(path, iter(frames), 7, 24, 32, 10, 2, 30, q, sampled, clipped) == 7
    assert np.array_equal(sampled[6], frames[6][:, :, 0]) and clipped == [1, 1, 7 * 24 * 32]
    with av.open(path) as c:
        s = c.streams.video[0]
        assert (s.codec.name, s.codec_context.pix_fmt) == ("hevc", "gray12le")
        pts = sorted(p.pts for p in c.demux(s) if p.dts is not None)
        assert pts == [k * int(1 / (10 * s.time_base)) for k in range(7)]  # frame k at exactly k/fps
    again = str(tmp_path / "again.mp4")
    encode_depth_episode(again, iter(frames), 7, 24, 32, 10, 2, 30, q)
    assert Path(again).read_bytes() == Path(path).read_bytes()  # deterministic bytes (one thread, no B-frames)
    with av.open(path) as c:
        got = [decode_depth(f, q) for f in c.decode(c.streams.video[0])]
    assert len(got) == 7
    for a, b in zip(frames, got):
        assert np.array_equal(b, q.dequantize(q.quantize(a)))  # lossless x265: only the quantization is lost
        assert (np.abs(b.astype(float) - a) <= q.bound(a)).all()


def test_short_depth_camera_is_a_frame_count_mismatch(tmp_path: Path) -> None:
    with pytest.raises(FrameCountMismatch):
        encode_depth_episode(str(tmp_path / "d.mp4"), iter(_frames(3)), 5, 24, 32, 10, 2, 30, DepthQuant())


def _mapping(*cams: tuple[str, list[int]]) -> Mapping:
    steps = [FieldMap(source=f"src/{t}", target=t, kind="image", dtype="uint16", shape=shape, role="depth")
             for t, shape in cams]
    return Mapping(dataset_name="d", steps=steps)


def test_layout_names_depth_cameras_as_lerobot_robots_do() -> None:
    layout = plan_layout(_mapping(("observation/depth", [24, 32, 1]), ("observation/depth_wrist", [17, 33, 1])))
    assert [(c.key, c.shape, c.depth) for c in layout.cameras] == [
        ("observation.images.depth", (24, 32, 1), True), ("observation.images.wrist_depth", (17, 33, 1), True)]
    for c in layout.cameras:  # and the reader names them back so
        assert depth_name(c.key.split(".")[-1]) == c.targets[0]


@pytest.mark.parametrize("shape", [[12, 16, 1], [24, 32, 3]], ids=["below-x265-minimum", "three-channels"])
def test_layout_refuses_what_lerobot_depth_cannot_hold(shape: list[int]) -> None:
    with pytest.raises(ConfigError, match="observation/depth"):
        plan_layout(_mapping(("observation/depth", shape)))


def test_reader_features_of_lerobot_depth() -> None:
    from robo_ray.errors import SourceFormatError
    from robo_ray.formats.lerobot.reader import parse_features

    feat = {"dtype": "video", "shape": [24, 32, 1], "names": ["height", "width", "channels"],
            "info": video_info(24, 32, 10, 2, 30, DepthQuant())}
    spec = parse_features({"observation.images.wrist_depth": feat, "observation.images.top": {
        "dtype": "video", "shape": [24, 32, 3], "names": ["height", "width", "channels"]}})
    depth, top = spec["observation.images.wrist_depth"], spec["observation.images.top"]
    assert (depth.dtype, depth.shape, depth.role) == ("uint16", (24, 32, 1), "depth")
    assert depth.name == "observation/depth_wrist"
    assert (top.dtype, top.role, top.name) == ("uint8", "camera", "observation/image")  # the lone colour camera
    with pytest.raises(SourceFormatError, match="depth map stored as images"):
        parse_features({"observation.images.d": {**feat, "dtype": "image"}})


def test_sampled_comparison_of_depth_frames() -> None:
    q, src = DepthQuant(), _frames(1)[0]
    good = q.dequantize(q.quantize(src))
    assert _depth_mismatch(0, 0, "observation/depth", src, good, q.bound) == []
    assert _depth_mismatch(0, 0, "observation/depth", src, good, None)  # lossy but a lossless writer: named
    bad = good.copy()
    bad[3, 4, 0] += 40  # one pixel 40 mm off
    (msg,) = _depth_mismatch(2, 5, "observation/depth", src, bad, q.bound)
    assert "episode 2 step 5" in msg and "1 pixels" in msg
    assert _depth_mismatch(0, 0, "observation/depth", src, src, None) == []
