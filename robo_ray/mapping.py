"""The Spec stage's product: how each source feature becomes an RLDS feature (schema as data, editable as YAML).

Defaults (DESIGN §6): `observation.state` -> `observation/state`; `action` -> `action`; one camera ->
`observation/image`, several -> `observation/image_<last part of key>`; other `observation.*` ->
`observation/<rest with dots as _>`; `next.reward` -> `reward`, `next.done` -> `is_terminal`; task text ->
`language_instruction`. Images are JPEG quality 95 unless configured.
"""
from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from robo_ray.episode import FeatureSpec
from robo_ray.errors import ConfigError
from robo_ray.readers.base import Inventory

STEP_FLAGS = ("is_first", "is_last", "is_terminal")
_TARGET_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(/[A-Za-z][A-Za-z0-9_]*)*$")
# Source keys that are lerobot bookkeeping, not data; recorded in mapping.md as intentionally not mapped.
LEROBOT_BOOKKEEPING = {"timestamp", "frame_index", "episode_index", "index", "task_index"}
# Non-standard spellings seen in real datasets (e.g. open50: `actions`, `state`, `image`).
ALIASES = {"actions": "action", "state": "observation/state", "observation.states": "observation/state"}


class FieldMap(BaseModel):
    """One output feature of a step and where it comes from."""

    model_config = ConfigDict(extra="forbid")

    source: str  # source feature key
    target: str  # RLDS key inside a step, "/"-separated
    kind: Literal["tensor", "image", "text"]
    dtype: str
    shape: list[int]
    transform: str = "none"
    encoding: Literal["jpeg", "png"] | None = None  # images: None = images.encoding
    source_shape: list[int] | None = None  # images: HWC of the source frames
    source_codec: str | None = None  # images: video codec, or "image" for encoded images in the parquet

    @field_validator("target")
    @classmethod
    def _target_ok(cls, v: str) -> str:
        if not _TARGET_RE.match(v):
            raise ValueError(f"target {v!r} must be '/'-separated identifiers")
        return v


class Defaults(BaseModel):
    """Where reward / discount / is_terminal come from when no source feature maps to them."""

    model_config = ConfigDict(extra="forbid")

    reward: float = 0.0
    discount: float = 1.0
    is_terminal: bool = False
    reward_source: str | None = None
    is_terminal_source: str | None = None
    language_source: str = "task"  # "task" = the frame's task text (task_index), "" = none


class ImageOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    encoding: Literal["jpeg", "png"] = "jpeg"
    jpeg_quality: int = Field(95, ge=1, le=100)
    resize: list[int] | None = None  # [height, width]

    @field_validator("resize")
    @classmethod
    def _resize_ok(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (len(v) != 2 or min(v) < 1 or max(v) > 8192):
            raise ValueError("resize must be [height, width] with 1..8192")
        return v


class Mapping(BaseModel):
    """The whole source -> RLDS mapping; `dropped` lists source keys intentionally left out, with why."""

    model_config = ConfigDict(extra="forbid")

    dataset_name: str
    version: str = "1.0.0"
    source_format: str = ""
    source_version: str = ""
    steps: list[FieldMap]
    defaults: Defaults = Field(default_factory=Defaults)
    images: ImageOptions = Field(default_factory=ImageOptions)
    episode_metadata: list[str] = Field(default_factory=lambda: ["episode_id", "file_path"])
    dropped: dict[str, str] = Field(default_factory=dict)

    @field_validator("dataset_name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if not re.match(r"^[a-zA-Z]\w*$", v):
            raise ValueError(f"dataset_name {v!r} must match [a-zA-Z]\\w* (tfds rule)")
        return v

    @field_validator("version")
    @classmethod
    def _version_ok(cls, v: str) -> str:
        if not re.match(r"^\d+\.\d+\.\d+$", v):
            raise ValueError(f"version {v!r} must be x.y.z")
        return v

    @model_validator(mode="after")
    def _derive_images(self) -> "Mapping":
        """Image shapes and transforms follow `images` (so an edited mapping.yaml stays consistent)."""
        for fm in self.steps:
            if fm.kind != "image" or not fm.source_shape:
                continue
            h, w, c = fm.source_shape
            out_h, out_w = self.images.resize or (h, w)
            fm.shape = [out_h, out_w, c]
            enc = fm.encoding or self.images.encoding
            parts = [f"decode {fm.source_codec or 'image'}"]
            if fm.transform.startswith("CHW->HWC"):
                parts.insert(0, "CHW->HWC")
            if self.images.resize:
                parts.append(f"resize {h}x{w}->{out_h}x{out_w}")
            parts.append(f"encode {enc.upper()}" + (f" q{self.images.jpeg_quality}" if enc == "jpeg" else " (lossless)"))
            fm.transform = ", ".join(parts)
        return self

    def encoding_of(self, fm: FieldMap) -> str:
        return fm.encoding or self.images.encoding

    def check_against(self, features: dict[str, FeatureSpec]) -> None:
        """Refuse mappings that name unknown sources or collide on a target."""
        targets: set[str] = set()
        reserved = {"reward", "discount", "language_instruction", *STEP_FLAGS}
        for fm in self.steps:
            if fm.source not in features:
                raise ConfigError(f"mapping: source feature {fm.source!r} does not exist in the dataset")
            if fm.target in targets:
                raise ConfigError(f"mapping: two features map to {fm.target!r}")
            if fm.target in reserved:
                raise ConfigError(f"mapping: {fm.target!r} is reserved; set it under defaults")
            for t in targets:
                if fm.target.startswith(t + "/") or t.startswith(fm.target + "/"):
                    raise ConfigError(f"mapping: {fm.target!r} and {t!r} overlap")
            targets.add(fm.target)
        for src in (self.defaults.reward_source, self.defaults.is_terminal_source):
            if src is not None and src not in features:
                raise ConfigError(f"mapping: defaults name unknown source feature {src!r}")
        for fm in self.steps:
            feat = features[fm.source]
            if fm.kind == "image" and feat.kind not in ("image", "video"):
                raise ConfigError(f"mapping: {fm.source!r} is not an image or video feature")
            if fm.kind == "image" and fm.source_shape and list(feat.shape) != fm.source_shape:
                raise ConfigError(f"mapping: {fm.source!r} source_shape {fm.source_shape} differs from the "
                                  f"dataset's {list(feat.shape)}")
            if fm.kind == "tensor" and feat.kind != "tensor":
                raise ConfigError(f"mapping: {fm.source!r} is a {feat.kind} feature, not a tensor")

    def unmapped(self, features: dict[str, FeatureSpec]) -> list[str]:
        """Source features neither mapped, used by defaults, nor listed in `dropped` (a user removed them)."""
        used = {fm.source for fm in self.steps} | set(self.dropped)
        used |= {s for s in (self.defaults.reward_source, self.defaults.is_terminal_source) if s}
        return [k for k in features if k not in used]

    def image_maps(self) -> list[FieldMap]:
        return [f for f in self.steps if f.kind == "image"]


def sanitize_name(name: str) -> str:
    """A tfds-valid snake_case dataset name from a folder name."""
    s = re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower() or "dataset"
    return s if s[0].isalpha() else f"ds_{s}"


def _camera_target(key: str, n_cameras: int) -> str:
    if n_cameras == 1:
        return "observation/image"
    last = re.sub(r"[^0-9a-zA-Z_]", "_", key.split(".")[-1]) or "cam"
    return f"observation/image_{last}"


def _tensor_target(key: str) -> str | None:
    if key in ALIASES:
        return ALIASES[key]
    if key == "action":
        return "action"
    if key == "observation.state":
        return "observation/state"
    if key.startswith("observation."):
        rest = re.sub(r"[^0-9a-zA-Z_]", "_", key[len("observation."):])
        return f"observation/{rest}"
    return None


def default_mapping(inv: Inventory, images: ImageOptions | None = None, name: str | None = None) -> Mapping:
    """The DESIGN §6 default mapping for an inventory."""
    images = images or ImageOptions()
    cams = [f for f in inv.features.values() if f.kind in ("image", "video")]
    steps: list[FieldMap] = []
    dropped: dict[str, str] = {}
    defaults = Defaults()
    for key, feat in inv.features.items():
        if key in LEROBOT_BOOKKEEPING:
            dropped[key] = "bookkeeping column (step order, indices, task via language_instruction)"
            continue
        if feat.kind in ("image", "video"):
            chw = bool(feat.declared_shape and feat.declared_shape != feat.shape)
            steps.append(FieldMap(source=key, target=_camera_target(key, len(cams)), kind="image", dtype="uint8",
                                  shape=list(feat.shape), transform="CHW->HWC" if chw else "none",
                                  source_shape=list(feat.shape),
                                  source_codec=(feat.codec or "video") if feat.kind == "video" else "image"))
            continue
        if key == "next.reward" and feat.kind == "tensor":
            defaults.reward_source = key
            continue
        if key == "next.done" and feat.kind == "tensor":
            defaults.is_terminal_source = key
            continue
        if feat.kind == "string":
            dropped[key] = "string feature (no RLDS tensor form); kept out"
            continue
        target = _tensor_target(key) or f"observation/{re.sub(r'[^0-9a-zA-Z_]', '_', key)}"
        dtype, transform = _target_dtype(feat.dtype)
        shape = [] if list(feat.shape) == [1] and key not in ("action", "observation.state") else list(feat.shape)
        steps.append(FieldMap(source=key, target=target, kind="tensor", dtype=dtype, shape=shape,
                              transform=transform))
    return Mapping(dataset_name=name or sanitize_name(inv.dataset_name), source_format=inv.source_format,
                   source_version=inv.source_version, steps=steps, defaults=defaults, images=images,
                   dropped=dropped)


def _target_dtype(dtype: str) -> tuple[str, str]:
    """TFRecord stores floats as float32 and integers as int64 (FORMATS 1.4): record the narrowing."""
    if dtype in ("float32",):
        return "float32", "none"
    if dtype.startswith("float"):
        return "float32", f"{dtype}->float32"
    if dtype == "bool":
        return "bool", "none"
    if dtype == "int64":
        return "int64", "none"
    if dtype.startswith(("int", "uint")):
        return "int64", f"{dtype}->int64"
    return "float32", f"{dtype}->float32"
