"""Issue #28 item 3: lerobot 0.6's per-frame language columns (`language_persistent`, `language_events`), written as
lerobot 0.6.1 reads them (checked with the real lerobot 0.6.1 and lerobot-doctor 0.2.0 in their venv,
tests/compat/venvs.py), read back, and made from RLDS sources with more instructions than the task.

1. A LeRobot v3.0 source with both columns (subtasks, task_aug rows, a camera-grounded vqa event, a speech tool call)
   -> LeRobot v3.0: lerobot 0.6.1's `ds[i]` returns each frame's rows as the source holds them (timestamps as
   float32), events only on their frames; lerobot-doctor 0.2.0 FAILs nothing but what it FAILs on the source itself
   (its shape check on language_events, whose lists lerobot leaves empty off their frames). (Round trips: the
   writer conformance suite's "lerobot-v30-language" source.)
2. RLDS with `language_instruction_2` per step and `episode_metadata/language_instruction` -> LeRobot: every frame's
   `language_persistent` holds the task_aug rows [task, second instruction, episode instruction] at t = 0 (as
   lerobot's annotation pipeline writes rephrasings), `language_events` is empty, the second instruction also stays
   a string column; lerobot 0.6.1 loads them.
3. Malformed language rows in a source text feature quarantine the episode with one line naming it.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from robo_ray.errors import DataCorrupt
from robo_ray.formats.lerobot.language import LANGUAGE_PERSISTENT, frame_rows, parse_rows
from robo_ray.formats.lerobot.layout import Feature
from tests.compat.venvs import ensure_lerobot_venv, lerobot_read
from tests.conformance import writer_cases as wc
from tests.fixtures import rlds_gen

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(3600),
              pytest.mark.xdist_group("lerobot_env")]


def _as_float32(rows: list[dict]) -> list[dict]:
    return [{**r, "timestamp": float(np.float32(r["timestamp"]))} if "timestamp" in r else r for r in rows]


def _read(root: Path, tmp: Path, *args: str) -> dict:
    proc, s = lerobot_read(root, tmp / f"read-{root.name}", *args, python=ensure_lerobot_venv())
    assert s.get("ok"), f"lerobot 0.6.1 rejected {root}: {s}\n{proc.stderr[-3000:]}"
    return json.loads(Path(s["json"]).read_text())


def test_language_columns_load_in_lerobot_061(tmp_path: Path) -> None:
    src = wc.SOURCES["lerobot-v30-language"][0](tmp_path)
    out = tmp_path / "out"
    outcome = wc.run_in_process(wc.load_writer_case("lerobot"), src, out, "lerobot-v30-language")
    assert outcome.exit_code == 0, outcome.message
    info = json.loads((out / "meta" / "info.json").read_text())
    for col in ("language_persistent", "language_events"):
        assert info["features"][col] == {"dtype": "language", "shape": [1], "names": None}
    got = _read(out, tmp_path)
    assert got["num_frames"] == 11 and len(got["samples"]) == 6
    for s in got["samples"]:
        length = next(e["length"] for e in got["episodes"] if e["episode_index"] == s["episode_index"])
        persistent, events = wc.language_rows(s["episode_index"], length, got["fps"])
        assert s["values"]["language_persistent"]["value"] == _as_float32(persistent), s["index"]
        assert s["values"]["language_events"]["value"] == events[s["frame_index"]], s["index"]
    assert any(s["values"]["language_events"]["value"] for s in got["samples"])  # the last frames' speech call
    # lerobot-doctor 0.2.0 FAILs language_events itself ("inconsistent shapes within episode": lerobot puts event
    # rows on their frames only, so the lists' lengths differ): the same FAIL on the source, nothing else
    ours, source = _doctor_fails(out, tmp_path), _doctor_fails(src, tmp_path)
    assert ours == source and all("'language_events': inconsistent shapes" in m for m in ours), (ours, source)


def _doctor_fails(root: Path, tmp: Path) -> list[str]:
    """lerobot-doctor's FAIL messages on a dataset."""
    proc, s = lerobot_read(root, tmp / f"doctor-{root.name}", "--doctor", python=ensure_lerobot_venv())
    assert s.get("json"), f"lerobot-doctor did not run on {root}: {s}\n{proc.stderr[-2000:]}"
    report = json.loads(Path(s["json"]).read_text())
    return sorted(m["message"] for c in report["checks"] for m in c["messages"] if m["severity"] == "FAIL")


def test_rlds_instructions_become_task_aug_rows(tmp_path: Path) -> None:
    src = rlds_gen.write_rlds_dataset(tmp_path / "rlds", "oxe_lang")
    out = tmp_path / "out"
    outcome = wc.run_in_process(wc.load_writer_case("lerobot"), src, out, "lerobot-v21-1cam",
                                "target.options.fps=10")
    assert outcome.exit_code == 0, outcome.message
    episodes = rlds_gen.tfds_episodes(src, "train")
    tables = [pq.read_table(p) for p in sorted(out.glob("data/chunk-*/file-*.parquet"))]
    table = pa.concat_tables(tables)
    assert len(episodes) == 2 and table.num_rows == sum(len(e["steps/is_first"]) for e in episodes)
    start = 0
    for ep in episodes:
        n = len(ep["steps/is_first"])
        text = lambda v: v.decode() if isinstance(v, bytes) else str(v)  # noqa: E731
        phrasings = [text(ep["steps/language_instruction"][0]), text(ep["steps/language_instruction_2"][0]),
                     text(ep["episode_metadata/language_instruction"])]
        want = [{"role": "user", "content": p, "style": "task_aug", "timestamp": 0.0, "camera": None,
                 "tool_calls": None} for p in phrasings]
        part = table.slice(start, n)
        assert part["language_persistent"].to_pylist() == [want] * n
        assert part["language_events"].to_pylist() == [[]] * n
        assert part["language_instruction_2"].to_pylist() == [text(v) for v in ep["steps/language_instruction_2"]]
        start += n
    got = _read(out, tmp_path)
    first_task = {s["episode_index"]: s["task"] for s in got["samples"] if s["which"] == "first"}
    for s in got["samples"]:
        rows = s["values"]["language_persistent"]["value"]
        assert [r["style"] for r in rows] == ["task_aug"] * 3 and rows[0]["content"] == first_task[s["episode_index"]]
        assert s["values"]["language_events"]["value"] == []


def test_malformed_rows_are_refused_with_the_episode_named() -> None:
    f = Feature(LANGUAGE_PERSISTENT, "language", "language", (1,), (LANGUAGE_PERSISTENT,), (1,), ("src",))

    class Ep:  # the two fields frame_rows reads of a CanonicalEpisode
        episode_index, length = 7, 2
        texts = {LANGUAGE_PERSISTENT: ['[{"role": "user", "timestamp": 0.0}]', '[{"content": "no role"}]']}
    with pytest.raises(DataCorrupt, match="episode 7 step 1: language_persistent is not a list of rows"):
        frame_rows(f, Ep())  # type: ignore[arg-type]
    Ep.texts = {LANGUAGE_PERSISTENT: ['[{"role": "user", "timestamp": 0.0}]', "{not json"]}
    with pytest.raises(DataCorrupt):
        frame_rows(f, Ep())  # type: ignore[arg-type]
    assert parse_rows('[{"role": "user", "timestamp": 1}]', LANGUAGE_PERSISTENT, "x")[0]["role"] == "user"
    with pytest.raises(ValueError, match="x: language_persistent"):  # a persistent row needs its timestamp
        parse_rows('[{"role": "user"}]', LANGUAGE_PERSISTENT, "x")
