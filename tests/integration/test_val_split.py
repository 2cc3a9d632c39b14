"""`robo-ray run --val-fraction`: RLDS writes a `val` split of the logged episodes (same choice on a second run,
resume works, another fraction is refused on resume), LeRobot writes exact `splits` episode ranges holding those
episodes, ORTF (no splits) refuses in one line."""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import require_shared, run_cli

pytestmark = pytest.mark.slow
SAMPLE = "lerobot_v30_av1_2cam"  # 4 episodes of 150 / 60 / 120 / 90 steps


@pytest.fixture(scope="module")
def src() -> Path:
    return require_shared(f"samples/{SAMPLE}")


def _val_from_log(out: Path) -> list[int]:
    m = re.search(r"(\d+) of (\d+) episodes in val \(source episode indices \[([\d, ]*)\]\)",
                  (out / "logs" / "convert.log").read_text())
    assert m, "the log does not say which episodes went to val"
    return [int(x) for x in m.group(3).split(",") if x.strip()]


def _source_lengths(out: Path) -> dict[int, int]:
    with open(out / "episode_index.csv") as f:
        return {int(r["episode_index"]): int(r["length"]) for r in csv.DictReader(f)}


def test_rlds_val_split_deterministic_and_resumable(src: Path, tmp_path: Path) -> None:
    args = ("--val-fraction", "0.25", "--set", "validate.tfds_readback=false")
    outs = []
    for k in range(2):
        out = tmp_path / f"o{k}"
        proc = run_cli("run", str(src), str(out), *args)
        assert proc.returncode == 0, proc.stderr
        outs.append(out)
    val = _val_from_log(outs[0])
    assert len(val) == 1 and _val_from_log(outs[1]) == val
    info = json.loads((outs[0] / f"rlds/{SAMPLE}/1.0.0/dataset_info.json").read_text())
    splits = {s["name"]: sum(int(n) for n in s["shardLengths"]) for s in info["splits"]}
    assert splits == {"train": 3, "val": 1}
    val_shards = sorted(p.name for p in (outs[0] / f"rlds/{SAMPLE}/1.0.0").glob("*-val.tfrecord-*"))
    assert val_shards == sorted(p.name for p in (outs[1] / f"rlds/{SAMPLE}/1.0.0").glob("*-val.tfrecord-*"))
    assert all((outs[0] / f"rlds/{SAMPLE}/1.0.0" / n).read_bytes() == (outs[1] / f"rlds/{SAMPLE}/1.0.0" / n)
               .read_bytes() for n in val_shards)
    assert json.loads((outs[0] / "diff_summary.json").read_text())["steps_written"] == 420
    # resume: the same job finds every shard committed; another fraction is another job
    proc = run_cli("run", str(src), str(outs[0]), *args, "--resume")
    assert proc.returncode == 0, proc.stderr
    n = len(list((outs[0] / f"rlds/{SAMPLE}/1.0.0").glob("*.tfrecord-*")))
    assert n >= 2 and f"{n} of {n} shards already committed" in (outs[0] / "logs" / "convert.log").read_text()
    proc = run_cli("run", str(src), str(outs[0]), "--val-fraction", "0.5", "--set", "validate.tfds_readback=false",
                   "--resume")
    assert proc.returncode == 4 and "splits.val_fraction" in proc.stderr


def test_lerobot_splits_are_exact_ranges(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "le"
    proc = run_cli("run", str(src), str(out), "--to", "lerobot", "--val-fraction", "0.25")
    assert proc.returncode == 0, proc.stderr
    splits = json.loads((out / "meta/info.json").read_text())["splits"]
    assert splits == {"train": "0:3", "val": "3:4"}
    (val,) = _val_from_log(out)
    rows = {}
    for f in sorted((out / "meta/episodes").rglob("*.parquet")):
        t = pq.read_table(f, columns=["episode_index", "length"]).to_pydict()
        rows.update(zip(t["episode_index"], t["length"]))
    assert rows[3] == _source_lengths(out)[val]  # the val range holds the logged source episode
    assert sorted(rows[e] for e in (0, 1, 2)) == sorted(n for i, n in _source_lengths(out).items() if i != val)


def test_ortf_refuses_val_fraction(src: Path, tmp_path: Path) -> None:
    proc = run_cli("run", str(src), str(tmp_path / "ortf"), "--to", "ortf", "--val-fraction", "0.25")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "has no splits" in lines[0] and "RR204" in lines[0], proc.stderr
