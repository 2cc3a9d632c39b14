"""What validation samples: the episodes compared with the source (`sample_ids`), their steps
(`sample_indices`), the units a loader's read-back reads (`spread_sample`)."""
from __future__ import annotations

from typing import Sequence, TypeVar

from robo_ray.episode import EpisodeRef, RefTable
from robo_ray.readers.base import spread


def sample_indices(T: int) -> list[int]:
    """The steps compared with the source: first, middle, last."""
    return sorted({0, T // 2, T - 1}) if T else []


def sample_ids(refs: Sequence[EpisodeRef], sample_episodes: int) -> set[int]:
    """Episodes compared to the source: `sample_episodes` spread evenly over the discovered ones (0 = none)."""
    if not sample_episodes:
        return set()
    ids = refs.episode_indices() if isinstance(refs, RefTable) else [r.episode_index for r in refs]
    if len(ids) > sample_episodes:
        step = len(ids) / sample_episodes
        ids = [ids[int(k * step)] for k in range(sample_episodes)]
    return set(ids)


ItemT = TypeVar("ItemT")


def spread_sample(items: list[ItemT], k: int) -> list[ItemT]:
    """`k` of `items` spread evenly, the first and the last included (0, or k >= len: all): the units a loader's
    read-back reads (`VerifyContext.readback_shards`)."""
    return [items[i] for i in spread(len(items), k or len(items))]
