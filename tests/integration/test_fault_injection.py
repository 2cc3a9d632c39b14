"""Fault injection (issue #9, acceptance 3), through tests/fixtures/faulty_fs.py (`faulty://`, a real fsspec
filesystem over the local disk or memory:// that fails a seeded fraction of its calls the way a flaky store does).

Every test runs once per seed (FAULT_SEEDS, default 10; each seed is another fault pattern), so one run of this file
is the "10 times in a row". With tests/integration/test_run_lock.py (the subprocess version of the concurrent runs):
    .venv/bin/python -m pytest -q tests/integration/test_fault_injection.py tests/integration/test_run_lock.py

* transient faults on a fraction of reads, writes, listings, info calls and deletes/renames of the source and of
  the destination (writes torn half-way): the run succeeds quietly, every fault was retried, and the dataset is
  byte-identical to a clean local run; a fault that does not go away ends in one error line after the bounded
  attempts;
* torn writes: the process dies (SIGKILL in a subprocess, or an in-process crash on memory://) in the middle of
  writing a shard, dataset_info.json, ledger.json, progress.jsonl or commit.json: no file under a final name is
  partial, `robo-ray validate` fails while the run is unfinished, `--resume` produces the clean run's bytes;
* a plain local destination killed while a shard is being written;
* two runs on one destination, the first frozen while it holds the lock: the second exits 4 without writing,
  the first publishes.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import pytest

from robo_ray import storage
from robo_ray.cli import main
from robo_ray.config import ConvertConfig
from tests.conftest import REPO
from tests.fixtures import faulty_fs
from tests.fixtures.lerobot_gen import DatasetSpec, write_lerobot_dataset

pytestmark = pytest.mark.timeout(300)

SEEDS = list(range(int(os.environ.get("FAULT_SEEDS", "10"))))
EPISODES = [8, 9, 10, 11, 9, 10]  # 64x48 H.264, one episode per file -> 4 shards of 1-2 episodes
SHARD = "src-train.tfrecord-{:05d}-of-00004"
DATASET_DIR = "rlds/src/1.0.0"
# in-process conversion: the faults and their counters stay in this process (no watchdog child process)
NO_WATCHDOG = [f"convert.{k}=null" for k in ("unit_timeout_s", "read_timeout_s") if k in ConvertConfig.model_fields]
BOOT = "import sys, tests.fixtures.faulty_fs; from robo_ray.cli import main; sys.exit(main(sys.argv[1:]))"


# ---- fixtures ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fault_src")
    return write_lerobot_dataset(root / "src", DatasetSpec(version="v3.0", episode_lengths=EPISODES,
                                                           episodes_per_file=1))


@pytest.fixture(scope="module")
def clean_run(source, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fault_ref") / "out"
    assert main(["run", str(source), str(out), *_sets("validate.tfds_readback=false")]) == 0
    return out


@pytest.fixture(scope="module")
def reference(clean_run) -> dict[str, bytes]:
    """The dataset directory of a clean local-to-local run: what every faulty run must reproduce byte for byte."""
    files = {p.name: p.read_bytes() for p in sorted((clean_run / DATASET_DIR).iterdir())}
    assert sum(".tfrecord-" in n for n in files) == 4 and "dataset_info.json" in files and "features.json" in files
    return files


@pytest.fixture(autouse=True)
def faults(monkeypatch):
    faulty_fs.reset()
    monkeypatch.setenv(storage.RETRY_BACKOFF_ENV, "0.001")
    monkeypatch.delenv(storage.RETRY_ATTEMPTS_ENV, raising=False)
    monkeypatch.delenv(faulty_fs.CRASH_ENV, raising=False)
    yield faulty_fs
    for hold in faulty_fs.HOLDS.values():
        hold.release.set()
    faulty_fs.reset()


@dataclass
class Dest:
    """A destination behind faulty://, over the local disk or memory://; `plain` is the same place without faults."""

    backend: str
    root: str  # path on the wrapped filesystem

    @property
    def url(self) -> str:
        return f"faulty://{self.root}"

    @property
    def plain(self) -> str:
        return self.root if self.backend == "local" else f"memory://{self.root}"

    @property
    def fs(self) -> Any:
        return fsspec.filesystem("file" if self.backend == "local" else "memory")

    def files(self) -> dict[str, bytes]:
        """Every file under the destination, by relative path."""
        fs = self.fs
        if not fs.exists(self.root):
            return {}
        return {p[len(self.root) + 1:]: fs.cat_file(p) for p in sorted(fs.find(self.root))}

    def options(self) -> list[str]:
        return ["target.storage_options.target_protocol=memory"] if self.backend == "memory" else []


def _dest(backend: str, tmp_path: Path) -> Dest:
    if backend == "local":
        return Dest("local", str(tmp_path / "out"))
    return Dest("memory", f"/fault-{uuid.uuid4().hex[:10]}/out")


@pytest.fixture
def cleanup_memory():
    made: list[Dest] = []
    yield made
    for d in made:
        if d.backend == "memory" and d.fs.exists(d.root):
            d.fs.rm(d.root, recursive=True)


# ---- helpers ----------------------------------------------------------------------------------------------------
def _sets(*items: str) -> list[str]:
    out: list[str] = []
    for s in [*NO_WATCHDOG, *items]:
        out += ["--set", s]
    return out


def _fault_options(side: str, seed: int, low: float, high: float) -> list[str]:
    """A seeded fault rate per kind of call for `side` (source | target)."""
    rng = random.Random(f"{side}:{seed}")
    rates = [f"{side}.storage_options.fail_{k}={rng.uniform(low, high):.3f}" for k in faulty_fs.KINDS]
    return [f"{side}.storage_options.seed={seed}", *rates]


def _run(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _dataset_files(files: dict[str, bytes]) -> dict[str, bytes]:
    prefix = DATASET_DIR + "/"
    return {k[len(prefix):]: v for k, v in files.items() if k.startswith(prefix)}


def _sha(files: dict[str, bytes]) -> dict[str, str]:
    return {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}


def _assert_published_like_reference(dest: Dest, reference: dict[str, bytes]) -> dict[str, bytes]:
    files = dest.files()
    assert not [k for k in files if ".tmp-" in k], sorted(files)
    assert _sha(_dataset_files(files)) == _sha(reference)  # shards, dataset_info.json, features.json; nothing else
    assert "commit.json" in files and "run.lock" not in files
    ledger = json.loads(files["ledger.json"])
    assert ledger["complete"] and len(ledger["shards"]) == 4
    return files


# ---- 1. transient faults: retried, quiet, same bytes --------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_transient_faults_are_retried_and_output_is_identical(seed, source, reference, tmp_path, capsys,
                                                               cleanup_memory):
    dest = _dest(("memory", "local")[seed % 2], tmp_path)
    cleanup_memory.append(dest)
    tfds = seed % 5 == 0  # the tfds read-back of a non-local output downloads it: retried `get`s as well
    before = sum(storage.retry_stats().values())
    rc, out, err = _run(capsys, "run", f"faulty://{source}", dest.url, *_sets(
        f"validate.tfds_readback={str(tfds).lower()}", *_fault_options("source", seed, 0.15, 0.35),
        *_fault_options("target", seed + 1000, 0.15, 0.35), *dest.options()))
    assert rc == 0, err
    assert err == "" and "validation passed" in out
    injected = dict(faulty_fs.STATS)
    assert all(injected.get(k, 0) > 0 for k in faulty_fs.KINDS), injected
    assert any(k == "write" for k, _, _ in faulty_fs.FAULTS)  # torn writes among them
    assert sum(storage.retry_stats().values()) - before == sum(injected.values())  # every fault met a retry
    _assert_published_like_reference(dest, reference)
    rc, _, err = _run(capsys, "validate", dest.plain, "--no-tfds")
    assert rc == 0, err


# ---- 2. a fault that does not go away: bounded attempts, one line naming the URL -----------------------------------
@pytest.mark.parametrize("side", ["read", "write"])
def test_persistent_fault_gives_up_after_bounded_attempts(side, source, tmp_path, capsys, monkeypatch,
                                                          cleanup_memory):
    monkeypatch.setenv(storage.RETRY_ATTEMPTS_ENV, "4")
    dest = _dest("memory", tmp_path)
    cleanup_memory.append(dest)
    if side == "read":  # one source video keeps failing
        broken = "observation.images.top/chunk-000/file-002.mp4"
        opts = ["source.storage_options.broken=" + broken, "source.storage_options.broken_kind=read"]
        url = f"faulty://{source}/videos/{broken}"
    else:  # every write of one shard fails (torn)
        broken = SHARD.format(1)
        opts = ["target.storage_options.broken=" + broken, "target.storage_options.broken_kind=write"]
        url = f"{dest.url}/{DATASET_DIR}/{broken}"
    rc, _, err = _run(capsys, "run", f"faulty://{source}", dest.url,
                      *_sets("validate.tfds_readback=false", *opts, *dest.options()))
    assert rc == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error[RR60"), err
    assert url in lines[0] and "gave up after 4 attempts" in lines[0], lines[0]
    hits = [f for f in faulty_fs.FAULTS if broken in f[2]]
    assert len(hits) == 4, hits  # the first read/write and 3 retries, then it stopped
    files = dest.files()
    assert "commit.json" not in files and "run.lock" not in files
    if side == "write":  # neither the shard nor a torn temp of it is left
        assert not [k for k in files if broken in k], sorted(files)


# ---- 3. torn writes: killed mid-write, never visible as committed, resumed to the same bytes --------------------
TORN_TARGETS = {  # what is being written when the process dies: crash plan (path, nth matching write)
    "shard": lambda seed: (SHARD.format(seed % 4), 1),
    "dataset_info": lambda seed: ("dataset_info.json", 1),
    "ledger": lambda seed: ("ledger.json", 2),  # the first one is written before any shard
    "progress": lambda seed: ("progress.jsonl", 2),
    "commit": lambda seed: ("commit.json", 1),
}


def _torn_case(seed: int) -> tuple[str, str]:
    """Seed -> (what dies mid-write, backend): seeds 0-4 crash in-process on memory://, 5-9 SIGKILL a subprocess
    writing to the local disk, each of the five targets once per backend."""
    return list(TORN_TARGETS)[seed % 5], ("memory", "local")[(seed // 5) % 2]


def _check_nothing_partial(files: dict[str, bytes], reference: dict[str, bytes], torn_name: str) -> None:
    """Every file under a final name is whole: dataset files equal the clean run's, JSON files parse; the torn
    bytes are only under a temp name."""
    for name, data in _dataset_files(files).items():
        if ".tmp-" not in name:
            assert data == reference[name], f"{name} is visible with {len(data)} partial bytes"
    for name in ("ledger.json", "commit.json", "job.json", "run.lock", "inventory.json"):
        if name in files:
            json.loads(files[name])
    if "progress.jsonl" in files:
        [json.loads(x) for x in files["progress.jsonl"].decode().splitlines()]
    torn = [k for k in files if f"{torn_name}.tmp-" in k]
    assert torn, f"no torn temp of {torn_name}: the crash did not happen mid-write ({sorted(files)})"
    if torn_name in reference:
        assert all(reference[torn_name].startswith(files[k]) and len(files[k]) < len(reference[torn_name])
                   for k in torn)


@pytest.mark.parametrize("seed", SEEDS)
def test_torn_write_is_never_visible_and_resume_completes(seed, source, reference, tmp_path, capsys, monkeypatch,
                                                          cleanup_memory):
    target, backend = _torn_case(seed)
    dest = _dest(backend, tmp_path)
    cleanup_memory.append(dest)
    torn_name, nth = TORN_TARGETS[target](seed)
    rng = random.Random(seed)
    plan = {"path": torn_name, "kind": "write", "nth": nth, "fraction": round(rng.uniform(0.1, 0.9), 3),
            "mode": "raise" if backend == "memory" else "kill"}
    args = ["run", f"faulty://{source}", dest.url, *_sets(
        "validate.tfds_readback=false", *_fault_options("source", seed, 0.0, 0.15),
        *_fault_options("target", seed + 1000, 0.0, 0.15), *dest.options())]
    if backend == "memory":
        monkeypatch.setenv(faulty_fs.CRASH_ENV, json.dumps(plan))
        with pytest.raises(faulty_fs.SimulatedCrash):
            main(args)
        monkeypatch.delenv(faulty_fs.CRASH_ENV)
    else:
        env = {**os.environ, faulty_fs.CRASH_ENV: json.dumps(plan)}
        proc = subprocess.run([sys.executable, "-c", BOOT, *args], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    files = dest.files()
    _check_nothing_partial(files, reference, torn_name)
    if target in ("shard", "dataset_info", "commit"):  # written once: its final name does not exist yet
        prefix = f"{DATASET_DIR}/" if target != "commit" else ""
        assert f"{prefix}{torn_name}" not in files
    committed_before = {k for k in _dataset_files(files) if ".tfrecord-" in k and ".tmp-" not in k}

    # validate: an unfinished run fails (exit 3); one killed while publishing has a complete, valid dataset
    finished = f"{DATASET_DIR}/dataset_info.json" in files
    rc, _, err = _run(capsys, "validate", dest.plain, "--no-tfds")
    assert rc == (0 if finished else 3), err
    if not finished:
        assert "dataset_info.json or features.json missing" in err and "Traceback" not in err

    rc, out, err = _run(capsys, "run", f"faulty://{source}", dest.url, *args[3:], "--resume")
    assert rc == 0, err
    assert "validation passed" in out
    files = _assert_published_like_reference(dest, reference)
    resumed = {SHARD.format(i) for i in json.loads(files["ledger.json"])["resumed_shards"]}
    assert resumed <= committed_before
    if target == "shard":
        assert torn_name not in resumed
    rc, _, err = _run(capsys, "validate", dest.plain, "--no-tfds")
    assert rc == 0, err


# ---- 4. a plain local destination: SIGKILL while a shard's temp file is open ---------------------------------------
@pytest.mark.parametrize("seed", SEEDS[:2])
def test_local_destination_killed_mid_shard(seed, source, clean_run, reference, tmp_path, capsys):
    """The source makes the subprocess die when it starts reading the second episode of a two-episode shard: the
    local writer's temp file holds the first one, the final name must not exist."""
    out = tmp_path / "out"
    ledger = json.loads((clean_run / "ledger.json").read_text())
    pairs = [s for s in ledger["shards"] if len(s["episodes"]) == 2]
    shard = pairs[seed % len(pairs)]
    second = shard["episodes"][1][0]
    plan = {"path": f"file-{second:03d}.mp4", "kind": "read", "nth": 1, "mode": "kill"}
    args = ["run", f"faulty://{source}", str(out), *_sets("validate.tfds_readback=false",
                                                           *_fault_options("source", seed, 0.0, 0.15))]
    env = {**os.environ, faulty_fs.CRASH_ENV: json.dumps(plan)}
    proc = subprocess.run([sys.executable, "-c", BOOT, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    ds = out / DATASET_DIR
    assert not (ds / shard["filename"]).exists()
    assert list(ds.glob(shard["filename"] + ".tmp-*")), sorted(p.name for p in ds.iterdir())
    for p in ds.iterdir():
        if ".tmp-" not in p.name:
            assert p.read_bytes() == reference[p.name], f"{p.name} is visible with partial bytes"
    rc, _, err = _run(capsys, "validate", str(out), "--no-tfds")
    assert rc == 3 and "dataset_info.json or features.json missing" in err
    rc, _, err = _run(capsys, "run", f"faulty://{source}", str(out), *args[3:], "--resume")
    assert rc == 0, err
    assert {p.name: p.read_bytes() for p in sorted(ds.iterdir())} == reference  # temps removed, same bytes
    assert not (out / "run.lock").exists() and (out / "commit.json").exists()


# ---- 5. two runs on one destination: exactly one publishes, the other exits 4 -------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_concurrent_runs_exactly_one_publishes(seed, source, reference, tmp_path, capsys, cleanup_memory):
    """Run A (a thread) is frozen at its first write after taking the lock; run B, started then, must exit 4 in one
    line naming A's lock without writing anything; A then finishes and publishes. Both meet transient faults."""
    dest = _dest(("memory", "local")[seed % 2], tmp_path)
    cleanup_memory.append(dest)
    args = ["run", f"faulty://{source}", dest.url, *_sets(
        "validate.tfds_readback=false", *_fault_options("source", seed, 0.0, 0.2),
        *_fault_options("target", seed + 1000, 0.0, 0.2), *dest.options())]
    hold = faulty_fs.HOLDS.setdefault("inventory.json", faulty_fs.Hold())
    result: dict[str, Any] = {}
    a = threading.Thread(target=lambda: result.setdefault("rc", main(args)), daemon=True)
    capsys.readouterr()
    a.start()
    try:
        while not hold.reached.wait(0.05) and a.is_alive():
            pass
        assert hold.reached.is_set(), f"run A ended before its first write: {capsys.readouterr().err}"
        before = dest.files()
        holder = json.loads(before["run.lock"])["run_id"]
        rc, _, err = _run(capsys, *args)
        assert rc == 4, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "RR403" in lines[0] and holder in lines[0], err
        assert dest.files() == before  # B wrote nothing
    finally:
        hold.release.set()
        a.join(120)
    assert result.get("rc") == 0, capsys.readouterr().err
    _assert_published_like_reference(dest, reference)


# ---- known gaps in files this suite does not own (strict: they fail once fixed, then drop the marker) -------------
def _crash_in_process(source: Path, dest: Dest, monkeypatch, path: str, nth: int) -> list[str]:
    args = ["run", f"faulty://{source}", dest.url, *_sets("validate.tfds_readback=false", *dest.options())]
    monkeypatch.setenv(faulty_fs.CRASH_ENV, json.dumps({"path": path, "nth": nth, "mode": "raise"}))
    with pytest.raises(faulty_fs.SimulatedCrash):
        main(args)
    monkeypatch.delenv(faulty_fs.CRASH_ENV)
    return args


def test_validate_names_the_missing_shard_of_an_unfinished_run(source, tmp_path, capsys, monkeypatch,
                                                               cleanup_memory):
    dest = _dest("memory", tmp_path)
    cleanup_memory.append(dest)
    _crash_in_process(source, dest, monkeypatch, SHARD.format(2), 1)
    rc, _, err = _run(capsys, "validate", dest.plain, "--no-tfds")
    assert rc == 3 and SHARD.format(2) in err, err


def test_overwrite_after_a_kill_mid_write(source, reference, tmp_path, capsys, monkeypatch, cleanup_memory):
    dest = _dest("memory", tmp_path)
    cleanup_memory.append(dest)
    args = _crash_in_process(source, dest, monkeypatch, "ledger.json", 2)
    assert [k for k in dest.files() if k.startswith("ledger.json.tmp-")]
    rc, _, err = _run(capsys, *args, "--overwrite")
    assert rc == 0, err
    _assert_published_like_reference(dest, reference)
