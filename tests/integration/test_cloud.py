"""Cloud storage end to end: S3 (moto server) and GCS (gcp-storage-emulator) on 127.0.0.1, no mocks in robo-ray.

Acceptance (issue "Cloud storage: S3, GCS and the Hugging Face Hub, bucket to bucket"):
1. test_s3_to_gcs_matches_local: a LeRobot v3.0 sample on S3 -> GCS; the output downloaded from GCS loads with
   tfds and equals a local-to-local conversion byte for byte; sources were read with ranged GETs only.
2. test_gcs_to_s3_on_ray_two_actors: a v3.0 dataset (4 units) on GCS -> S3 through Ray with 2 actors.
3. test_kill_driver_then_resume_on_s3: SIGKILL of the driver mid-run, `--resume` on S3, same shards as clean.
4. test_secret_appears_nowhere: with an access key and secret set (environment and storage options), every file
   the Ray run wrote (downloaded from S3), Ray's session logs and the CLI's stdout/stderr do not contain it.
5. test_unreachable_or_missing_bucket_one_line: one `error[RR60x]` line naming the URL, exit != 0, no hang
   (S3 and GCS endpoints on a closed loopback port, the Hub via HF_ENDPOINT; missing S3 and GCS buckets).
Also: transient errors are retried (injected 503/500/resets), a permanent error names the URL, conditional
create of the commit marker, streamed multipart upload to the final key, hf:// routing, redaction helpers.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from robo_ray.config import load_config
from robo_ray.stages.journal import read_ledger
from robo_ray.executors.in_process import InProcessExecutor
from robo_ray.stages.pipeline import run_pipeline
from tests.conftest import REPO, load_rlds, run_cli, sigkill_when
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset
from tests.fixtures.servers import FaultRule, free_port, gcs_server, s3_server  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("cloud"), pytest.mark.timeout(300)]

PUSHER = REPO / "examples" / "lerobot_v30_pusher"  # written by lerobot 0.4.4: v3.0, 4 episodes, 2 AV1 cameras
SETS = ["validate.tfds_readback=false"]  # the tests read the output back with tfds themselves
SRC_BUCKET, OUT_BUCKET = "cloud-src", "cloud-out"
SECRET = "SuperSecretValue123"
ACCESS_KEY = "AKIAROBORAYTESTKEY42"


# ---- helpers ----------------------------------------------------------------------------------------------------
def _sets(*extra: str) -> list[str]:
    out: list[str] = []
    for s in [*SETS, *extra]:
        out += ["--set", s]
    return out


def _version_dir(root: Path) -> Path:
    return next((root / "rlds").glob("*/*"))


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


def _download(fs, prefix: str, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    fs.invalidate_cache()
    fs.get(prefix.rstrip("/") + "/", str(dest) + "/", recursive=True)
    return dest


def _local_reference(src: Path, out: Path) -> dict[str, bytes]:
    cfg = load_config(None, SETS, **{"source.url": str(src), "target.url": str(out)})
    outcome = run_pipeline(cfg, overwrite=True, executor=InProcessExecutor())
    assert outcome.exit_code == 0, outcome.message
    return _files(_version_dir(out))


def _one_error_line(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if x.strip()]
    assert len(lines) == 1, stderr[-3000:]
    assert lines[0].startswith("error[RR"), lines[0]
    return lines[0]


# ---- module fixtures: datasets on the servers, local references ---------------------------------------------------
@pytest.fixture(scope="module")
def env(s3_server, gcs_server):  # noqa: F811
    """Environment of a CLI subprocess that talks to both servers (no Ray address: Ray runs start in-process)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ROBO_RAY_FAULT_")) and k != "RAY_ADDRESS"}
    e.update(s3_server.env())
    e.update(gcs_server.env())
    e["ROBO_RAY_STATUS_INTERVAL_S"] = "0"
    return e


@pytest.fixture(scope="module")
def sources(s3_server, gcs_server, tmp_path_factory):  # noqa: F811
    """The pusher sample on S3; a generated v3.0 dataset (12 episodes, 3 per file -> 4 units) on S3 and GCS."""
    base = tmp_path_factory.mktemp("cloud_src")
    cams = [CameraSpec(key="observation.images.top", codec="h264"),
            CameraSpec(key="observation.images.wrist", codec="h264")]
    v30 = write_lerobot_dataset(base / "v30_12ep", DatasetSpec(
        version="v3.0", episode_lengths=[15, 18, 12, 20, 14, 16, 19, 13, 17, 15, 14, 16], fps=20, cameras=cams,
        episodes_per_file=3))
    s3, gcs = s3_server.fs(), gcs_server.fs()
    s3_server.make_bucket(SRC_BUCKET)
    s3_server.make_bucket(OUT_BUCKET)
    gcs_server.make_bucket(SRC_BUCKET)
    gcs_server.make_bucket(OUT_BUCKET)
    s3.put(str(PUSHER), f"{SRC_BUCKET}/in/", recursive=True)
    s3.put(str(v30), f"{SRC_BUCKET}/in/", recursive=True)
    gcs.put(str(v30), f"{SRC_BUCKET}/in/", recursive=True)
    return {"pusher": PUSHER, "v30": v30}


@pytest.fixture(scope="module")
def reference(sources, tmp_path_factory):
    """Local-to-local conversions: the bytes every cloud run must reproduce."""
    return {k: _local_reference(src, tmp_path_factory.mktemp(f"ref_{k}")) for k, src in sources.items()}


# ---- 1. S3 -> GCS equals local -> local ------------------------------------------------------------------------------
def test_s3_to_gcs_matches_local(s3_server, gcs_server, env, sources, reference, tmp_path):  # noqa: F811
    s3_server.faults.clear()
    r = run_cli("run", f"s3://{SRC_BUCKET}/in/lerobot_v30_pusher", f"gs://{OUT_BUCKET}/pusher", *_sets(),
                env=env, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "validation passed" in r.stdout
    # streamed, not downloaded: every read of a parquet or MP4 object was a ranged GET
    data_gets = [(p, rng) for m, p, rng in s3_server.faults.requests
                 if m == "GET" and p.endswith((".parquet", ".mp4"))]
    assert data_gets and all(rng.startswith("bytes=") for _, rng in data_gets), data_gets
    out = _download(gcs_server.fs(), f"{OUT_BUCKET}/pusher", tmp_path / "out")
    assert not list(out.rglob("*.tmp-*"))
    got = _files(_version_dir(out))
    assert sorted(got) == sorted(reference["pusher"])
    assert got == reference["pusher"]  # shards, dataset_info.json, features.json: byte for byte
    episodes = load_rlds(_version_dir(out))
    assert [int(e["episode_metadata"]["episode_id"]) for e in episodes] == [0, 1, 2, 3]
    assert sum(len(e["steps"]["is_first"]) for e in episodes) == 420
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["complete"] and len(ledger["shards"]) == 4  # one file of 4 episodes: plan.min_shards units


# ---- 2 + 4. GCS -> S3 on Ray with 2 actors; no secret anywhere --------------------------------------------------------
@pytest.fixture(scope="module")
def ray_run(s3_server, env, sources, tmp_path_factory):  # noqa: F811
    """One Ray run (2 actors, in-process cluster in a private temp dir) with a recognisable secret set in the
    environment *and* in the target's storage options."""
    ray_tmp = Path(f"/tmp/rrc-{uuid.uuid4().hex[:8]}")  # short: Ray puts unix sockets under it
    e = dict(env, RAY_TMPDIR=str(ray_tmp), AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET,
             ROBO_RAY_STATUS_INTERVAL_S="2")
    e.pop("RAY_AUTH_MODE", None)
    try:
        t0 = time.monotonic()
        r = run_cli("run", f"gs://{SRC_BUCKET}/in/v30_12ep", f"s3://{OUT_BUCKET}/ray", "--actors", "2",
                    *_sets(f"target.storage_options.key={ACCESS_KEY}", f"target.storage_options.secret={SECRET}",
                           f"target.storage_options.client_kwargs.endpoint_url={s3_server.endpoint}"),
                    env=e, timeout=280)
        seconds = time.monotonic() - t0
        out = _download(s3_server.fs(), f"{OUT_BUCKET}/ray", tmp_path_factory.mktemp("ray_out"))
        ray_files = {p: p.read_bytes() for p in ray_tmp.rglob("*") if p.is_file() and not p.is_socket()}
        yield {"result": r, "out": out, "ray_files": ray_files, "seconds": seconds}
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_gcs_to_s3_on_ray_two_actors(ray_run, reference):
    r, out = ray_run["result"], ray_run["out"]
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "validation passed" in r.stdout
    assert "2 actor(s)" in (out / "final_report.md").read_text()
    got = _files(_version_dir(out))
    assert sum(".tfrecord-" in n for n in got) == 4
    assert got == reference["v30"]
    episodes = load_rlds(_version_dir(out))
    assert [int(e["episode_metadata"]["episode_id"]) for e in episodes] == list(range(12))
    job = json.loads((out / "job.json").read_text())
    assert job["target"]["storage_options"]["secret"] == "***"


def test_secret_appears_nowhere(ray_run):
    r, out = ray_run["result"], ray_run["out"]
    assert r.returncode == 0, r.stderr[-3000:]
    written = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert len(written) >= 15 and any("logs" in p.parts for p in written)
    assert ray_run["ray_files"], "Ray's session directory was not where the test expected it"
    for where, blob in [("stdout", r.stdout.encode()), ("stderr", r.stderr.encode()),
                        *[(str(p), b) for p, b in written.items()], *[(str(p), b) for p, b in
                                                                       ray_run["ray_files"].items()]]:
        assert SECRET.encode() not in blob, f"the secret leaked into {where}"
    # the access key id is masked where the run wrote its config
    assert ACCESS_KEY.encode() not in (out / "job.json").read_bytes()


# ---- 3. SIGKILL of the driver, then --resume on S3 --------------------------------------------------------------------
def _s3_ledger(fs, prefix: str) -> dict | None:
    """ledger.json plus the journal parts (one object per recorded unit: ledger.json itself is only written at the
    start and the end on object stores, robo_ray/stages/journal.py)."""
    fs.invalidate_cache()
    return read_ledger(fs, prefix)


def test_kill_driver_then_resume_on_s3(s3_server, env, sources, reference, tmp_path):  # noqa: F811
    prefix = f"{OUT_BUCKET}/resume"
    fs = s3_server.fs()
    cmd = [sys.executable, "-m", "robo_ray.cli", "run", f"s3://{SRC_BUCKET}/in/v30_12ep", f"s3://{prefix}",
           *_sets()]
    s3_server.faults.clear()
    slow = s3_server.faults.add(FaultRule(("PUT",), ".tfrecord-", "delay", delay_s=1.2))
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sigkill_when(proc, lambda: len((_s3_ledger(fs, prefix) or {}).get("shards", [])) >= 2, 120,
                 "2 shards committed on S3")
    s3_server.faults.wait_idle()
    s3_server.faults.clear()
    assert slow.hits >= 2
    led = _s3_ledger(fs, prefix)
    assert led is not None and not led["complete"]
    done_before = sorted(s["shard_index"] for s in led["shards"])
    assert 2 <= len(done_before) < 4

    r = run_cli("run", f"s3://{SRC_BUCKET}/in/v30_12ep", f"s3://{prefix}", "--resume", *_sets(), env=env,
                timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    final = _s3_ledger(fs, prefix)
    assert final["complete"] and final["resumed_shards"] == done_before
    shard_puts = [p for m, p, _ in s3_server.faults.requests if m in ("PUT", "POST") and ".tfrecord-" in p]
    assert len({p for p in shard_puts}) == 4 - len(done_before), shard_puts  # committed shards not rewritten
    out = _download(fs, prefix, tmp_path / "out")
    assert _files(_version_dir(out)) == reference["v30"]
    progress = [json.loads(x) for x in (out / "progress.jsonl").read_text().splitlines()]
    assert sorted(p["episode_id"] for p in progress if p["status"] == "completed") == list(range(12))
    assert not (out / "journal").exists() or not any((out / "journal").iterdir())  # merged into progress.jsonl


# ---- 5. unreachable endpoint, missing bucket --------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["s3-unreachable", "gs-unreachable", "hf-unreachable", "s3-no-bucket",
                                  "gs-no-bucket"])
def test_unreachable_or_missing_bucket_one_line(env, sources, tmp_path, case):
    e = dict(env)
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    if case == "s3-unreachable":
        e.update(AWS_ENDPOINT_URL=dead, AWS_MAX_ATTEMPTS="2")
        src, dst, url, code = f"s3://{SRC_BUCKET}/in/v30_12ep", str(tmp_path / "out"), "s3://cloud-src", "RR602"
    elif case == "gs-unreachable":
        e.update(STORAGE_EMULATOR_HOST=dead, ROBO_RAY_STORAGE_PROBE_TIMEOUT_S="3")
        src, dst, url, code = str(sources["pusher"]), f"gs://{OUT_BUCKET}/x", f"gs://{OUT_BUCKET}/x", "RR602"
    elif case == "hf-unreachable":  # HfFileSystem honours HF_ENDPOINT
        e.update(HF_ENDPOINT=dead)
        src, dst, code = "hf://datasets/lerobot/pusht@v3.0", str(tmp_path / "out"), "RR602"
        url = "hf://datasets/lerobot/pusht"
    elif case == "s3-no-bucket":
        src, dst, url, code = "s3://no-such-bucket/in/ds", str(tmp_path / "out"), "s3://no-such-bucket", "RR601"
    else:
        src, dst, url, code = str(sources["pusher"]), "gs://no-such-bucket/out", "gs://no-such-bucket", "RR601"
    t0 = time.monotonic()
    r = run_cli("run", src, dst, *_sets(), env=e, timeout=90)
    seconds = time.monotonic() - t0
    assert r.returncode != 0
    line = _one_error_line(r.stderr)
    assert line.startswith(f"error[{code}]") and url in line, line
    assert seconds < 45, f"took {seconds:.0f}s"
    assert not (tmp_path / "out").exists()  # nothing written when the source is unreachable


# ---- retries and permanent errors -------------------------------------------------------------------------------------
def test_transient_errors_are_retried(s3_server, env, sources, reference, tmp_path):  # noqa: F811
    faults = s3_server.faults
    faults.clear()
    rules = [faults.add(FaultRule(("GET",), "file-000.parquet", "503", times=1)),
             faults.add(FaultRule(("GET",), ".mp4", "500", times=1)),
             faults.add(FaultRule(("GET",), "info.json", "reset", times=1)),
             faults.add(FaultRule(("PUT",), ".tfrecord-", "503", times=1)),
             faults.add(FaultRule(("PUT",), "ledger.json", "500", times=1))]
    r = run_cli("run", f"s3://{SRC_BUCKET}/in/lerobot_v30_pusher", f"s3://{OUT_BUCKET}/retry", *_sets(), env=env,
                timeout=240)
    faults.clear()
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert [x.hits for x in rules] == [1, 1, 1, 1, 1]
    assert r.stderr.strip() == ""  # retried quietly
    out = _download(s3_server.fs(), f"{OUT_BUCKET}/retry", tmp_path / "out")
    assert _files(_version_dir(out)) == reference["pusher"]


@pytest.mark.parametrize("side", ["write", "read"])
def test_permanent_error_names_the_url(s3_server, env, sources, side):  # noqa: F811
    faults = s3_server.faults
    faults.clear()
    if side == "write":  # every upload under the destination is refused
        faults.add(FaultRule(("PUT", "POST"), f"/{OUT_BUCKET}/denied/", "403"))
        args, code, url = (str(sources["pusher"]), f"s3://{OUT_BUCKET}/denied"), "RR603", f"s3://{OUT_BUCKET}/denied/"
    else:  # one source video keeps failing with 500 after the retries
        faults.add(FaultRule(("GET",), "observation.images.top/chunk-000/file-000.mp4", "500"))
        args, code = (f"s3://{SRC_BUCKET}/in/lerobot_v30_pusher", f"s3://{OUT_BUCKET}/broken"), "RR600"
        url = f"s3://{SRC_BUCKET}/in/lerobot_v30_pusher/videos/observation.images.top/chunk-000/file-000.mp4"
    try:
        r = run_cli("run", *args, *_sets(), env=dict(env, AWS_MAX_ATTEMPTS="2"), timeout=120)
    finally:
        faults.clear()
    assert r.returncode != 0
    line = _one_error_line(r.stderr)
    assert line.startswith(f"error[{code}]") and url in line, line


# ---- storage primitives on the real servers --------------------------------------------------------------------------
def test_conditional_create_lets_one_of_two_concurrent_writers_win(s3_server, tmp_path):  # noqa: F811
    from robo_ray.storage import create_exclusive, url_to_fs

    s3_server.make_bucket(OUT_BUCKET)
    targets = [url_to_fs(f"s3://{OUT_BUCKET}/marker-{uuid.uuid4().hex[:6]}", s3_server.storage_options()),
               url_to_fs(str(tmp_path / "local"))]
    for fs, root in targets:
        path = f"{root}/commit.json"
        results: list[str] = []
        barrier = threading.Barrier(4)

        def claim(i: int, fs=fs, path=path, results=results, barrier=barrier) -> None:
            barrier.wait()
            try:
                create_exclusive(fs, path, json.dumps({"run": i}).encode())
                results.append(f"won {i}")
            except FileExistsError:
                results.append("lost")

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results)[:3] == ["lost"] * 3 and sum(x.startswith("won") for x in results) == 1, results
        winner = int(results[[x.startswith("won") for x in results].index(True)].split()[1])
        assert json.loads(fs.cat_file(path)) == {"run": winner}


def test_gcs_emulator_ignores_if_generation_match(gcs_server, monkeypatch):  # noqa: F811
    """Evidence, kept as a canary: gcp-storage-emulator overwrites an object on an upload with ifGenerationMatch=0
    (real GCS answers 412), so the race below needs tests/fixtures/gcs_preconditions.py. When this fails, the
    emulator honours the precondition: race the publishers against it directly and drop the proxy."""
    from robo_ray.storage import create_exclusive, url_to_fs

    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    gcs_server.make_bucket(OUT_BUCKET)
    fs, root = url_to_fs(f"gs://{OUT_BUCKET}/canary-{uuid.uuid4().hex[:6]}", gcs_server.storage_options())
    create_exclusive(fs, f"{root}/commit.json", b"first")
    create_exclusive(fs, f"{root}/commit.json", b"second")  # GCS itself would raise FileExistsError here
    assert fs.cat_file(f"{root}/commit.json") == b"second"


def _race(publish, n: int = 2) -> tuple[list[int], dict[int, BaseException]]:
    """`publish(i)` in n threads released together: (winners, {loser: its exception})."""
    barrier, won, lost = threading.Barrier(n), [], {}

    def one(i: int) -> None:
        barrier.wait()
        try:
            publish(i)
            won.append(i)
        except Exception as exc:  # noqa: BLE001 - recorded, asserted by the caller
            lost[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return won, lost


@pytest.mark.parametrize("via", ["create_exclusive", "publisher"])
def test_gcs_commit_marker_race_one_publisher_wins(gcs_server, monkeypatch, via):  # noqa: F811
    """Two publishers race for one gs:// commit.json (ifGenerationMatch=0, enforced by the precondition proxy in
    front of the emulator): exactly one wins, the other gets the stable conflict (FileExistsError from
    create_exclusive; OutputConflict RR402 naming the winner from the Publisher), the object holds the winner's
    bytes, and every upload of the marker asked for the precondition."""
    from robo_ray.errors import OutputConflict
    from robo_ray.stages.destination import publish_commit_marker
    from robo_ray.storage import create_exclusive, url_to_fs
    from tests.fixtures.gcs_preconditions import GcsPreconditionProxy

    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    gcs_server.make_bucket(OUT_BUCKET)
    direct = gcs_server.fs()
    with GcsPreconditionProxy(gcs_server.endpoint) as proxy:
        for round_ in range(3):
            url = f"gs://{OUT_BUCKET}/race-{uuid.uuid4().hex[:6]}"
            fs, root = url_to_fs(url, {**gcs_server.storage_options(), "endpoint_url": proxy.endpoint})
            path = f"{root}/commit.json"

            def publish(i: int) -> None:
                if via == "create_exclusive":
                    create_exclusive(fs, path, json.dumps({"run_id": f"run-{i}"}).encode())
                else:
                    publish_commit_marker(fs, root, url, {"run_id": f"run-{i}"})  # what Publisher.finish calls

            won, lost = _race(publish)
            assert len(won) == 1 and len(lost) == 1, f"round {round_}: won {won}, lost {lost}"
            (loser, exc), = lost.items()
            if via == "create_exclusive":
                assert isinstance(exc, FileExistsError), repr(exc)
            else:
                assert isinstance(exc, OutputConflict) and exc.code == "RR402", repr(exc)
                assert f"published by another run (run-{won[0]})" in str(exc), str(exc)
            assert json.loads(direct.cat_file(path))["run_id"] == f"run-{won[0]}"  # the winner's bytes, as stored
            marker_uploads = [q for name, q in proxy.uploads if name == path.split("/", 1)[1]]
            assert len(marker_uploads) == 2 and all(q.get("ifGenerationMatch") == ["0"] for q in marker_uploads), \
                marker_uploads
            proxy.uploads.clear()


def test_commit_marker_refuses_a_second_publisher(s3_server, sources, monkeypatch):  # noqa: F811
    """Two runs raced on one S3 destination and the other one committed first: this run must not publish."""
    from robo_ray.errors import OutputConflict
    from robo_ray.stages.destination import COMMIT_MARKER
    from robo_ray.stages.publisher import Publisher
    from robo_ray.storage import create_exclusive, join

    prefix = f"{OUT_BUCKET}/race-{uuid.uuid4().hex[:6]}"
    opts = [f"target.storage_options.{k}={json.dumps(v)}" for k, v in s3_server.storage_options().items()]
    cfg = load_config(None, SETS + opts, **{"source.url": str(sources["pusher"]), "target.url": f"s3://{prefix}"})
    first = run_pipeline(cfg, executor=InProcessExecutor())
    assert first.exit_code == 0
    fs = s3_server.fs()
    marker = json.loads(fs.cat_file(f"{prefix}/commit.json"))
    assert marker["shards"] and marker["exit_code"] == 0
    with pytest.raises(FileExistsError):  # S3 enforces If-None-Match: * for the marker
        create_exclusive(fs, f"{prefix}/commit.json", b"{}")
    # job.json holds masked credentials, and a resume with the same (secret) options is still the same job
    job = json.loads(fs.cat_file(f"{prefix}/job.json"))
    assert job["target"]["storage_options"]["secret"] == "***"
    again = run_pipeline(cfg, resume=True, executor=InProcessExecutor())
    assert again.exit_code == 0, again.message
    assert json.loads(fs.cat_file(f"{prefix}/ledger.json"))["resumed_shards"] == [0, 1, 2, 3]
    assert json.loads(fs.cat_file(f"{prefix}/commit.json"))["run_id"] != marker["run_id"]  # published again

    original = Publisher._publish_commit_marker

    def other_run_commits_first(self, outcome, results):
        create_exclusive(self.fs, join(self.root, COMMIT_MARKER), b'{"run_id": "the-other-run"}')
        return original(self, outcome, results)

    monkeypatch.setattr(Publisher, "_publish_commit_marker", other_run_commits_first)
    with pytest.raises(OutputConflict, match="the-other-run"):
        run_pipeline(cfg, overwrite=True, executor=InProcessExecutor())
    assert json.loads(fs.cat_file(f"{prefix}/commit.json")) == {"run_id": "the-other-run"}


def test_streamed_upload_goes_to_the_final_key(s3_server, monkeypatch):  # noqa: F811
    """A shard larger than one upload block goes up as a multipart upload to its final key; an aborted one leaves
    no object behind (fsspec would otherwise commit a partial file on close/garbage collection)."""
    import robo_ray.storage as storage

    monkeypatch.setattr(storage.atomic, "UPLOAD_BLOCK", 5 << 20)
    fs, root = storage.url_to_fs(f"s3://{OUT_BUCKET}/upload-{uuid.uuid4().hex[:6]}", s3_server.storage_options())
    blob = os.urandom(11 << 20)
    s3_server.faults.clear()
    f = storage.open_upload(fs, f"{root}/big.bin")
    for i in range(0, len(blob), 1 << 20):
        f.write(blob[i:i + (1 << 20)])
    f.close()
    reqs = [(m, p) for m, p, _ in s3_server.faults.requests if "big.bin" in p]
    assert ("POST", f"/{root}/big.bin") in reqs and sum(m == "PUT" for m, _ in reqs) == 3  # 5 + 5 + 1 MiB parts
    assert fs.cat_file(f"{root}/big.bin") == blob
    g = storage.open_upload(fs, f"{root}/aborted.bin")
    g.write(blob)
    storage.discard_upload(g)
    del g
    fs.invalidate_cache()
    assert not fs.exists(f"{root}/aborted.bin")
    assert fs.call_s3("list_multipart_uploads", Bucket=OUT_BUCKET).get("Uploads") in (None, [])


# ---- hf:// routing (no network here) and redaction ---------------------------------------------------------------------
def test_hf_urls_route_to_hffilesystem_with_revision(monkeypatch):
    from huggingface_hub import HfFileSystem

    from robo_ray.errors import ConfigError
    from robo_ray.storage import url_to_fs

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # routing only: no network here (probe=False skips the Hub lookup)
    fs, root = url_to_fs("hf://datasets/lerobot/pusht", {"revision": "v3.0"}, probe=False)
    assert isinstance(fs, HfFileSystem) and root == "datasets/lerobot/pusht@v3.0"
    _, root = url_to_fs("hf://datasets/lerobot/pusht/meta", {"revision": "refs/pr/1"}, probe=False)
    assert root == "datasets/lerobot/pusht@refs%2Fpr%2F1/meta"
    _, root = url_to_fs("hf://datasets/lerobot/pusht@v2.1", probe=False)
    assert root == "datasets/lerobot/pusht@v2.1"
    with pytest.raises(ConfigError, match="revision"):
        url_to_fs("hf://datasets/lerobot/pusht@v2.1", {"revision": "v3.0"}, probe=False)


def test_redaction_helpers(tmp_path):
    from robo_ray.secrets import redact, redact_options, redact_url, register_options
    from robo_ray.storage import url_to_fs, write_text_atomic

    opts = {"key": ACCESS_KEY, "secret": SECRET, "token": "anon", "anon": False,
            "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "aws_session_token": "tok-123456789"},
            "config_kwargs": {"retries": {"max_attempts": 3}}}
    masked = redact_options(opts)
    assert masked["key"] == masked["secret"] == masked["client_kwargs"]["aws_session_token"] == "***"
    assert masked["token"] == "anon" and masked["anon"] is False
    assert masked["client_kwargs"]["endpoint_url"] == "http://127.0.0.1:9000"
    assert masked["config_kwargs"] == {"retries": {"max_attempts": 3}}
    assert redact_url("https://user:pw@host/x?X-Amz-Signature=abc&part=1") == \
        "https://user:***@host/x?X-Amz-Signature=***&part=1"
    cfg = load_config(None, [f"target.storage_options.secret={SECRET}"],
                      **{"source.url": "s3://a/b", "target.url": "gs://c/d"})
    assert SECRET not in json.dumps(cfg.safe_dump())
    register_options(opts)
    assert redact(f"failed with {SECRET} and {ACCESS_KEY}") == "failed with *** and ***"
    fs, root = url_to_fs(str(tmp_path))
    write_text_atomic(fs, f"{root}/report.md", f"secret={SECRET}\n")
    assert (tmp_path / "report.md").read_text() == "secret=***\n"
