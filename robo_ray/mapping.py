"""The Spec stage's product: how each source feature becomes an RLDS feature (schema as data, editable as YAML).

The default mapping is format-neutral: every reader declares what each feature is (`FeatureSpec.role`) and its
canonical name (`FeatureSpec.name`, e.g. `observation/state`, `observation/image_wrist`, `action`), and the
inventory says which episode metadata the reader gives and where the language comes from. Data features (state,
observation, action, camera, depth, other) become step features under their canonical name; reward / discount /
is_first / is_last / terminal features feed the RLDS step fields (`defaults`); bookkeeping and text features are
listed under `dropped` with the reader's reason. Images are JPEG quality 95 unless configured.
"""
from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from robo_ray.cameras import camera_targets, camera_views, view_rank
from robo_ray.episode import FeatureSpec
from robo_ray.errors import ConfigError
from robo_ray.readers.base import BUILTIN_METADATA, DATA_ROLES, Inventory, MetaType, canonical_path
from robo_ray.readers.naming import TASK_NAME

STEP_FLAGS = ("is_first", "is_last", "is_terminal")
View = Literal["primary", "secondary", "wrist", "depth"]
_TARGET_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(/[A-Za-z][A-Za-z0-9_]*)*$")
# roles that feed an RLDS step field instead of becoming a step feature: role -> the Defaults field naming the source
SOURCE_ROLES = {"reward": "reward_source", "discount": "discount_source", "is_first": "is_first_source",
                "is_last": "is_last_source", "terminal": "is_terminal_source"}


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
    role: str | None = None  # the source feature's role (FeatureSpec.role): state, action, camera, depth, ...
    view: View | None = None  # images: the camera's role (primary, secondary, wrist, depth); decides their order

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
    language_source: str = "task"  # "task" = the step's task text (Episode.step_tasks), "" = none
    instruction: str = ""  # the instruction of steps without task text (--instruction / source.instruction)
    # per-step columns for the other RLDS step fields (None = constant / first-last rule)
    discount_source: str | None = None
    is_first_source: str | None = None
    is_last_source: str | None = None

    def step_language(self, step_tasks: list[str], n: int) -> list[str]:
        """Each of `n` steps' instruction: the source's task text (`language_source == "task"`), `instruction`
        where there is none (no task text in the source, or an empty task)."""
        tasks = list(step_tasks) if self.language_source == "task" else [""] * n
        return [t or self.instruction for t in tasks] if self.instruction else tasks

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
        """Image shapes and transforms follow `images` (so an edited mapping.yaml stays consistent); image
        features are ordered by their view (primary, secondary, wrist, depth; stable otherwise)."""
        self.steps = order_by_view(self.steps)
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


def _role_of(feat: FeatureSpec) -> str:
    if feat.role is not None:
        return feat.role
    if feat.kind in ("image", "video"):
        return "depth" if feat.dtype == "uint16" else "camera"
    return "other"


def default_mapping(inv: Inventory, images: ImageOptions | None = None, name: str | None = None) -> Mapping:
    """The default mapping of an inventory, from the roles and canonical names its reader declared (DESIGN §6):
    data features -> step features named as declared (images: uint8 JPEG/PNG, 16-bit depth: uint16 PNG; tensors
    narrowed to float32 / int64 as TFRecord stores them, scalars shape []); step-field roles -> `defaults`
    sources; language text other than the task (named TASK_NAME) -> text step features; everything else
    (bookkeeping, text) -> `dropped` with the reader's note."""
    images = images or ImageOptions()
    steps: list[FieldMap] = []
    dropped: dict[str, str] = {}
    defaults = Defaults(language_source=inv.language_source)
    for key, feat in inv.features.items():
        role = _role_of(feat)
        if role in SOURCE_ROLES and feat.kind == "tensor":
            field = SOURCE_ROLES[role]
            if getattr(defaults, field) is None:
                setattr(defaults, field, key)
            else:
                dropped[key] = f"a second {role} source (`{getattr(defaults, field)}` is used)"
            continue
        if feat.kind == "string" and role == "language" and feat.name and feat.name != TASK_NAME:
            steps.append(FieldMap(source=key, target=feat.name, kind="text", dtype="string", shape=[], role=role))
            continue  # more language than the step's task (its own name: TASK_NAME): kept as text
        if role not in DATA_ROLES or feat.kind == "string":
            dropped[key] = feat.note or ("text feature (no tensor form); kept out" if feat.kind == "string" else
                                         f"{role} feature: not step data")
            continue
        target = feat.name or canonical_path("", key.replace(".", "/")) or "feature"
        if feat.kind in ("image", "video"):
            fm = _image_map(key, feat, target)
            if feat.channels_first:
                fm.transform = "CHW->HWC"
        else:
            fm = _tensor_map(key, feat, target)
            if feat.scalar:
                fm.shape = []
        fm.role = role
        steps.append(fm)
    name_cameras(steps)
    meta = dict(inv.metadata_types)
    return Mapping(dataset_name=name or sanitize_name(inv.dataset_name), source_format=inv.source_format,
                   source_version=inv.source_version, steps=steps, defaults=defaults, images=images,
                   episode_metadata=list(meta),
                   episode_metadata_types={k: v for k, v in meta.items() if k not in BUILTIN_METADATA},
                   dropped=dropped)


def name_cameras(steps: list[FieldMap]) -> None:
    """Give the image features their view and camera target (robo_ray/cameras.py), in place; the Mapping
    orders them by view."""
    images = [fm for fm in steps if fm.kind == "image"]
    depth = [fm.role == "depth" or fm.dtype == "uint16" for fm in images]
    views = camera_views((fm.source, fm.target, d) for fm, d in zip(images, depth))
    taken = {fm.target for fm in steps if fm.kind != "image"}
    targets = camera_targets([(fm.target, d, v) for fm, d, v in zip(images, depth, views)], taken)
    for fm, view, target in zip(images, views, targets):
        fm.view, fm.target = view, target  # type: ignore[assignment]


def order_by_view(steps: list[FieldMap]) -> list[FieldMap]:
    """`steps` with the image features (in the places they hold) sorted by view: primary, secondary, wrist,
    depth; stable otherwise (an edited view in mapping.yaml changes the order)."""
    images = sorted((fm for fm in steps if fm.kind == "image"), key=lambda fm: view_rank(fm.view))
    it = iter(images)
    return [next(it) if fm.kind == "image" else fm for fm in steps]


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
