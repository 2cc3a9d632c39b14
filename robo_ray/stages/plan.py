"""Plan: group episodes into work units. One unit = one output shard = an ordered list of episodes that share
source files (so each MP4 is decoded once, in order). Deterministic: depends only on the inventory and config,
never on the cluster, so any actor count produces the same shards."""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from typing import Sequence

from robo_ray.episode import EpisodeRef, FeatureSpec, RefTable
from robo_ray.errors import ConfigError

VAL = "val"
# at most this many episodes in one unit (config plan.max_unit_episodes): a source file holding 20,000 short episodes
# would otherwise be one unit on one worker, and one unit's result row and retry grow with it
MAX_UNIT_EPISODES = 1000


@dataclass(frozen=True)
class Unit:
    index: int
    num_shards: int
    refs: RefTable  # the unit's episodes, in order (a list or tuple of refs is converted)
    split: str | None = None  # the source split all its episodes belong to, when the target keeps splits apart
    split_shard: tuple[int, int] | None = None  # (position, count) of the unit among its split's units

    def __post_init__(self) -> None:
        if not isinstance(self.refs, RefTable):
            object.__setattr__(self, "refs", RefTable(self.refs))

    @property
    def episode_indices(self) -> list[int]:
        return self.refs.episode_indices()


def bytes_per_step(features: dict[str, FeatureSpec]) -> int:
    """Rough output bytes of one step: JPEG at ~1/10 of raw pixels, low-dim values at 4 bytes, 64 of framing."""
    per_step = 0
    for f in features.values():
        n = 1
        for d in f.shape:
            n *= d
        per_step += n // 10 if f.kind in ("image", "video") else 4 * n
    return per_step + 64


def estimate_episode_bytes(ref: EpisodeRef, features: dict[str, FeatureSpec]) -> int:
    """Rough output size of an episode (`bytes_per_step` x its steps)."""
    return max(1, ref.length * bytes_per_step(features))


def _group_starts(refs: RefTable) -> list[int]:
    """Positions where a group starts: consecutive episodes that share any source file form one group."""
    starts: list[int] = []
    prev_files: set[str] = set()
    for k, ref in enumerate(refs):
        files = set(ref.source_files())
        if starts and files & prev_files:
            prev_files |= files
        else:
            starts.append(k)
            prev_files = files
    return starts


def plan_units(refs: Sequence[EpisodeRef], features: dict[str, FeatureSpec], target_shard_mb: float = 256.0,
               min_shards: int = 4, max_unit_episodes: int = MAX_UNIT_EPISODES) -> list[Unit]:
    """Cut the episode list into contiguous units of about `target_shard_mb`, at least min(groups, min_shards),
    none holding more than `max_unit_episodes` episodes. Works on positions: units are slices of the refs' table."""
    table = RefTable.of(refs)
    if not len(table):
        return []
    target = max(1, int(target_shard_mb * (1 << 20)))
    per_step = bytes_per_step(features)
    sizes = [max(1, n * per_step) for n in table.lengths()]
    # split oversized groups (v3.0 files can hold hundreds of episodes) into contiguous pieces [a, b)
    pieces: list[tuple[int, int]] = []
    starts = _group_starts(table)
    for g0, g1 in zip(starts, starts[1:] + [len(table)]):
        a, acc = g0, 0
        for k in range(g0, g1):
            if k > a and (acc + sizes[k] > target or k - a >= max_unit_episodes):
                pieces.append((a, k))
                a, acc = k, 0
            acc += sizes[k]
        pieces.append((a, g1))
    total = sum(sizes)
    want = max(math.ceil(total / target), min_shards, math.ceil(len(table) / max_unit_episodes))
    pieces = _split_to(pieces, sizes, want)
    n_units = min(len(pieces), want)
    # contiguous partition of pieces into n_units, balancing cumulative size (slots never decrease along pieces)
    spans: list[list[int] | None] = [None] * n_units
    acc = 0
    for i, (a, b) in enumerate(pieces):
        psize = sum(sizes[a:b])
        slot = min(n_units - 1, int((acc + psize / 2) * n_units / total))
        slot = max(slot, n_units - (len(pieces) - i))  # leave at least one piece for each remaining unit
        span = spans[slot]
        if span is None:
            spans[slot] = [a, b]
        else:
            span[1] = b
        acc += psize
    cuts = [part for span in spans if span is not None for part in _cut(span[0], span[1], max_unit_episodes)]
    return [Unit(i, len(cuts), table[a:b]) for i, (a, b) in enumerate(cuts)]


def _split_to(pieces: list[tuple[int, int]], sizes: list[int], want: int) -> list[tuple[int, int]]:
    """Halve the largest piece of two or more episodes (at its size midpoint) until there are `want` pieces or none
    can be split: a source of few large files (a v3.0 or RLDS file of many episodes, one Minari HDF5) still makes
    `min_shards` units, so the actors share the work to the end (3 files on 2 actors: one actor idle for a third of
    the run). A unit that starts inside a file seeks to its first episode, as the cuts above already do."""
    pieces = list(pieces)
    weight = [sum(sizes[a:b]) for a, b in pieces]
    while len(pieces) < want:
        splittable = [i for i, (a, b) in enumerate(pieces) if b - a > 1]
        if not splittable:
            break
        k = max(splittable, key=lambda i: (weight[i], -i))
        a, b = pieces[k]
        mid, acc = a + 1, sizes[a]
        while mid < b - 1 and 2 * acc < weight[k]:  # the first cut at or past half the piece's size
            acc += sizes[mid]
            mid += 1
        pieces[k:k + 1] = [(a, mid), (mid, b)]
        weight[k:k + 1] = [acc, weight[k] - acc]
    return pieces


def _cut(start: int, end: int, most: int) -> list[tuple[int, int]]:
    """Positions [start, end) cut into the fewest even contiguous parts of at most `most` episodes."""
    n = end - start
    parts = math.ceil(n / most)
    bounds = [start + round(k * n / parts) for k in range(parts + 1)]
    return list(zip(bounds, bounds[1:]))


def plan_split_units(refs: Sequence[EpisodeRef], features: dict[str, FeatureSpec], target_shard_mb: float = 256.0,
                     min_shards: int = 4, max_unit_episodes: int = MAX_UNIT_EPISODES) -> list[Unit]:
    """`plan_units` per split (a source without splits is all `train`): units are numbered across splits, `train`
    first, then the others in the order they first appear; each split's episodes are one contiguous run of units
    (LeRobot's `splits` are episode ranges), and every unit carries its split and its (position, count) among the
    split's units (tfds names shards per split)."""
    table = RefTable.of(refs)
    by_split: dict[str, list[int]] = {"train": []}
    for k, ref in enumerate(table):
        by_split.setdefault(ref.split or "train", []).append(k)
    planned = [(split, plan_units(_positions(table, pos), features, target_shard_mb, min_shards, max_unit_episodes))
               for split, pos in by_split.items() if pos]
    total = sum(len(units) for _, units in planned)
    out: list[Unit] = []
    for split, units in planned:
        for k, u in enumerate(units):
            out.append(Unit(len(out), total, u.refs, split, (k, len(units))))
    return out


def _positions(table: RefTable, pos: list[int]) -> RefTable:
    """The rows at `pos` (a slice when they are one contiguous run)."""
    if pos and pos[-1] - pos[0] == len(pos) - 1:
        return table[pos[0]:pos[-1] + 1]
    return table.take(pos)


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
