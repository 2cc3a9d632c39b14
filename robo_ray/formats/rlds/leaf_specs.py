"""The leaves of an RLDS features.json as robo-ray features: each leaf's `FeatureSpec` (kind, dtype, shape, codec),
its role (camera, action, reward, language, ...), its canonical name (unique, never nested inside another) and how
an episode-level value is stored (`meta_type`)."""
from __future__ import annotations

import re

from robo_ray.episode import FeatureSpec, Role
from robo_ray.formats.rlds.features import Leaf
from robo_ray.readers.inventory import BUILTIN_METADATA, MetaType
from robo_ray.readers.naming import LANGUAGE_TEXT, identifier

_LANGUAGE = LANGUAGE_TEXT
_STEP_ROLES: dict[str, Role] = {"reward": "reward", "discount": "discount", "is_first": "is_first",
                                "is_last": "is_last", "is_terminal": "terminal"}


def _role(leaf: Leaf) -> Role:
    if not leaf.per_step:
        return "metadata"
    p = leaf.path[1:]
    if leaf.cls == "Image":
        depth = leaf.dtype == "uint16" or (leaf.shape[-1] == 1 and "depth" in "/".join(p).lower())
        return "depth" if depth else "camera"
    if p == ("observation", "state"):
        return "state"
    if p[0] == "action":
        return "action"
    if len(p) == 1 and p[0] in _STEP_ROLES and leaf.dtype != "string":
        return _STEP_ROLES[p[0]]
    if leaf.dtype == "string" and leaf.shape == () and _LANGUAGE.match(p[-1]):
        return "language"
    return "observation" if p[0] == "observation" else "other"


def _note(leaf: Leaf) -> str | None:
    notes = []
    if leaf.dtype == "float64" and leaf.encoding == "none":
        notes.append("float64 stored as float32 in the TFRecord (tf.Example float lists): float32 precision")
    if leaf.encoding in ("bytes", "zlib"):
        notes.append(f"stored {leaf.encoding}-encoded (tfds Tensor encoding), decoded by the reader")
    if leaf.cls == "Image" and not leaf.encoding:
        notes.append("features.json declares no encodingFormat: images are passed on as stored")
    return "; ".join(notes) or None


def _unique(names: list[str]) -> list[str]:
    """Names made unique by suffixing the later repeats (`x`, `x_2`, ...)."""
    out = list(names)
    seen: dict[str, int] = {}
    for i, name in enumerate(out):
        n = seen.get(name, 0)
        seen[name] = n + 1
        if n:
            out[i] = f"{name}_{n + 1}"
    return out


def _step_name(path: tuple[str, ...], flatten: bool) -> str:
    parts = [q for p in path for q in ([p.replace("/", "_")] if flatten else p.split("/"))]
    return "/".join(identifier(q) for q in parts)


def meta_type(leaf: Leaf) -> MetaType | None:
    """How a target stores an episode-level value; None for a non-scalar (kept in Episode.metadata as an array)."""
    if leaf.shape:
        return None
    if leaf.dtype == "string":
        return "text"
    return "bool" if leaf.dtype == "bool" else "float" if leaf.dtype.startswith("float") else "int"


def build_specs(leaves: list[Leaf]) -> tuple[dict[str, FeatureSpec], dict[str, Leaf], dict[str, str]]:
    """(FeatureSpecs by key, the leaf of each key, the Episode.metadata name of each episode-level key).

    Keys are unique by construction (they are the Example's keys). Canonical names must not nest inside each other
    either (`a/b` beside a leaf `a`): a step name whose '/' came from inside one key (kuka's
    `clip_function_input/...`) is flattened with '_' when it would. Episode-level features are named
    `episode_metadata/<path below episode_metadata, or their own top-level key>`."""
    steps = [leaf for leaf in leaves if leaf.per_step]
    top = [leaf for leaf in leaves if not leaf.per_step]
    step_keys = ["/".join(leaf.path[1:]) for leaf in steps]
    names = [_step_name(leaf.path[1:], False) for leaf in steps]

    def parents(n: str) -> set[str]:
        return {n.rsplit("/", i)[0] for i in range(1, n.count("/") + 1)}
    every, inner = set(names), {p for n in names for p in parents(n)}
    names = _unique([_step_name(leaf.path[1:], True) if any("/" in p for p in leaf.path[1:])
                     and (n in inner or parents(n) & every) else n for leaf, n in zip(steps, names)])
    top_keys = [leaf.flat_key if leaf.flat_key not in step_keys else f"episode/{leaf.flat_key}" for leaf in top]
    meta = [identifier(("/".join(leaf.path[1:]) if leaf.path[0] == "episode_metadata" and len(leaf.path) > 1
                    else leaf.flat_key).replace("/", "_")) for leaf in top]
    for i, leaf in enumerate(top):  # the built-in keys keep their meaning (BUILTIN_METADATA): int id, text path
        if meta[i] in BUILTIN_METADATA and meta_type(leaf) != BUILTIN_METADATA[meta[i]]:
            meta[i] = f"source_{meta[i]}"
    meta = _unique(meta)
    specs: dict[str, FeatureSpec] = {}
    by_key: dict[str, Leaf] = {}
    meta_names: dict[str, str] = {}
    for leaf, key, name in [*zip(steps, step_keys, names), *zip(top, top_keys, [f"episode_metadata/{m}"
                                                                               for m in meta])]:
        kind = "image" if leaf.cls == "Image" else "string" if leaf.dtype == "string" else "tensor"
        specs[key] = FeatureSpec(key, kind, leaf.dtype, leaf.shape, declared_shape=leaf.shape,
                                 codec=(leaf.encoding or None) if kind == "image" else None, role=_role(leaf),
                                 name=name, scalar=leaf.shape == (), note=_note(leaf))
        by_key[key] = leaf
        if not leaf.per_step:
            meta_names[key] = name[len("episode_metadata/"):]
    return specs, by_key, meta_names

