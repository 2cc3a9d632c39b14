"""What a robomimic-family HDF5 file holds, as its writers lay it out (no I/O beyond the h5py objects given).

robomimic (scripts/dataset_states_to_obs.py), MimicGen and Isaac Lab write one file:

    data/                   attrs: env_args (JSON: env_name, type, env_kwargs{control_freq, robots, ...}), total
      demo_<N>/             attrs: num_samples (= T), model_file, ep_info; Isaac Lab: seed, success
        actions (T, A)  rewards (T,)  dones (T,)  states (T, S) (Isaac Lab: a group of per-step arrays)
        obs/<key> (T, ...)  next_obs/<key> (T, ...)  [actions_abs, action_dict/*, datagen_info/*, ...]
    mask/<name>             the demos of a filter key: a 1-D array of byte strings (dtype S) ("train", "valid",
                            and any other filter key, e.g. "20_percent")

RoboCasa (and robomimic's language-conditioned datasets) give each demo an `ep_meta` attribute (JSON) whose
"lang" is that demo's instruction.

LIBERO (scripts/create_dataset.py) adds `problem_info` (JSON with `language_instruction`), `env_name`,
`bddl_file_name`, `macros_image_convention` ("opengl": robosuite rendered the frames bottom-up) to data/'s attrs,
and `robot_states` to each demo; its images are `obs/agentview_rgb`, `obs/eye_in_hand_rgb` (T, 128, 128, 3) uint8.

Per-step image observations are uint8 (T, H, W, C) datasets (C 1 or 3; (T, H, W) is grey); every other numeric
dataset with T rows is a tensor. `next_obs/*` (the observation after each step: the next step's `obs`) is left out.
"""
from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import numpy as np

from robo_ray.episode import FeatureSpec
from robo_ray.errors import SourceFormatError, UnsafeInput
from robo_ray.formats.hdf5 import attr_text, jsonable, leaves
from robo_ray.readers.base import canonical_path, held_fps, unique_names
from robo_ray.safety import MAX_EPISODES, check_shape

DEMO = re.compile(r"^demo_(\d{1,12})$")
# robomimic's split filter keys -> robo-ray splits; any other mask is a filter key kept in episode metadata
SPLIT_MASKS = {"train": "train", "valid": "val", "val": "val", "test": "test"}
NEXT_OBS_NOTE = "the observation after each step (the next step's obs/...); left out"
NOT_PER_STEP_NOTE = "not one row per step (e.g. Isaac Lab's initial_state); left out"
MAX_ATTR_CHARS = 4 << 20  # env_args, problem_info, bddl_file_content, ep_meta: text attributes read whole
INITIAL = "initial_state/"  # Isaac Lab: the scene's state at reset, one row
CHECKED_DEMOS = 3  # demos whose row counts decide which datasets are per step
LIBERO_RATE = 20.0  # LIBERO's create_dataset.py replays at control_freq=20 (used when env_args does not say)


def demo_number(name: str) -> int | None:
    m = DEMO.match(name)
    return int(m.group(1)) if m else None


def is_robomimic_file(f: Any) -> bool:
    """A robomimic-family file: a `data` group holding `demo_<N>` groups (Minari files hold `episode_<N>` at the
    root; ALOHA files `observations` and `action`)."""
    import h5py

    link = f.get("data", getlink=True)
    if not isinstance(link, h5py.HardLink) or not isinstance(f["data"], h5py.Group):
        return False
    return any(DEMO.match(name) for name in f["data"])


# ---- file-level attributes -------------------------------------------------------------------------------------
def json_attr(attrs: Any, key: str, where: str) -> Any:
    """A JSON text attribute (env_args, problem_info), None when absent; invalid JSON is one SourceFormatError."""
    try:
        text = attr_text(attrs, key, MAX_ATTR_CHARS)
    except UnsafeInput as exc:
        raise UnsafeInput(f"{where}: {exc}") from exc
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceFormatError(f"{where}: attribute {key} is not valid JSON ({exc.msg})") from exc


def control_freq(env_args: Any) -> float | None:
    """The control rate robosuite ran the demonstrations at: env_args["env_kwargs"]["control_freq"]."""
    kwargs = env_args.get("env_kwargs") if isinstance(env_args, dict) else None
    return held_fps(kwargs.get("control_freq")) if isinstance(kwargs, dict) else None


def robot_type(env_args: Any) -> str | None:
    kwargs = env_args.get("env_kwargs") if isinstance(env_args, dict) else None
    robots = kwargs.get("robots") if isinstance(kwargs, dict) else None
    if isinstance(robots, str):
        return robots
    if isinstance(robots, list) and robots and all(isinstance(r, str) for r in robots):
        return ",".join(robots)
    return None


def language(problem_info: Any) -> str:
    """LIBERO's task text: problem_info["language_instruction"] ("" when there is none)."""
    text = problem_info.get("language_instruction") if isinstance(problem_info, dict) else None
    if isinstance(text, list):  # some LIBERO variants store the words as a list
        text = " ".join(str(t) for t in text)
    return " ".join(text.split()) if isinstance(text, str) else ""


def demo_language(attrs: Any, where: str) -> tuple[str, str | None]:
    """A demo's own task text: its `ep_meta` attribute's "lang" (RoboCasa and robomimic's language-conditioned
    datasets write `ep_meta` JSON per demo), and why it could not be read (None when it could, or is absent)."""
    try:
        meta = json_attr(attrs, "ep_meta", where)
    except (SourceFormatError, UnsafeInput) as exc:
        return "", str(exc)
    text = meta.get("lang") if isinstance(meta, dict) else None
    return (" ".join(text.split()), None) if isinstance(text, str) else ("", None)


def opengl_frames(attrs: Any) -> bool:
    """Whether the file says its frames are bottom-up (robosuite's "opengl" image convention, LIBERO's attribute):
    they are flipped vertically to the usual top-down order when read."""
    return (attr_text(attrs, "macros_image_convention", 64) or "").strip().lower() == "opengl"


def read_masks(f: Any, where: str) -> dict[str, list[str]]:
    """mask/<name> -> its demo keys (robomimic stores them as byte strings); bounded before reading."""
    import h5py

    out: dict[str, list[str]] = {}
    link = f.get("mask", getlink=True)
    if link is None:
        return out
    if not isinstance(link, h5py.HardLink) or not isinstance(f["mask"], h5py.Group):
        raise SourceFormatError(f"{where}: /mask is not a group")
    for name, ds in leaves(f["mask"], "", where):
        if len(ds.shape or ()) != 1 or ds.shape[0] > MAX_EPISODES or ds.dtype.kind not in "SOU":
            raise SourceFormatError(f"{where}: mask/{name} is not a list of demo keys ({ds.shape} {ds.dtype})")
        if ds.dtype.kind == "S" and ds.dtype.itemsize > 256:
            raise UnsafeInput(f"{where}: mask/{name} holds keys of {ds.dtype.itemsize} bytes")
        out[name] = [str(jsonable(v)) for v in ds[()]]
    return out


# ---- features from one demo ------------------------------------------------------------------------------------
def _is_image(ds: Any) -> bool:
    shape = tuple(ds.shape[1:])
    if ds.dtype not in (np.uint8, np.uint16):
        return False
    if len(shape) == 3:
        return shape[2] in (1, 3) and shape[0] >= 8 and shape[1] >= 8
    return len(shape) == 2 and shape[0] >= 8 and shape[1] >= 8


def _feature(key: str, ds: Any) -> FeatureSpec:
    shape = tuple(int(d) for d in ds.shape[1:])
    if _is_image(ds):
        hwc = (shape[0], shape[1], shape[2] if len(shape) == 3 else 1)
        return FeatureSpec(key, "image", str(ds.dtype), hwc, declared_shape=shape, codec="raw")
    return FeatureSpec(key, "tensor", str(ds.dtype), check_shape(key, list(shape)), declared_shape=shape)


def _declare(feat: FeatureSpec) -> FeatureSpec:
    """Role and canonical name of a demo's dataset (key relative to the demo group)."""
    key = feat.key
    head, _, rest = key.partition("/")
    if key == "actions":
        return replace(feat, role="action", name="action")
    if key == "rewards":
        return replace(feat, role="reward", name="reward", scalar=True)
    if key == "dones":
        return replace(feat, role="other", name="done", scalar=True)
    if head == "obs" and rest:
        if feat.kind == "image":
            role = "depth" if feat.dtype == "uint16" else "camera"
            return replace(feat, role=role, name=canonical_path("observation", rest))
        return replace(feat, role="observation", name=canonical_path("observation", rest))
    if head == "states":
        return replace(feat, role="other", name=canonical_path("sim_state", rest))
    return replace(feat, role="other", name=canonical_path("", key))


def not_per_step(group: Any, keys: list[str], where: str) -> list[str]:
    """Of `keys`, those that do not hold one row per step in this demo (checked on a few demos besides the first:
    a first demo of 1 or 2 steps makes Isaac Lab's initial_state or MimicGen's src_demo_inds look per-step)."""
    actions = group.get("actions")
    if actions is None or not hasattr(actions, "shape") or not actions.shape:
        return []
    steps = int(actions.shape[0])
    rows = {key: ds.shape[0] if ds.shape else None for key, ds in leaves(group, "", where)}
    return [k for k in keys if k in rows and rows[k] != steps]


def demo_features(group: Any, where: str) -> tuple[dict[str, FeatureSpec], list[str]]:
    """The features of one demo group (the file's first), and the datasets left out for not having one row per
    step. Non-numeric datasets are left out too, and Isaac Lab's `initial_state/*` (one row, whatever T is)."""
    actions = group.get("actions")
    if actions is None or not hasattr(actions, "shape") or len(actions.shape or ()) < 1:
        raise SourceFormatError(f"{where}: {group.name} has no actions dataset")
    steps = int(actions.shape[0])
    feats: dict[str, FeatureSpec] = {}
    skipped: list[str] = []
    for key, ds in leaves(group, "", where):
        if ds.dtype.kind not in "biuf" or not ds.shape or int(ds.shape[0]) != steps or key.startswith(INITIAL):
            skipped.append(key)
            continue
        if key.startswith("next_obs/"):
            feats[key] = replace(_feature(key, ds), role="bookkeeping", note=NEXT_OBS_NOTE)
            continue
        feats[key] = _declare(_feature(key, ds))
    if any(f.kind == "image" for k, f in feats.items() if k == "actions"):
        raise SourceFormatError(f"{where}: actions are images")
    return unique_names(feats), skipped
