"""The files two trainers that read LeRobot datasets need beside lerobot's own: openpi's `norm_stats.json` and
GR00T's `meta/modality.json`.

* `norm_stats.json` (at the dataset root, openpi's layout: openpi/shared/normalize.py `save` / `load`):
  {"norm_stats": {"state": {"mean", "std", "q01", "q99"}, "actions": {...}}}, the two keys openpi's LeRobot data
  configs normalize (scripts/compute_norm_stats.py: keys = ["state", "actions"], after the repack transform
  {"state": "observation.state", "actions": "action"}). Made from the Validate stage's mergeable statistics
  (robo_ray.stats: float64 mean / population std over every written step, q01 / q99 from KLL sketches); no second
  read of the data. Each key is written only when the dataset has its feature.
* `meta/modality.json` (GR00T's LeRobot flavour, gr00t/data/schema.py `LeRobotModalityMetadata`): `state` and
  `action` groups as [start, end) slices of their column (one group per mapping target: the action's targets in
  the order `action` concatenates them; `observation.state` whatever its role and every other state-role 1-D tensor,
  with `original_key` naming its column), `video` {camera name: {"original_key": feature key}}, and `annotation`
  {"human.task_description": {"original_key": "task_index"}} when the steps carry language.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from robo_ray.stages.norm_stats import concatenated
from robo_ray.stats import StatsSet

if TYPE_CHECKING:
    from robo_ray.formats.lerobot.layout import Feature, Layout
    from robo_ray.mapping import Mapping

NORM_STATS = "norm_stats.json"
MODALITY = "meta/modality.json"
OPENPI_KEYS = {"state": "observation.state", "actions": "action"}  # openpi's key -> the LeRobot feature
OPENPI_STATS = ("mean", "std", "q01", "q99")
CAMERA_PREFIX = "observation.images."
TASK_ANNOTATION = "human.task_description"


def _feature(layout: "Layout", key: str) -> "Feature | None":
    return next((f for f in layout.features if f.key == key and f.kind in ("tensor", "action")), None)


def openpi_norm_stats(layout: "Layout", stats: StatsSet) -> dict[str, Any] | None:
    """norm_stats.json's content (module docstring), None when the dataset has neither feature with a step."""
    out: dict[str, Any] = {}
    for key, feature_key in OPENPI_KEYS.items():
        f = _feature(layout, feature_key)
        if f is None:
            continue
        values = concatenated(stats, f.targets, OPENPI_STATS)
        if values is not None and len(values["mean"]) == sum(f.sizes):
            out[key] = values
    return {"norm_stats": out} if out else None


def _group_name(target: str, taken: set[str]) -> str:
    """A group's name: the target's last part after its role prefix (observation/state -> state,
    action/world_vector -> world_vector), '/' as '_', unique within its modality."""
    base = target.split("/", 1)[1] if "/" in target else target
    base = base.replace("/", "_")
    name, k = base, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def modality_json(layout: "Layout", mapping: "Mapping") -> dict[str, Any]:
    """meta/modality.json's content (module docstring)."""
    state: dict[str, Any] = {}
    for f in layout.features:
        if f.kind == "tensor" and (f.role == "state" or f.key == OPENPI_KEYS["state"]) and len(f.shape) == 1:
            entry: dict[str, Any] = {"start": 0, "end": int(f.shape[0]), "dtype": f.dtype}
            if f.key != OPENPI_KEYS["state"]:
                entry["original_key"] = f.key
            state[_group_name(f.targets[0], set(state))] = entry
    action: dict[str, Any] = {}
    act = _feature(layout, OPENPI_KEYS["actions"])
    start = 0
    for target, size in zip(act.targets, act.sizes) if act is not None else ():
        action[_group_name(target, set(action))] = {"start": start, "end": start + int(size), "dtype": act.dtype}
        start += int(size)
    video = {cam.key.removeprefix(CAMERA_PREFIX): {"original_key": cam.key} for cam in layout.cameras}
    out: dict[str, Any] = {"state": state, "action": action, "video": video}
    if mapping.defaults.language_source or mapping.defaults.instruction:
        out["annotation"] = {TASK_ANNOTATION: {"original_key": "task_index"}}
    return out


def slice_problems(modality: dict[str, Any], layout: "Layout") -> list[str]:
    """Where the state / action groups of a modality.json do not cover their column's dimensions exactly once
    (per column: the slices sorted by start must tile 0..size), or name a column the dataset lacks."""
    problems: list[str] = []
    for group, default in (("state", OPENPI_KEYS["state"]), ("action", OPENPI_KEYS["actions"])):
        col = _feature(layout, default)
        columns: dict[str, list[tuple[int, int, str]]] = {default: []} if col and len(col.shape) == 1 else {}
        for name, g in (modality.get(group) or {}).items():
            columns.setdefault(g.get("original_key") or default, []).append((int(g["start"]), int(g["end"]), name))
        for key, slices in columns.items():
            f = _feature(layout, key)
            if f is None or len(f.shape) != 1:
                problems.append(f"{group}: {[s[2] for s in slices]} slice {key!r}, not a 1-D column of the dataset")
                continue
            edge = 0
            for a, b, name in sorted(slices):
                if a != edge or b <= a:
                    problems.append(f"{group}.{name} [{a}:{b}] of {key} leaves a gap or overlaps at {edge}")
                edge = max(edge, b)
            if edge != f.shape[0]:
                problems.append(f"{group}: the slices of {key} end at {edge}, its size is {f.shape[0]}")
    return problems
