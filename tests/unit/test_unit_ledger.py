"""The Publisher's two helpers on their own (issue #30): `UnitLedger` (recorded units, progress lines,
ledger.json) and `UnitAttempts` (attempts, the units in flight), without a run around them."""
from __future__ import annotations

import json

from robo_ray.stages.attempts import UnitAttempts
from robo_ray.stages.journal import UnitLedger
from robo_ray.storage import url_to_fs
from robo_ray.writers import UnitResult


def _ledger(tmp_path, previous=(), attempts=None):
    fs, root = url_to_fs(str(tmp_path))
    counts = attempts if attempts is not None else {}
    return UnitLedger(fs, root, {"mapping": "m", "plan": "p"}, ["a.bin", "b.bin"], list(previous),
                      lambda: counts), counts


def test_ledger_records_units_and_writes_progress_lines(tmp_path) -> None:
    book, counts = _ledger(tmp_path)
    first = json.loads((tmp_path / "ledger.json").read_text())
    assert first == {"shards": [], "num_shards": 2, "fingerprint": {"mapping": "m", "plan": "p"},
                     "unit_files": ["a.bin", "b.bin"], "attempts": {}, "resumed_shards": [], "complete": False}
    res = UnitResult(1, "b.bin", [(7, 30)], [{"episode_index": 8, "code": "EP203", "reason": "NaN",
                                              "file": "x"}], 10, "ab")
    assert book.is_new(res)
    counts[1] = 2
    book.record(res, "T0", "T1")
    assert not book.is_new(UnitResult(1, "b.bin", [(7, 30)], num_bytes=10, sha256="ab"))
    assert book.is_new(UnitResult(1, "b.bin", [(7, 30)], num_bytes=10, sha256="cd"))
    rows = [json.loads(x) for x in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert [(r["episode_id"], r["status"], r["started_at"], r["completed_at"]) for r in rows] == [
        (7, "completed", "T0", "T1"), (8, "failed", "T0", "T1")]
    assert rows[1]["code"] == "EP203" and rows[1]["shard"] is None
    final = book.finish()
    on_disk = json.loads((tmp_path / "ledger.json").read_text())
    assert on_disk["complete"] and final["complete"] and on_disk["attempts"] == {"1": 2}
    assert [s["shard_index"] for s in on_disk["shards"]] == [1]


def test_a_resumed_ledger_keeps_the_previous_units_and_progress(tmp_path) -> None:
    (tmp_path / "progress.jsonl").write_text('{"episode_id": 0}\n')
    prev = UnitResult(0, "a.bin", [(0, 5)], num_bytes=3, sha256="ee").to_dict()
    book, _ = _ledger(tmp_path, previous=[prev])
    assert set(book.results) == {0} and book.resumed == {0}
    assert (tmp_path / "progress.jsonl").read_text() == '{"episode_id": 0}\n'  # not truncated on resume
    assert json.loads((tmp_path / "ledger.json").read_text())["resumed_shards"] == [0]


def test_attempts_count_and_track_the_units_in_flight() -> None:
    tries = UnitAttempts()
    assert tries.begin(3, "h1:1")["attempt"] == 1
    tries.failed(3, "ValueError: x")
    reply = tries.begin(3, "h2:2")
    assert reply["attempt"] == 2 and reply["last_error"] == "ValueError: x"
    tries.begin(4, "h1:3")
    assert tries.in_flight(done={4}) == {3: "h2:2"}
    assert (tries.busy_on("h1"), tries.busy_on("h2")) == (1, 1)
    tries.end(3)
    assert tries.busy_on("h2") == 0 and tries.attempt_counts() == {3: 2, 4: 1}
    assert tries.done(3, {"shard_index": 3})["done"] == {"shard_index": 3}
    assert tries.last_error(4, "worker died") == "worker died"
