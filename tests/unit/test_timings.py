"""Stage timings (robo_ray/stages/timings.py): the clock's rules, and logs/timings.json of a real run (#14)."""
from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import fsspec

from robo_ray.config import load_config
from robo_ray.stages.pipeline import run_pipeline
from robo_ray.stages.timings import StageClock
from tests.fixtures.lerobot_gen import DatasetSpec, write_lerobot_dataset

STAGES = ["discover", "plan", "convert", "finalize", "verify", "publish"]


def test_begin_closes_the_open_stage_and_end_wins() -> None:
    clock = StageClock.starting("a")
    clock.end("a", mark="done")  # ended early: the next begin does not move it
    end_a = clock.stages["a"][1]
    clock.begin("b")
    assert clock.stages["a"][1] == end_a == clock.marks["done"]
    clock.begin("c")
    assert clock.stages["b"][1] == clock.stages["c"][0]
    clock = pickle.loads(pickle.dumps(clock))  # travels with the PublishSpec to a Ray actor
    d = clock.to_dict()
    assert list(d["stages"]) == ["a", "b", "c"] and d["stages"]["c"]["end"] >= d["stages"]["c"]["start"]


def test_a_run_writes_every_stage_in_order(tmp_path: Path) -> None:
    src = write_lerobot_dataset(tmp_path / "src", DatasetSpec(version="v3.0", episode_lengths=[3] * 6, cameras=[]))
    out = "memory://timings-run"
    cfg = load_config(None, ["validate.tfds_readback=false", "plan.min_shards=3"],
                      **{"source.url": str(src), "target.url": out})
    outcome = run_pipeline(cfg, stderr=io.StringIO())
    assert outcome.exit_code == 0, outcome.message
    fs, root = fsspec.core.url_to_fs(out)
    t = json.loads(fs.cat_file(f"{root}/logs/timings.json"))
    assert list(t["stages"]) == STAGES
    bounds = [x for s in STAGES for x in (t["stages"][s]["start"], t["stages"][s]["end"])]
    assert bounds == sorted(bounds), t  # one after the other
    assert t["marks"]["last_unit_committed"] == t["stages"]["convert"]["end"]
    convert = t["stages"]["convert"]
    assert convert["start"] <= t["marks"]["first_unit_started"] < t["marks"]["last_unit_committed"], t
