"""What a replay buffer's arrays are: each `data/<key>/.zarray` checked before zarr opens it (untrusted: format,
shape, chunks, dtype, codecs), and its feature (kind, role, canonical name) from its key and shape.

Diffusion Policy (diffusion_policy/common/replay_buffer.py) keeps every per-step array under `data/` with the
same first dimension (the total steps) and `meta/episode_ends` (cumulative int64 ends). Key names are the
projects': `action`, `state`, `img`, `keypoint`, `n_contacts` (Push-T), `timestamp`, `robot_eef_pose`,
`camera_<i>` (real-robot recordings), `<cam>_image` / `robot0_eef_pos` (robomimic tasks); UMI
(scripts_slam_pipeline/07_generate_replay_buffer.py): `camera<i>_rgb` (HxWx3 uint8, one frame a chunk, JPEG-XL
through imagecodecs' numcodecs codec), `robot<i>_eef_pos`, `robot<i>_eef_rot_axis_angle`, `robot<i>_gripper_width`,
`robot<i>_demo_start_pose`, `robot<i>_demo_end_pose`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from robo_ray.episode import FeatureSpec
from robo_ray.errors import SourceFormatError, UnsafeInput
from robo_ray.readers.base import canonical_path
from robo_ray.safety import MAX_DIM, MAX_ELEMENTS_PER_STEP, check_shape

MAX_CHUNK_BYTES = 256 << 20  # one chunk decoded (zarr decodes whole chunks to read a slice)
MAX_ROWS = 10 ** 10  # the first dimension of a data array: the buffer's total steps
_DTYPE = re.compile(r"^[<>|](b1|[iu][1248]|f[248])$")
_IMAGE_WORDS = ("img", "image", "rgb", "camera", "cam", "pixels")
TIMESTAMP_NOTE = "the recorder's clock per step; the targets derive timestamps from the frame rate"
FLOAT_FRAMES_NOTE = "float frames of 0..255 (Diffusion Policy's Push-T img), rounded to uint8"

_registered = False


def register_codecs() -> None:
    """numcodecs' own codecs and imagecodecs' (imagecodecs_jpegxl, imagecodecs_jpeg2k, ...: what UMI and Diffusion
    Policy write images with), registered once."""
    global _registered
    if not _registered:
        from imagecodecs.numcodecs import register_codecs as register

        register(verbose=False)
        _registered = True


@dataclass(frozen=True)
class ArrayMeta:
    """One data array's checked .zarray."""

    key: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str
    codecs: tuple[str, ...]

    @property
    def rows(self) -> int:
        return self.shape[0]

    def declared(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "chunks": list(self.chunks), "dtype": self.dtype,
                "codecs": list(self.codecs)}


def _ints(value: Any, what: str, where: str, limit: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= 6 or any(
            isinstance(d, bool) or not isinstance(d, int) or d < 0 or d > limit for d in value):
        raise UnsafeInput(f"{where}: {what} {value!r:.80} is not a list of 1 to 6 integers in 0..{limit}")
    return tuple(value)


def check_codec(config: Any, where: str) -> str:
    """The id of a compressor / filter config that numcodecs (with imagecodecs' codecs) can build; an unknown or
    malformed one is one SourceFormatError (the array cannot be read at all)."""
    import numcodecs

    register_codecs()
    if not isinstance(config, dict) or not isinstance(config.get("id"), str):
        raise SourceFormatError(f"{where}: codec {config!r:.80} is not a numcodecs config")
    try:
        numcodecs.get_codec(dict(config))
    except ValueError as exc:
        raise SourceFormatError(f"{where}: unknown codec {config['id']!r:.60} (numcodecs and imagecodecs know "
                                "no such codec)") from exc
    except Exception as exc:  # noqa: BLE001 - a codec's constructor refused the parameters
        raise SourceFormatError(f"{where}: codec {config['id']!r:.60} with unusable parameters "
                                f"({' '.join(str(exc).split())[:120]})") from exc
    return config["id"]


def parse_array(zarray: dict[str, Any], key: str, where: str) -> ArrayMeta | str:
    """The checked metadata of `data/<key>`, or why it is left out (a str: not numeric). Shapes and chunks beyond
    the limits refuse the source (UnsafeInput): every episode reads them."""
    if zarray.get("zarr_format") != 2:
        raise SourceFormatError(f"{where}: zarr_format {zarray.get('zarr_format')!r:.20} (zarr 2 stores only)")
    shape = _ints(zarray.get("shape"), "shape", where, MAX_ROWS)
    chunks = _ints(zarray.get("chunks"), "chunks", where, MAX_ROWS)
    if len(chunks) != len(shape) or any(c < 1 for c in chunks):
        raise UnsafeInput(f"{where}: chunks {list(chunks)} do not fit shape {list(shape)}")
    dtype = zarray.get("dtype")
    if not isinstance(dtype, str) or not _DTYPE.match(dtype):
        return f"dtype {dtype!r:.40} is not numeric"
    if zarray.get("order", "C") not in ("C", "F"):
        raise SourceFormatError(f"{where}: order {zarray.get('order')!r:.20} is neither C nor F")
    if any(d > MAX_DIM for d in shape[1:]):
        raise UnsafeInput(f"{where}: shape {list(shape)} has a dimension over {MAX_DIM}")
    item = np.dtype(dtype).itemsize
    per_step = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    if per_step > MAX_ELEMENTS_PER_STEP:
        raise UnsafeInput(f"{where}: shape {list(shape)} holds {per_step} values a step (limit "
                          f"{MAX_ELEMENTS_PER_STEP})")
    chunk_bytes = int(np.prod(chunks, dtype=np.int64)) * item  # zarr decodes whole chunks, edge ones too
    if chunk_bytes > MAX_CHUNK_BYTES:
        raise UnsafeInput(f"{where}: chunks {list(chunks)} of {dtype} are {chunk_bytes} bytes decoded (limit "
                          f"{MAX_CHUNK_BYTES})")
    codecs = [] if zarray.get("compressor") is None else [zarray["compressor"]]
    filters = zarray.get("filters") or []
    if not isinstance(filters, list):
        raise SourceFormatError(f"{where}: filters {filters!r:.60} is not a list")
    ids = tuple(check_codec(c, where) for c in [*filters, *codecs])
    return ArrayMeta(key, shape, chunks, np.dtype(dtype).str, ids)


# ---- features --------------------------------------------------------------------------------------------------
def _image_words(key: str) -> bool:
    low = key.lower()
    return any(w in low for w in _IMAGE_WORDS)


def feature(meta: ArrayMeta) -> FeatureSpec:
    """The feature of one data array, with its role and canonical name."""
    key, dtype, step = meta.key, np.dtype(meta.dtype), meta.shape[1:]
    if len(step) == 3 and step[2] in (1, 3) and step[0] >= 8 and step[1] >= 8:
        if dtype == np.uint8:
            return FeatureSpec(key, "image", "uint8", step, declared_shape=step, codec="raw", role="camera",
                               name=canonical_path("observation", key))
        if dtype == np.uint16 and step[2] == 1:
            return FeatureSpec(key, "image", "uint16", step, declared_shape=step, codec="raw", role="depth",
                               name=canonical_path("observation", key))
        if dtype.kind == "f" and step[2] == 3 and _image_words(key):
            return FeatureSpec(key, "image", "uint8", step, declared_shape=step, codec="raw", role="camera",
                               name=canonical_path("observation", key), note=FLOAT_FRAMES_NOTE)
    spec = FeatureSpec(key, "tensor", dtype.name, check_shape(key, list(step)), declared_shape=step)
    low = key.lower()
    if low in ("action", "actions"):
        return replace(spec, role="action", name="action")
    if low in ("reward", "rewards"):
        return replace(spec, role="reward", name="reward", scalar=True)
    if low in ("done", "dones"):
        return replace(spec, role="other", name="done", scalar=True)
    if low in ("timestamp", "timestamps"):
        return replace(spec, role="bookkeeping", note=TIMESTAMP_NOTE)
    if low == "state":
        return replace(spec, role="state", name="observation/state")
    return replace(spec, role="observation", name=canonical_path("observation", key))


def to_frames(block: np.ndarray, spec: FeatureSpec) -> np.ndarray:
    """Rows of an image array as the frames a writer takes: float 0..255 frames rounded to uint8."""
    if block.dtype.kind == "f":
        return np.clip(np.rint(np.nan_to_num(block)), 0, 255).astype(np.uint8)
    return block


# ---- known recorders -------------------------------------------------------------------------------------------
UMI_RATE = 59.94  # UMI's GoPro rate (06_generate_dataset_plan.py): one buffer step per video frame
PUSHT_RATE = 10.0  # Diffusion Policy's Push-T env: metadata video.frames_per_second (its control rate)
_UMI_CAMERA = re.compile(r"^camera\d+_rgb$")
_UMI_ROBOT = re.compile(r"^robot\d+_eef_pos$")


def layout_of(keys: list[str]) -> str:
    """"umi", "pusht" or "replay_buffer" (any other Diffusion Policy buffer), from the data keys."""
    if any(_UMI_CAMERA.match(k) for k in keys) and any(_UMI_ROBOT.match(k) for k in keys):
        return "umi"
    if {"state", "action", "keypoint", "n_contacts"} <= set(keys):
        return "pusht"
    return "replay_buffer"


def known_rate(layout: str) -> tuple[float, str] | None:
    if layout == "umi":
        return UMI_RATE, "UMI's GoPro frame rate (59.94 fps; one step per video frame)"
    if layout == "pusht":
        return PUSHT_RATE, "Diffusion Policy's Push-T env (10 Hz control rate)"
    return None
