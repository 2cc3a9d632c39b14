"""The LeRobot features of a mapping: which mapping targets make which LeRobot feature (`plan_layout`).

Feature naming (by the mapping's role, else by the canonical target name):
    state  observation/state            -> observation.state
    camera observation/image_<name>     -> observation.images.<name>
    depth  observation/depth[_<name>]   -> observation.images.<name>_depth (lerobot's robots name depth cameras
                                           `<camera>_depth`), shape (H, W, 1), `info.is_depth_map`
                                           (formats/lerobot/depth.py)
           observation/image (one camera) -> observation.images.<last part of the source key> (top, image, ...)
           observation/<other>          -> observation.images.<other, / as _>
    action every action tensor          -> `action`, float32, the tensors concatenated in mapping order (RLDS
                                           world_vector[3] + rotation_delta[3] + open_gripper -> action[7]);
                                           `names` lists each component (the source's names for a single one)
    other  observation/<rest>           -> observation.<rest, / as .> (own feature, own shape; 2-D stay 2-D)
           <target>                     -> <target, / as .>           (e.g. Minari info/success -> info.success)
    reward (defaults.reward_source)     -> next.reward float32 [1]
    terminal (defaults.is_terminal_source) -> next.done bool [1]
    discount (defaults.discount_source) -> discount float32 [1] (only when the source has a per-step discount)
    language (the step's instruction)   -> the task: meta/tasks.parquet + task_index per frame
    text step features                  -> dtype "string" features
    language_persistent / language_events text (JSON rows) -> lerobot's language columns (dtype "language");
                                           more language than the task (language text features, language
                                           episode metadata) -> task_aug rows in language_persistent
                                           (robo_ray/formats/lerobot/language.py)
    bookkeeping                         -> timestamp (float32, k/fps), frame_index, episode_index, index, task_index
Not written: is_first / is_last (lerobot derives them from frame_index and the episode bounds), episode
metadata. Depth cameras (16-bit) are quantized to 12-bit HEVC video as lerobot 0.6.1 does (formats/lerobot/depth.py).
Grey 8-bit cameras are encoded as 3-channel video.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from robo_ray.errors import ConfigError
from robo_ray.formats.lerobot.language import LANGUAGE_COLUMNS, LANGUAGE_EVENTS, LANGUAGE_METADATA, LANGUAGE_PERSISTENT
from robo_ray.formats.lerobot.paths import BOOKKEEPING
from robo_ray.mapping import FieldMap, Mapping


MIN_DEPTH_SIDE = 16  # x265 refuses smaller frames (avcodec_open2 EINVAL for 12x16, 8x8; 16x16 and 17x33 encode)


@dataclass(frozen=True)
class Feature:
    """One LeRobot feature and the mapping targets it is made of."""

    key: str
    kind: Literal["action", "tensor", "string", "language", "reward", "discount", "done", "video"]
    dtype: str  # float32 / int64 / bool / string / video
    shape: tuple[int, ...]  # LeRobot's shape ((1,) = a scalar column)
    targets: tuple[str, ...] = ()
    sizes: tuple[int, ...] = ()  # values per step of each target (action components)
    sources: tuple[str, ...] = ()
    role: str = ""  # tensors: the mapping's role (state, observation, ...): what GR00T's modality.json groups
    depth: bool = False  # video: a 16-bit depth camera (12-bit quantized HEVC gray12le, shape (H, W, 1))

    @property
    def scalar(self) -> bool:
        return self.shape == (1,)

    @property
    def numeric(self) -> bool:
        return self.kind not in ("string", "language", "video")


def _ident(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", text).strip("_")


def _role(fm: FieldMap) -> str:
    """The feature's role: the mapping's when declared, else from its canonical target name."""
    if fm.role:
        return fm.role
    if fm.kind == "image":
        return "depth" if fm.dtype == "uint16" else "camera"
    if fm.target == "observation/state":
        return "state"
    if fm.target == "action" or fm.target.startswith("action/"):
        return "action"
    return "observation" if fm.target.startswith("observation/") else "other"


def camera_key(fm: FieldMap) -> str:
    t = fm.target
    rest = t[len("observation/"):] if t.startswith("observation/") else t
    if fm.dtype == "uint16" and (rest == "depth" or rest.startswith("depth_")):  # lerobot's `<camera>_depth`
        name = rest[len("depth_"):] if rest.startswith("depth_") else "depth"
        return f"observation.images.{name if name.endswith('depth') else name + '_depth'}"
    if rest == "image":
        name = _ident(re.split(r"[./]", fm.source.rstrip("./"))[-1]) or "image"
    elif rest.startswith("image_"):
        name = rest[len("image_"):]
    else:
        name = rest.replace("/", "_")
    return f"observation.images.{name}"


def data_key(fm: FieldMap, role: str) -> str:
    t = fm.target
    if role == "state" and t == "observation/state":
        return "observation.state"
    if t.startswith("observation/"):
        return "observation." + t[len("observation/"):].replace("/", ".")
    return t.replace("/", ".")


def _shape(fm_shape: list[int]) -> tuple[int, ...]:
    return (1,) if not fm_shape or list(fm_shape) == [1] else tuple(int(d) for d in fm_shape)


@dataclass
class Layout:
    features: list[Feature]  # info.json order (bookkeeping last)
    cameras: list[Feature]
    camera_maps: dict[str, FieldMap]  # feature key -> the image mapping

    @property
    def data_features(self) -> list[Feature]:
        return [f for f in self.features if f.kind != "video"]

    def feature(self, key: str) -> Feature:
        return next(f for f in self.features if f.key == key)


def plan_layout(mapping: Mapping) -> Layout:
    """The LeRobot features of a mapping (the naming table above); ConfigError for what LeRobot cannot
    hold (odd frame sizes, depth other than one 16-bit channel)."""
    out: list[Feature] = []
    taken: set[str] = set(BOOKKEEPING) | {"next.reward", "next.done", "discount"}
    camera_maps: dict[str, FieldMap] = {}
    actions = [fm for fm in mapping.steps if fm.kind == "tensor" and _role(fm) == "action"]

    def unique(key: str) -> str:
        base, k = key, 2
        while key in taken:
            key, k = f"{base}_{k}", k + 1
        taken.add(key)
        return key

    action_done = False
    for fm in mapping.steps:
        role = _role(fm)
        if fm.kind == "image":
            depth = role == "depth" or fm.dtype != "uint8"
            if depth and (fm.dtype != "uint16" or (len(fm.shape) > 2 and int(fm.shape[2]) != 1)):
                raise ConfigError(f"mapping: {fm.source!r} is a {fm.dtype} image of shape {fm.shape}; the LeRobot "
                                  "target writes 8-bit colour or one-channel 16-bit depth (mm) only: remove it from "
                                  "mapping.yaml (pass it back with --mapping)")
            h, w = int(fm.shape[0]), int(fm.shape[1])
            if depth and (h < MIN_DEPTH_SIDE or w < MIN_DEPTH_SIDE):
                raise ConfigError(f"mapping: depth camera {fm.source!r} is {w}x{h}; x265 (lerobot's HEVC depth "
                                  f"video) needs at least {MIN_DEPTH_SIDE}x{MIN_DEPTH_SIDE}: remove it from "
                                  "mapping.yaml")
            if depth:  # gray12le has no chroma: odd sizes are fine; never resized
                key = unique(camera_key(fm))
                camera_maps[key] = fm
                out.append(Feature(key, "video", "video", (h, w, 1), (fm.target,), (), (fm.source,), depth=True))
                continue
            if h % 2 or w % 2:
                raise ConfigError(f"mapping: camera {fm.source!r} is {w}x{h}; yuv420p video needs an even width and "
                                  "height: set images.resize (e.g. --set images.resize=[H,W])")
            key = unique(camera_key(fm))
            camera_maps[key] = fm
            out.append(Feature(key, "video", "video", (h, w, 3), (fm.target,), (), (fm.source,)))
        elif fm.kind == "text" and fm.target in LANGUAGE_COLUMNS:  # lerobot's own columns, as JSON rows per step
            taken.add(fm.target)
            out.append(Feature(fm.target, "language", "language", (1,), (fm.target,), (1,), (fm.source,), role))
        elif fm.kind == "text":
            out.append(Feature(unique(data_key(fm, role)), "string", "string", (1,), (fm.target,), (1,),
                               (fm.source,)))
        elif role == "action":
            if action_done:
                continue
            action_done = True
            sizes = tuple(int(np.prod(a.shape)) if a.shape else 1 for a in actions)
            taken.add("action")
            out.append(Feature("action", "action", "float32", _shape([sum(sizes)]), tuple(a.target for a in actions),
                               sizes, tuple(a.source for a in actions)))
        else:
            shape = _shape(fm.shape)
            size = int(np.prod(fm.shape)) if fm.shape else 1
            out.append(Feature(unique(data_key(fm, role)), "tensor", fm.dtype, shape, (fm.target,), (size,),
                               (fm.source,), role))
    out += language_features(mapping, {f.key for f in out})
    d = mapping.defaults
    if d.reward_source:
        out.append(Feature("next.reward", "reward", "float32", (1,), sources=(d.reward_source,)))
    if d.is_terminal_source:
        out.append(Feature("next.done", "done", "bool", (1,), sources=(d.is_terminal_source,)))
    if d.discount_source:  # a per-step discount (Minari: 0 after termination) is data: kept, not dropped
        out.append(Feature("discount", "discount", "float32", (1,), sources=(d.discount_source,)))
    out += [Feature("timestamp", "tensor", "float32", (1,)), *(Feature(k, "tensor", "int64", (1,))
                                                                for k in BOOKKEEPING[1:])]
    return Layout(out, [f for f in out if f.kind == "video"], camera_maps)


def language_features(mapping: Mapping, have: set[str]) -> list[Feature]:
    """lerobot's two language columns, when the mapping passes one through or holds more language than the task:
    a `language_persistent` of task_aug rows made from the language text features (`targets`) and the episode
    metadata holding language (`sources`), and an empty `language_events` (robo_ray/formats/lerobot/language.py)."""
    out: list[Feature] = []
    if LANGUAGE_PERSISTENT not in have:
        texts = tuple(fm.target for fm in mapping.steps
                      if fm.kind == "text" and fm.role == "language" and fm.target not in LANGUAGE_COLUMNS)
        meta = tuple(k for k in mapping.episode_metadata
                     if mapping.episode_metadata_types.get(k) == "text" and LANGUAGE_METADATA.search(k))
        if texts or meta or LANGUAGE_EVENTS in have:
            out.append(Feature(LANGUAGE_PERSISTENT, "language", "language", (1,), texts, (), meta))
    if LANGUAGE_EVENTS not in have and (out or LANGUAGE_PERSISTENT in have):
        out.append(Feature(LANGUAGE_EVENTS, "language", "language", (1,)))
    return out
