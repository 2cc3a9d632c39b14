"""Canonical feature names, the same way for every reader: identifier parts (`identifier`, `canonical_path`),
which roles are step data (`DATA_ROLES`, `is_step_data`) and unique names among them (`unique_names`)."""
from __future__ import annotations

import re
from dataclasses import replace

from robo_ray.episode import FeatureSpec

# Roles whose features are per-step data placed under their canonical name; the others are RLDS-style step fields
# (reward, discount, is_first, is_last, terminal), or not step data (language, metadata, bookkeeping).
DATA_ROLES = frozenset({"state", "observation", "action", "camera", "depth", "other"})
# the canonical name of the language feature a reader gives as each step's task (Episode.step_tasks); other
# language-role text features are kept as text step features by the default mapping
TASK_NAME = "language_instruction"
# text features that hold language, by their key's last part: instructions (the task and more: RLDS
# `language_instruction_2`, ...) and lerobot 0.6's language columns carried as JSON text
LANGUAGE_TEXT = re.compile(r"^(natural_)?language_instruction(_\d+)?$|^instruction$|^language_(persistent|events)$")


def identifier(part: str) -> str:
    """One part of a canonical name as an identifier: other characters -> `_`, outer `_` stripped, a leading
    digit prefixed (`_index_0` -> `index_0`, `0` -> `f0`, `a-b` -> `a_b`)."""
    s = re.sub(r"[^0-9A-Za-z_]", "_", part).strip("_") or "f"
    return s if s[0].isalpha() else f"f{s}"


def canonical_path(prefix: str, rest: str, sep: str = "/") -> str:
    """`prefix` and the `sep`-separated parts of `rest` as a "/"-separated canonical name of identifiers."""
    parts = [identifier(p) for p in rest.split(sep) if p]
    return "/".join([prefix, *parts]) if prefix else "/".join(parts)


def is_step_data(feat: FeatureSpec) -> bool:
    """A feature that becomes a step feature under its canonical name (text has no tensor form: it never does)."""
    return feat.kind != "string" and (feat.role is None or feat.role in DATA_ROLES)


def unique_names(features: dict[str, FeatureSpec]) -> dict[str, FeatureSpec]:
    """`features` with later duplicate canonical names among the step data suffixed `_2`, `_3`, ... in feature
    order (sanitised names collide: `a.b` and `a_b` both give `a_b`)."""
    seen: dict[str, int] = {}
    out: dict[str, FeatureSpec] = {}
    for key, feat in features.items():
        if feat.name and is_step_data(feat):
            n = seen.get(feat.name, 0)
            seen[feat.name] = n + 1
            if n:
                feat = replace(feat, name=f"{feat.name}_{n + 1}")
        out[key] = feat
    return out
