"""Planning units: deterministic, contiguous, every episode exactly once, shared files never split apart."""
from __future__ import annotations

from robo_ray.episode import EpisodeRef, FeatureSpec, VideoRef
from robo_ray.stages.plan import plan_units

FEATS = {"cam": FeatureSpec("cam", "video", "uint8", (480, 640, 3))}


def _v2_refs(n: int) -> list[EpisodeRef]:
    return [EpisodeRef(i, 100, f"data/ep{i}.parquet", (("cam", VideoRef(f"v/ep{i}.mp4")),)) for i in range(n)]


def _v3_refs(per_file: list[int]) -> list[EpisodeRef]:
    refs, i = [], 0
    for f, n in enumerate(per_file):
        for k in range(n):
            refs.append(EpisodeRef(i, 100, f"data/file-{f}.parquet", (("cam", VideoRef(f"v/file-{f}.mp4", k * 5.0,
                                                                                         k * 5.0 + 5)),)))
            i += 1
    return refs


def _flat(units) -> list[int]:
    return [i for u in units for i in u.episode_indices]


def test_every_episode_once_in_order() -> None:
    refs = _v2_refs(37)
    units = plan_units(refs, FEATS, target_shard_mb=1, min_shards=4)
    assert _flat(units) == list(range(37))
    assert [u.index for u in units] == list(range(len(units)))
    assert all(u.num_shards == len(units) for u in units)


def test_min_shards_for_small_datasets() -> None:
    assert len(plan_units(_v2_refs(10), FEATS, target_shard_mb=1024, min_shards=4)) == 4
    assert len(plan_units(_v2_refs(2), FEATS, target_shard_mb=1024, min_shards=4)) == 2


def test_episodes_sharing_a_file_stay_together() -> None:
    refs = _v3_refs([3, 5, 2])
    units = plan_units(refs, FEATS, target_shard_mb=1024, min_shards=8)
    files_per_unit = [{r.data_path for r in u.refs} for u in units]
    assert all(len(f) == 1 for f in files_per_unit)
    assert _flat(units) == list(range(10))


def test_oversized_file_groups_are_split_contiguously() -> None:
    refs = _v3_refs([40])
    units = plan_units(refs, FEATS, target_shard_mb=0.1, min_shards=1)
    assert len(units) > 1 and _flat(units) == list(range(40))


def test_deterministic() -> None:
    refs = _v3_refs([3, 5, 2, 7])
    assert plan_units(refs, FEATS, 0.5, 3) == plan_units(list(refs), FEATS, 0.5, 3)


def test_empty() -> None:
    assert plan_units([], FEATS) == []


def test_a_many_episode_file_is_cut_into_units_of_at_most_max_unit_episodes() -> None:
    """20,000 short episodes in one file were one unit on one worker; now units of <= max_unit_episodes."""
    refs = [EpisodeRef(i, 20, "data/file-0.parquet") for i in range(2500)]
    units = plan_units(refs, {}, target_shard_mb=256, min_shards=4, max_unit_episodes=1000)
    assert [len(u.refs) for u in units] == [500, 500, 1000, 500]  # 3 pieces of <= 1000, the first halved: 4 units
    assert _flat(units) == list(range(2500))
    units = plan_units(refs, {}, target_shard_mb=256, min_shards=4, max_unit_episodes=300)
    assert max(len(u.refs) for u in units) <= 300 and _flat(units) == list(range(2500))


def test_few_files_still_make_min_shards_units() -> None:
    """One file of 10 episodes (a Minari HDF5, a v3.0 or RLDS file) was one unit: one actor worked, the others
    idled, and tfds' shuffle_files had one shard. Now the largest pieces are halved at their size midpoint until
    there are `min_shards`, each unit a contiguous run of episodes."""
    refs = [EpisodeRef(i, 20, "data/file-0.parquet") for i in range(10)]
    units = plan_units(refs, {}, 256, 4, 1000)
    assert [len(u.refs) for u in units] == [3, 2, 3, 2] and _flat(units) == list(range(10))
    uneven = [EpisodeRef(i, n, "data/file-0.parquet") for i, n in enumerate([100, 10, 10, 10, 10, 60])]
    assert [u.episode_indices for u in plan_units(uneven, {}, 256, 2, 1000)] == [[0], [1, 2, 3, 4, 5]]
    assert len(plan_units(refs[:3], {}, 256, 4, 1000)) == 3  # never more units than episodes
    two_files = [EpisodeRef(i, 20, f"data/file-{i // 6}.parquet") for i in range(12)]
    assert [len(u.refs) for u in plan_units(two_files, {}, 256, 4, 1000)] == [3, 3, 3, 3]
