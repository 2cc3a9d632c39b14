"""ROS messages as robo-ray reads them, built with rosbags' own types and serialisers: the image encodings ROS uses
(pixels checked against the array the message was made from), CompressedImage JPEG / PNG, header stamps read from
the raw CDR and ROS 1 bytes, and the clock rule's counts on hand-made message times."""
from __future__ import annotations

import io

import av
import numpy as np
import pytest
import simplejpeg
from PIL import Image
from rosbags.typesys import Stores, get_typestore

from robo_ray.errors import DataCorrupt, DataMissing
from robo_ray.formats.rosbag import clock
from robo_ray.formats.rosbag.bags import header_stamp
from robo_ray.formats.rosbag.messages import (NotRead, depth_png_array, describe, encoded_image, extractor,
                                              image_array, tensor_values)
from tests.fixtures.rosbag_gen import build, compressed_depth

TS2 = get_typestore(Stores.ROS2_HUMBLE)
TS1 = get_typestore(Stores.ROS1_NOETIC)
RGB = np.random.default_rng(0).integers(0, 256, (4, 5, 3), dtype=np.uint8)


def _image(data: np.ndarray, encoding: str, step: int | None = None, big: bool = False) -> object:
    h, w = data.shape[:2]
    raw = data.tobytes()
    row = len(raw) // h
    step = step or row
    padded = b"".join(raw[i * row:(i + 1) * row] + b"\0" * (step - row) for i in range(h))
    return build(TS2, "sensor_msgs/msg/Image", {"height": h, "width": w, "encoding": encoding, "step": step,
                                                "is_bigendian": int(big), "data": np.frombuffer(padded, np.uint8)})


@pytest.mark.parametrize("encoding, stored", [
    ("rgb8", RGB), ("bgr8", RGB[..., ::-1]), ("rgba8", np.dstack([RGB, np.full((4, 5), 7, np.uint8)])),
    ("bgra8", np.dstack([RGB[..., ::-1], np.full((4, 5), 7, np.uint8)]))])
def test_colour_encodings_give_rgb(encoding: str, stored: np.ndarray) -> None:
    msg = _image(np.ascontiguousarray(stored), encoding, step=stored.shape[1] * stored.shape[2] + 3)
    got = image_array(msg, "bag x")
    np.testing.assert_array_equal(got, RGB)
    assert describe("sensor_msgs/msg/Image", msg, "bag x")[0].shape == (4, 5, 3)


def test_grey_and_depth_encodings() -> None:
    grey = RGB[..., 0]
    np.testing.assert_array_equal(image_array(_image(grey, "mono8"), "bag x")[..., 0], grey)
    depth = (np.arange(20, dtype=np.uint16).reshape(4, 5) * 3001)
    for big in (False, True):
        stored = depth.astype(">u2" if big else "<u2")
        got = image_array(_image(stored, "16UC1", big=big), "bag x")
        assert got.dtype == np.uint16 and got.shape == (4, 5, 1)
        np.testing.assert_array_equal(got[..., 0], depth)


def test_metric_depth_is_read_in_millimetres() -> None:
    """32FC1 (metres, Gazebo / Isaac Sim) -> uint16 millimetres, rounded, either byte order; what 16UC1 cannot hold
    (NaN, inf, <= 0, beyond 65.535 m) -> 0 (no reading); the feature says so in its note."""
    metres = np.array([[0.5, 1.2344, 1.2346, 65.535, 65.5356],
                       [np.nan, np.inf, -np.inf, 0.0, -0.3],
                       [0.0004, 0.0006, 3.0, 10.0, 70.0],
                       [2.5, 2.5, 2.5, 2.5, 2.5]], np.float32)
    want = np.array([[500, 1234, 1235, 65535, 0], [0, 0, 0, 0, 0], [0, 1, 3000, 10000, 0],
                     [2500] * 5], np.uint16)
    for big in (False, True):
        msg = _image(metres.astype(">f4" if big else "<f4"), "32FC1", step=5 * 4 + 8, big=big)
        (value,) = describe("sensor_msgs/msg/Image", msg, "bag x")
        assert (value.kind, value.shape, value.dtype) == ("image", (4, 5, 1), "uint16")
        assert value.note.startswith("32FC1 depth in metres, written as 16-bit millimetres")
        got = extractor("sensor_msgs/msg/Image", value, "bag x")(msg)
        assert got.dtype == np.uint16 and got.shape == (4, 5, 1)
        np.testing.assert_array_equal(got[..., 0], want)
    assert describe("sensor_msgs/msg/Image", _image(RGB, "rgb8"), "bag x")[0].note == ""


def test_packed_yuv_is_read_as_rgb() -> None:
    """usb_cam's `yuv422_yuy2` (Y0 U Y1 V) and `yuv422` (U Y0 V Y1, UYVY) give the same RGB, close to the frame they
    were made from (chroma shared by a pixel pair), with a padded step; an odd width is the episode's error."""
    y, x = np.mgrid[0:4, 0:6]
    rgb = np.stack([100 + 10 * x, 80 + 12 * y, 120 + 3 * (x + y)], axis=-1).astype(np.uint8)
    yuyv = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuyv422").to_ndarray()
    uyvy = np.ascontiguousarray(yuyv[..., ::-1])
    got = {enc: image_array(_image(arr, enc, step=6 * 2 + 4), "bag x") for enc, arr in
           (("yuv422_yuy2", yuyv), ("yuv422", uyvy))}
    np.testing.assert_array_equal(got["yuv422_yuy2"], got["yuv422"])
    assert got["yuv422"].shape == (4, 6, 3) and np.abs(got["yuv422"].astype(int) - rgb).max() <= 8
    (value,) = describe("sensor_msgs/msg/Image", _image(yuyv, "yuv422_yuy2"), "bag x")
    assert (value.kind, value.shape, value.dtype) == ("image", (4, 6, 3), "uint8")
    with pytest.raises(DataCorrupt, match="even width"):
        image_array(_image(yuyv[:, :5], "yuv422_yuy2"), "bag x")


def test_bad_images_are_the_episodes_error() -> None:
    with pytest.raises(DataCorrupt, match="encoding 'nv21'"):
        image_array(_image(RGB, "nv21"), "bag x")
    short = build(TS2, "sensor_msgs/msg/Image", {"height": 400, "width": 500, "encoding": "rgb8", "step": 1500,
                                                 "data": np.zeros(10, np.uint8)})
    with pytest.raises(DataCorrupt, match="does not fit"):
        image_array(short, "bag x")


def test_compressed_images_pass_as_their_bytes() -> None:
    png = io.BytesIO()
    Image.fromarray(RGB).save(png, format="PNG")
    for data, shape in ((simplejpeg.encode_jpeg(RGB), (4, 5, 3)), (png.getvalue(), (4, 5, 3))):
        msg = build(TS2, "sensor_msgs/msg/CompressedImage", {"format": "rgb8; x compressed bgr8",
                                                             "data": np.frombuffer(data, np.uint8)})
        assert encoded_image(msg, "bag x") == data
        assert describe("sensor_msgs/msg/CompressedImage", msg, "bag x")[0].shape == shape


def test_compressed_depth_is_read_other_depth_formats_are_not() -> None:
    """compressed_depth_image_transport's 16UC1 PNG (after its 12-byte config header) and image_transport's 16-bit
    PNG -> uint16 depth, exactly;
    32FC1 / RVL compressedDepth and undecoded Image encodings (8UC3) raise NotRead (the topic is left out), a damaged
    compressedDepth message is the episode's DataCorrupt."""
    depth = (np.arange(20, dtype=np.uint16).reshape(4, 5) * 3001)
    msg = build(TS2, "sensor_msgs/msg/CompressedImage", {
        "format": "16UC1; compressedDepth png", "data": np.frombuffer(compressed_depth(depth), np.uint8)})
    (value,) = describe("sensor_msgs/msg/CompressedImage", msg, "bag x")
    assert (value.kind, value.shape, value.dtype) == ("image", (4, 5, 1), "uint16")
    got = extractor("sensor_msgs/msg/CompressedImage", value, "bag x")(msg)
    assert got.dtype == np.uint16
    np.testing.assert_array_equal(got[..., 0], depth)
    for fmt in ("32FC1; compressedDepth", "16UC1; compressedDepth rvl"):
        other = build(TS2, "sensor_msgs/msg/CompressedImage", {"format": fmt, "data": msg.data})
        with pytest.raises(NotRead, match="compressedDepth"):
            describe("sensor_msgs/msg/CompressedImage", other, "bag x")
    with pytest.raises(NotRead, match="8UC3"):
        describe("sensor_msgs/msg/Image", _image(RGB, "8UC3"), "bag x")
    png16 = io.BytesIO()  # image_transport's "png compressed" of a 16UC1 image: depth too, not an 8-bit camera
    Image.fromarray(depth).save(png16, format="PNG")
    plain = build(TS2, "sensor_msgs/msg/CompressedImage", {"format": "16UC1; png compressed ",
                                                           "data": np.frombuffer(png16.getvalue(), np.uint8)})
    (value,) = describe("sensor_msgs/msg/CompressedImage", plain, "bag x")
    assert (value.kind, value.shape, value.dtype) == ("image", (4, 5, 1), "uint16")
    np.testing.assert_array_equal(extractor("sensor_msgs/msg/CompressedImage", value, "bag x")(plain)[..., 0], depth)
    broken = build(TS2, "sensor_msgs/msg/CompressedImage", {"format": "16UC1; compressedDepth png",
                                                            "data": np.frombuffer(b"\0" * 40, np.uint8)})
    with pytest.raises(DataCorrupt, match="holds no PNG"):
        depth_png_array(broken, "bag x")


def test_numbers_of_any_message() -> None:
    twist = build(TS2, "geometry_msgs/msg/Twist", {"linear": {"x": 1.0, "y": 2.0, "z": 3.0},
                                                   "angular": {"x": 4.0, "y": 5.0, "z": 6.0}})
    np.testing.assert_array_equal(tensor_values(twist, "geometry_msgs/msg/Twist"), [1, 2, 3, 4, 5, 6])
    (value,) = describe("geometry_msgs/msg/Twist", twist, "bag x")
    assert value.names == ("linear.x", "linear.y", "linear.z", "angular.x", "angular.y", "angular.z")
    arr = build(TS2, "std_msgs/msg/Float64MultiArray", {"layout": {"dim": [], "data_offset": 9},
                                                        "data": np.array([0.5, 1.5])})
    np.testing.assert_array_equal(tensor_values(arr, "std_msgs/msg/Float64MultiArray"), [0.5, 1.5])


def test_header_stamps_from_raw_bytes() -> None:
    stamp = {"stamp": {"sec": 1_700_000_123, "nanosec": 456_789}, "frame_id": "f"}
    js = {"header": stamp, "name": ["a"], "position": np.array([1.0])}
    raw2 = TS2.serialize_cdr(build(TS2, "sensor_msgs/msg/JointState", js), "sensor_msgs/msg/JointState")
    big = TS2.serialize_cdr(build(TS2, "sensor_msgs/msg/JointState", js), "sensor_msgs/msg/JointState",
                            little_endian=False)
    raw1 = TS1.serialize_ros1(build(TS1, "sensor_msgs/msg/JointState", {**js, "header": {**stamp, "seq": 4}}),
                              "sensor_msgs/msg/JointState")
    want = 1_700_000_123 * 10**9 + 456_789
    assert header_stamp(raw2, False) == header_stamp(big, False) == header_stamp(raw1, True) == want


def test_clock_rule_counts() -> None:
    """A 10 Hz topic (ms) missing its message at 500 and, later, 1100-1400; ticks every 100 ms from 0."""
    ms = 1_000_000
    times = np.array([t for t in range(0, 2100, 100) if t != 500 and not 1100 <= t <= 1400], np.int64) * ms
    ticks = clock.fps_ticks(0, 2000 * ms, 10.0)
    assert len(ticks) == 21 and ticks[-1] == 2000 * ms
    period = clock.nominal_period(times)
    assert period == 100 * ms and list(clock.gaps(times, period)) == [4, 9]
    s = clock.sample(times, ticks, None, period)
    assert list(times[s.index][4:7] // ms) == [400, 400, 600]  # the tick at 500 takes 400's message
    assert s.filled == 5  # 500, and 1100..1400
    assert s.held == 2 and s.beyond == [(1300 * ms, 300 * ms)]  # 1300 and 1400 are over 2 periods old
    wide = clock.sample(times, ticks, 500 * ms, period)
    assert wide.held == 0 and wide.filled == 5
    assert clock.first_decrease(np.array([1, 2, 2, 1, 3])) == 3 and clock.window({"a": times, "b": times[3:]}) \
        == (times[3], times[-1])


def test_topics_on_clocks_hours_apart_say_how_to_convert_them() -> None:
    """Simulation-time header stamps beside wall-clock receive times share no window: the episode's error says
    to use receive times throughout; topics that merely do not overlap get no such hint."""
    from robo_ray.formats.rosbag.steps import ClockRule, plan_steps

    rule = ClockRule(10.0, None, None, "quarantine")
    sim = np.arange(0, 2_000_000_000, 20_000_000, dtype=np.int64)  # header stamps from t=0 (sim time)
    wall = 1_700_000_000 * 10**9 + np.arange(0, 2_000_000_000, 50_000_000, dtype=np.int64)  # receive times
    plan = plan_steps({"/joint_states": sim, "/arm/command": wall}, rule, "bag x")
    assert isinstance(plan.error, DataMissing) and "stamps=log" in str(plan.error)
    apart = plan_steps({"/joint_states": sim, "/arm/command": sim + 3_000_000_000}, rule, "bag x")
    assert isinstance(apart.error, DataMissing) and "stamps=log" not in str(apart.error)


def test_point_clouds_and_oversized_messages_are_not_step_features() -> None:
    """A PointCloud2 and a message of more than MAX_TOPIC_VALUES numbers raise NotRead (left out, with the reason);
    `widths` counts each message's numbers (per JointState part) so a varying topic can be found."""
    from robo_ray.formats.rosbag.messages import MAX_TOPIC_VALUES, widths

    cloud = build(TS2, "sensor_msgs/msg/PointCloud2", {"height": 1, "width": 3, "point_step": 4, "row_step": 12,
                                                       "data": np.zeros(12, np.uint8)})
    with pytest.raises(NotRead, match="point clouds"):
        describe("sensor_msgs/msg/PointCloud2", cloud, "bag x")
    big = build(TS2, "std_msgs/msg/Float32MultiArray", {"data": np.zeros(MAX_TOPIC_VALUES + 1, np.float32)})
    with pytest.raises(NotRead, match="not a per-step feature"):
        describe("std_msgs/msg/Float32MultiArray", big, "bag x")
    joints = build(TS2, "sensor_msgs/msg/JointState", {"name": ["a", "b"], "position": np.ones(2),
                                                       "velocity": np.zeros(0), "effort": np.ones(2)})
    count = widths("sensor_msgs/msg/JointState")
    assert count is not None and count(joints) == (("a", "b"), (2, 0, 2))  # names too: which publisher
    small = build(TS2, "std_msgs/msg/Float32MultiArray", {"data": np.zeros(5, np.float32)})
    count = widths("std_msgs/msg/Float32MultiArray")
    assert count is not None and count(small) == (5,)
    assert widths("sensor_msgs/msg/Image") is None and widths("sensor_msgs/msg/PointCloud2") is None
