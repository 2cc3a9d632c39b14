"""Normalization statistics of a written dataset: `StatsAccumulator` (every numeric step feature of a mapping,
mergeable) and the layout Octo's and OpenVLA's loaders read (`loader_statistics`)."""
from __future__ import annotations

from typing import Any

import numpy as np

from robo_ray.mapping import Mapping
from robo_ray.stats import StatsSet


LOADER_GROUPS = {"action": "action", "proprio": "state"}  # dataset_statistics.json group -> FieldMap.role


class StatsAccumulator(StatsSet):
    """Normalization statistics of every numeric step feature of a mapping (plus "reward"), over all written steps:
    mergeable, memory independent of the number of steps (robo_ray.stats). `add` takes the written values of one
    episode keyed by mapping target."""

    def __init__(self, mapping: Mapping) -> None:
        shapes = {fm.target: list(fm.shape) for fm in mapping.steps if fm.kind == "tensor"}
        super().__init__({**shapes, "reward": []})
        # what the loaders call action / proprio: the mapping's action- and state-role features, in mapping order
        self.groups = {group: [fm.target for fm in mapping.steps if fm.kind == "tensor" and fm.role == role]
                       for group, role in LOADER_GROUPS.items()}


def concatenated(stats: StatsSet, targets: list[str] | tuple[str, ...], keys: tuple[str, ...]) -> dict[str, Any] | None:
    """The statistics `keys` of the features `targets`, concatenated per step in that order (each flattened), as
    lists; features with no step are left out, None when none has one."""
    stats.flush()
    parts = [stats.features[t] for t in targets if t in stats.features and stats.features[t].count]
    if not parts:
        return None
    summaries = [p.summary() for p in parts]
    return {k: np.concatenate([np.ravel(s[k]) for s in summaries]).tolist() for k in keys}


def loader_statistics(stats: StatsAccumulator, episodes: int, steps: int) -> dict[str, Any]:
    """The layout Octo's and OpenVLA's `make_dataset_from_rlds(dataset_statistics=...)` read: top-level `action`
    and `proprio` (mean, std, min, max, p01 / p99 for Octo, q01 / q99 for OpenVLA; features of a group concatenated
    per step in mapping order, as their standardize functions concatenate them), `num_transitions`,
    `num_trajectories`. Without a state feature `proprio` is zeros of the action's size, as OpenVLA's
    get_dataset_statistics computes it (its normalization reads `proprio` unconditionally)."""
    out: dict[str, Any] = {}
    for group, targets in stats.groups.items():
        g = concatenated(stats, targets, ("mean", "std", "min", "max", "q01", "q99"))
        if g is None:
            continue
        g["p01"], g["p99"] = g["q01"], g["q99"]
        out[group] = g
    if "action" in out and "proprio" not in out:
        zeros = [0.0] * len(out["action"]["mean"])
        out["proprio"] = {k: zeros for k in out["action"]}
    out["num_transitions"], out["num_trajectories"] = steps, episodes
    return out
