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


MetaType = Literal["int", "float", "text", "bool"]
BUILTIN_METADATA: dict[str, MetaType] = {"episode_id": "int", "file_path": "text"}


class FieldMap(BaseModel):
    """One output feature of a step and where it comes from."""

    model_config = ConfigDict(extra="forbid")

    source: str  # source feature key
    target: str  # RLDS key inside a step, "/"-separated
    kind: Literal["tensor", "image", "text"]
    dtype: str  # images: uint8, or uint16 (16-bit depth, PNG only)
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
    # per-step columns for the other RLDS step fields (None = constant / first-last rule); Minari and ORTF use them
    discount_source: str | None = None
    is_first_source: str | None = None
    is_last_source: str | None = None

    def sources(self) -> list[str]:
        """Source features the defaults read."""
        return [s for s in (self.reward_source, self.is_terminal_source, self.discount_source,
                            self.is_first_source, self.is_last_source) if s]


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
    # type of each episode_metadata key beyond episode_id (int) and file_path (text); missing keys are text
    episode_metadata_types: dict[str, MetaType] = Field(default_factory=dict)
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
            out_h, out_w = (self.images.resize if fm.dtype != "uint16" else None) or (h, w)
            fm.shape = [out_h, out_w, c]
            enc = self.encoding_of(fm)
            parts = [f"decode {fm.source_codec or 'image'}"]
            if fm.transform.startswith("CHW->HWC"):
                parts.insert(0, "CHW->HWC")
            if self.images.resize and fm.dtype != "uint16":
                parts.append(f"resize {h}x{w}->{out_h}x{out_w}")
            parts.append(f"encode {enc.upper()}" + (f" q{self.images.jpeg_quality}" if enc == "jpeg" else " (lossless)"))
            fm.transform = ", ".join(parts)
        return self

    def encoding_of(self, fm: FieldMap) -> str:
        if fm.dtype == "uint16":
            return "png"  # JPEG has no 16-bit mode
        return fm.encoding or self.images.encoding

    def metadata_type(self, key: str) -> MetaType:
        return self.episode_metadata_types.get(key) or BUILTIN_METADATA.get(key, "text")

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
        for src in self.defaults.sources():
            if src not in features:
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
        used |= set(self.defaults.sources())
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
    """The DESIGN §6 default mapping for an inventory (per-format rules for Minari and ORTF)."""
    images = images or ImageOptions()
    if inv.source_format == "minari":
        return _minari_mapping(inv, images, name)
    if inv.source_format == "ortf":
        return _ortf_mapping(inv, images, name)
    cams = [f for f in inv.features.values() if f.kind in ("image", "video")]
    steps: list[FieldMap] = []
    dropped: dict[str, str] = {}
    defaults = Defaults()
    for key, feat in inv.features.items():
        if key in LEROBOT_BOOKKEEPING:
            dropped[key] = "bookkeeping column (step order, indices, task via language_instruction)"
            continue
        if feat.kind in ("image", "video"):
            fm = _image_map(key, feat, _camera_target(key, len(cams)))
            if feat.declared_shape and feat.declared_shape != feat.shape:
                fm.transform = "CHW->HWC"  # LeRobot declares some cameras [C, H, W]
            steps.append(fm)
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
        fm = _tensor_map(key, feat, _tensor_target(key) or f"observation/{re.sub(r'[^0-9a-zA-Z_]', '_', key)}")
        if fm.shape == [1] and key not in ("action", "observation.state"):
            fm.shape = []  # LeRobot stores shape [1] features as scalar columns
        steps.append(fm)
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


# ---- Minari and ORTF rules ------------------------------------------------------------------------------------
MINARI_METADATA: dict[str, MetaType] = {"episode_id": "int", "file_path": "text", "seed": "int"}
ORTF_METADATA: dict[str, MetaType] = {
    "episode_id": "int", "file_path": "text", "ortf_episode_id": "text", "task_id": "int", "success": "int",
    "failure_reason": "text", "operator_notes": "text", "recorded_at": "text", "duration_seconds": "float",
    "annotations": "text"}
ORTF_BOOKKEEPING = {"episode_id", "step_index", "timestamp", "task_id"}


def _segment(part: str) -> str:
    """One path segment as a target identifier: `_index_0` -> `index_0`, `0` -> `f0`."""
    s = re.sub(r"[^0-9A-Za-z_]", "_", part).strip("_") or "f"
    return s if s[0].isalpha() else f"f{s}"


def _path_target(prefix: str, rest: str, sep: str = "/") -> str:
    parts = [_segment(p) for p in rest.split(sep) if p]
    return "/".join([prefix, *parts]) if prefix else "/".join(parts)


def _tensor_map(key: str, feat: FeatureSpec, target: str) -> FieldMap:
    dtype, transform = _target_dtype(feat.dtype)
    return FieldMap(source=key, target=target, kind="tensor", dtype=dtype, shape=list(feat.shape),
                    transform=transform)


def _image_map(key: str, feat: FeatureSpec, target: str) -> FieldMap:
    depth = feat.dtype == "uint16"
    codec = (feat.codec or "video") if feat.kind == "video" else (feat.codec or "image")
    return FieldMap(source=key, target=target, kind="image", dtype="uint16" if depth else "uint8",
                    shape=list(feat.shape), encoding="png" if depth else None, source_shape=list(feat.shape),
                    source_codec=codec)


def _finish(inv: Inventory, images: ImageOptions, name: str | None, steps: list[FieldMap], defaults: Defaults,
            dropped: dict[str, str], meta: dict[str, MetaType]) -> Mapping:
    seen: dict[str, int] = {}
    for fm in steps:  # sanitised names may collide (`a.b` and `a_b`): suffix the later ones
        n = seen.get(fm.target, 0)
        seen[fm.target] = n + 1
        if n:
            fm.target = f"{fm.target}_{n + 1}"
    extra = {k: v for k, v in meta.items() if k not in BUILTIN_METADATA}
    return Mapping(dataset_name=name or sanitize_name(inv.dataset_name), source_format=inv.source_format,
                   source_version=inv.source_version, steps=steps, defaults=defaults, images=images,
                   episode_metadata=list(meta), episode_metadata_types=extra, dropped=dropped)


def _minari_mapping(inv: Inventory, images: ImageOptions, name: str | None) -> Mapping:
    """Minari: one Box observation -> observation/state (image: observation/image), Dict/Tuple subspaces ->
    observation/<key>; actions -> action; rewards -> reward; terminations/truncations -> terminated/truncated;
    infos/<k> -> info/<k>; is_terminal and discount are the reader's per-step columns (T+1 layout)."""
    steps: list[FieldMap] = []
    dropped: dict[str, str] = {}
    defaults = Defaults(reward_source="rewards", is_terminal_source="is_terminal", discount_source="discount",
                        language_source="")
    for key, feat in inv.features.items():
        if key in ("rewards", "is_terminal", "discount"):
            continue
        if feat.kind == "string":
            dropped[key] = "text space (no RLDS tensor form); kept out"
            continue
        head, _, rest = key.partition("/")
        if head == "observations":
            if feat.kind in ("image", "video"):
                target = _path_target("observation", rest) if rest else "observation/image"
                steps.append(_image_map(key, feat, target))
                continue
            target = _path_target("observation", rest) if rest else "observation/state"
        elif head == "actions":
            target = _path_target("action", rest) if rest else "action"
        elif key == "terminations":
            target = "terminated"
        elif key == "truncations":
            target = "truncated"
        elif head == "infos":
            target = _path_target("info", rest)
        else:
            target = _path_target("", key)
        if feat.kind in ("image", "video"):
            steps.append(_image_map(key, feat, target))
        else:
            steps.append(_tensor_map(key, feat, target))
    return _finish(inv, images, name, steps, defaults, dropped, dict(MINARI_METADATA))


def _ortf_mapping(inv: Inventory, images: ImageOptions, name: str | None) -> Mapping:
    """ORTF: action -> action; observation.state (the concatenated state, or the single `state` component) ->
    observation/state, other components -> observation/<component>; one camera -> observation/image, several ->
    observation/image_<camera>; depth cameras -> observation/depth[_<camera>] (uint16 PNG); boundary flags,
    reward and discount from the step columns; instruction from tasks.jsonl."""
    steps: list[FieldMap] = []
    dropped: dict[str, str] = {}
    defaults = Defaults(is_first_source="is_first", is_last_source="is_last", is_terminal_source="is_terminal")
    rgb = [k for k, f in inv.features.items() if f.kind in ("image", "video") and f.dtype != "uint16"]
    depth = [k for k, f in inv.features.items() if f.kind in ("image", "video") and f.dtype == "uint16"]
    has_state = "observation.state" in inv.features
    for key, feat in inv.features.items():
        if key in ("is_first", "is_last", "is_terminal"):
            continue
        if key in ORTF_BOOKKEEPING or key.endswith(".frame_index"):
            dropped[key] = "bookkeeping column (episode rows, step order, video frame index, task via " \
                           "language_instruction)"
            continue
        if key == "reward" and feat.kind == "tensor":
            defaults.reward_source = key
            continue
        if key == "discount" and feat.kind == "tensor":
            defaults.discount_source = key
            continue
        if feat.kind == "string":
            dropped[key] = "string column (no RLDS tensor form); kept out"
            continue
        if feat.kind in ("image", "video"):
            cam = key.rsplit(".", 1)[-1]
            group = depth if key in depth else rgb
            base = "observation/depth" if key in depth else "observation/image"
            steps.append(_image_map(key, feat, base if len(group) == 1 else f"{base}_{_segment(cam)}"))
            continue
        if key == "observation.state":
            target = "observation/state"
        elif key.startswith("observation.state."):
            comp = key[len("observation.state."):]
            if comp == "state" and not has_state:
                target = "observation/state"
            else:
                target = _path_target("observation", comp, ".")
        elif key.startswith("observation."):
            target = _path_target("observation", key[len("observation."):], ".")
        else:
            target = _path_target("", key, ".")
        steps.append(_tensor_map(key, feat, target))
    return _finish(inv, images, name, steps, defaults, dropped, dict(ORTF_METADATA))
