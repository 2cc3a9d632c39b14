"""ROS bags (issue #27 item 4): MCAP (mcap_ros2's writer), rosbag2 with sqlite3 and mcap storage and ROS 1 bags
(rosbags' writers), one bag per episode (tests/fixtures/rosbag_gen.py), convert to RLDS, LeRobot v3.0 and ORTF.

The truth is computed here from the raw messages, read with rosbags' AnyReader alone (no robo_ray), by the
documented rule: times are header stamps where a message has a header, else receive times; the window runs from
the latest first message to the earliest last message of the data topics; `--fps F` ticks are
start + round(k * 1e9 / F) up to the end; each topic gives its latest message at or before the tick. Low-dim values
must be exact (float64 narrowed to float32 by the targets), frames within 30 dB PSNR of the decoded source (bgr8
turned to RGB, JPEG decoded), the language the /task text; RLDS loads in tfds."""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import simplejpeg
from PIL import Image
from rosbags.highlevel import AnyReader

from robo_ray.config import load_config
from robo_ray.errors import ConfigError
from robo_ray.readers import detect_format, open_reader
from robo_ray.stages.pipeline import run_pipeline
from robo_ray.stages.source_frames import source_frames
from tests.conftest import convert_in_process, load_rlds, psnr, source_cache
from tests.fixtures import rosbag_gen

FPS = 10.0
DATA = ("/joint_states", "/arm/command", "/cam_high/image_raw", "/cam_wrist/image_raw",
        "/cam_side/image_raw/compressed")
CAMS = {"/cam_high/image_raw": "observation/image_high", "/cam_wrist/image_raw": "observation/image_wrist",
        "/cam_side/image_raw/compressed": "observation/image_side"}


def raw_topics(bag: Path, stamps: str = "header", unset: tuple[str, ...] = ()
               ) -> dict[str, tuple[np.ndarray, list[Any]]]:
    """topic -> (times ns, messages) read with rosbags alone (`unset` topics: stamps never set, receive times)."""
    out: dict[str, tuple[list[int], list[Any]]] = {}
    with AnyReader([bag]) as r:
        for conn, t, raw in r.messages():
            msg = r.deserialize(raw, conn.msgtype)
            stamp = getattr(msg, "header", None)
            if stamps == "header" and stamp is not None and conn.topic not in unset:
                t = stamp.stamp.sec * 10**9 + stamp.stamp.nanosec
            times, msgs = out.setdefault(conn.topic, ([], []))
            times.append(t)
            msgs.append(msg)
    return {k: (np.array(v[0], np.int64), v[1]) for k, v in out.items()}


def image_of(msg: Any) -> np.ndarray:
    """What a camera message shows, in RGB, decoded independently."""
    if hasattr(msg, "format"):
        return simplejpeg.decode_jpeg(bytes(msg.data))
    if msg.encoding == "yuv422_yuy2":  # Y0 U Y1 V, BT.601 limited range (what V4L2 webcams give)
        p = np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.width // 2, 4).astype(np.float64)
        y = np.stack([p[..., 0], p[..., 2]], axis=-1).reshape(msg.height, msg.width) - 16
        u, v = (np.repeat(p[..., k], 2, axis=1) - 128 for k in (1, 3))
        rgb = np.stack([1.164 * y + 1.596 * v, 1.164 * y - 0.813 * v - 0.391 * u, 1.164 * y + 2.018 * u], axis=-1)
        return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)
    img = np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.width, 3)
    return img[..., ::-1] if msg.encoding == "bgr8" else img


def depth_of(msg: Any) -> np.ndarray:
    """A depth message's depth in millimetres, decoded independently: a CompressedImage's 16-bit PNG
    (compressedDepth: after its 12-byte config header); a 32FC1 Image's metres x 1000, rounded, where 16UC1 can hold
    them (0: no reading)."""
    if not hasattr(msg, "format"):
        metres = np.frombuffer(bytes(msg.data), "<f4").reshape(msg.height, msg.width, 1)
        valid = np.isfinite(metres) & (metres > 0) & (metres <= 65.535)
        return np.where(valid, np.rint(np.where(valid, metres, 0) * 1000.0), 0).astype(np.uint16)
    with Image.open(io.BytesIO(bytes(msg.data)[12 if "compressedDepth" in msg.format else 0:])) as im:
        return np.asarray(im).astype(np.uint16)[..., None]


def truth(bag: Path, fps: float | None = FPS, stamps: str = "header", reference: str | None = None,
          depth_topics: tuple[str, ...] = (), unset: tuple[str, ...] = ()) -> dict[str, Any]:
    """One episode's expected steps by the as-of rule (`depth_topics`: depth CompressedImage topics also mapped;
    `unset`: topics whose header stamps are all 0, read by receive time)."""
    topics = raw_topics(bag, stamps, unset)
    data = DATA + depth_topics
    start = max(int(topics[t][0][0]) for t in data)
    end = min(int(topics[t][0][-1]) for t in data)
    if reference is None:
        ticks = []
        k = 0
        while start + round(k * 1e9 / fps) <= end:
            ticks.append(start + round(k * 1e9 / fps))
            k += 1
        ticks = np.array(ticks, np.int64)
    else:
        ref = topics[reference][0]
        ticks = ref[(ref >= start) & (ref <= end)]

    def asof(topic: str) -> list[Any]:
        times, msgs = topics[topic]
        return [msgs[max(i for i in range(len(times)) if times[i] <= t)] for t in ticks]

    task = topics["/task"][1][0].data
    return {"state": np.array([m.position for m in asof("/joint_states")]),
            "velocity": np.array([m.velocity for m in asof("/joint_states")]),
            "action": np.array([m.data for m in asof("/arm/command")]),
            "frames": {t: np.stack([image_of(m) for m in asof(t)]) for t in CAMS},
            "depth": {t: np.stack([depth_of(m) for m in asof(t)]) for t in depth_topics},
            "usb": asof("/usb_cam/image_raw") if "/usb_cam/image_raw" in topics and depth_topics else [],
            "task": task, "length": len(ticks)}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    return source_cache(tmp_path_factory, lambda fmt, tmp: rosbag_gen.write_dataset(tmp / "bags", fmt))


def bags(src: Path) -> list[Path]:
    return sorted(src.iterdir(), key=lambda p: int(p.stem.split("_")[1]))


def convert(src: Path, out: Path, target: str, *overrides: str, **options: Any) -> Any:
    return convert_in_process(src, out, target, *overrides, source_options=options)


@pytest.mark.parametrize("fmt", rosbag_gen.FORMATS)
def test_bags_are_detected_and_inventoried(fmt: str, made: Callable[[str], Path]) -> None:
    """Every topic with its type, count and rate; the dropped frame as a gap; the default clock is the first
    camera's messages (so its dropped frame is no step) at its median rate."""
    src = made(fmt)
    assert detect_format(str(src)) == "rosbag"
    inv = open_reader(str(src)).discover()
    want = [truth(b, reference="/cam_high/image_raw") for b in bags(src)]
    assert [r.length for r in inv.refs] == [w["length"] for w in want] and inv.fps == 10.0
    assert inv.tasks == [w["task"] for w in want]
    topics = inv.declared["topics"]
    assert topics["/joint_states"]["type"] == "sensor_msgs/msg/JointState"
    assert topics["/joint_states"]["rate_hz"] == 50.0 and topics["/arm/command"]["rate_hz"] == 20.0
    assert topics["/cam_high/image_raw"]["count"] == 3 * 19 and topics["/cam_wrist/image_raw"]["count"] == 3 * 20
    assert topics["/cam_high/image_raw"]["gaps"] == 3 and topics["/cam_wrist/image_raw"]["gaps"] == 0
    roles = {k: f.role for k, f in inv.features.items()}
    assert roles == {"/arm/command": "action", "/joint_states": "state", "/joint_states#velocity": "observation",
                     **{c: "camera" for c in CAMS}}
    assert {f.code for f in inv.findings} == {"RB104"}, inv.findings


@pytest.mark.parametrize("fmt", rosbag_gen.FORMATS)
def test_bags_to_rlds_load_in_tfds(fmt: str, made: Callable[[str], Path], tmp_path: Path) -> None:
    src = made(fmt)
    want = [truth(b) for b in bags(src)]
    inv = open_reader(str(src), options={"fps": FPS}).discover()
    # the dropped /cam_high frame is filled by the previous one at one step of each episode, and said
    filled = [f for f in inv.findings if f.code == "RB102"]
    assert len(filled) == 3 and all("/cam_high/image_raw: 1 step" in f.message for f in filled), inv.findings
    outcome = convert(src, tmp_path / "out", "rlds", fps=FPS)
    episodes = load_rlds(Path(outcome.dataset_dir))
    assert len(episodes) == len(want)
    for ep, w in zip(episodes, want):
        steps = ep["steps"]
        assert len(steps["action"]) == w["length"]
        np.testing.assert_array_equal(steps["observation/state"], w["state"].astype(np.float32))
        np.testing.assert_array_equal(steps["observation/joint_states_velocity"], w["velocity"].astype(np.float32))
        np.testing.assert_array_equal(steps["action"], w["action"].astype(np.float32))
        assert [s.decode() for s in steps["language_instruction"]] == [w["task"]] * w["length"]
        for topic, name in CAMS.items():
            got, frames = steps[name], w["frames"][topic]
            assert got.shape == frames.shape
            worst = min(psnr(a, b) for a, b in zip(got, frames))
            assert worst >= 30, (topic, worst)
        # bgr8 turned to RGB: the channel-swapped reading is far off
        assert psnr(steps["observation/image_wrist"][0], w["frames"]["/cam_wrist/image_raw"][0][..., ::-1]) < 25


@pytest.mark.parametrize("target", ["lerobot", "ortf"])
@pytest.mark.parametrize("fmt", ["mcap", "rosbag2_sqlite3"])
def test_bags_to_lerobot_and_ortf(fmt: str, target: str, made: Callable[[str], Path], tmp_path: Path) -> None:
    src = made(fmt)
    want = [truth(b) for b in bags(src)]
    outcome = convert(src, tmp_path / "out", target, fps=FPS)
    reader = open_reader(outcome.dataset_dir if target == "ortf" else str(tmp_path / "out"))
    inv = reader.discover()
    assert inv.fps == FPS and [r.length for r in inv.refs] == [w["length"] for w in want]
    cams = [k for k, f in inv.features.items() if f.kind in ("video", "image")]
    assert len(cams) == 3
    for ref, w in zip(inv.refs, want):
        ep = reader.load_episode(ref)
        np.testing.assert_array_equal(ep.columns["action"].reshape(w["length"], -1), w["action"].astype(np.float32))
        assert set(ep.step_tasks) == {w["task"]}
        matched = set()
        for cam in cams:  # each written camera is one source camera (targets name them their own way)
            got = source_frames(reader, ep, cam, list(range(w["length"])))
            worst, topic = max((min(psnr(a, b) for a, b in zip(got, w["frames"][t])), t) for t in CAMS)
            assert worst >= 30, (cam, worst)
            matched.add(topic)
        assert matched == set(CAMS)
    if target == "lerobot":
        assert json.loads((tmp_path / "out" / "meta" / "info.json").read_text())["fps"] == FPS


@pytest.mark.parametrize("fmt", ["ros1", "rosbag2_sqlite3"])
def test_recorder_topics_compressed_depth_read_unread_encodings_left_out(fmt: str, tmp_path: Path) -> None:
    """A recording with what `record -a` also catches: a compressedDepth topic (16UC1 PNG after its config header)
    and a 16-bit `png compressed` topic are read as depth, exactly; a 32FC1 depth topic (metres) is read as
    millimetres, said by RB107, with NaN / inf / beyond 65.535 m / negative pixels 0; usb_cam's yuv422_yuy2 topic
    is a camera (RGB within 30 dB of the frame it was made from); a point cloud of varying size is left out with a
    finding (they used to refuse the whole dataset, or quarantine every episode), and everything else converts as
    before."""
    sim = "/sim/depth/image_raw"
    depth_topics = ("/camera/aligned_depth_to_color/image_raw/compressed",
                    "/camera/depth/image_rect_raw/compressedDepth", sim)
    src = rosbag_gen.write_dataset(tmp_path / "bags", fmt, episodes=2, recorder_topics=True)
    want = [truth(b, depth_topics=depth_topics) for b in bags(src)]
    inv = open_reader(str(src), options={"fps": FPS}).discover()
    left = sorted(f.message.split(" ")[0] for f in inv.findings if f.code == "RB105")
    assert left == ["/camera/depth/color/points"], inv.findings
    usb = inv.features["/usb_cam/image_raw"]
    assert (usb.role, usb.dtype, tuple(usb.shape)) == ("camera", "uint8", (rosbag_gen.H, rosbag_gen.W, 3))
    assert sorted(inv.declared["left_out"]) == left
    (metric,) = [f.message for f in inv.findings if f.code == "RB107"]
    assert metric.startswith(f"{sim} (sensor_msgs/msg/Image): 32FC1 depth in metres, written as 16-bit millimetres")
    specs = {t: inv.features[t] for t in depth_topics}
    for spec in specs.values():
        assert (spec.role, spec.dtype, tuple(spec.shape)) == ("depth", "uint16", (rosbag_gen.H, rosbag_gen.W, 1))
    assert [r.length for r in inv.refs] == [w["length"] for w in want]
    outcome = convert(src, tmp_path / "out", "rlds", fps=FPS)
    episodes = load_rlds(Path(outcome.dataset_dir))
    assert len(episodes) == len(want)
    for ep, w in zip(episodes, want):
        steps = ep["steps"]
        np.testing.assert_array_equal(steps["action"], w["action"].astype(np.float32))
        for topic, spec in specs.items():  # 16-bit PNG in RLDS: lossless
            np.testing.assert_array_equal(steps[spec.name], w["depth"][topic])
        usb_frames = steps[usb.name]
        usb_want = np.stack([image_of(m) for m in w["usb"]])
        assert min(psnr(a, b) for a, b in zip(usb_frames, usb_want)) >= 30
        sim_mm = steps[specs[sim].name]
        assert all(int(sim_mm[k, y, x, 0]) == 0 for k in range(len(sim_mm)) for y, x in rosbag_gen.NO_READING)
        assert sim_mm.min() == 0 and sim_mm.max() >= 500  # millimetres, not metres truncated to 0
        for topic, name in CAMS.items():
            assert min(psnr(a, b) for a, b in zip(steps[name], w["frames"][topic])) >= 30, topic


def _opencv_topic(messages: list[Any]) -> list[Any]:
    """/cv/image: an OpenCV node's frames published through cv_bridge without an encoding ("8UC3", BGR bytes) at
    /cam_high's times."""
    cams = [(t, v["header"]) for t, topic, _, v in messages if topic == "/cam_high/image_raw"]
    extra = [(t + 1_000, "/cv/image", "sensor_msgs/msg/Image", {
        "header": header, "height": rosbag_gen.H, "width": rosbag_gen.W, "encoding": "8UC3", "is_bigendian": 0,
        "step": rosbag_gen.W * 3, "data": np.ascontiguousarray(rosbag_gen.frame(0, 4, k)[..., ::-1]).ravel()})
        for k, (t, header) in enumerate(cams)]
    return sorted(messages + extra, key=lambda m: m[0])


def test_an_image_encoding_set_by_the_user(tmp_path: Path) -> None:
    """An 8UC3 topic (cv_bridge's passthrough of an OpenCV image) is left out, the finding saying how to read it as
    BGR; with source.options.encodings it is a camera in RGB (RB109 says the encoding was set). A topic that is no
    Image, or an encoding robo-ray does not read, is refused up front."""
    src = rosbag_gen.write_dataset(tmp_path / "bags", "mcap", episodes=2, seconds=1.0)
    for ep in (0, 1):
        rosbag_gen.rewrite(src, ep, messages=_opencv_topic)
    (left,) = [f.message for f in open_reader(str(src), options={"fps": FPS}).discover().findings
               if f.code == "RB105"]
    assert left.startswith("/cv/image (sensor_msgs/msg/Image: image encoding '8UC3' is not read") and \
        """--set 'source.options.encodings={"/cv/image": "bgr8"}' reads it so""" in left, left
    options = {"fps": FPS, "encodings": {"/cv/image": "bgr8"}}
    inv = open_reader(str(src), options=options).discover()
    assert not [f for f in inv.findings if f.code == "RB105"]
    assert [f.message for f in inv.findings if f.code == "RB109"] == [
        "/cv/image (sensor_msgs/msg/Image): its images are read as bgr8 (source.options.encodings), whatever "
        "encoding their messages name"]
    spec = inv.features["/cv/image"]
    assert (spec.role, spec.shape) == ("camera", (rosbag_gen.H, rosbag_gen.W, 3))
    episodes = load_rlds(Path(convert(src, tmp_path / "out", "rlds", **options).dataset_dir))
    for ep in episodes:
        frames = ep["steps"][spec.name]
        assert len(frames) > 5
        # every frame is frame(0, 4, k) for some k, in RGB (not the BGR bytes): JPEG q95 within 30 dB
        best = [max(psnr(f, rosbag_gen.frame(0, 4, k)) for k in range(40)) for f in frames]
        assert min(best) >= 30, best
    for bad, why in (({"/joint_states": "bgr8"}, "is no sensor_msgs/Image topic"),
                     ({"/cv/image": "8UC3"}, "not an encoding robo-ray reads"), (["bgr8"], "not a mapping")):
        with pytest.raises(ConfigError, match=why):
            open_reader(str(src), options={"fps": FPS, "encodings": bad})


def test_a_topic_the_first_bag_does_not_describe_is_said_left_out(tmp_path: Path) -> None:
    """The features come from the first bag: a topic whose message definition it lacks (a custom type in a bag
    that stores none for it) cannot be mapped, and is named in a finding (RB105) instead of vanishing."""
    src = rosbag_gen.write_dataset(tmp_path / "bags", "mcap", episodes=2, seconds=1.0)
    rosbag_gen.rewrite(src, 0, msgdefs=rosbag_gen.without_definition("/arm/command"))
    inv = open_reader(str(src), options={"fps": FPS}).discover()
    (left,) = [f for f in inv.findings if f.code == "RB105"]
    assert left.message.startswith("/arm/command (std_msgs/msg/Float64MultiArray: no message definition in "
                                   "episode_0.mcap"), left.message
    assert "/arm/command" not in {f.topic for f in open_reader(str(src), options={"fps": FPS}).feats.values()}
    assert inv.episodes_count == 2 and all(r.length for r in inv.refs)


def test_header_stamps_never_set_take_receive_times(tmp_path: Path) -> None:
    """A publisher that never sets header.stamp (all 0, common in hand-written nodes) on /joint_states: its receive
    times are used (RB106 says so) and the episodes convert with the values the as-of rule picks by them (they used
    to hold no step: the window closed at t=0)."""
    def unstamped(messages: list[Any]) -> list[Any]:
        for _, topic, _, value in messages:
            if topic == "/joint_states":
                value["header"]["stamp"] = {"sec": 0, "nanosec": 0}
        return messages

    src = rosbag_gen.write_dataset(tmp_path / "bags", "rosbag2_sqlite3", episodes=2)
    for ep in (0, 1):
        rosbag_gen.rewrite(src, ep, "rosbag2_sqlite3", messages=unstamped)
    want = [truth(b, unset=("/joint_states",)) for b in bags(src)]
    inv = open_reader(str(src), options={"fps": FPS}).discover()
    assert [f.code for f in inv.findings if f.code in ("RB101", "RB106")] == ["RB106"], inv.findings
    assert inv.declared["topics"]["/joint_states"]["stamps"] == "log (stamps unset)"
    assert [r.length for r in inv.refs] == [w["length"] for w in want] and all(w["length"] > 10 for w in want)
    episodes = load_rlds(Path(convert(src, tmp_path / "out", "rlds", fps=FPS).dataset_dir))
    for ep, w in zip(episodes, want):
        np.testing.assert_array_equal(ep["steps"]["observation/state"], w["state"].astype(np.float32))
        np.testing.assert_array_equal(ep["steps"]["action"], w["action"].astype(np.float32))


def _gripper_publisher(names: list[str], position: float, stamped: bool = True
                       ) -> Callable[[list[Any]], list[Any]]:
    """A second /joint_states publisher (a gripper driver: position only, no velocity), at /arm/command's 20 Hz,
    header stamps 5 ms after those times (`stamped` False: every stamp 0, never set)."""
    def add(messages: list[Any]) -> list[Any]:
        extra = [(t + 5_000_000, "/joint_states", "sensor_msgs/msg/JointState", {
            "header": {"stamp": {"sec": (t + 5_000_000) // 10**9 if stamped else 0,
                                 "nanosec": (t + 5_000_000) % 10**9 if stamped else 0}, "frame_id": ""},
            "name": names, "position": np.full(len(names), position + 1e-3 * k), "velocity": np.zeros(0),
            "effort": np.zeros(0)})
            for k, (t, topic, _, _) in enumerate(m for m in messages if m[1] == "/arm/command")]
        return sorted(messages + extra, key=lambda m: m[0])
    return add


def _reversed_joints_every_other(messages: list[Any]) -> list[Any]:
    """Every other arm message lists its joints (and values) in reverse order: the same state."""
    arm = [v for _, topic, _, v in messages if topic == "/joint_states" and len(v["name"]) == 7]
    for v in arm[1::2]:
        v["name"] = v["name"][::-1]
        v["position"], v["velocity"] = v["position"][::-1].copy(), v["velocity"][::-1].copy()
    return messages


def _publishers_truth(bag: Path) -> dict[str, Any]:
    """The merged state by the rule, each publisher (told apart by its joint names) sampled as-of on its own; a
    publisher whose stamps are all 0 by its receive times."""
    topics = raw_topics(bag)
    times, msgs = topics.pop("/joint_states")
    received = raw_topics(bag, "log")["/joint_states"][0]
    for key, size in (("arm", 7), ("gripper", 1)):
        keep = [i for i, m in enumerate(msgs) if len(m.name) == size]
        topics[key] = (times[keep] if times[keep].any() else received[keep], [msgs[i] for i in keep])
    data = ["arm", "gripper", *DATA[1:]]
    start = max(int(topics[t][0][0]) for t in data)
    end = min(int(topics[t][0][-1]) for t in data)
    ticks = [start + round(k * 1e9 / FPS) for k in range(int((end - start) * FPS / 1e9) + 2)]
    ticks = [t for t in ticks if t <= end]

    def asof(topic: str) -> list[Any]:
        t, m = topics[topic]
        return [m[int(np.searchsorted(t, tick, side="right")) - 1] for tick in ticks]

    def ordered(m: Any, part: str) -> np.ndarray:
        by_name = dict(zip(m.name, getattr(m, part)))
        return np.array([by_name[f"joint_{k}"] for k in range(7)])

    arm, gripper = asof("arm"), asof("gripper")
    return {"state": np.array([[*ordered(a, "position"), g.position[0]] for a, g in zip(arm, gripper)]),
            "velocity": np.array([ordered(a, "velocity") for a in arm]), "length": len(ticks)}


def test_joint_states_from_two_publishers_are_merged_by_joint_name(tmp_path: Path) -> None:
    """Two publishers on /joint_states (the arm's 7 joints at 50 Hz, a gripper driver's 1 at 20 Hz): one state of 8
    joints, each publisher sampled as-of the step on its own (its own rate and gaps), arm messages that list their
    joints in another order put back in the first one's; velocity from the arm alone (the gripper has none). Said
    by RB108 (the topic used to be left out, and before that every episode quarantined)."""
    src = rosbag_gen.write_dataset(tmp_path / "bags", "mcap", episodes=2, seconds=1.5)
    for ep in (0, 1):
        rosbag_gen.rewrite(src, ep, messages=lambda m: _reversed_joints_every_other(
            _gripper_publisher(["gripper"], 0.04)(m)))
    reader = open_reader(str(src), options={"fps": FPS})
    inv = reader.discover()
    codes = {f.code for f in inv.findings}
    assert "RB105" not in codes and "RB101" not in codes, inv.findings
    (said,) = [f.message for f in inv.findings if f.code == "RB108"]
    assert said.startswith("/joint_states (sensor_msgs/msg/JointState): 2 publishers (joint_0 .. joint_6 (7); "
                           "gripper) merged by joint name into one value of 8 joints"), said
    state, velocity = inv.features["/joint_states"], inv.features["/joint_states#velocity"]
    assert (state.role, state.shape, state.names) == ("state", (8,), (*rosbag_gen.JOINTS, "gripper"))
    assert (velocity.shape, velocity.names) == ((7,), tuple(rosbag_gen.JOINTS))
    pubs = inv.declared["topics"]["/joint_states"]["publishers"]
    assert {k: v["rate_hz"] for k, v in pubs.items()} == {"/joint_states[joint_0..joint_6]": 50.0,
                                                          "/joint_states[gripper]": 20.0}
    want = [_publishers_truth(b) for b in bags(src)]
    assert [r.length for r in inv.refs] == [w["length"] for w in want]
    episodes = load_rlds(Path(convert(src, tmp_path / "out", "rlds", fps=FPS).dataset_dir))
    assert len(episodes) == 2
    for ep, w in zip(episodes, want):
        np.testing.assert_array_equal(ep["steps"]["observation/state"], w["state"].astype(np.float32))
        assert len(np.unique(ep["steps"]["observation/state"][:, 7])) > 5  # the gripper's value moves per step
        ep_velocity = [k for k in ep["steps"] if k.endswith("velocity")]
        assert len(ep_velocity) == 1
        np.testing.assert_array_equal(ep["steps"][ep_velocity[0]], w["velocity"].astype(np.float32))
    convert(src, tmp_path / "lerobot", "lerobot", fps=FPS)  # the joint names reach LeRobot's info.json
    feats = json.loads((tmp_path / "lerobot" / "meta" / "info.json").read_text())["features"]
    assert feats["observation.state"]["names"] == [*rosbag_gen.JOINTS, "gripper"]
    assert [f["names"] for k, f in feats.items() if k.endswith("velocity")] == [rosbag_gen.JOINTS]


def test_a_publisher_that_never_sets_its_stamps_is_read_by_receive_times(tmp_path: Path) -> None:
    """The gripper driver never sets header.stamp (all 0) while the arm's are set: the gripper's receive times are
    used for it alone (RB106 names that publisher), and the merged state follows the rule."""
    src = rosbag_gen.write_dataset(tmp_path / "bags", "rosbag2_sqlite3", episodes=2, seconds=1.5)
    for ep in (0, 1):
        rosbag_gen.rewrite(src, ep, "rosbag2_sqlite3", messages=_gripper_publisher(["gripper"], 0.04, stamped=False))
    inv = open_reader(str(src), options={"fps": FPS}).discover()
    assert [f.message.split(" ")[0] for f in inv.findings if f.code == "RB106"] == ["/joint_states[gripper]"]
    assert "RB101" not in {f.code for f in inv.findings}, inv.findings
    want = [_publishers_truth(b) for b in bags(src)]
    assert [r.length for r in inv.refs] == [w["length"] for w in want] and all(w["length"] > 10 for w in want)
    episodes = load_rlds(Path(convert(src, tmp_path / "out", "rlds", fps=FPS).dataset_dir))
    for ep, w in zip(episodes, want):
        np.testing.assert_array_equal(ep["steps"]["observation/state"], w["state"].astype(np.float32))


def test_joint_state_publishers_that_overlap_or_appear_later(tmp_path: Path) -> None:
    """Publishers sharing a joint cannot be merged by name: the topic is left out with its reason (RB105) and the
    rest converts. A publisher the first bag did not have quarantines only its episode, with a line naming it."""
    src = rosbag_gen.write_dataset(tmp_path / "bags", "mcap", episodes=2, seconds=1.0)
    for ep in (0, 1):
        rosbag_gen.rewrite(src, ep, messages=_gripper_publisher(["joint_6", "gripper"], 0.04))
    inv = open_reader(str(src), options={"fps": FPS}).discover()
    (left,) = [f for f in inv.findings if f.code == "RB105"]
    assert left.message.startswith("/joint_states (sensor_msgs/msg/JointState: its messages carry 2 sets of joint "
                                   "names that share joints"), left.message
    assert not [k for k in inv.features if k.startswith("/joint_states")]
    episodes = load_rlds(Path(convert(src, tmp_path / "out", "rlds", fps=FPS).dataset_dir))
    assert len(episodes) == 2 and all(len(ep["steps"]["action"]) for ep in episodes)

    later = rosbag_gen.write_dataset(tmp_path / "later", "mcap", episodes=3, seconds=1.0)
    for ep in (0, 1, 2):
        rosbag_gen.rewrite(later, ep, messages=_gripper_publisher(["gripper"], 0.04))
    rosbag_gen.rewrite(later, 1, messages=lambda m: _gripper_publisher(["base_x"], 1.0)(
        _gripper_publisher(["gripper"], 0.04)(m)))
    inv = open_reader(str(later), options={"fps": FPS}).discover()
    (bad,) = [f.message for f in inv.findings if f.code == "RB101"]
    assert "episode_1.mcap" in bad and "a /joint_states message with joints ['base_x'] is none of the first bag's " \
        "publishers (/joint_states[joint_0..joint_6]; /joint_states[gripper])" in bad, bad
    outcome = run_pipeline(load_config(None, ["validate.tfds_readback=false", "convert.max_quarantine_fraction=0.5"],
                                       **{"source.url": str(later), "target.url": str(tmp_path / "later_out"),
                                          "source.options": {"fps": FPS}}))
    assert outcome.exit_code == 0, outcome.message
    assert [(r["episode_index"], r["code"]) for r in outcome.quarantined] == [(1, "EP202")]
    assert "['base_x'] is none of the first bag's publishers" in outcome.quarantined[0]["reason"]
    episodes = load_rlds(Path(outcome.dataset_dir))
    assert len(episodes) == 2 and all(ep["steps"]["observation/state"].shape[1] == 8 for ep in episodes)


def test_clock_options(made: Callable[[str], Path]) -> None:
    """A reference topic as the clock, receive times instead of header stamps, each against the rule computed
    here; the two time bases give different steps (header stamps are 3 / 8 ms before receipt)."""
    src = made("ros1")
    bag = bags(src)[1]
    for options, kwargs in (({"clock": "/joint_states"}, {"reference": "/joint_states"}),
                            ({"fps": 10.0, "stamps": "log"}, {"stamps": "log"}),
                            ({"fps": 7.0}, {"fps": 7.0})):
        reader = open_reader(str(src), options=options)
        inv = reader.discover()
        w = truth(bag, **kwargs)
        ref = inv.refs[1]
        assert ref.length == w["length"], options
        ep = reader.load_episode(ref)
        np.testing.assert_array_equal(ep.columns["/joint_states"], w["state"])
        np.testing.assert_array_equal(ep.columns["/arm/command"], w["action"])
        got = np.stack(list(ep.images["/cam_high/image_raw"].array))
        np.testing.assert_array_equal(got, w["frames"]["/cam_high/image_raw"])
    header, log = truth(bag, stamps="header"), truth(bag, stamps="log")
    assert not np.array_equal(header["action"], log["action"][:len(header["action"])])


def test_a_gap_beyond_the_skew_quarantines_the_episode(tmp_path: Path) -> None:
    """Five /cam_high frames missing in episode 1: beyond the default skew (2 periods) it is quarantined with its
    reason (EP210, naming the bag and the episode), the others convert; on_gap=hold keeps the previous frame and
    says how many steps; a max_skew of 0.6 s takes the gap as five fills."""
    src = tmp_path / "bags"
    for i in range(3):
        rosbag_gen.write_bag(src / f"episode_{i}", "rosbag2_mcap",
                             rosbag_gen.episode_messages(i, gap_frames=5 if i == 1 else 1))
    inv = open_reader(str(src), options={"fps": FPS}).discover()
    bad = [f for f in inv.findings if f.code == "RB101"]
    assert len(bad) == 1 and "bag episode_1 (episode 1)" in bad[0].message and "/cam_high" in bad[0].message
    outcome = run_pipeline(load_config(None, ["validate.tfds_readback=false", "convert.max_quarantine_fraction=0.5"],
                                       **{"source.url": str(src), "target.url": str(tmp_path / "out"),
                                          "source.options": {"fps": FPS}}))
    assert outcome.exit_code == 0, outcome.message
    records = outcome.quarantined
    assert [(r["episode_index"], r["code"]) for r in records] == [(1, "EP210")]
    assert "bag episode_1 (episode 1)" in records[0]["reason"]
    held = open_reader(str(src), options={"fps": FPS, "on_gap": "hold"}).discover()
    assert [f.code for f in held.findings if f.code in ("RB101", "RB103")] == ["RB103"]
    assert held.refs[1].length == truth(src / "episode_1")["length"]
    wide = open_reader(str(src), options={"fps": FPS, "max_skew": 0.6}).discover()
    assert not [f for f in wide.findings if f.code in ("RB101", "RB103")]
    assert any("/cam_high/image_raw: 5 step" in f.message for f in wide.findings if f.code == "RB102")


def test_frames_stream_while_taken(tmp_path: Path) -> None:
    """A 20 s episode: taking its frames one by one, as a writer does, never holds more than a few chunks of them
    (the whole camera decoded is ~0.9 MB): past the first 20 frames (the bag reopened for the camera, its types
    built), the peak grows by less than a quarter of the frames decoded."""
    import tracemalloc

    src = rosbag_gen.write_dataset(tmp_path / "bags", "rosbag2_sqlite3", episodes=1, seconds=20.0)
    reader = open_reader(str(src), options={"fps": FPS})
    ref = reader.discover().refs[0]
    ep = reader.load_episode(ref)
    tracemalloc.start()
    try:
        n, early = 0, 0
        for f in ep.images["/cam_high/image_raw"].array:
            assert f.shape == (rosbag_gen.H, rosbag_gen.W, 3)
            n += 1
            if n == 20:
                early = tracemalloc.get_traced_memory()[1]
        peak = tracemalloc.get_traced_memory()[1] - early
    finally:
        tracemalloc.stop()
    whole = n * rosbag_gen.H * rosbag_gen.W * 3
    assert n == ref.length and n > 190
    assert peak < whole / 4, (peak, whole)


def test_bags_on_a_remote_filesystem(made: Callable[[str], Path]) -> None:
    """Bags behind an fsspec URL (memory://: rosbag2 folders and MCAP files) are copied locally to be read and give
    the same inventory and episodes as on disk; Discover split by bag (the Ray scan's tasks, scanned by a pickled
    reader as a worker would) gives the same inventory."""
    import pickle

    import fsspec

    mem = fsspec.filesystem("memory")
    for fmt in ("rosbag2_sqlite3", "mcap"):
        local = open_reader(str(made(fmt)), options={"fps": FPS})
        root = f"/remote_{fmt}"
        mem.put(str(made(fmt)), root, recursive=True)
        remote = open_reader(f"memory://{root}", options={"fps": FPS})
        inv, want = remote.discover(), local.discover()
        assert [(r.data_path, r.length) for r in inv.refs] == [(r.data_path, r.length) for r in want.refs]
        assert inv.declared["topics"] == want.declared["topics"]
        ep, ep0 = remote.load_episode(inv.refs[2]), local.load_episode(want.refs[2])
        for key in ep0.columns:
            np.testing.assert_array_equal(ep.columns[key], ep0.columns[key])
        for key in ep0.images:
            assert list(ep.images[key]) == list(ep0.images[key])
        worker = pickle.loads(pickle.dumps(local))
        rows = [pickle.loads(pickle.dumps(worker.scan(t))) for t in local.scan_tasks()]
        split = local.merge_scans(rows)
        assert split.refs == want.refs and split.declared == want.declared
        assert [f.message for f in split.findings] == [f.message for f in want.findings]
        mem.rm(root, recursive=True)


@pytest.mark.timeout(400)
def test_bags_on_ray_write_the_in_process_bytes(made: Callable[[str], Path], tmp_path: Path) -> None:
    """`robo-ray run --mode parallel-max --actors 2` (a local Ray instance) over the bags writes the shards the
    in-process run writes, and `robo-ray validate` passes on them."""
    from tests.conftest import run_cli

    src = made("rosbag2_mcap")
    common = ["--fps", "10", "--set", "validate.tfds_readback=false", "--set", "plan.min_shards=3"]
    shards = []
    for name, extra in (("inproc", []), ("ray", ["--mode", "parallel-max", "--actors", "2"])):
        proc = run_cli("run", str(src), str(tmp_path / name), *common, *extra, env={"RAY_AUTH_MODE": "disabled"},
                       timeout=380)
        assert proc.returncode == 0, proc.stderr[-3000:]
        (version,) = (tmp_path / name).glob("rlds/*/1.0.0")
        shards.append({p.name: p.read_bytes() for p in sorted(version.glob("*.tfrecord-*"))})
    assert len(shards[0]) == 3 and shards[0] == shards[1]
    proc = run_cli("validate", str(tmp_path / "ray"), "--no-tfds", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("options, says", [({"stamps": "sensor"}, "stamps"), ({"on_gap": "drop"}, "on_gap"),
                                           ({"max_skew": -1}, "max_skew"), ({"clock": "/nope"}, "/nope"),
                                           ({"fps": 0}, "fps"), ({"skew": 1}, "no option skew")])
def test_bad_options_are_one_config_error(options: dict[str, Any], says: str, made: Callable[[str], Path]) -> None:
    from robo_ray.errors import ConfigError

    with pytest.raises(ConfigError, match=says) as info:
        open_reader(str(made("mcap")), options=options)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("fmt", ["mcap", "rosbag2_sqlite3"])
def test_one_bag_as_the_source(fmt: str, made: Callable[[str], Path]) -> None:
    """The URL of one bag (an MCAP file, a rosbag2 folder) is a one-episode source; its siblings are not read."""
    bag = bags(made(fmt))[1]
    assert detect_format(str(bag)) == "rosbag"
    reader = open_reader(str(bag), options={"fps": FPS})
    inv = reader.discover()
    assert [(r.data_path, r.length) for r in inv.refs] == [(bag.name, truth(bag)["length"])]
    ep = reader.load_episode(inv.refs[0])
    np.testing.assert_array_equal(ep.columns["/arm/command"], truth(bag)["action"])
    assert reader.exists(inv.refs[0].data_path)
