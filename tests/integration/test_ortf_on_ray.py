"""ORTF on the Writer contract (issue #13): `--to ortf` on Ray writes the in-process bytes, a killed driver resumes
to them, `robo-ray validate` names a tampered file, and a quarantined episode leaves a readable, contiguous dataset.

The source (LeRobot v3.0, three episodes per file, an H.264 camera and a PNG camera, one episode that changes task)
is planned as 3 size-balanced units cut to `chunk_size=2`: 6 chunks, one of which holds per-step task ids that
finalize renumbers. The Ray runs connect to one `ray start` cluster for the module (tests/integration/test_ray_exec.py's
fixture); `created_at` is fixed so the manifest is deterministic."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from robo_ray.cli import main
from robo_ray.readers import open_reader
from tests.conftest import REPO, run_cli, sigkill_when, wait_for
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, corrupt_video, write_lerobot_dataset
from tests.integration.test_ray_exec import _worker_pids, cluster  # noqa: F401 - the module's Ray cluster

pytestmark = pytest.mark.timeout(300)

SETS = ["target.options.chunk_size=2", "target.options.created_at=2025-01-01T00:00:00Z"]
TASKS = [["pick"], ["pick"], ["place"], ["wipe"], ["place", "wipe"], ["pick"], ["wipe"], ["place"], ["pick"]]
N_UNITS = 6  # [0 1] [2] [3 4] [5] [6 7] [8]


def _sets(*extra: str) -> list[str]:
    out: list[str] = []
    for s in [*SETS, *extra]:
        out += ["--set", s]
    return out


def _files(out: Path) -> dict[str, str]:
    """sha256 of every file of the ORTF dataset (data/, meta/, videos/), by relative name."""
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for top in ("data", "meta", "videos") for p in sorted((out / top).rglob("*")) if p.is_file()}


def _ledger(out: Path) -> dict:
    return json.loads((out / "ledger.json").read_text())


def _run(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return write_lerobot_dataset(tmp_path_factory.mktemp("ortf_ray") / "src", DatasetSpec(
        version="v3.0", episode_lengths=[12, 10, 14, 11, 13, 9, 12, 10, 11], fps=20, episodes_per_file=3,
        with_reward_done=True, tasks_per_episode=TASKS,
        cameras=[CameraSpec("observation.images.top"), CameraSpec("observation.images.wrist", storage="image")]))


@pytest.fixture(scope="module")
def reference(source, tmp_path_factory) -> Path:
    """The in-process run (no Ray): the bytes every Ray run must reproduce."""
    out = tmp_path_factory.mktemp("ortf_ref") / "out"
    proc = run_cli("run", str(source), str(out), "--to", "ortf", *_sets())
    assert proc.returncode == 0, proc.stderr
    return out


def test_in_process_output_is_chunked_renumbered_and_reads_back(source, reference):
    ledger = _ledger(reference)
    assert [s["shard_index"] for s in ledger["shards"]] == list(range(N_UNITS))
    assert [[e for e, _ in s["episodes"]] for s in ledger["shards"]] == [[0, 1], [2], [3, 4], [5], [6, 7], [8]]
    renumbered = [s for s in ledger["shards"] if s["extra"]["step_tasks"]]
    assert [s["shard_index"] for s in renumbered] == [2]  # the chunk of the episode that changes task
    table = pq.read_table(reference / "data/chunk-002/steps.parquet")
    assert "task_id" in table.column_names
    assert "task_id" not in pq.read_schema(reference / "data/chunk-000/steps.parquet").names
    src, out = open_reader(str(source)), open_reader(str(reference), "ortf")
    inv = out.discover()
    assert not inv.findings and [r.episode_index for r in inv.refs] == list(range(9))
    for ref, sref in zip(inv.refs, src.discover().refs):  # global task ids: every step's instruction survives
        assert out.load_episode(ref).step_tasks == src.load_episode(sref).step_tasks, ref.episode_index
    eps = pq.read_table(reference / "meta/episodes.parquet").to_pydict()
    assert eps["start_step"][1:] == eps["end_step"][:-1] and eps["start_step"][0] == 0
    assert eps["chunk_id"] == [0, 0, 1, 2, 2, 3, 4, 4, 5]


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
@pytest.mark.parametrize("mode", [["--actors", "2"], ["--mode", "safe"]], ids=["actors2", "safe"])
def test_ray_writes_the_in_process_bytes(cluster, source, reference, tmp_path, mode):  # noqa: F811
    want = _files(reference)
    assert len([n for n in want if n.startswith("videos/")]) == 18
    out = tmp_path / "out"
    proc = run_cli("run", str(source), str(out), "--to", "ortf", *mode, "--address", cluster.gcs, *_sets(),
                   env=cluster.env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert _files(out) == want
    assert sorted(_ledger(out)["attempts"].values()) == [1] * N_UNITS


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_killed_driver_resumes_only_the_missing_units(cluster, source, reference, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "robo_ray.cli", "run", str(source), str(out), "--to", "ortf", "--actors", "2",
           "--address", cluster.gcs, *_sets()]
    env = dict(cluster.env, ROBO_RAY_FAULT_DELAY_S="3.0")  # every unit sleeps first: the kill lands mid-run
    # (3 s: ledger.json is rewritten at most every second, longer when a rewrite is slow; see UnitLedger)
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sigkill_when(proc, lambda: (out / "ledger.json").exists() and len(_ledger(out)["shards"]) >= 1, 150,
                 "a committed unit")
    wait_for(lambda: not _worker_pids(cluster), 60, "the killed job's actors to exit", step=0.5)
    ledger = _ledger(out)
    assert not ledger["complete"] and not (out / "meta/manifest.json").exists()
    done_before = sorted(s["shard_index"] for s in ledger["shards"])
    assert 1 <= len(done_before) < N_UNITS, done_before
    # files of the committed units are kept as they are (a chunk finalize renumbers is rewritten by design)
    kept = {f["name"] for s in ledger["shards"] for f in s["files"]}
    kept |= {s["filename"] for s in ledger["shards"] if s["filename"] and not s["extra"]["step_tasks"]}
    stat_before = {n: (out / n).stat() for n in kept}
    rc, _, err = _run(capsys, "validate", str(out))  # not committed: says so, naming the units still missing
    missing = [f"data/chunk-{i:03d}/steps.parquet" for i in range(N_UNITS) if i not in done_before]
    assert rc == 3 and "meta/manifest.json missing" in err and all(m in err for m in missing), err

    r = run_cli("run", str(source), str(out), "--to", "ortf", "--actors", "2", "--address", cluster.gcs,
                "--resume", *_sets(), env=cluster.env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    final = _ledger(out)
    assert final["complete"] and final["resumed_shards"] == done_before
    assert sorted(int(k) for k in final["attempts"]) == sorted(set(range(N_UNITS)) - set(done_before))
    for n, st in stat_before.items():
        now = (out / n).stat()
        assert (now.st_ino, now.st_mtime_ns) == (st.st_ino, st.st_mtime_ns), n
    assert f"resume: {len(done_before)} of {N_UNITS} shards already committed" in (out / "logs/convert.log").read_text()
    assert _files(out) == _files(reference)
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]


# ---- validate ------------------------------------------------------------------------------------------------------
def _flip_steps(out: Path) -> str:
    name = "data/chunk-002/steps.parquet"
    data = bytearray((out / name).read_bytes())
    data[len(data) // 2] ^= 0x01
    (out / name).write_bytes(bytes(data))
    return name


def _delete_mp4(out: Path) -> str:
    name = "videos/top/chunk-004/episode_000007.mp4"
    (out / name).unlink()
    return name


def _edit_episodes(field: str):
    def edit(out: Path) -> str:
        name = "meta/episodes.parquet"
        table = pq.read_table(out / name)
        rows = table.to_pylist()
        if field == "notes":  # consistent with everything else: only the rebuild from the ledger shows it
            rows[3]["operator_notes"] = "edited"
        else:
            rows[3]["length"] += 1
            rows[3]["end_step"] += 1
        pq.write_table(table.from_pylist(rows, schema=table.schema), out / name)
        return name
    return edit


TAMPER = {"flipped_byte_in_steps": _flip_steps, "deleted_mp4": _delete_mp4,
          "edited_episode_notes": _edit_episodes("notes"), "edited_episode_length": _edit_episodes("length")}


def test_validate_passes_on_the_output(reference, tmp_path, capsys):
    out = tmp_path / "copy"
    shutil.copytree(reference, out)
    rc, stdout, err = _run(capsys, "validate", str(out))
    assert rc == 0, err
    assert "validation passed: 9 episodes" in stdout
    report = (out / "validation_report.md").read_text()
    assert "ortf read-back" in report and "sample images" in report


@pytest.mark.parametrize("case", sorted(TAMPER))
def test_validate_names_the_tampered_file(reference, tmp_path, capsys, case):
    out = tmp_path / "copy"
    shutil.copytree(reference, out)
    name = TAMPER[case](out)
    rc, _, err = _run(capsys, "validate", str(out))
    assert rc == 3, err
    lines = [ln for ln in err.splitlines() if ln.startswith("validation failed")]
    assert len(lines) == 1 and name in lines[0], err
    assert "Traceback" not in err


# ---- quarantine --------------------------------------------------------------------------------------------------
def test_quarantined_episodes_leave_a_contiguous_readable_dataset(tmp_path, capsys):
    """Episode 1's first camera is missing, episode 2's second one (after the first was encoded), episode 3's
    first camera is cut: each is quarantined and leaves no file under a final name."""
    cams = [CameraSpec("observation.images.top"), CameraSpec("observation.images.wrist")]
    src = write_lerobot_dataset(tmp_path / "src", DatasetSpec(version="v2.1", episode_lengths=[6, 7, 8, 5, 9],
                                                              cameras=cams))
    videos = src / "videos/chunk-000"
    corrupt_video(videos / "observation.images.top/episode_000001.mp4", "delete")
    corrupt_video(videos / "observation.images.wrist/episode_000002.mp4", "delete")
    corrupt_video(videos / "observation.images.top/episode_000003.mp4", "truncate")
    out = tmp_path / "ortf"
    rc, _, err = _run(capsys, "run", str(src), str(out), "--to", "ortf", *_sets())
    assert rc == 3, err
    for ep in (1, 2, 3):
        assert f"episode={ep}" in err and "quarantined[EP" in err
    assert "quarantined[EP101] episode=1" in err and "episode_000001.mp4" in err
    assert not list(out.rglob("episode_00000[123].mp4")) and not list(out.rglob("*.tmp-*"))
    reader = open_reader(str(out), "ortf")
    inv = reader.discover()
    assert not [f for f in inv.findings if f.level == "error"], inv.findings
    assert [(r.episode_index, r.length) for r in inv.refs] == [(0, 6), (4, 9)]
    for ref in inv.refs:
        assert reader.load_episode(ref).length == ref.length
    eps = pq.read_table(out / "meta/episodes.parquet").to_pydict()
    assert (eps["episode_id"], eps["start_step"], eps["end_step"]) == (["000000", "000004"], [0, 6], [6, 15])
    assert "## Quarantined Episodes" in (out / "final_report.md").read_text()
    rc, _, err = _run(capsys, "validate", str(out))
    assert rc == 0, err  # quarantines are accounted for: the written dataset itself is valid


def test_missing_frame_rate_is_refused_naming_the_option(tmp_path, capsys):
    from tests.fixtures import minari_gen

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dataset_id = minari_gen.make_dataset(tmp_path, "tuple", "arrow")
    src = tmp_path.joinpath(*dataset_id.split("/"))
    rc, _, err = _run(capsys, "run", str(src), str(tmp_path / "out"), "--to", "ortf")
    assert rc == 2 and "--set target.options.fps=" in err and "Traceback" not in err, err
    assert not (tmp_path / "out" / "data").exists()

