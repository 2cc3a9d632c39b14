"""LeRobot sources whose files are not where info.json says, or whose video windows cut the last frame (issue #28:
convert what is intact, name what is not):

1. `source.options.video_path` / `data_path` replace info.json's templates (D110 says so); the same checks as
   info.json's (fields, `..`, absolute paths) under the option's name;
2. when not one video of a camera is where video_path puts them but the dataset has other MP4s, Discover names
   them and the option (D111), and the final report lists Discover's findings;
3. a v3.0 window whose to_timestamp is the last frame's time (not the end of the last frame) is read to
   from_timestamp + length / fps, as lerobot reads frames by their timestamps (D112); frames the file does not
   have are still EP103;
4. the real open50 set (MPEG-4 Part 2 under `video/image/...`, to_timestamp at the last frame): with the option,
   the 5 episodes whose MP4 exists are written with every step, the 3 others quarantined EP101 by name.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from robo_ray.config import load_config
from robo_ray.errors import UnsafeInput
from robo_ray.readers import open_reader
from robo_ray.stages.pipeline import run_pipeline
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset

FAST = ["validate.tfds_readback=false"]
MOVED = "video/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"


def _source(root: Path, lengths: list[int]) -> Path:
    write_lerobot_dataset(root, DatasetSpec(version="v3.0", episode_lengths=lengths, fps=10, episodes_per_file=1,
                                            cameras=[CameraSpec("observation.images.top", "h264", 32, 32)]))
    return root


def _run(src: Path, out: Path, *sets: str):
    return run_pipeline(load_config(None, [*FAST, *sets], **{"source.url": str(src), "target.url": str(out),
                                                              "target.format": "lerobot"}))


def _codes(reader) -> list[str]:
    return [f.code for f in reader.discover().findings]


def _written(out: Path) -> dict[int, int]:
    ledger = json.loads((out / "ledger.json").read_text())
    return {int(e): int(n) for sh in ledger["shards"] for e, n in sh["episodes"]}


def _quarantined(out: Path) -> dict[int, str]:
    ledger = json.loads((out / "ledger.json").read_text())
    return {int(q["episode_index"]): q["code"] for sh in ledger["shards"] for q in sh["quarantined"]}


def test_video_path_option_reads_videos_moved_out_of_the_template(tmp_path: Path) -> None:
    src = _source(tmp_path / "src", [12, 9, 11])
    shutil.move(str(src / "videos"), str(src / "video"))
    plain = open_reader(str(src), "lerobot")
    findings = {f.code: f for f in plain.discover().findings}
    assert "D106" in findings and "D111" in findings, findings
    hint = findings["D111"].message
    assert "observation.images.top" in hint and "video/observation.images.top/chunk-000/file-000.mp4" in hint
    assert "source.options.video_path" in hint

    out = tmp_path / "out"
    outcome = _run(src, out)
    assert outcome.exit_code == 3 and _written(out) == {}  # every episode's video missing: quarantined, not lost
    report = (out / "final_report.md").read_text()
    assert "## Discover Findings" in report and "warning[D111]" in report and "error[D106]" in report

    moved = open_reader(str(src), "lerobot", options={"video_path": MOVED})
    codes = _codes(moved)
    assert "D110" in codes and "D106" not in codes and "D111" not in codes, codes
    out2 = tmp_path / "out2"
    outcome = _run(src, out2, f"source.options.video_path={MOVED}")
    assert outcome.exit_code == 0, outcome.message
    assert _written(out2) == {0: 12, 1: 9, 2: 11}


@pytest.mark.parametrize("template, words", [
    ("../outside/{video_key}.mp4", "escapes the dataset root"),
    ("/abs/{video_key}.mp4", "not relative"),
    ("videos/{secret}.mp4", "unknown field"),
    ("videos/{video_key!r}.mp4", "disallowed format"),
])
def test_a_bad_template_option_is_refused_under_its_name(tmp_path: Path, template: str, words: str) -> None:
    src = _source(tmp_path / "src", [5])
    with pytest.raises(UnsafeInput, match="source.options.video_path") as err:
        open_reader(str(src), "lerobot", options={"video_path": template})
    assert words in str(err.value)


def test_data_path_option_and_a_wrong_type(tmp_path: Path) -> None:
    src = _source(tmp_path / "src", [6, 7])
    shutil.move(str(src / "data"), str(src / "frames"))
    reader = open_reader(str(src), "lerobot",
                         options={"data_path": "frames/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"})
    assert "D106" not in _codes(reader)
    assert [reader.load_episode(r).length for r in reader.episode_refs()] == [6, 7]
    with pytest.raises(UnsafeInput, match="source.options.data_path: a path template string"):
        open_reader(str(src), "lerobot", options={"data_path": 3})


def _cut_windows(src: Path, frames_short: float) -> None:
    """meta/episodes: each camera's to_timestamp moved `frames_short` frames before the end of the episode."""
    path = next((src / "meta" / "episodes").rglob("*.parquet"))
    t = pq.read_table(path)
    col = "videos/observation.images.top/to_timestamp"
    ends = [float(a) + (n - frames_short) / 10 for a, n in
            zip(t.column("videos/observation.images.top/from_timestamp").to_pylist(), t.column("length").to_pylist())]
    t = t.set_column(t.schema.get_field_index(col), col, pa.array(ends, pa.float64()))
    pq.write_table(t, path)


def test_a_window_ending_at_the_last_frames_time_is_read_whole(tmp_path: Path) -> None:
    src = _source(tmp_path / "src", [12, 9, 11])
    _cut_windows(src, 1)  # to_timestamp = the last frame's time, as the open50 tool writes it
    reader = open_reader(str(src), "lerobot")
    d112 = [f for f in reader.discover().findings if f.code == "D112"]
    assert len(d112) == 1 and d112[0].actual == 3 and "episode 0 observation.images.top" in d112[0].message
    out = tmp_path / "out"
    outcome = _run(src, out)
    assert outcome.exit_code == 0, outcome.message
    assert _written(out) == {0: 12, 1: 9, 2: 11}


def test_frames_the_file_lacks_are_still_an_episode_error(tmp_path: Path) -> None:
    src = _source(tmp_path / "src", [12, 9, 11])
    _cut_windows(src, 1)
    meta = next((src / "meta" / "episodes").rglob("*.parquet"))  # episode 1 claims 2 more steps than its MP4 has
    t = pq.read_table(meta)
    lengths = t.column("length").to_pylist()
    lengths[1] += 2
    t = t.set_column(t.schema.get_field_index("length"), "length", pa.array(lengths, pa.int64()))
    pq.write_table(t, meta)
    data = src / "data" / "chunk-000" / "file-001.parquet"
    rows = pq.read_table(data)
    pq.write_table(pa.concat_tables([rows, rows.slice(0, 2)]), data)  # 2 more rows (their values do not matter)
    out = tmp_path / "out"
    outcome = _run(src, out)
    assert outcome.exit_code == 3, outcome.message
    assert _written(out) == {0: 12, 2: 11} and _quarantined(out) == {1: "EP103"}


def test_real_open50_with_the_video_path_option(shared: Path, tmp_path: Path) -> None:
    src = shared / "real" / "open50_8ep"
    plain = {f.code: f for f in open_reader(str(src), "lerobot").discover().findings}
    assert "video/image/chunk-000/file-000.mp4" in plain["D111"].message
    out = tmp_path / "out"
    outcome = _run(src, out, f"source.options.video_path={MOVED}")
    assert outcome.exit_code == 3, outcome.message
    lengths = dict(zip(*pq.read_table(src / "meta/episodes/chunk-000/file-000.parquet",
                                      columns=["episode_index", "length"]).to_pydict().values()))
    assert _written(out) == {e: lengths[e] for e in (0, 3, 4, 5, 6)}
    assert _quarantined(out) == {1: "EP101", 2: "EP101", 7: "EP101"}
    assert outcome.validation_passed
