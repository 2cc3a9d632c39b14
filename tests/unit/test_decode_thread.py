"""convert.decode_thread: each camera decoded in a thread of its own only where the converter has a CPU to spare
(auto), or always (true) / never (false); the bytes written never depend on it."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import robo_ray.stages.convert as convert_mod
from robo_ray.config import load_config
from robo_ray.stages.convert import ConvertOptions, decodes_in_thread, machine_cpus
from robo_ray.stages.pipeline import run_pipeline


@pytest.mark.parametrize(("setting", "ahead", "cpus", "expected"), [
    ("auto", 8, 1.0, False),   # 2 actors on 2 CPUs: every core already runs a converter
    ("auto", 8, 2.0, True),    # 1 actor on 2 CPUs, or in-process on a 2-core machine
    ("auto", 8, 4.0, True),
    (True, 8, 1.0, True),
    (False, 8, 4.0, False),
    (True, 0, 4.0, False),     # decode_ahead 0 means no thread, whatever the setting
    ("auto", 0, 4.0, False),
])
def test_the_decoding_thread_follows_the_setting_and_the_cpu_share(setting, ahead, cpus, expected) -> None:
    assert decodes_in_thread(ConvertOptions(decode_ahead=ahead, decode_thread=setting), cpus) is expected


def test_the_share_is_asked_only_when_the_setting_is_auto() -> None:
    asked: list[int] = []

    def share() -> float:
        asked.append(1)
        return 2.0

    assert decodes_in_thread(ConvertOptions(decode_thread=True), share) is True
    assert decodes_in_thread(ConvertOptions(decode_thread=False), share) is False
    assert decodes_in_thread(ConvertOptions(decode_ahead=0), share) is False
    assert not asked  # a Ray actor's share is a call to the coordinator: none when the answer cannot matter
    assert decodes_in_thread(ConvertOptions(), share) is True and asked == [1]


def test_auto_without_a_share_uses_the_machines_cpus() -> None:
    assert decodes_in_thread(ConvertOptions(), None) is (machine_cpus() >= 2)


def _shards(out: Path) -> dict[str, str]:
    d = next((out / "rlds").glob("*/*"))
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if ".tfrecord-" in p.name}


def test_the_bytes_do_not_depend_on_the_decoding_thread(shared, tmp_path, monkeypatch) -> None:
    """Two cameras, in-process: with the thread forced on, one DecodeAhead per camera and episode; forced off,
    none; the shards are the same bytes."""
    src = shared / "samples" / "lerobot_v30_av1_2cam"
    made: list[int] = []
    real = convert_mod.DecodeAhead

    def counting(frames, depth):
        made.append(depth)
        return real(frames, depth)

    monkeypatch.setattr(convert_mod, "DecodeAhead", counting)
    shards = {}
    for setting in ("true", "false"):
        made.clear()
        out = tmp_path / setting
        cfg = load_config(None, ["validate.tfds_readback=false", f"convert.decode_thread={setting}"],
                          **{"source.url": str(src), "target.url": str(out)})
        outcome = run_pipeline(cfg)
        assert outcome.exit_code == 0, outcome.message
        episodes = sum(1 for _ in (out / "progress.jsonl").open())
        assert (len(made) == 2 * episodes) if setting == "true" else not made, (setting, len(made), episodes)
        shards[setting] = _shards(out)
    assert shards["true"] and shards["true"] == shards["false"]


def test_busy_on_counts_the_units_in_flight_on_a_host() -> None:
    from robo_ray.ray_exec.worker import AttemptCounter
    from robo_ray.stages.attempts import busy_on

    assert busy_on("a", ["a:1", "a:2", "b:3", "ab:4"]) == 2
    counter = AttemptCounter()
    counter.begin(0, "node-a:11")
    counter.begin(1, "node-a:12")
    counter.begin(2, "node-b:13")
    assert (counter.busy_on("node-a"), counter.busy_on("node-b")) == (2, 1)
    counter.record({"shard_index": 1, "filename": "x"})  # the unit is done: its worker is free
    assert (counter.busy_on("node-a"), counter.busy_on("node-b")) == (1, 1)


def test_the_share_is_asked_before_each_video_episode(shared, tmp_path, monkeypatch) -> None:
    """A converter whose CPU share changes (a Ray actor's, once the other actors run out of units) decodes in
    threads exactly for the episodes that start with a share of 2 or more."""
    from robo_ray.readers import open_reader
    from robo_ray.executors.base import JobSpec
    from robo_ray.stages.target_setup import make_writer, resolve_mapping
    from robo_ray.stages.plan import Unit

    src = shared / "samples" / "lerobot_v30_av1_2cam"
    made: list[int] = []
    real = convert_mod.DecodeAhead
    monkeypatch.setattr(convert_mod, "DecodeAhead", lambda frames, depth: made.append(1) or real(frames, depth))
    shares = iter([1.0, 1.0, 2.0, 2.0] + [2.0] * 100)  # asked per camera: 2 cameras an episode
    out = tmp_path / "out"
    cfg = load_config(None, [], **{"source.url": str(src), "target.url": str(out)})
    inv = open_reader(str(src)).discover()
    mapping = resolve_mapping(cfg, inv)
    job = JobSpec(str(src), None, mapping.model_dump_json(), str(out), ConvertOptions(),
                  target_options=make_writer(cfg, mapping).unit_options(inv))
    refs = list(inv.refs)
    assert len(refs) >= 2
    conv = job.make_converter(cpus=lambda: next(shares))
    try:
        conv.convert(Unit(0, 1, refs))
    finally:
        conv.close()
    assert len(made) == 2 * len(refs) - 2  # every camera but the first episode's two
