"""Camera names and views, the same for every source (the Spec stage's default mapping uses them).

Image-like features become `observation/image` (one colour camera) or `observation/image_<name>` (several), depth
images `observation/depth[_<name>]`; `<name>` is the feature's canonical name without generic words (image, rgb,
pixels, cam, ...): `observation/wrist_image` -> `observation/image_wrist`, Minari's `observation/pixels` ->
`observation/image`. Names already of that form stay. Each camera gets a view: `wrist` when its key or name says
wrist / hand / gripper / eef / ee, `depth` for depth images, else the first is `primary`, later ones `secondary`.
Views order the image features (primary, secondary, wrist, depth), as Octo's `image_obs_keys` list them.
"""
from __future__ import annotations

import re
from typing import Iterable

GENERIC = frozenset({"image", "images", "img", "imgs", "rgb", "pixels", "pixel", "cam", "cams", "camera",
                     "cameras", "observation", "observations", "obs", "video", "videos", "depth", "color",
                     "colour", "frame", "frames"})
WRIST_WORDS = ("wrist", "hand", "gripper", "eef")
WRIST_TOKENS = frozenset({"ee", "endeffector", "end_effector"})
VIEW_ORDER: tuple[str, ...] = ("primary", "secondary", "wrist", "depth")
_RGB_FORM = re.compile(r"^observation/image(_[A-Za-z0-9_]+)?$")
_DEPTH_FORM = re.compile(r"^observation/depth(_[A-Za-z0-9_]+)?$")


def tokens(text: str) -> list[str]:
    """Lower-case words of a key or name (split at anything but letters and digits)."""
    return [t for t in re.split(r"[^0-9a-z]+", text.lower()) if t]


def is_wrist(*texts: str) -> bool:
    """Whether a camera's key or name says it looks from the wrist / hand / gripper / end effector."""
    words = [t for s in texts for t in tokens(s)]
    joined = [s.lower() for s in texts]
    return any(t in WRIST_TOKENS or any(w in t for w in WRIST_WORDS) for t in words) or \
        any("ee_" in s.rsplit("/", 1)[-1].rsplit(".", 1)[-1] for s in joined)


def camera_views(cams: Iterable[tuple[str, str, bool]]) -> list[str]:
    """The view of each camera given as (source key, canonical name, is depth), in order."""
    out: list[str] = []
    for key, name, depth in cams:
        if depth:
            out.append("depth")
        elif is_wrist(key, name):
            out.append("wrist")
        else:
            out.append("primary" if "primary" not in out else "secondary")
    return out


def short_name(name: str) -> str:
    """The camera's own words: its canonical name without generic ones (`observation/wrist_image` -> `wrist`)."""
    return "_".join(t for t in tokens(name) if t not in GENERIC)


def _of_form(name: str, depth: bool) -> bool:
    """`observation/image[_<own words>]` (depth: `observation/depth[...]`): kept as it is."""
    m = (_DEPTH_FORM if depth else _RGB_FORM).match(name)
    return bool(m) and (not m.group(1) or bool(short_name(m.group(1))))


def camera_targets(cams: list[tuple[str, bool, str]], taken: set[str]) -> list[str]:
    """Targets for cameras given as (canonical name, is depth, view), in order, unique among themselves and
    `taken` (the other step features' targets): names already of the form stay, the others are renamed."""
    out: list[str | None] = [name if _of_form(name, depth) and name not in taken else None
                             for name, depth, _ in cams]
    used = set(taken) | {t for t in out if t}
    counts = {d: sum(1 for _, dd, _ in cams if dd == d) for d in (False, True)}
    for i, (name, depth, view) in enumerate(cams):
        if out[i] is not None:
            continue
        base = "observation/depth" if depth else "observation/image"
        own = short_name(name)
        if counts[depth] == 1 or not own:
            candidates = [base, f"{base}_{own or view}"]
        else:
            candidates = [f"{base}_{own}"]
        target = next((c for c in candidates if c not in used), None)
        k = 2
        while target is None or target in used:
            target, k = f"{candidates[-1]}_{k}", k + 1
        out[i] = target
        used.add(target)
    return [t for t in out if t is not None]


def view_rank(view: str | None) -> float:
    """Sort key of a view (unset: after secondary, before wrist)."""
    return float(VIEW_ORDER.index(view)) if view in VIEW_ORDER else 1.5
