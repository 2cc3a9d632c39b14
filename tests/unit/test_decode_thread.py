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
