"""Plan: group episodes into work units. One unit = one output shard = an ordered list of episodes that share
source files (so each MP4 is decoded once, in order). Deterministic: depends only on the inventory and config,
never on the cluster, so any actor count produces the same shards."""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace

from robo_ray.episode import EpisodeRef, FeatureSpec
from robo_ray.errors import ConfigError

VAL = "val"
# at most this many episodes in one unit (config plan.max_unit_episodes): a source file holding 20,000 short episodes
# would otherwise be one unit on one worker, and one unit's result row and retry grow with it
MAX_UNIT_EPISODES = 1000


@dataclass(frozen=True)
class Unit:
    index: int
    num_shards: int
    refs: tuple[EpisodeRef, ...]
    split: str | None = None  # the source split all its episodes belong to, when the target keeps splits apart
    split_shard: tuple[int, int] | None = None  # (position, count) of the unit among its split's units

    @property
    def episode_indices(self) -> list[int]:
        return [r.episode_index for r in self.refs]


def estimate_episode_bytes(ref: EpisodeRef, features: dict[str, FeatureSpec]) -> int:
    """Rough output size: JPEG at ~1/10 of raw pixels, low-dim values at 4 bytes."""
    per_step = 0
    for f in features.values():
        n = 1
        for d in f.shape:
            n *= d
        per_step += n // 10 if f.kind in ("image", "video") else 4 * n
    return max(1, ref.length * (per_step + 64))


def _groups(refs: list[EpisodeRef]) -> list[list[EpisodeRef]]:
    """Consecutive episodes that share any source file form one group."""
    groups: list[list[EpisodeRef]] = []
    prev_files: set[str] = set()
    for ref in refs:
        files = set(ref.source_files())
        if groups and files & prev_files:
            groups[-1].append(ref)
            prev_files |= files
        else:
            groups.append([ref])
            prev_files = files
    return groups


def plan_units(refs: list[EpisodeRef], features: dict[str, FeatureSpec], target_shard_mb: float = 256.0,
               min_shards: int = 4, max_unit_episodes: int = MAX_UNIT_EPISODES) -> list[Unit]:
    """Cut the episode list into contiguous units of about `target_shard_mb`, at least min(groups, min_shards),
    none holding more than `max_unit_episodes` episodes."""
    if not refs:
        return []
    target = max(1, int(target_shard_mb * (1 << 20)))
    sizes = {r.episode_index: estimate_episode_bytes(r, features) for r in refs}
    # split oversized groups (v3.0 files can hold hundreds of episodes) into contiguous pieces
    pieces: list[list[EpisodeRef]] = []
    for g in _groups(refs):
        cur: list[EpisodeRef] = []
        acc = 0
        for r in g:
            if cur and (acc + sizes[r.episode_index] > target or len(cur) >= max_unit_episodes):
                pieces.append(cur)
                cur, acc = [], 0
            cur.append(r)
            acc += sizes[r.episode_index]
        pieces.append(cur)
    total = sum(sizes.values())
    n_units = min(len(pieces), max(math.ceil(total / target), min_shards, math.ceil(len(refs) / max_unit_episodes)))
    # contiguous partition of pieces into n_units, balancing cumulative size
    units: list[list[EpisodeRef]] = [[] for _ in range(n_units)]
    acc = 0
    for i, piece in enumerate(pieces):
        psize = sum(sizes[r.episode_index] for r in piece)
        slot = min(n_units - 1, int((acc + psize / 2) * n_units / total))
        slot = max(slot, n_units - (len(pieces) - i))  # leave at least one piece for each remaining unit
        units[slot].extend(piece)
        acc += psize
    units = [part for u in units if u for part in _cut(u, max_unit_episodes)]
    return [Unit(i, len(units), tuple(u)) for i, u in enumerate(units)]


def _cut(refs: list[EpisodeRef], most: int) -> list[list[EpisodeRef]]:
    """A contiguous run of episodes cut into the fewest even contiguous parts of at most `most` episodes."""
    parts = math.ceil(len(refs) / most)
    bounds = [round(k * len(refs) / parts) for k in range(parts + 1)]
    return [refs[a:b] for a, b in zip(bounds, bounds[1:])]


def plan_split_units(refs: list[EpisodeRef], features: dict[str, FeatureSpec], target_shard_mb: float = 256.0,
                     min_shards: int = 4, max_unit_episodes: int = MAX_UNIT_EPISODES) -> list[Unit]:
    """`plan_units` per split (a source without splits is all `train`): units are numbered across splits, `train`
    first, then the others in the order they first appear; each split's episodes are one contiguous run of units
    (LeRobot's `splits` are episode ranges), and every unit carries its split and its (position, count) among the
    split's units (tfds names shards per split)."""
    by_split: dict[str, list[EpisodeRef]] = {"train": []}
    for ref in refs:
        by_split.setdefault(ref.split or "train", []).append(ref)
    planned = [(split, plan_units(group, features, target_shard_mb, min_shards, max_unit_episodes))
               for split, group in by_split.items() if group]
    total = sum(len(units) for _, units in planned)
    out: list[Unit] = []
    for split, units in planned:
        for k, u in enumerate(units):
            out.append(Unit(len(out), total, u.refs, split, (k, len(units))))
    return out


def _split_key(dataset_name: str, episode_index: int) -> bytes:
    return hashlib.sha256(f"robo-ray split\0{dataset_name}\0{episode_index}".encode()).digest()


def assign_val_split(refs: list[EpisodeRef], val_fraction: float, dataset_name: str) -> list[EpisodeRef]:
    """Move round(val_fraction x N) of the N source-`train` (or unsplit) episodes to `val`: those whose
    sha256(dataset name, episode index) is smallest, so the choice is the same on every run, machine and executor
    and does not depend on the episodes' order. At least one val and one train episode when val_fraction > 0 and
    N >= 2. Other source splits are kept; a source that already has a `val` split is refused (ConfigError)."""
    if val_fraction <= 0:
        return refs
    have_val = sum(1 for r in refs if r.split == VAL)
    if have_val:
        raise ConfigError(f"splits.val_fraction={val_fraction}: the source already has a `{VAL}` split "
                          f"({have_val} episodes), kept as it is; drop --val-fraction (or select --split train)")
    pool = [r for r in refs if r.split in (None, "train")]
    if len(pool) < 2:
        return refs
    n_val = min(len(pool) - 1, max(1, int(val_fraction * len(pool) + 0.5)))
    val = {r.episode_index for r in sorted(pool, key=lambda r: _split_key(dataset_name, r.episode_index))[:n_val]}
    return [replace(r, split=VAL if r.episode_index in val else r.split or "train") if r.split in (None, "train")
            else r for r in refs]
