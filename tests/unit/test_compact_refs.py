"""What the driver and the Publisher hold per episode (issue #14): refs as columns (RefTable), unit results as packed
(episode, steps) pairs (EpisodeSteps), ledger.json one shard per line, and the streamed files and digests that must
stay byte-compatible with what earlier runs wrote (resume compares them)."""
from __future__ import annotations

import hashlib
import json
import pickle
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import fsspec
import numpy as np

from robo_ray.episode import EpisodeRef, RefTable, VideoRef
from robo_ray.readers.base import Inventory
from robo_ray.stages.discover import episode_index_csv, episode_index_rows, write_discover_outputs
from robo_ray.stages.journal import ledger_text
from robo_ray.stages.resume import plan_fingerprint
from robo_ray.stages.plan import plan_split_units, plan_units
from robo_ray.stages.check_records import ValidationResult
from robo_ray.stages.validation_report import diff_summary, diff_summary_text
from robo_ray.writers.base import EpisodeSteps, UnitResult


def _refs(n: int) -> list[EpisodeRef]:
    """v3.0-like refs: a few files, video windows, splits, global offsets (some None), source ids."""
    return [EpisodeRef(i, 5 + i % 3, f"data/file-{i // 4}.parquet",
                       (("cam", VideoRef(f"v/file-{i // 4}.mp4", 0.5 * i, 0.5 * i + 0.4)),) if i % 2 else (),
                       ("pick",) if i % 5 else ("pick", "place"), 10 * i if i % 3 else None, 10 * i + 5,
                       f"ep{i}" if i % 7 == 0 else None, (i, 9) if i % 11 == 0 else None,
                       "val" if i % 4 == 0 else None) for i in range(n)]


def test_ref_table_reads_like_the_list_it_holds() -> None:
    refs = _refs(40)
    table = RefTable(refs)
    assert len(table) == 40 and list(table) == refs and table == refs
    assert table[7] == refs[7] and table[-1] == refs[-1]
    assert list(table[3:9]) == refs[3:9] and list(table[::3]) == refs[::3] and list(table[30:]) == refs[30:]
    assert list(table.take([9, 2, 2])) == [refs[9], refs[2], refs[2]]
    assert table.episode_indices() == list(range(40)) and table.lengths() == [r.length for r in refs]
    assert table.episode_array().tolist() == list(range(40))
    shuffled = RefTable(refs[::-1])
    assert list(shuffled.sorted_by_episode()) == refs


def test_ref_table_pickles_as_columns_and_a_slice_carries_only_its_rows() -> None:
    table = RefTable(_refs(4000))
    assert list(pickle.loads(pickle.dumps(table))) == list(table)
    part = table[100:110]
    assert list(pickle.loads(pickle.dumps(part))) == list(table)[100:110]
    assert len(pickle.dumps(part)) * 50 < len(pickle.dumps(table))  # not the whole table's distinct values


def test_inventory_and_units_hold_ref_tables() -> None:
    refs = _refs(30)
    inv = Inventory("d", "/x", "lerobot", "v3.0", 30, 0, {}, refs, 10.0)
    assert isinstance(inv.refs, RefTable) and inv.refs == refs
    inv.refs = refs[:5]
    assert isinstance(inv.refs, RefTable) and list(inv.refs) == refs[:5]
    units = plan_split_units(inv.refs, {}, target_shard_mb=1e-4, min_shards=3, max_unit_episodes=4)
    assert all(isinstance(u.refs, RefTable) and len(u.refs) <= 4 for u in units)
    assert sorted(e for u in units for e in u.episode_indices) == list(range(5))


def test_planning_a_ref_table_equals_planning_the_list() -> None:
    refs = _refs(203)
    for kwargs in ({"target_shard_mb": 1e-4, "min_shards": 4, "max_unit_episodes": 7},
                   {"target_shard_mb": 256, "min_shards": 4, "max_unit_episodes": 1000},
                   {"target_shard_mb": 1e-3, "min_shards": 1, "max_unit_episodes": 50}):
        a = plan_units(refs, {}, **kwargs)
        b = plan_units(RefTable(refs), {}, **kwargs)
        assert [list(u.refs) for u in a] == [list(u.refs) for u in b]
        assert [e for u in a for e in u.episode_indices] == list(range(203))


def test_a_ref_table_costs_under_100_bytes_per_episode() -> None:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        table = RefTable(EpisodeRef(i, 5, "data/chunk-000/file-000.parquet", (), ("task",), 5 * i, 5 * i + 5)
                         for i in range(100_000))
        per_episode = (tracemalloc.get_traced_memory()[0] - before) / len(table)
    finally:
        tracemalloc.stop()
    assert per_episode < 100, per_episode


def test_episode_steps_behave_as_a_list_of_pairs() -> None:
    pairs = [(3, 5), (1, 7), (200_000, 12)]
    steps = EpisodeSteps(pairs)
    assert list(steps) == pairs and steps == pairs and steps == [list(p) for p in pairs] and len(steps) == 3
    assert steps[1] == (1, 7) and steps[-1] == (200_000, 12) and steps[:2] == pairs[:2]
    steps.append((9, 1))
    assert dict(steps) == {3: 5, 1: 7, 200_000: 12, 9: 1} and steps != pairs
    assert pickle.loads(pickle.dumps(steps)) == steps
    res = UnitResult(0, "shard", [(0, 5), (1, 6)])
    assert isinstance(res.episodes, EpisodeSteps)
    row = res.to_dict()
    assert row["episodes"] == [[0, 5], [1, 6]] and json.loads(json.dumps(row)) == row
    assert UnitResult.from_dict(json.loads(json.dumps(row))).episodes == [(0, 5), (1, 6)]
    assert res.packed()["episodes"] is res.episodes  # the Publisher's ledger shares, never copies


def test_ledger_text_is_json_with_one_line_per_shard() -> None:
    rows = [UnitResult(k, f"s{k}", [(k * 3 + j, 5) for j in range(3)], sha256="ab").packed() for k in range(4)]
    ledger = {"shards": rows, "num_shards": 4, "fingerprint": {"plan": "x"}, "complete": True}
    text = ledger_text(ledger)
    back = json.loads(text)
    assert back["shards"] == [UnitResult(**{**r, "episodes": list(r["episodes"])}).to_dict() for r in rows]
    assert back["num_shards"] == 4 and back["complete"] is True
    shard_lines = [ln for ln in text.splitlines() if ln.strip().startswith('{"shard_index"')]
    assert len(shard_lines) == 4
    assert json.loads(ledger_text({"shards": [], "complete": False})) == {"shards": [], "complete": False}


def test_plan_fingerprint_is_the_digest_earlier_runs_wrote() -> None:
    """Resume compares fingerprints: the streamed digest must equal sha256(json.dumps(the whole plan))."""
    units = plan_split_units(_refs(57), {}, target_shard_mb=1e-4, min_shards=4, max_unit_episodes=9)
    plan = [[u.index, u.num_shards, [[r.episode_index, r.length, list(r.source_files())]
                                     + ([r.split] if r.split else []) for r in u.refs]] for u in units]
    mapping = SimpleNamespace(model_dump_json=lambda: "{}")
    assert plan_fingerprint(mapping, units)["plan"] == hashlib.sha256(json.dumps(plan).encode()).hexdigest()
    assert plan_fingerprint(mapping, [])["plan"] == hashlib.sha256(b"[]").hexdigest()


def test_diff_summary_text_equals_the_dict() -> None:
    res = ValidationResult()
    res.set_episodes(np.array([5, 2, 9, 2]), np.array([1, 2, 3, 4]))  # a repeated episode keeps its last value
    assert res.episode_steps == {2: 4, 5: 1, 9: 3} and res.steps_written == 8 and res.episodes_written == 3
    assert json.loads(diff_summary_text(res, chunk=2)) == diff_summary(res)
    assert json.loads(diff_summary_text(ValidationResult())) == diff_summary(ValidationResult())


def test_episode_index_csv_is_written_in_pieces(tmp_path: Path) -> None:
    inv = Inventory("d", "/x", "lerobot", "v3.0", 30, 0, {}, _refs(30), 10.0)
    pieces = list(episode_index_rows(inv, chunk_rows=7))
    assert len(pieces) == 5 and "".join(pieces) == episode_index_csv(inv)
    assert len(episode_index_csv(inv).splitlines()) == 31
    write_discover_outputs(fsspec.filesystem("file"), str(tmp_path), inv)
    assert (tmp_path / "episode_index.csv").read_text() == episode_index_csv(inv)
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_lerobot_v3_discover_streams_its_episode_metadata(tmp_path: Path) -> None:
    """50,000 episodes: meta/episodes is read in batches without its statistics columns, into a RefTable. Before,
    the whole table became Python rows and a list of refs: ~470 bytes per episode kept, ~880 at the peak."""
    from bench.gen_state_only import generate
    from robo_ray.readers import open_reader

    n = 50_000
    generate(tmp_path / "src", n, 5)
    reader = open_reader(str(tmp_path / "src"), None, {}, {})
    tracemalloc.start()
    try:
        inv = reader.discover()
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(inv.refs) == n and inv.refs[n - 1].episode_index == n - 1 and inv.total_steps == 5 * n
    assert kept / n < 100 and peak / n < 350, (kept / n, peak / n)
