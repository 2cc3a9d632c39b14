"""--val-fraction: deterministic assignment by episode (order, process and hash seed do not matter), at least one val
and one train episode, the fraction respected, source splits kept; per-split planning keeps each split contiguous."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from robo_ray.episode import EpisodeRef, FeatureSpec
from robo_ray.errors import ConfigError
from robo_ray.stages.plan import assign_val_split, plan_split_units

FEATS = {"state": FeatureSpec("state", "tensor", "float32", (8,))}


def _refs(n: int, split: str | None = None) -> list[EpisodeRef]:
    return [EpisodeRef(i, 10 + i % 7, f"data/ep{i}.parquet", split=split) for i in range(n)]


def _val(refs: list[EpisodeRef]) -> list[int]:
    return sorted(r.episode_index for r in refs if r.split == "val")


def test_zero_fraction_keeps_the_refs() -> None:
    refs = _refs(10)
    assert assign_val_split(refs, 0.0, "ds") is refs


@pytest.mark.parametrize("n", [2, 3, 4, 7, 10])
def test_at_least_one_val_and_one_train(n: int) -> None:
    for f in (0.001, 0.25, 0.5, 0.99):
        out = assign_val_split(_refs(n), f, "ds")
        val = _val(out)
        assert 1 <= len(val) <= n - 1, (n, f, val)
        assert all(r.split in ("train", "val") for r in out)


def test_fraction_is_respected() -> None:
    for n, f in ((1000, 0.1), (1000, 0.05), (37, 0.25), (4, 0.25)):
        assert len(_val(assign_val_split(_refs(n), f, "ds"))) == round(n * f)


def test_deterministic_whatever_the_order() -> None:
    refs = _refs(200)
    first = _val(assign_val_split(refs, 0.1, "bridge"))
    shuffled = refs[:]
    random.Random(7).shuffle(shuffled)
    assert _val(assign_val_split(shuffled, 0.1, "bridge")) == first
    # episodes in their own units (any executor) get the same answer as the full list: the choice is per episode
    assert _val(assign_val_split(refs, 0.1, "other_name")) != first  # the dataset name is part of the key


def test_same_choice_in_another_process() -> None:
    """No dependence on Python's per-process string hash (PYTHONHASHSEED) or anything of this process."""
    code = ("import json; from robo_ray.episode import EpisodeRef; from robo_ray.stages.plan import assign_val_split;"
            "refs=[EpisodeRef(i, 5, f'e{i}') for i in range(300)];"
            "print(json.dumps(sorted(r.episode_index for r in assign_val_split(refs, 0.2, 'ds') if r.split=='val')))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout) == _val(assign_val_split(_refs(300), 0.2, "ds"))


def test_one_episode_stays_train() -> None:
    assert _val(assign_val_split(_refs(1), 0.5, "ds")) == []


def test_other_source_splits_kept_and_source_val_refused() -> None:
    refs = _refs(6, "train") + [EpisodeRef(6 + i, 5, f"t{i}", split="test") for i in range(3)]
    out = assign_val_split(refs, 0.5, "ds")
    assert [r.split for r in out[6:]] == ["test"] * 3
    assert len(_val(out)) == 3 and all(r.episode_index < 6 for r in out if r.split == "val")
    with pytest.raises(ConfigError, match="already has a `val` split"):
        assign_val_split(_refs(4, "train") + [EpisodeRef(4, 5, "v", split="val")], 0.25, "ds")


def test_plan_keeps_each_split_contiguous_train_first() -> None:
    refs = assign_val_split(_refs(40), 0.2, "ds")
    units = plan_split_units(refs, FEATS, target_shard_mb=0.0001, min_shards=4)
    order = [u.split for u in units]
    assert order[0] == "train" and order == sorted(order, key=lambda s: s != "train")  # one run per split
    assert [u.index for u in units] == list(range(len(units))) and {u.num_shards for u in units} == {len(units)}
    for split in ("train", "val"):
        mine = [u for u in units if u.split == split]
        assert [u.split_shard for u in mine] == [(k, len(mine)) for k in range(len(mine))]
        assert sorted(i for u in mine for i in u.episode_indices) == [r.episode_index for r in refs
                                                                      if r.split == split]
