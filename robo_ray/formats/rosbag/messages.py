"""ROS message types -> what they hold for a dataset: the value a topic gives per step (numbers, an image, text),
its per-step shape, and the role a type suggests. Decoding follows the encodings ROS uses: sensor_msgs/Image
`rgb8`, `bgr8`, `rgba8`, `bgra8`, `mono8` / `8UC1`, packed 4:2:2 `yuv422_yuy2` / `yuv422` (usb_cam; RGB by FFmpeg),
`16UC1` / `mono16` (depth, uint16), `32FC1` (depth in metres, Gazebo / Isaac Sim: written as 16UC1 millimetres,
the other ROS depth encoding), or the encoding the user set for a topic (source.options.encodings); CompressedImage
JPEG or PNG bytes (passed on undecoded); 16-bit PNGs (compressed_depth_image_transport's `16UC1; compressedDepth
png`: a 12-byte config header, then the PNG; image_transport's `16UC1; png compressed`) decoded to uint16 depth. A
topic whose first message robo-ray does not read (another encoding such as nv21 or 8UC3, a 32FC1 / RVL
compressedDepth, a point cloud, more than MAX_TOPIC_VALUES numbers) raises `NotRead`: the topic is left out, with
its reason, and the other topics convert."""
from __future__ import annotations

import dataclasses
import io
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from robo_ray.errors import DataCorrupt
from robo_ray.safety import MAX_DIM, MAX_ELEMENTS_PER_STEP

JOINT_STATE = "sensor_msgs/msg/JointState"
IMAGE = "sensor_msgs/msg/Image"
COMPRESSED = "sensor_msgs/msg/CompressedImage"
STRING = "std_msgs/msg/String"
SKIPPED_TYPES = {"std_msgs/msg/Header", "std_msgs/msg/MultiArrayLayout"}
POINT_CLOUDS = {"sensor_msgs/msg/PointCloud2", "sensor_msgs/msg/PointCloud"}
MAX_TOPIC_VALUES = 1 << 14  # numbers one message may give a step (a LaserScan's ranges fit; a point cloud does not)
JOINT_PARTS = ("position", "velocity", "effort")
Layout = tuple[tuple[str, ...], tuple[int, ...]]  # a JointState message's joint names, and the length of each part
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I")  # PIL's modes of a 16-bit grey PNG
DEPTH_HEADER_MAX = 64  # compressedDepth: the PNG follows a small config header (12 bytes in ROS 1 and ROS 2)
# encoding -> (channels, dtype, channel order reversed, alpha dropped)
ENCODINGS: dict[str, tuple[int, str, bool, bool]] = {
    "rgb8": (3, "uint8", False, False), "bgr8": (3, "uint8", True, False),
    "rgba8": (4, "uint8", False, True), "bgra8": (4, "uint8", True, True),
    "mono8": (1, "uint8", False, False), "8UC1": (1, "uint8", False, False),
    "mono16": (1, "uint16", False, False), "16UC1": (1, "uint16", False, False),
    "32FC1": (1, "float32", False, False),
}
# packed 4:2:2 YUV (usb_cam, V4L2 webcams) -> RGB through FFmpeg's swscale (BT.601); ROS encoding -> its bytes are
# UYVY (each byte pair swapped from YUYV, FFmpeg's yuyv422)
PACKED_YUV = {"yuv422_yuy2": False, "yuv422": True}
READ_ENCODINGS = (*ENCODINGS, *PACKED_YUV)
METRIC_DEPTH = "32FC1"  # depth in metres (float), written as uint16 millimetres
MAX_MILLIMETRES = 65535
METRIC_DEPTH_NOTE = ("32FC1 depth in metres, written as 16-bit millimetres like the 16UC1 depth topics (rounded to "
                     "1 mm; NaN, inf, <= 0 and beyond 65.535 m become 0, no reading)")


class NotRead(Exception):
    """A topic whose messages robo-ray does not read (an image encoding it does not decode): left out of the
    mapping with this reason (a finding), never the whole dataset's error."""


@dataclass(frozen=True)
class TopicValue:
    """What one feature takes from a topic's messages: `kind` "tensor" / "image" / "encoded" / "string", the
    per-step shape and dtype, `part` (JointState: position / velocity / effort), `names` (per component), `note`
    (how the values differ from the messages', said in Discover's findings)."""

    kind: str
    shape: tuple[int, ...]
    dtype: str
    part: str = ""
    names: tuple[str, ...] | None = None
    note: str = ""
    encoding: str = ""  # an Image topic's encoding as the user set it (source.options.encodings); "" = the messages'


def numeric_leaves(msg: Any, prefix: str = "") -> list[tuple[str, np.ndarray]]:
    """(dotted name, values) of every number in a message, depth first, headers and MultiArray layouts left
    out; strings and sequences of messages have no fixed numeric form and are left out too."""
    out: list[tuple[str, np.ndarray]] = []
    for f in dataclasses.fields(msg):
        if f.name.startswith("__"):
            continue
        value = getattr(msg, f.name)
        name = f"{prefix}{f.name}"
        if getattr(value, "__msgtype__", None) in SKIPPED_TYPES:
            continue
        if isinstance(value, (bool, int, float, np.number)):
            out.append((name, np.asarray([value], dtype=np.float64)))
        elif isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            out.append((name, value.astype(np.float64).ravel()))
        elif hasattr(value, "__msgtype__"):
            out.extend(numeric_leaves(value, name + "."))
    return out


def tensor_values(msg: Any, msgtype: str, part: str = "") -> np.ndarray:
    """The numbers one message gives (float64): a JointState's `part`, else every numeric leaf."""
    if msgtype == JOINT_STATE:
        return np.asarray(getattr(msg, part or "position"), dtype=np.float64).ravel()
    leaves = numeric_leaves(msg)
    return np.concatenate([v for _, v in leaves]) if leaves else np.zeros(0)


def leaf_names(msg: Any) -> tuple[str, ...]:
    """A name per component of `tensor_values` (field paths, indexed where a field holds several)."""
    names: list[str] = []
    for name, v in numeric_leaves(msg):
        names.extend([name] if len(v) == 1 else [f"{name}[{i}]" for i in range(len(v))])
    return tuple(names)


def image_array(msg: Any, where: str, encoding: str = "") -> np.ndarray:
    """A sensor_msgs/Image as an HxWxC array in RGB order (uint8), or HxWx1 uint16 (16UC1 / mono16, and 32FC1 in
    millimetres); the sizes are checked against the data before it is viewed. `encoding`: read as this one, not the
    message's own (source.options.encodings)."""
    name = encoding or msg.encoding
    if name in PACKED_YUV:
        return packed_yuv_rgb(msg, where, name)
    enc = ENCODINGS.get(name)
    if enc is None:
        raise DataCorrupt(f"{where}: image encoding {name!r} is not read (one of {', '.join(READ_ENCODINGS)})")
    ch, dtype, reverse, alpha = enc
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    item = np.dtype(dtype).itemsize
    data = msg.data
    if not (0 < h <= MAX_DIM and 0 < w <= MAX_DIM) or step < w * ch * item or len(data) < step * h:
        raise DataCorrupt(f"{where}: image {w}x{h} {name} with step {step} does not fit its "
                          f"{len(data)} bytes")
    rows = np.frombuffer(data, np.uint8, count=step * h).reshape(h, step)[:, :w * ch * item]
    arr = rows.view(np.dtype(dtype).newbyteorder(">" if msg.is_bigendian else "<")).reshape(h, w, ch)
    if alpha:
        arr = arr[..., :3]
    if reverse:
        arr = arr[..., ::-1]
    if name == METRIC_DEPTH:
        return metres_to_millimetres(arr)
    return np.ascontiguousarray(arr, dtype=dtype)


def packed_yuv_rgb(msg: Any, where: str, encoding: str) -> np.ndarray:
    """A packed 4:2:2 image (`yuv422_yuy2`: Y0 U Y1 V; `yuv422`: U Y0 V Y1) as HxWx3 RGB, converted by FFmpeg (PyAV);
    the sizes are checked against the data first (a pair of pixels shares its chroma: the width is even)."""
    import av

    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    data = msg.data
    if not (0 < h <= MAX_DIM and 0 < w <= MAX_DIM) or w % 2 or step < 2 * w or len(data) < step * h:
        raise DataCorrupt(f"{where}: image {w}x{h} {encoding} with step {step} does not fit its "
                          f"{len(data)} bytes (4:2:2 needs an even width)")
    pairs = np.frombuffer(data, np.uint8, count=step * h).reshape(h, step)[:, :2 * w].reshape(h, w, 2)
    if PACKED_YUV[encoding]:
        pairs = pairs[..., ::-1]
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(pairs), format="yuyv422")
    return frame.to_ndarray(format="rgb24")


def metres_to_millimetres(metres: np.ndarray) -> np.ndarray:
    """Float depth in metres as uint16 millimetres, rounded; what 16UC1 cannot hold (NaN, inf, <= 0, beyond
    65.535 m) is 0, 16UC1's "no reading"."""
    mm = np.rint(metres.astype(np.float64) * 1000.0)
    return np.where(np.isfinite(mm) & (mm > 0) & (mm <= MAX_MILLIMETRES), mm, 0).astype(np.uint16)


def encoded_image(msg: Any, where: str) -> bytes:
    """A CompressedImage's JPEG or PNG bytes (as image_transport wrote them; decoders give RGB)."""
    data = bytes(msg.data)
    if data[:3] != b"\xff\xd8\xff" and data[:8] != b"\x89PNG\r\n\x1a\n":
        raise DataCorrupt(f"{where}: compressed image ({msg.format!r}) is neither JPEG nor PNG")
    return data


def encoded_header(data: bytes, where: str) -> tuple[int, int, str]:
    """(H, W, PIL mode) of JPEG / PNG bytes, from their header (nothing decoded)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            return im.height, im.width, im.mode
    except Exception as exc:  # noqa: BLE001 - PIL raises many kinds on bad data
        raise DataCorrupt(f"{where}: compressed image unreadable ({exc})") from exc


def encoded_shape(data: bytes, where: str) -> tuple[int, int, int]:
    """(H, W, C) of JPEG / PNG bytes from their header: C 1 for grey, else 3."""
    h, w, mode = encoded_header(data, where)
    return h, w, 1 if mode in ("L", "1") else 3


def is_compressed_depth(msg: Any) -> bool:
    return "compresseddepth" in str(msg.format).lower()


def depth_png_array(msg: Any, where: str) -> np.ndarray:
    """A CompressedImage holding a 16-bit grey PNG as HxWx1 uint16: `16UC1; compressedDepth png` (the PNG after
    compressed_depth_image_transport's config header) or `16UC1; png compressed` (image_transport's PNG of a
    16UC1 / mono16 image); the size is checked before the PNG is decoded."""
    from PIL import Image

    data = bytes(msg.data)
    at = data.find(PNG_MAGIC, 0, DEPTH_HEADER_MAX)
    if at < 0:
        raise DataCorrupt(f"{where}: depth image ({msg.format!r:.60}) holds no PNG")
    try:
        with Image.open(io.BytesIO(data[at:])) as im:
            w, h = im.size
            if not (0 < h <= MAX_DIM and 0 < w <= MAX_DIM) or h * w > MAX_ELEMENTS_PER_STEP:
                raise DataCorrupt(f"{where}: depth image of {w}x{h} is beyond the limits")
            arr = np.asarray(im)
    except DataCorrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - PIL raises many kinds on bad data
        raise DataCorrupt(f"{where}: depth PNG unreadable ({exc})") from exc
    if arr.shape != (h, w) or arr.dtype.kind not in "iu" or arr.min(initial=0) < 0 or arr.max(initial=0) > 65535:
        raise DataCorrupt(f"{where}: depth PNG is {arr.dtype} {arr.shape}, not 16-bit grey")
    return arr.astype(np.uint16)[..., None]


def _depth_format(msg: Any, where: str) -> TopicValue:
    """The feature of a compressedDepth topic: 16-bit PNG depth is read; 32FC1 (quantised inverse depth) and RVL
    are NotRead."""
    fmt = str(msg.format)
    encoding = fmt.split(";", 1)[0].strip()
    if encoding not in ("16UC1", "mono16") or "rvl" in fmt.lower():
        raise NotRead(f"compressedDepth format {fmt!r:.60} is not read (only 16UC1 PNG)")
    arr = depth_png_array(msg, where)
    return TopicValue("image", tuple(arr.shape), "uint16")


def describe(msgtype: str, msg: Any, where: str, encoding: str = "") -> list[TopicValue]:
    """The features one topic gives, from its first message ([] when none: text outside a task topic is handled
    by the reader, messages without numbers give nothing); NotRead for images robo-ray cannot decode."""
    if msgtype == IMAGE:
        name = encoding or msg.encoding
        if name not in READ_ENCODINGS:
            raise NotRead(f"image encoding {name!r:.40} is not read (one of {', '.join(READ_ENCODINGS)})")
        arr = image_array(msg, where, encoding)
        note = METRIC_DEPTH_NOTE if name == METRIC_DEPTH else ""
        return [TopicValue("image", tuple(arr.shape), str(arr.dtype), note=note, encoding=encoding)]
    if msgtype == COMPRESSED:
        if is_compressed_depth(msg):
            return [_depth_format(msg, where)]
        h, w, mode = encoded_header(encoded_image(msg, where), where)
        if mode in SIXTEEN_BIT_MODES:  # image_transport's PNG of a 16UC1 / mono16 image: depth, decoded here
            arr = depth_png_array(msg, where)
            return [TopicValue("image", tuple(arr.shape), "uint16")]
        return [TopicValue("encoded", (h, w, 1 if mode in ("L", "1") else 3), "uint8")]
    if msgtype == STRING:
        return [TopicValue("string", (), "string")]
    if msgtype in POINT_CLOUDS:
        raise NotRead("point clouds are not read")
    if msgtype == JOINT_STATE:
        out = []
        names = joint_names(msg)
        for part in JOINT_PARTS:
            n = len(getattr(msg, part))
            if n:
                out.append(TopicValue("tensor", (n,), "float64", part, names if len(names) == n else None))
        return out
    n = len(tensor_values(msg, msgtype))
    if n > MAX_TOPIC_VALUES:
        raise NotRead(f"{n} numbers a message, over {MAX_TOPIC_VALUES} (not a per-step feature)")
    return [TopicValue("tensor", (n,), "float64", names=leaf_names(msg))] if n else []


def joint_names(msg: Any) -> tuple[str, ...]:
    """A JointState message's joint names (which publisher sent it, when several share the topic)."""
    return tuple(str(n) for n in msg.name)


def joint_layout(msg: Any) -> Layout:
    """A JointState message's joint names and how many values each of position / velocity / effort holds."""
    return joint_names(msg), tuple(len(getattr(msg, p)) for p in JOINT_PARTS)


def widths(msgtype: str) -> Callable[[Any], Any] | None:
    """How many numbers each message of a numeric topic gives, to find topics whose width varies (a variable-length
    array); a JointState's layout (its joint names too: several publishers on one topic); None for types read
    otherwise."""
    if msgtype in (IMAGE, COMPRESSED, STRING) or msgtype in POINT_CLOUDS:
        return None
    if msgtype == JOINT_STATE:
        return joint_layout
    return lambda msg: (len(tensor_values(msg, msgtype)),)


def extractor(msgtype: str, value: TopicValue, where: str) -> Callable[[Any], Any]:
    """A function of a deserialised message -> the feature's value for one step, checked against its shape."""
    if value.kind == "image":
        def image(msg: Any) -> np.ndarray:
            arr = depth_png_array(msg, where) if msgtype == COMPRESSED else image_array(msg, where, value.encoding)
            if arr.shape != value.shape or str(arr.dtype) != value.dtype:
                raise DataCorrupt(f"{where}: an image is {arr.shape} {arr.dtype}, the topic's first was "
                                  f"{value.shape} {value.dtype}")
            return arr
        return image
    if value.kind == "encoded":
        return lambda msg: encoded_image(msg, where)
    if value.kind == "string":
        return lambda msg: str(msg.data)

    def tensor(msg: Any) -> np.ndarray:
        v = tensor_values(msg, msgtype, value.part)
        if v.shape != value.shape:
            raise DataCorrupt(f"{where}: a message has {len(v)} values, the topic's first had {value.shape[0]}")
        return v
    return tensor
