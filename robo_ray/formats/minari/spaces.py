"""Minari's features: its spaces (the JSON serialisation minari writes, read without gymnasium) and HDF5 datasets
as `FeatureSpec`s keyed like the HDF5 layout, then each feature's role and canonical name (`declare_features`)."""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np

from robo_ray.episode import FeatureSpec
from robo_ray.errors import SourceFormatError, UnsafeInput
from robo_ray.readers.naming import canonical_path, unique_names
from robo_ray.safety import check_shape

TEXT_NOTE = "text space (no RLDS tensor form); kept out"


def parse_space(raw: Any, where: str) -> dict[str, Any] | None:
    """A space as minari serialises it (JSON string or dict); None when absent."""
    if raw is None:
        return None
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SourceFormatError(f"{where}: not valid JSON ({exc.msg})") from exc
    if not isinstance(raw, dict) or "type" not in raw:
        raise SourceFormatError(f"{where}: a space must be a JSON object with a `type`")
    return raw


def _is_image_box(space: dict[str, Any], shape: tuple[int, ...], dtype: str) -> bool:
    """minari's is_image_space: uint8 Box, 2 or 3 dims, at least 32x32, bounds 0..255."""
    if dtype != "uint8" or len(shape) not in (2, 3) or shape[0] < 32 or shape[1] < 32:
        return False
    try:
        return bool(np.all(np.asarray(space.get("low")) == 0) and np.all(np.asarray(space.get("high")) == 255))
    except (TypeError, ValueError):
        return False


def space_features(space: dict[str, Any], key: str, jpeg: bool, where: str, depth: int = 0) -> list[FeatureSpec]:
    """The leaves of a space as features keyed like the HDF5 layout (`observations/<k>`, `/_index_<i>`)."""
    if depth > 8:
        raise UnsafeInput(f"{where}: space nesting deeper than 8 levels")
    kind = space.get("type")
    if kind == "Dict":
        subs = space.get("subspaces")
        if not isinstance(subs, dict):
            raise SourceFormatError(f"{where}: Dict space without subspaces")
        return [f for k, sub in subs.items() for f in space_features(parse_space(sub, where), f"{key}/{k}", jpeg,
                                                                      where, depth + 1)]
    if kind == "Tuple":
        subs = space.get("subspaces")
        if not isinstance(subs, list):
            raise SourceFormatError(f"{where}: Tuple space without subspaces")
        return [f for i, sub in enumerate(subs)
                for f in space_features(parse_space(sub, where), f"{key}/_index_{i}", jpeg, where, depth + 1)]
    if kind == "Box":
        dtype = _dtype(space.get("dtype"), where)
        shape = check_shape(key, list(space.get("shape") or []))
        if _is_image_box(space, shape, dtype):
            hwc = (shape[0], shape[1], shape[2] if len(shape) == 3 else 1)
            return [FeatureSpec(key, "image", "uint8", hwc, declared_shape=shape, codec="jpeg" if jpeg else "raw")]
        return [FeatureSpec(key, "tensor", dtype, shape, declared_shape=shape)]
    if kind == "Discrete":
        return [FeatureSpec(key, "tensor", _dtype(space.get("dtype", "int64"), where), ())]
    if kind == "MultiDiscrete":
        shape = check_shape(key, list(np.shape(space.get("nvec"))))
        return [FeatureSpec(key, "tensor", _dtype(space.get("dtype", "int64"), where), shape)]
    if kind == "MultiBinary":
        n = space.get("n")
        shape = check_shape(key, [n] if isinstance(n, int) else list(n or []))
        return [FeatureSpec(key, "tensor", "int8", shape)]
    if kind == "Text":
        return [FeatureSpec(key, "string", "string", ())]
    raise SourceFormatError(f"{where}: space type {kind!r} is not supported (Box, Discrete, MultiDiscrete, "
                            "MultiBinary, Dict, Tuple, Text)")


def _dtype(raw: Any, where: str) -> str:
    try:
        dt = np.dtype(str(raw))
    except TypeError as exc:
        raise SourceFormatError(f"{where}: unknown dtype {raw!r}") from exc
    if dt.kind not in "biuf":
        raise SourceFormatError(f"{where}: dtype {raw!r} is not numeric")
    return str(dt)


def h5_feature(key: str, ds: Any) -> FeatureSpec:
    """A feature inferred from a dataset (infos, extra datasets, 0.4 files without a space)."""
    dt = ds.dtype
    shape = tuple(ds.shape[1:])
    if dt.kind in "biuf":
        if dt == np.uint8 and len(shape) in (2, 3) and shape[0] >= 32 and shape[1] >= 32:
            return FeatureSpec(key, "image", "uint8", (shape[0], shape[1], shape[2] if len(shape) == 3 else 1),
                               declared_shape=shape, codec="raw")
        return FeatureSpec(key, "tensor", str(dt), check_shape(key, list(shape)), declared_shape=shape)
    return FeatureSpec(key, "string", "string", ())


def declare_features(features: dict[str, FeatureSpec]) -> dict[str, FeatureSpec]:
    """Each feature's role and canonical name: one Box observation -> observation/state (an image:
    observation/image), Dict/Tuple subspaces -> observation/<key> (`_index_<i>` -> `index_<i>`); actions -> action
    (action/<key>); terminations / truncations -> terminated / truncated; infos/<k> -> info/<k>; rewards -> reward;
    the reader's per-step `is_terminal` and `discount` (T+1 layout) -> terminal, discount. Text spaces have no
    tensor form; later duplicate names get `_2`, `_3`, ..."""
    out: dict[str, FeatureSpec] = {}
    for key, feat in features.items():
        if key == "rewards":
            out[key] = replace(feat, role="reward", name="reward")
            continue
        if key == "is_terminal":
            out[key] = replace(feat, role="terminal", name="is_terminal")
            continue
        if key == "discount":
            out[key] = replace(feat, role="discount", name="discount")
            continue
        if feat.kind == "string":
            out[key] = replace(feat, role="other", note=TEXT_NOTE)
            continue
        image = feat.kind in ("image", "video")
        head, _, rest = key.partition("/")
        if head == "observations":
            if image:
                role, name = "camera", canonical_path("observation", rest) if rest else "observation/image"
            else:
                role, name = ("observation", canonical_path("observation", rest)) if rest else \
                    ("state", "observation/state")
        elif head == "actions":
            role, name = "action", canonical_path("action", rest) if rest else "action"
        elif key == "terminations":
            role, name = "other", "terminated"
        elif key == "truncations":
            role, name = "other", "truncated"
        elif head == "infos":
            role, name = "other", canonical_path("info", rest)
        else:
            role, name = "other", canonical_path("", key)
        if image:
            role = "depth" if feat.dtype == "uint16" else "camera"
        out[key] = replace(feat, role=role, name=name)  # type: ignore[arg-type]
    return unique_names(out)
