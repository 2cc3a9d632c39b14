"""robo-ray's LeRobot v3.0 output loaded by the REAL lerobot 0.6.1 (`LeRobotDataset`, `ds[i]` with its 1e-4 s frame
lookup) and checked by lerobot-doctor 0.2.0, in their own venv (tests/compat/venvs.py; built once, ~2.5 min):

1. generated v2.1 (2 cameras H.264 + AV1, reward/done, a task change inside an episode) -> AV1 output: loads,
   `ds[i]` succeeds on every frame, episode/frame counts, state/action/reward exact, the task of every sampled
   frame, first/middle/last frame of each episode >= 30 dB against the source, and not worse than lerobot's own
   encoder (tests/compat/lerobot_reference.py, same frames, same settings) by more than 1 dB; doctor: no FAIL;
2. ../shared/samples/lerobot_v21_h264_1cam (lerobot 0.3.3) -> H.264 output (`target.options.vcodec=h264`): the same;
3. ../shared/real/g1_v21_30ep -> 26 episodes, the 4 without video (0, 3, 6, 9) quarantined by name, exit 3; the
   written episodes load in lerobot with the source's values, renumbered 0..25.
4. other sources (issue #17 acceptance 1), `ds[i]` on every frame of each output: ../shared/samples/rlds/pusher_rlds
   (--fps 10), the tfds-written bridge-like RLDS datasets of test_any_to_any (nested action dict, with and without
   episode_metadata), Minari (the state-only pointmaze sample and a generated dataset with raw image observations,
   `target.options.fps=10`) and ../shared/samples/lerobot_v30_av1_2cam: episode/frame counts, every numeric feature
   of every sampled frame exactly equal to the source's value (read with tfds, h5py or robo-ray's LeRobot reader; as
   the mapping's dtype, which is what `ds[i]` gives), `action` = the action leaves concatenated in mapping order,
   tasks = the language instruction, first/middle/last frame of each camera >= 30 dB against the source's pixels,
   stats.json with every numeric feature and camera; doctor: no FAIL.

    pytest -m compat tests/integration/test_lerobot_compat.py
"""
from __future__ import annotations

import io
import json
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from robo_ray.formats.lerobot.layout import camera_key
from robo_ray.readers import open_reader
from robo_ray.stages.spec import load_mapping
from tests.compat.venvs import lerobot_read, lerobot_reference
from tests.conftest import decode_all_frames, psnr, run_cli
from tests.fixtures import minari_gen, rlds_gen
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, expected_frame, write_lerobot_dataset
# bridge_like: test_any_to_any's module fixture (the tfds-written bridge-like RLDS datasets), requested by name below
from tests.integration.test_any_to_any import BRIDGE_LIKE, _lerobot_key, _step_text, bridge_like  # noqa: F401

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(3600),
              pytest.mark.xdist_group("lerobot_env")]

TOP, WRIST = "observation.images.top", "observation.images.wrist"
SPEC = DatasetSpec(version="v2.1", episode_lengths=[24, 17, 30], fps=15, with_reward_done=True,
                   cameras=[CameraSpec(TOP, "h264"), CameraSpec(WRIST, "av1")],
                   tasks_per_episode=[["pick the cube"], ["pick the cube", "place the cube"], ["stack"]])
SETS = ["--set", "validate.tfds_readback=false", "--set", "plan.min_shards=2"]


def _convert(src: Path, out: Path, *extra: str, code: int = 0) -> None:
    r = run_cli("run", str(src), str(out), "--to", "lerobot", *SETS, *extra, timeout=1800)
    assert r.returncode == code, r.stdout[-2000:] + r.stderr[-4000:]
    return r


def _read(python: Path, root: Path, tmp: Path, *args: str) -> tuple[dict, dict[str, np.ndarray]]:
    proc, s = lerobot_read(root, tmp / f"read-{root.name}", *args, python=python)
    assert proc.returncode == 0 and s["ok"], f"lerobot could not read {root}: {s}\n{proc.stderr[-4000:]}"
    summary = json.loads(Path(s["json"]).read_text())
    with np.load(s["npz"]) as z:
        arrays = {k: z[k] for k in z.files}
    return summary, arrays


def _doctor(python: Path, root: Path, tmp: Path) -> dict:
    proc, s = lerobot_read(root, tmp / f"doctor-{root.name}", "--doctor", python=python)
    assert s["ok"], f"lerobot-doctor FAILed {root}: {s}"
    return s


def _source_map(out: Path) -> list[int]:
    ledger = json.loads((out / "ledger.json").read_text())
    return [e["source"] for s in sorted(ledger["shards"], key=lambda s: s["shard_index"])
            for e in s["extra"].get("episodes", [])]


def _check_against_source(summary: dict, arrays: dict, src: Path, out: Path, keys: tuple[str, ...]) -> None:
    """Every sampled frame's numeric values equal the source's (through robo-ray's reader of the source)."""
    reader = open_reader(str(src))
    refs = {r.episode_index: r for r in reader.discover().refs}
    sources = _source_map(out)
    assert [e["episode_index"] for e in summary["episodes"]] == list(range(len(sources)))
    cache: dict[int, object] = {}
    for s in summary["samples"]:
        src_ep = sources[s["episode_index"]]
        ep = cache.get(src_ep) or reader.load_episode(refs[src_ep])
        cache[src_ep] = ep
        k = s["frame_index"]
        assert s["task"] == ep.step_tasks[k], (s["episode_index"], k)
        for key in keys:
            got = arrays[f"{s['index']}/{key}"]
            want = ep.columns[key][k]
            assert np.array_equal(got.reshape(-1), np.asarray(want).reshape(-1)), (key, s["episode_index"], k)
        assert abs(s["timestamp"] - k / summary["fps"]) < 1e-6


def _decoded_source(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]


# ---- 1. generated v2.1, and lerobot's own encoder at the same settings --------------------------------------------
def test_generated_v21_loads_in_lerobot(lerobot_python, tmp_path):
    src = write_lerobot_dataset(tmp_path / "src", SPEC)
    out = tmp_path / "robo"
    _convert(src, out, "--set", "target.options.reencode=true")  # our encoder against lerobot's (copy: its own test)
    summary, arrays = _read(lerobot_python, out, tmp_path, "--all-frames")
    n = sum(SPEC.episode_lengths)
    assert (summary["num_episodes"], summary["num_frames"], summary["fps"]) == (3, n, 15)
    assert summary["fps_type"] == "int" and summary["checked_frames"] == n + 9  # 3 samples x 3 + every frame
    assert sorted(summary["stats_keys"]) == sorted(summary["features"])  # stats for every feature and camera
    assert [e["tasks"] for e in summary["episodes"]] == [["pick the cube"], ["pick the cube", "place the cube"],
                                                         ["stack"]]
    _check_against_source(summary, arrays, src, out, ("observation.state", "action", "next.reward", "next.done"))
    # lerobot's own writer, fed the frames robo-ray's encoder was fed (the decoded source videos), same settings
    frames = {cam.key: [] for cam in SPEC.cameras}
    for e in range(len(SPEC.episode_lengths)):
        for cam in SPEC.cameras:
            frames[cam.key].append(_decoded_source(src / f"videos/chunk-000/{cam.key}/episode_{e:06d}.mp4"))
    npz = tmp_path / "frames.npz"
    reader = open_reader(str(src))
    payload = {"fps": np.array(SPEC.fps)}
    for e, ref in enumerate(reader.discover().refs):
        ep = reader.load_episode(ref)
        payload[f"ep{e:03d}/observation.state"] = ep.columns["observation.state"]
        payload[f"ep{e:03d}/action"] = ep.columns["action"]
        payload[f"ep{e:03d}/task"] = np.array(ep.step_tasks)
        for cam in SPEC.cameras:
            payload[f"ep{e:03d}/{cam.key}"] = np.stack(frames[cam.key][e])
    np.savez(npz, **payload)
    proc, ref = lerobot_reference(npz, tmp_path / "lerobot_ref", "--vcodec", "libsvtav1", "--crf", "30", "--g", "2",
                                  python=lerobot_python)
    assert proc.returncode == 0 and ref["ok"], f"{ref}\n{proc.stderr[-3000:]}"
    ref_summary, ref_arrays = _read(lerobot_python, tmp_path / "lerobot_ref", tmp_path)
    ours = {(s["episode_index"], s["frame_index"]): s for s in summary["samples"]}
    theirs = {(s["episode_index"], s["frame_index"]): s for s in ref_summary["samples"]}
    assert set(ours) == set(theirs)
    worst: dict[str, list[float]] = {"ours": [], "lerobot": [], "truth": []}
    for key, s in ours.items():
        e, k = key
        for cam_index, cam in enumerate(SPEC.cameras):
            mine = arrays[f"{s['index']}/{cam.key}"]
            lero = ref_arrays[f"{theirs[key]['index']}/{cam.key}"]
            given = frames[cam.key][e][k]
            truth = expected_frame(e, k, cam_index, cam.height, cam.width)
            worst["ours"].append(psnr(mine, given))
            worst["lerobot"].append(psnr(lero, given))
            worst["truth"].append(psnr(mine, truth))
    print({k: (round(min(v), 1), round(float(np.mean(v)), 1)) for k, v in worst.items()})
    assert min(worst["truth"]) >= 30.0
    assert np.mean(worst["ours"]) >= np.mean(worst["lerobot"]) - 1.0, worst
    _doctor(lerobot_python, out, tmp_path)


# ---- 2. the lerobot 0.3.3 sample, H.264 output ------------------------------------------------------------------------
def test_lerobot_v21_sample_h264_loads_in_lerobot(lerobot_python, shared, tmp_path):
    src = shared / "samples/lerobot_v21_h264_1cam"
    out = tmp_path / "robo"
    _convert(src, out, "--set", "target.options.vcodec=h264")
    info = json.loads((out / "meta/info.json").read_text())
    cam = next(k for k, v in info["features"].items() if v["dtype"] == "video")
    assert info["features"][cam]["info"]["video.codec"] == "h264"
    summary, arrays = _read(lerobot_python, out, tmp_path, "--all-frames")
    inv = open_reader(str(src)).discover()
    assert summary["num_episodes"] == len(inv.refs) and summary["num_frames"] == inv.total_steps
    assert sorted(summary["tasks"].values()) == sorted(inv.tasks)
    _check_against_source(summary, arrays, src, out, ("observation.state", "action"))
    reader = open_reader(str(src))
    refs = reader.discover().refs
    for s in summary["samples"]:  # against the source video's frame at the same step
        from robo_ray.stages.source_frames import source_frames

        ep = reader.load_episode(refs[s["episode_index"]])
        want = source_frames(reader, ep, cam, [s["frame_index"]])[0]
        assert psnr(arrays[f"{s['index']}/{cam}"], want) >= 30.0
    _doctor(lerobot_python, out, tmp_path)


# ---- 3. the real g1 dataset with four missing videos --------------------------------------------------------------
def test_real_g1_quarantines_four_and_loads_in_lerobot(lerobot_python, shared, tmp_path):
    src = shared / "real/g1_v21_30ep"
    out = tmp_path / "robo"
    r = _convert(src, out, code=3)
    quarantined = sorted(int(line.split("episode=")[1].split()[0]) for line in r.stderr.splitlines()
                         if line.startswith("quarantined[EP101]"))
    assert quarantined == [0, 3, 6, 9], r.stderr[-3000:]
    for e in quarantined:
        assert f"episode_{e:06d}.mp4" in r.stderr
    assert "26 episodes" in r.stdout and "validation passed" in r.stdout
    assert _source_map(out) == [e for e in range(30) if e not in quarantined]
    summary, arrays = _read(lerobot_python, out, tmp_path)
    assert summary["num_episodes"] == 26
    _check_against_source(summary, arrays, src, out, ("observation.state", "action"))
    _doctor(lerobot_python, out, tmp_path)


# ---- 4. RLDS, Minari and LeRobot v3.0 sources (issue #17 acceptance 1) ----------------------------------------------
BOOKKEEPING = {"timestamp", "frame_index", "episode_index", "index", "task_index"}
STAT_NAMES = {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}
Leaf = Callable[[str], Any]  # one source episode: source key (the mapping's `source`) -> its per-step values


def _pixels(x: Any) -> np.ndarray:
    """A source image as RGB: encoded bytes (RLDS JPEG) decoded with PIL, raw arrays (Minari) as they are."""
    if isinstance(x, (bytes, np.bytes_)):
        from PIL import Image

        return np.asarray(Image.open(io.BytesIO(x)).convert("RGB"))
    return np.asarray(x)


def _expected_columns(out: Path, leaf: Leaf, n: int) -> dict[str, np.ndarray]:
    """Every numeric LeRobot feature -> the n values it must hold, built from the source's leaves with the output's
    mapping.yaml: `action` = the action leaves as float32 concatenated in mapping order, every other tensor its own
    feature (the mapping's dtype: float64 sources are narrowed to float32, which is also all `ds[i]` returns),
    next.reward / next.done / discount from the mapping's default sources."""
    mapping = load_mapping((out / "mapping.yaml").read_text())
    feats = json.loads((out / "meta/info.json").read_text())["features"]
    actions = [fm for fm in mapping.steps if fm.role == "action"]
    cols = {"action": np.concatenate([np.asarray(leaf(fm.source)).reshape(n, -1).astype(np.float32)
                                      for fm in actions], 1)}
    for fm in mapping.steps:
        if fm.kind == "tensor" and fm.role != "action":
            key = _lerobot_key(fm.target, fm.role)
            assert feats[key]["dtype"] == fm.dtype, (key, feats[key]["dtype"], fm.dtype)
            cols[key] = np.asarray(leaf(fm.source)).astype(fm.dtype).reshape(n, *feats[key]["shape"])
    d = mapping.defaults
    cols["next.reward"] = np.asarray(leaf(d.reward_source), np.float32).reshape(n, 1)
    cols["next.done"] = np.asarray(leaf(d.is_terminal_source), np.bool_).reshape(n, 1)
    if d.discount_source:
        cols["discount"] = np.asarray(leaf(d.discount_source), np.float32).reshape(n, 1)
    return cols


def _check_stats(out: Path, summary: dict) -> None:
    """meta/stats.json (as lerobot loaded it, and on disk) has every feature but strings, with all ten statistics."""
    stats = json.loads((out / "meta/stats.json").read_text())
    want = {k for k, f in summary["features"].items() if f["dtype"] != "string"}
    assert set(summary["stats_keys"]) == set(stats) == want, sorted(want ^ set(stats))
    for key, st in stats.items():
        assert set(st) >= STAT_NAMES, (key, sorted(st))
        if summary["features"][key]["dtype"] in ("video", "image"):
            assert np.shape(st["mean"]) == (3, 1, 1), (key, np.shape(st["mean"]))


def _check_from_source(summary: dict, arrays: dict, out: Path, leaves: list[Leaf],
                       language: str | None) -> dict[str, float]:
    """Counts, stats.json, and every sampled frame against the source episodes (`leaves`, in output order): its
    timestamp, every numeric feature exactly (values and the dtype `ds[i]` gives), its task (the step's `language`
    text, "" without one) and its camera frames; returns the worst PSNR per camera (each >= 30 dB)."""
    info = json.loads((out / "meta/info.json").read_text())
    feats, fps = info["features"], info["fps"]
    mapping = load_mapping((out / "mapping.yaml").read_text())
    lengths = [len(leaf(mapping.steps[0].source)) for leaf in leaves]
    assert _source_map(out) == list(range(len(leaves)))  # nothing quarantined, source order kept
    assert (summary["num_episodes"], summary["num_frames"], summary["fps"]) == (len(leaves), sum(lengths), fps)
    assert [e["length"] for e in summary["episodes"]] == lengths
    assert summary["checked_frames"] == sum(lengths) + len(summary["samples"])  # ds[i] on every frame passed
    _check_stats(out, summary)
    expected = [_expected_columns(out, leaf, n) for leaf, n in zip(leaves, lengths)]
    numeric = {k for k, f in feats.items() if f["dtype"] not in ("video", "image") and k not in BOOKKEEPING}
    assert set(expected[0]) == numeric, sorted(set(expected[0]) ^ numeric)  # every numeric feature is checked
    cameras = [fm for fm in mapping.steps if fm.kind == "image"]
    video_keys = [k for k, f in feats.items() if f["dtype"] == "video"]
    assert video_keys == [camera_key(fm) for fm in cameras]  # every camera, in mapping (view) order
    texts = [[_step_text(t) for t in leaf(language)] if language else [""] * n for leaf, n in zip(leaves, lengths)]
    assert sorted(summary["tasks"].values()) == sorted({t for ep in texts for t in ep})
    assert [sorted(e["tasks"]) for e in summary["episodes"]] == [sorted(set(ep)) for ep in texts]
    worst = {key: 99.0 for key in video_keys}
    for s in summary["samples"]:
        e, k, i = s["episode_index"], s["frame_index"], s["index"]
        where = f"episode {e} frame {k}"
        assert abs(s["timestamp"] - k / fps) < 1e-6, (where, s["timestamp"])
        assert s["task"] == texts[e][k], where
        for key, col in expected[e].items():
            got = arrays[f"{i}/{key}"]
            assert got.dtype == col.dtype, (where, key, got.dtype, col.dtype)
            assert np.array_equal(got.reshape(-1), col[k].reshape(-1)), (where, key, got, col[k])
        for fm, key in zip(cameras, video_keys):
            worst[key] = min(worst[key], psnr(arrays[f"{i}/{key}"], _pixels(leaves[e](fm.source)[k])))
    assert all(v >= 30.0 for v in worst.values()), worst
    return worst


def _rlds_leaves(src: Path) -> list[Leaf]:
    """The episodes as tfds itself returns them (images left encoded), in the reader's order (splits as listed)."""
    splits = [s["name"] for s in json.loads((src / "dataset_info.json").read_text())["splits"]]
    return [lambda key, ep=ep: ep[f"steps/{key}"] for split in splits for ep in rlds_gen.tfds_episodes(src, split)]


def test_rlds_pusher_sample_loads_in_lerobot(lerobot_python, shared, tmp_path):
    src = shared / "samples/rlds/pusher_rlds/1.0.0"
    out = tmp_path / "robo"
    _convert(src, out, "--fps", "10")
    summary, arrays = _read(lerobot_python, out, tmp_path, "--all-frames")
    assert (summary["num_episodes"], summary["num_frames"], summary["fps"]) == (4, 290, 10)
    numeric = {k for k, f in summary["features"].items() if f["dtype"] != "video" and k not in BOOKKEEPING}
    assert numeric == {"action", "observation.state", "next.reward", "next.done", "discount"}
    worst = _check_from_source(summary, arrays, out, _rlds_leaves(src), "language_instruction")
    assert set(worst) == {"observation.images.image", "observation.images.wrist"}  # image_wrist (cameras.py)
    print(worst)
    _doctor(lerobot_python, out, tmp_path)


@pytest.mark.parametrize("variant", list(BRIDGE_LIKE))
def test_rlds_bridge_like_loads_in_lerobot(variant, bridge_like, lerobot_python, tmp_path):  # noqa: F811
    src = bridge_like[variant]
    top = json.loads((src / "features.json").read_text())["featuresDict"]["features"]
    assert ("episode_metadata" in top) == BRIDGE_LIKE[variant]
    out = tmp_path / "robo"
    _convert(src, out, "--fps", "10")
    summary, arrays = _read(lerobot_python, out, tmp_path, "--all-frames")
    actions = [fm.source for fm in load_mapping((out / "mapping.yaml").read_text()).steps if fm.role == "action"]
    assert sorted(actions) == ["action/counts", "action/gripper", "action/open_gripper", "action/rotation_delta",
                               "action/terminate_episode", "action/world_vector"]
    assert summary["features"]["action"]["shape"] == [13]  # 2 + 3 + 1 + 3 + 1 + 3
    numeric = {k for k, f in summary["features"].items() if f["dtype"] != "video" and k not in BOOKKEEPING}
    assert numeric == {"action", "observation.state", "observation.natural_language_embedding",
                       "observation.clip_function_input.workspace_bounds", "observation.heightmap",
                       "next.reward", "next.done"}
    worst = _check_from_source(summary, arrays, out, _rlds_leaves(src), "observation/natural_language_instruction")
    assert set(worst) == {"observation.images.image"}
    _doctor(lerobot_python, out, tmp_path)


def _minari_leaf(group: Any) -> Leaf:
    """One Minari HDF5 episode in robo-ray's T+1-step layout: transition columns (T rows) get a zero last row,
    observations and per-step infos (T+1 rows) stay; is_terminal = terminations[-1] on the last step, discount 0
    after a terminating transition and on the last step (robo_ray/formats/minari/reader.py)."""
    T = len(group["actions"])
    term = np.concatenate([np.asarray(group["terminations"][()], bool), [False]])

    def leaf(key: str) -> np.ndarray:
        if key == "is_terminal":
            return np.arange(T + 1) == T if term[T - 1] else np.zeros(T + 1, bool)
        if key == "discount":
            discount = np.where(term, 0.0, 1.0)
            discount[-1] = 0.0
            return discount
        value = np.asarray(group[key][()])
        assert len(value) in (T, T + 1), (key, value.shape, T)
        return np.concatenate([value, np.zeros_like(value[:1])]) if len(value) == T else value
    return leaf


@pytest.mark.parametrize("case", ["pointmaze-sample", "image-raw"])
@pytest.mark.filterwarnings("ignore:`eval_env` is set to None:UserWarning")  # minari's DataCollector
def test_minari_loads_in_lerobot(case, lerobot_python, shared, tmp_path, monkeypatch):
    if case == "pointmaze-sample":
        src = shared / "samples/minari/pointmaze/umaze-random-v0"
    else:
        monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))  # make_dataset sets it; restored after the test
        src = tmp_path.joinpath(*minari_gen.make_dataset(tmp_path, "image", "hdf5", jpeg=False).split("/"))
    out = tmp_path / "robo"
    _convert(src, out, "--set", "target.options.fps=10")  # Minari records no rate (the reader takes no --fps)
    summary, arrays = _read(lerobot_python, out, tmp_path, "--all-frames")
    import h5py

    with h5py.File(src / "data/main_data.hdf5", "r") as f:
        leaves = [_minari_leaf(f[f"episode_{e}"]) for e in range(len(f))]
        worst = _check_from_source(summary, arrays, out, leaves, None)
    if case == "pointmaze-sample":
        assert (summary["num_episodes"], summary["num_frames"]) == (4, 604)  # 4 x (150 transitions + 1)
        assert summary["video_keys"] == [] and worst == {}
        assert {"observation.achieved_goal", "observation.desired_goal", "observation.observation",
                "info.success"} <= set(summary["features"])
    else:
        assert summary["num_frames"] == sum(n + 1 for n in minari_gen.LENGTHS)
        assert set(worst) == {"observation.images.pixels"}
        assert {"observation.state", "info.dist", "info.success"} <= set(summary["features"])
    _doctor(lerobot_python, out, tmp_path)


@lru_cache(maxsize=4)
def _decoded_video(path: str) -> tuple[tuple[float, np.ndarray], ...]:
    return tuple(decode_all_frames(Path(path)))


def test_lerobot_v30_av1_sample_loads_in_lerobot(lerobot_python, shared, tmp_path):
    src = shared / "samples/lerobot_v30_av1_2cam"
    out = tmp_path / "robo"
    _convert(src, out)
    info = json.loads((out / "meta/info.json").read_text())
    cams = [k for k, v in info["features"].items() if v["dtype"] == "video"]
    assert sorted(cams) == ["observation.images.side", "observation.images.top"]
    assert all(info["features"][k]["info"]["video.codec"] == "av1" for k in cams)
    summary, arrays = _read(lerobot_python, out, tmp_path, "--all-frames")
    reader = open_reader(str(src))
    inv = reader.discover()
    assert (summary["num_episodes"], summary["num_frames"], summary["fps"]) == (4, 420, 20)
    assert [e["length"] for e in summary["episodes"]] == [r.length for r in inv.refs]
    assert summary["checked_frames"] == 420 + len(summary["samples"])
    assert sorted(summary["tasks"].values()) == sorted(inv.tasks)
    _check_stats(out, summary)
    _check_against_source(summary, arrays, src, out, ("observation.state", "action", "next.reward", "next.done"))
    worst = {cam: 99.0 for cam in cams}
    for s in summary["samples"]:  # against the source MP4's frame at from_timestamp + k/fps, decoded with PyAV
        ref = inv.refs[s["episode_index"]]
        for cam in cams:
            vref = ref.video_map[cam]
            t = vref.from_timestamp + s["frame_index"] / inv.fps
            at, want = min(_decoded_video(str(src / vref.path)), key=lambda f: abs(f[0] - t))
            assert abs(at - t) < 1e-4, (cam, s["episode_index"], s["frame_index"], at, t)
            worst[cam] = min(worst[cam], psnr(arrays[f"{s['index']}/{cam}"], want))
    print(worst)
    assert min(worst.values()) >= 30.0, worst
    _doctor(lerobot_python, out, tmp_path)
