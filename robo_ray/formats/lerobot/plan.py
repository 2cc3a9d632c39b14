"""The LeRobot plan: units per split, capped by the file size limits, each with the numbering it writes when
nothing is quarantined (`LeRobotUnit`; finalize corrects it otherwise)."""
from __future__ import annotations

from dataclasses import dataclass
from robo_ray.episode import EpisodeRef, FeatureSpec
from robo_ray.stages.plan import Unit, plan_split_units


@dataclass(frozen=True)
class LeRobotUnit(Unit):
    """A unit with the numbering it writes if nothing is quarantined (finalize corrects it otherwise)."""

    episode_offset: int = 0
    index_offset: int = 0
    task_ids: tuple[tuple[str, int], ...] = ()  # planned ids of the tasks the unit's episodes list
    planned_tasks: int = 0  # size of the planned task table (provisional ids for unknown tasks start here)


def plan_units(refs: list[EpisodeRef], features: dict[str, FeatureSpec], cap_mb: float, min_units: int,
               max_unit_episodes: int) -> list[Unit]:
    """`plan_split_units` (episodes sharing source files stay together, each split one episode range) with units of
    at most `cap_mb`, each carrying the numbering it writes when nothing is quarantined: episode and row offsets
    from the source's lengths, task ids from the tasks' first appearance over the episodes in source order."""
    units = plan_split_units(refs, features, cap_mb, min_units, max_unit_episodes)
    planned: dict[str, int] = {}
    for r in refs:
        for t in r.tasks:
            planned.setdefault(str(t), len(planned))
    out: list[Unit] = []
    e = i = 0
    for u in units:
        tasks = {str(t) for r in u.refs for t in r.tasks}
        out.append(LeRobotUnit(u.index, u.num_shards, u.refs, split=u.split, split_shard=u.split_shard,
                               episode_offset=e, index_offset=i,
                               task_ids=tuple(sorted((t, planned[t]) for t in tasks)),
                               planned_tasks=len(planned)))
        e += len(u.refs)
        i += sum(r.length for r in u.refs)
    return out
