"""The LeRobot v3.0 writer (`--to lerobot`, robo_ray/formats/lerobot/writer.py) in the project venv (no lerobot):

1. LeRobot v2.1 (generated: 2 cameras H.264 + AV1, reward/done, multi-task) -> v3.0, read back with robo-ray's
   LeRobot reader and PyAV: every low-dim value and task exact, frame counts, timestamps k/fps (parquet and video),
   every frame >= 30 dB PSNR against the generator's frame; the v3.0 files as lerobot wants them (info.json,
   tasks.parquet index, meta/episodes columns, stats.json);
2. Minari (raw pixels) -> LeRobot with --set target.options.fps; a rateless source without it and a float rate
   are refused (exit 2, one line naming the option);
3. a quarantined episode (deleted video) -> exit 3, indices contiguous over the written episodes (units after it
   renumbered, their ledger entries updated), the rest reads back;
4. RLDS with a nested action dict -> one float32 `action` whose names list the components;
5. SIGKILL mid-run + --resume -> the uninterrupted run's bytes (with a quarantine, so renumbering is resumed too);
6. `robo-ray validate` passes on an output and fails (exit 3) on a tampered data parquet;
7. `--actors 2` on Ray writes the in-process bytes (slow: starts Ray).
"""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from robo_ray.config import load_config
from robo_ray.readers import open_reader
from robo_ray.stages.pipeline import run_pipeline
from tests.conftest import REPO, psnr, run_cli
from tests.fixtures.lerobot_gen import (CameraSpec, DatasetSpec, dataset_tasks, expected_episode_data,
                                        expected_frame, frame_task_indices, write_lerobot_dataset)

pytestmark = pytest.mark.timeout(600)

TOP, WRIST = "observation.images.top", "observation.images.wrist"
SPEC = DatasetSpec(version="v2.1", episode_lengths=[30, 20, 25, 12], fps=20, with_reward_done=True,
                   cameras=[CameraSpec(TOP, "h264"), CameraSpec(WRIST, "av1")],
                   tasks_per_episode=[["pick"], ["place"], ["pick", "place"], ["stack"]])
QUARANTINE_SPEC = DatasetSpec(version="v2.1", episode_lengths=[12, 10, 14, 9, 11, 8], fps=15,
                              cameras=[CameraSpec(TOP, "h264")])
FAST = ["validate.tfds_readback=false"]


def _run(src: Path, dst: Path, *sets: str, fmt: str = "lerobot", **kw):
    cfg = load_config(None, [*FAST, *sets], **{"source.url": str(src), "target.url": str(dst),
                                               "target.format": fmt})
    return run_pipeline(cfg, stderr=io.StringIO(), **kw)


def _files(out: Path) -> dict[str, bytes]:
    """Every file of the LeRobot dataset (data/, meta/, videos/) by relative path."""
    return {str(p.relative_to(out)): p.read_bytes() for top in ("data", "meta", "videos")
            for p in sorted((out / top).rglob("*")) if p.is_file()}


def _decode(path: Path) -> list[tuple[float, np.ndarray]]:
    with av.open(str(path)) as c:
        return [(float(f.time), f.to_ndarray(format="rgb24")) for f in c.decode(c.streams.video[0])]


@pytest.fixture(scope="module")
def v21(tmp_path_factory) -> Path:
    return write_lerobot_dataset(tmp_path_factory.mktemp("lrw_src") / "v21", SPEC)


@pytest.fixture(scope="module")
def converted(v21, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lrw_out") / "out"
    # the encoder's output (settings in info.json); copied video: tests/integration/test_lerobot_copy.py
    outcome = _run(v21, out, "plan.min_shards=3", "target.options.reencode=true")
    assert outcome.exit_code == 0, outcome.message
    return out


@pytest.fixture(scope="module")
def quarantine_src(tmp_path_factory) -> Path:
    src = write_lerobot_dataset(tmp_path_factory.mktemp("lrw_q") / "src", QUARANTINE_SPEC)
    (src / "videos/chunk-000" / TOP / "episode_000001.mp4").unlink()  # episode 1: missing video (EP101)
    return src


# ---- 1. LeRobot v2.1 -> v3.0 round trip --------------------------------------------------------------------------
def test_v21_round_trip_values_frames_timestamps(converted):
    reader = open_reader(str(converted), "lerobot")
    inv = reader.discover()
    assert reader.version == "v3.0" and not [f for f in inv.findings if f.level == "error"], inv.findings
    assert [r.episode_index for r in inv.refs] == [0, 1, 2, 3]
    tasks, per_ep = dataset_tasks(SPEC)
    assert reader.tasks() == tasks  # the source's task table, same ids
    for k, ref in enumerate(inv.refs):
        n = SPEC.episode_lengths[k]
        ep = reader.load_episode(ref)
        assert ep.length == ref.length == n
        want = expected_episode_data(SPEC, k)
        for key in ("observation.state", "action", "next.reward", "next.done"):
            assert np.array_equal(ep.columns[key].reshape(want[key].shape), want[key]), (k, key)
        assert np.array_equal(ep.timestamps, (np.arange(n) / SPEC.fps).astype(np.float32).astype(np.float64))
        assert ep.step_tasks == [tasks[t] for t in frame_task_indices(SPEC, k)]
        assert list(ref.tasks) == per_ep[k]
        for cam_index, cam in enumerate(SPEC.cameras):
            vref = ref.video_map[cam.key]
            frames = [(t, f) for t, f in _decode(converted / vref.path)
                      if vref.from_timestamp - 1e-9 <= t < vref.to_timestamp - 1e-9]
            assert len(frames) == n, (k, cam.key)
            for i, (t, img) in enumerate(frames):
                assert abs(t - (vref.from_timestamp + i / SPEC.fps)) < 1e-9, (k, cam.key, i, t)
                ref_img = expected_frame(k, i, cam_index, cam.height, cam.width)
                assert psnr(img, ref_img) >= 30.0, (k, cam.key, i, psnr(img, ref_img))


def test_v3_files_as_lerobot_wants_them(v21, converted):
    info = json.loads((converted / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 20 and isinstance(info["fps"], int)
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (4, 87, 3)
    assert info["splits"] == {"train": "0:4"} and info["robot_type"] == SPEC.robot_type
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    feats = info["features"]
    assert list(feats) == ["observation.state", "action", TOP, WRIST, "next.reward", "next.done", "timestamp",
                           "frame_index", "episode_index", "index", "task_index"]
    src_feats = json.loads((v21 / "meta/info.json").read_text())["features"]
    assert feats["action"]["names"] == src_feats["action"]["names"]  # the source's names, kept
    assert feats["observation.state"]["names"] == src_feats["observation.state"]["names"]
    assert feats["next.done"] == {"dtype": "bool", "shape": [1], "names": None}
    top = feats[TOP]
    assert top["dtype"] == "video" and top["shape"] == [48, 64, 3] and top["names"] == ["height", "width", "channels"]
    assert {k: top["info"][k] for k in ("video.codec", "video.pix_fmt", "video.fps", "video.g", "video.crf")} == \
        {"video.codec": "av1", "video.pix_fmt": "yuv420p", "video.fps": 20, "video.g": 2, "video.crf": 30}
    tasks = pd.read_parquet(converted / "meta/tasks.parquet")
    assert tasks.index.name == "task" and list(tasks.index) == ["pick", "place", "stack"]
    assert list(tasks["task_index"]) == [0, 1, 2]
    # several units: one data parquet, one meta/episodes part and one MP4 per camera each, file index = unit index
    data_files = sorted((converted / "data").rglob("*.parquet"))
    assert [p.name for p in data_files] == ["file-000.parquet", "file-001.parquet", "file-002.parquet"]
    assert len(list((converted / "videos" / TOP).rglob("*.mp4"))) == 3
    eps = pd.concat([pd.read_parquet(p) for p in sorted((converted / "meta/episodes").rglob("*.parquet"))])
    assert list(eps["episode_index"]) == [0, 1, 2, 3]
    assert list(eps["dataset_from_index"]) == [0, 30, 50, 75] and list(eps["dataset_to_index"]) == [30, 50, 75, 87]
    assert [list(t) for t in eps["tasks"]] == [["pick"], ["place"], ["pick", "place"], ["stack"]]
    for col in ("episode_index", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
                f"videos/{TOP}/chunk_index", f"videos/{TOP}/file_index", "meta/episodes/chunk_index"):
        assert eps[col].dtype == np.int64, col
    for key in ("observation.state", "action", TOP, "index", "task_index"):
        for st in ("min", "max", "mean", "std", "count", "q01", "q99"):
            assert f"stats/{key}/{st}" in eps.columns, (key, st)
    first = pq.read_table(sorted((converted / "meta/episodes").rglob("*.parquet"))[0])
    assert np.asarray(first[f"stats/{TOP}/mean"][0].as_py()).shape == (3, 1, 1)
    assert first["stats/observation.state/min"][0].as_py() == \
        expected_episode_data(SPEC, 0)["observation.state"].min(0).tolist()
    data = pq.read_table(data_files[0])
    assert data.schema.field("timestamp").type == "float" and data.schema.field("index").type == "int64"
    assert data.schema.field("observation.state").type.list_size == SPEC.state_dim
    assert json.loads(data.schema.metadata[b"huggingface"])["info"]["features"]["action"]["_type"] == "List"
    for p in data_files:  # one row group per episode
        episodes = np.unique(pq.read_table(p)["episode_index"].to_numpy())
        assert pq.ParquetFile(p).metadata.num_row_groups == len(episodes) >= 1
    # stats.json: every numeric feature and camera; state exact against the source values
    stats = json.loads((converted / "meta/stats.json").read_text())
    state = np.concatenate([expected_episode_data(SPEC, k)["observation.state"] for k in range(4)]).astype(np.float64)
    assert np.allclose(stats["observation.state"]["mean"], state.mean(0), atol=1e-9)
    assert np.allclose(stats["observation.state"]["std"], state.std(0), atol=1e-9)
    assert np.array_equal(np.float32(stats["observation.state"]["min"]), state.min(0).astype(np.float32))
    assert stats["observation.state"]["count"] == [87] and stats["index"]["max"] == [86]
    for cam in (TOP, WRIST):
        assert np.asarray(stats[cam]["mean"]).shape == (3, 1, 1) and 0 < np.asarray(stats[cam]["mean"]).min() < 1
        assert stats[cam]["count"] == [87]  # every frame sampled (episodes shorter than 100 frames)


def test_report_and_ledger(converted):
    report = (converted / "validation_report.md").read_text()
    assert "PASSED" in report and "paired reader" in report and "videos" in report
    ledger = json.loads((converted / "ledger.json").read_text())
    for s in ledger["shards"]:
        assert len(json.dumps(s)) < 64_000  # per-unit facts only, no per-step values
        assert s["extra"]["numbering"]["episode_offset"] == sum(len(x["extra"]["episodes"])
                                                                for x in ledger["shards"][:s["shard_index"]])


# ---- 2. Minari, frame rates ---------------------------------------------------------------------------------------
def test_minari_with_fps_option(tmp_path):
    from tests.fixtures import minari_gen

    dataset_id = minari_gen.make_dataset(tmp_path / "minari", "image", "hdf5", jpeg=False)
    src = (tmp_path / "minari").joinpath(*dataset_id.split("/"))
    r = run_cli("run", str(src), str(tmp_path / "refused"), "--to", "lerobot", "--set", "validate.tfds_readback=false")
    assert r.returncode == 2 and "target.options.fps" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    out = tmp_path / "out"
    outcome = _run(src, out, "target.options.fps=10")
    assert outcome.exit_code == 0, outcome.message
    info = json.loads((out / "meta/info.json").read_text())
    assert info["fps"] == 10 and "observation.images.pixels" in info["features"]
    source = open_reader(str(src))
    back = open_reader(str(out), "lerobot")
    src_inv, out_inv = source.discover(), back.discover()
    assert [r.length for r in out_inv.refs] == [r.length for r in src_inv.refs]
    for s_ref, o_ref in zip(src_inv.refs, out_inv.refs):
        s, o = source.load_episode(s_ref), back.load_episode(o_ref)
        assert np.array_equal(o.columns["observation.state"], s.columns["observations/state"].astype(np.float32))
        assert np.array_equal(o.columns["action"], s.columns["actions"].astype(np.float32))
        assert np.array_equal(o.timestamps, (np.arange(o.length) / 10).astype(np.float32).astype(np.float64))


def test_float_fps_refused_and_integer_override(tmp_path):
    spec = DatasetSpec(version="v2.1", episode_lengths=[6, 5], fps=20, cameras=[])
    src = write_lerobot_dataset(tmp_path / "src", spec)
    info = json.loads((src / "meta/info.json").read_text())
    info["fps"] = 3.75
    (src / "meta/info.json").write_text(json.dumps(info))
    r = run_cli("run", str(src), str(tmp_path / "a"), "--to", "lerobot")
    assert r.returncode == 2 and "3.75" in r.stderr and "--set target.options.fps=N" in r.stderr, r.stderr
    r = run_cli("run", str(src), str(tmp_path / "b"), "--to", "lerobot", "--set", "target.options.fps=3.75")
    assert r.returncode == 2 and "target.options.fps" in r.stderr, r.stderr
    outcome = _run(src, tmp_path / "c", "target.options.fps=4")
    assert outcome.exit_code == 0, outcome.message
    assert json.loads((tmp_path / "c/meta/info.json").read_text())["fps"] == 4


# ---- 3. quarantine ------------------------------------------------------------------------------------------------
def test_quarantined_episode_leaves_contiguous_indices(quarantine_src, tmp_path):
    out = tmp_path / "out"
    r = run_cli("run", str(quarantine_src), str(out), "--to", "lerobot", "--set", "plan.min_shards=3",
                "--set", "validate.tfds_readback=false")
    assert r.returncode == 3, r.stderr[-2000:]
    assert "quarantined[EP101] episode=1" in r.stderr and "validation passed" in r.stdout
    lengths = [n for i, n in enumerate(QUARANTINE_SPEC.episode_lengths) if i != 1]
    reader = open_reader(str(out), "lerobot")
    inv = reader.discover()
    assert not [f for f in inv.findings if f.level == "error"]
    assert [r.episode_index for r in inv.refs] == list(range(5)) and [r.length for r in inv.refs] == lengths
    index = np.concatenate([pq.read_table(p)["index"].to_numpy() for p in sorted((out / "data").rglob("*.parquet"))])
    assert np.array_equal(index, np.arange(sum(lengths)))
    ledger = json.loads((out / "ledger.json").read_text())
    sources = [e["source"] for s in ledger["shards"] for e in s["extra"].get("episodes", [])]
    assert sources == [0, 2, 3, 4, 5]
    renumbered = [s for s in ledger["shards"] if s["extra"]["numbering"]["episode_offset"] > 0]
    assert renumbered  # units after the quarantined episode were rewritten, and their ledger entries follow
    for k, ref in enumerate(inv.refs):
        ep = reader.load_episode(ref)
        src_k = sources[k]
        assert np.array_equal(ep.columns["observation.state"],
                              expected_episode_data(QUARANTINE_SPEC, src_k)["observation.state"])
    r = run_cli("validate", str(out))
    assert r.returncode == 0, r.stderr[-2000:]


def test_validate_fails_on_tampered_data_parquet(converted, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(converted, out)
    r = run_cli("validate", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    path = out / "data/chunk-000/file-001.parquet"
    table = pq.read_table(path)
    col = table["next.reward"].to_numpy().copy()
    col[3] += 1.0
    i = table.schema.get_field_index("next.reward")
    import pyarrow as pa

    table = table.set_column(i, table.schema.field(i), pa.array(col))
    pq.write_table(table, path)
    r = run_cli("validate", str(out))
    assert r.returncode == 3 and "file-001.parquet" in r.stderr and "checksum" in r.stderr, r.stderr[-2000:]


# ---- 4. RLDS with a nested action dict -----------------------------------------------------------------------------
def test_rlds_nested_action_is_concatenated(tmp_path):
    from robo_ray.stages.spec import load_mapping
    from tests.fixtures.rlds_gen import write_rlds_dataset

    src = write_rlds_dataset(tmp_path / "tfds", "bridge")
    spec_dir = tmp_path / "spec"
    r = run_cli("spec", str(src), str(spec_dir))
    assert r.returncode == 0, r.stderr[-2000:]
    mapping = load_mapping((spec_dir / "mapping.yaml").read_text(), "mapping.yaml")
    with_depth = tmp_path / "with-depth"  # 16-bit depth (values up to 65,535 mm): quantized, the clipping named
    r = run_cli("run", str(src), str(with_depth), "--to", "lerobot", "--set", "target.options.fps=5",
                "--set", "validate.tfds_readback=false", "--set", "convert.max_quarantine_fraction=0.5")
    assert r.returncode == 0, r.stdout[-1000:] + r.stderr[-3000:]
    depth = json.loads((with_depth / "meta/info.json").read_text())["features"]["observation.images.depth"]
    assert depth["shape"] == [32, 32, 1] and depth["info"]["is_depth_map"], depth
    assert "observation.images.depth: " in r.stderr and "above it" in r.stderr, r.stderr[-3000:]
    mapping.steps = [fm for fm in mapping.steps if fm.kind != "image" or fm.dtype == "uint8"]
    (spec_dir / "mapping.yaml").write_text(json.dumps(mapping.model_dump()))
    out = tmp_path / "out"
    r = run_cli("run", str(src), str(out), "--to", "lerobot", "--mapping", str(spec_dir / "mapping.yaml"),
                "--set", "target.options.fps=5", "--set", "validate.tfds_readback=false",
                "--set", "convert.max_quarantine_fraction=0.5")
    assert r.returncode == 0, r.stdout[-1000:] + r.stderr[-3000:]
    info = json.loads((out / "meta/info.json").read_text())
    actions = [fm for fm in mapping.steps if fm.role == "action"]
    names = info["features"]["action"]["names"]
    assert info["features"]["action"]["dtype"] == "float32"
    assert info["features"]["action"]["shape"] == [sum(int(np.prod(fm.shape or [1])) for fm in actions)]
    want: list[str] = []  # mapping order; a one-value component keeps its name, others get _i
    for fm in actions:
        base, size = fm.target.removeprefix("action/"), int(np.prod(fm.shape or [1]))
        want += [base] if size == 1 else [f"{base}_{i}" for i in range(size)]
    assert names == want and "world_vector_2" in names and "open_gripper" in names, names
    assert "quarantined[EP208]" in r.stderr  # the bridge fixture's empty test episode
    back = open_reader(str(out), "lerobot")
    inv = back.discover()
    first = back.load_episode(inv.refs[0])
    assert first.columns["action"].shape == (inv.refs[0].length, len(names))


# ---- 5. kill + resume -----------------------------------------------------------------------------------------------
BOOT = "import sys, tests.fixtures.faulty_fs; from robo_ray.cli import main; sys.exit(main(sys.argv[1:]))"


def test_sigkill_then_resume_gives_the_same_bytes(quarantine_src, tmp_path):
    from tests.fixtures import faulty_fs

    sets = ["--set", "plan.min_shards=3", "--set", "validate.tfds_readback=false", "--set",
            "convert.max_quarantine_fraction=0.5"]
    ref = tmp_path / "ref"
    r = run_cli("run", str(quarantine_src), str(ref), "--to", "lerobot", *sets)
    assert r.returncode == 0, r.stderr[-2000:]
    out = tmp_path / "out"
    args = ["run", f"faulty://{quarantine_src}", str(out), "--to", "lerobot", *sets]
    plan = {"path": "episode_000004.mp4", "kind": "read", "nth": 1, "mode": "kill"}  # in the last unit
    env = {**os.environ, faulty_fs.CRASH_ENV: json.dumps(plan)}
    proc = subprocess.run([sys.executable, "-c", BOOT, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert not (out / "meta/info.json").exists()
    assert (out / "data/chunk-000/file-000.parquet").exists()  # the first unit was committed before the kill
    assert not (out / "data/chunk-000/file-002.parquet").exists()  # the last one was not
    proc = subprocess.run([sys.executable, "-c", BOOT, *args, "--resume"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _files(out) == _files(ref)
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]


# ---- 6. Ray --------------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.xdist_group("ray")
def test_two_actors_write_the_in_process_bytes(v21, converted, tmp_path):
    out = tmp_path / "ray"
    r = run_cli("run", str(v21), str(out), "--to", "lerobot", "--actors", "2", "--set", "plan.min_shards=3",
                "--set", "validate.tfds_readback=false", "--set", "target.options.reencode=true",
                env={"RAY_AUTH_MODE": "disabled"}, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert _files(out) == _files(converted)
