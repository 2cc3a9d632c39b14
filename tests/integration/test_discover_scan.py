"""Discover as a map over the file list (issue #26 part 4): an RLDS source of 40 shards, local and on moto S3, with
one corrupted shard. `merge_scans` of its scan tasks, scanned in this process and through `scan_with_ray_data` on a
real local Ray instance, gives the inventory `discover()` gives: refs, findings, counts."""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

from bench.discover_scale import NAME, generate
from robo_ray.formats.rlds.reader import RldsReader
from robo_ray.ray_exec.scan import ReaderFactory, scan_with_ray_data
from robo_ray.readers import open_reader
from robo_ray.readers.base import BaseReader, Inventory
from tests.fixtures.servers import s3_server  # noqa: F401 - fixture

SHARDS, PER_SHARD, BAD_SHARD = 40, 3, 17


def _summary(inv: Inventory) -> dict[str, Any]:
    return {"refs": list(inv.refs), "findings": [f.to_dict() for f in inv.findings],
            "episodes": inv.episodes_count, "steps": inv.total_steps, "declared": inv.declared}


@pytest.fixture(scope="module")
def local_source(tmp_path_factory) -> Path:
    """The version folder of a 40-shard dataset whose shard BAD_SHARD has a corrupted second record header."""
    clean = generate(tmp_path_factory.mktemp("gen"), SHARDS, PER_SHARD, steps=4, pad=64)
    root = tmp_path_factory.mktemp("src") / NAME / "1.0.0"
    shutil.copytree(clean, root)
    shard = sorted(root.glob(f"{NAME}-train.tfrecord-*"))[BAD_SHARD]
    data = bytearray(shard.read_bytes())
    (first,) = struct.unpack("<Q", data[:8])
    data[first + 16 + 8] ^= 0xFF  # the length CRC of record 1
    shard.write_bytes(bytes(data))
    return root


@pytest.fixture(scope="module")
def s3_source(local_source, s3_server) -> tuple[str, dict[str, Any]]:  # noqa: F811
    bucket = s3_server.make_bucket("discover-scan")
    fs = s3_server.fs()
    files = sorted(local_source.iterdir())
    prefix = f"{bucket}/{NAME}/1.0.0"
    fs.put([str(p) for p in files], [f"{prefix}/{p.name}" for p in files])
    return f"s3://{prefix}", s3_server.storage_options()


@pytest.fixture(scope="module")
def ray_local():
    import ray

    from robo_ray.ray_exec.local_instance import init_local

    # a new local instance even when another test has a `ray start` cluster on this machine
    init_local(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def _sources(local_source: Path, s3_source: tuple[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(str(local_source), {}), s3_source]


def _check_against_discover(reader: BaseReader, merged: Inventory) -> None:
    expected = _summary(reader.discover())
    # the records after the bad header cannot be located: still listed (quarantined at load), never dropped
    assert expected["episodes"] == SHARDS * PER_SHARD
    bad = [f for f in expected["findings"] if f["level"] == "error"]
    assert [f["code"] for f in bad] == ["R104"] and f"tfrecord-000{BAD_SHARD}-of" in bad[0]["message"]
    assert f"the {PER_SHARD - 2} episode(s) declared after it" in bad[0]["message"]
    assert _summary(merged) == expected


def test_tasks_are_the_shards_in_order(local_source):
    reader = open_reader(str(local_source))
    tasks = reader.scan_tasks()
    assert [t.index for t in tasks] == list(range(SHARDS))
    assert [t.files[0] for t in tasks] == sorted(p.name for p in local_source.glob(f"{NAME}-train.tfrecord-*"))
    with pytest.raises(ValueError, match="39 scanned shards for 40"):
        reader.merge_scans(reader.scan_all(tasks)[:-1])


@pytest.mark.parametrize("where", ["local", "s3"])
def test_merge_of_in_process_scans_is_discover(where, local_source, s3_source):
    url, options = dict(zip(["local", "s3"], _sources(local_source, s3_source)))[where]
    reader = open_reader(url, storage_options=options)
    assert reader.scan_threads == (1 if where == "local" else 16)
    rows = [reader.scan(t) for t in reader.scan_tasks()]
    _check_against_discover(reader, reader.merge_scans(rows))


@pytest.mark.parametrize("where", ["local", "s3"])
def test_merge_of_ray_data_scans_is_discover(where, local_source, s3_source, ray_local):
    url, options = dict(zip(["local", "s3"], _sources(local_source, s3_source)))[where]
    reader = open_reader(url, storage_options=options)
    factory = ReaderFactory.of(reader, url, options)
    assert factory.cls is RldsReader
    rows = scan_with_ray_data(factory, reader.scan_tasks(), concurrency=2)
    _check_against_discover(reader, reader.merge_scans(rows))


def test_a_reader_that_does_not_split_says_so(shared: Path):
    """A reader without the pair (here: the shared real LeRobot v2.1 dataset's) has no tasks: discover() runs."""
    reader = open_reader(str(shared / "real" / "g1_v21_30ep"))
    assert reader.scan_tasks() == []
    with pytest.raises(NotImplementedError, match="does not split its Discover scan"):
        reader.merge_scans([])
    assert reader.discover().episodes_count == 30


@pytest.fixture(scope="module")
def clean_source(tmp_path_factory) -> Path:
    """The same 40-shard dataset without the corrupted record."""
    return generate(tmp_path_factory.mktemp("gen_clean"), SHARDS, PER_SHARD, steps=4, pad=64)


def test_a_run_on_ray_scans_the_files_on_the_workers(clean_source, tmp_path, monkeypatch):
    """The pipeline hands a source of many files to the executor's `scan` (a Ray Data map on the workers): the
    output is the in-process run's, bytes and inventory, and the scan ran there once."""
    import hashlib

    from robo_ray.config import load_config
    from robo_ray.executors.in_process import InProcessExecutor
    from robo_ray.ray_exec import scan as ray_scan
    from robo_ray.ray_exec.executor import RayExecutor
    from robo_ray.stages import pipeline

    calls: list[int] = []
    real = ray_scan.scan_with_ray_data

    def spy(factory, tasks, concurrency, num_cpus=1.0):
        calls.append(len(tasks))
        return real(factory, tasks, concurrency, num_cpus)

    monkeypatch.setattr(ray_scan, "scan_with_ray_data", spy)
    monkeypatch.setattr(pipeline, "SCAN_ON_WORKERS_MIN_FILES", 8)
    sets = ["validate.tfds_readback=false", "plan.min_shards=4"]

    def run(out: Path, executor) -> dict[str, str]:
        cfg = load_config(None, sets, **{"source.url": str(clean_source), "target.url": str(out)})
        outcome = pipeline.run_pipeline(cfg, executor=executor)
        assert outcome.exit_code == 0, outcome.message
        return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted((out / "rlds").rglob("*")) if p.is_file()}

    reference = run(tmp_path / "ref", InProcessExecutor())
    assert calls == []  # the in-process executor offers no scan: the reader scans in this process
    ex = RayExecutor(actors=2, status_interval_s=0)
    try:
        got = run(tmp_path / "ray", ex)
    finally:
        ex.shutdown()
    assert calls == [SHARDS]
    assert got == reference
    inventories = [json.loads((tmp_path / run / "inventory.json").read_text()) for run in ("ref", "ray")]
    for inv in inventories:
        inv.pop("detected_at", None)
    assert inventories[0] == inventories[1]
