"""Any source to any target through the CLI (issue #17 acceptance 2, and the any-to-any promise), in-process mode.

a) LeRobot v3.0 -> RLDS -> LeRobot v3.0 (the shared AV1 2-camera sample, and a generated v3.0 dataset with several
   tasks per episode and an H.264 + an AV1 camera): every episode, its length, its tasks (per episode and per step),
   every low-dim value exactly (float32), and every frame of every camera (PSNR >= 30 dB against the source's own
   frames, both decoded with PyAV here).
b) RLDS -> LeRobot v3.0 (the pusher sample, and tfds-written bridge-like datasets with a nested action dict, with and
   without episode_metadata): `action` is one float32 feature holding the nested action leaves concatenated in
   mapping order (the LeRobot writer's documented rule), every other numeric observation is its own feature with the
   source's values, tasks are the language instruction; values are compared with what tfds itself returns.
c) RLDS -> ORTF -> RLDS (pusher): every episode and every low-dim value. ORTF stores cameras as video, so RLDS's
   JPEG bytes cannot pass through it; with `target.options.lossless=true` and PNG on the way back the pixels are
   exactly the source JPEGs' decoded pixels.
d) Splits (pusher: train 3 + val 1): `--split val` writes only the val episode, without --split every episode; RLDS ->
   RLDS passes JPEG bytes through unchanged; the split of every episode is kept (FORMATS Part 6).
"""
from __future__ import annotations

import io
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from robo_ray.episode import VideoRef
from robo_ray.readers import open_reader
from robo_ray.stages.spec import load_mapping
from tests.conftest import decode_all_frames, psnr, run_cli
from tests.fixtures import rlds_gen
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

FAST = ("--set", "validate.tfds_readback=false")  # tfds' read-back of RLDS output is tested elsewhere
BOOKKEEPING = {"timestamp", "frame_index", "episode_index", "index", "task_index"}
MIN_PSNR = 30.0
GENERATED_V30 = DatasetSpec(
    version="v3.0", episode_lengths=[18, 12, 15], fps=15, with_reward_done=True, episodes_per_file=2,
    cameras=[CameraSpec("observation.images.top", "av1"), CameraSpec("observation.images.wrist", "h264")],
    tasks_per_episode=[["pick"], ["place", "pick"], ["stack"]])


def _cli(*args: str) -> None:
    r = run_cli(*args, *FAST)
    assert r.returncode == 0, f"robo-ray {' '.join(args)}: exit {r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}"


def _rlds_output(dst: Path) -> Path:
    """The version folder of the one RLDS dataset under DST/rlds/."""
    found = sorted(dst.glob("rlds/*/*/dataset_info.json"))
    assert len(found) == 1, f"expected one RLDS dataset under {dst}/rlds, found {found}"
    return found[0].parent


def _pusher(shared: Path) -> Path:
    return shared / "samples" / "rlds" / "pusher_rlds" / "1.0.0"


@lru_cache(maxsize=16)
def _decoded(path: str) -> tuple[tuple[float, np.ndarray], ...]:
    return tuple(decode_all_frames(Path(path)))


def _frames(root: Path, vref: VideoRef, fps: float) -> list[np.ndarray]:
    """The frames of one episode's window of an MP4 (decoded with PyAV, matched by time to half a frame)."""
    half = 0.5 / fps
    end = vref.to_timestamp if vref.to_timestamp is not None else float("inf")
    return [img for t, img in _decoded(str(root / vref.path)) if vref.from_timestamp - half <= t < end - half]


def _assert_same_column(want: np.ndarray, got: np.ndarray, what: str) -> None:
    """Same dtype and values (text columns: same strings)."""
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, the source's {want.dtype}"
    same = list(got) == list(want) if want.dtype == object else np.array_equal(got, want)
    assert same, f"{what} differs from the source"


def _jpeg_pixels(data: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


# ---- a) LeRobot v3.0 -> RLDS -> LeRobot v3.0 ----------------------------------------------------------------------
@pytest.fixture(params=["sample", "generated"])
def lerobot_v30(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    if request.param == "sample":
        return request.getfixturevalue("shared") / "samples" / "lerobot_v30_av1_2cam"
    return write_lerobot_dataset(tmp_path / "gen_v30", GENERATED_V30)


def test_lerobot_v30_to_rlds_and_back(lerobot_v30: Path, tmp_path: Path) -> None:
    src = lerobot_v30
    fps = json.loads((src / "meta/info.json").read_text())["fps"]
    _cli("run", str(src), str(tmp_path / "A"))
    rlds = _rlds_output(tmp_path / "A")
    out = tmp_path / "B"
    _cli("run", str(rlds), str(out), "--to", "lerobot", "--fps", str(fps))

    src_reader, out_reader = open_reader(str(src), "lerobot"), open_reader(str(out), "lerobot")
    src_inv, out_inv = src_reader.discover(), out_reader.discover()
    assert out_inv.fps == src_inv.fps == fps
    assert [r.length for r in out_inv.refs] == [r.length for r in src_inv.refs], "episodes or lengths differ"
    cameras = sorted(k for k, f in src_reader.features.items() if f.kind in ("video", "image"))
    assert len(cameras) == 2
    assert sorted(k for k, f in out_reader.features.items() if f.kind in ("video", "image")) == cameras
    lowdim = [k for k, f in src_reader.features.items() if f.kind == "tensor" and k not in BOOKKEEPING]
    assert {"observation.state", "action"} <= set(lowdim)
    for k, (s_ref, o_ref) in enumerate(zip(src_inv.refs, out_inv.refs)):
        s_ep, o_ep = src_reader.load_episode(s_ref), out_reader.load_episode(o_ref)
        assert list(o_ref.tasks) == list(s_ref.tasks), (k, o_ref.tasks, s_ref.tasks)
        assert o_ep.step_tasks == s_ep.step_tasks, f"episode {k}: per-step tasks differ"
        for key in lowdim:
            a, b = s_ep.columns[key], o_ep.columns[key]
            assert b.dtype == a.dtype, (k, key, b.dtype, a.dtype)
            assert np.array_equal(b.reshape(a.shape), a), f"episode {k}: {key} differs"
        for cam in cameras:
            s_frames = _frames(src, s_ref.video_map[cam], fps)
            o_frames = _frames(out, o_ref.video_map[cam], fps)
            assert len(s_frames) == len(o_frames) == s_ref.length, (k, cam, len(s_frames), len(o_frames))
            worst = min(psnr(o, s) for o, s in zip(o_frames, s_frames))
            assert worst >= MIN_PSNR, f"episode {k} {cam}: worst frame {worst:.1f} dB"


# ---- b) RLDS -> LeRobot v3.0 ---------------------------------------------------------------------------------------
# Bridge-like variants of rlds_gen's `bridge` (nested action dict, string-Tensor instruction, float64 state, a key
# with '/', a zlib Tensor) without its 16-bit depth camera (up to 65 m, beyond lerobot's depth range) and without the
# empty test episode; `bridge_like_meta` moves the top-level episode_id / success into episode_metadata with file_path.
BRIDGE_LIKE = {"bridge_like": False, "bridge_like_meta": True}  # variant -> with episode_metadata
BRIDGE_SPLITS = {"train": [9, 5], "val": [6]}


def _bridge_like_features(orig: Callable[[str], Any]) -> Callable[[str], Any]:
    def features(variant: str) -> Any:
        if variant not in BRIDGE_LIKE:
            return orig(variant)
        import tensorflow_datasets as tfds

        F = tfds.features
        bridge = orig("bridge")
        steps = dict(bridge["steps"].feature.items())
        steps["observation"] = F.FeaturesDict({k: v for k, v in steps["observation"].items() if k != "depth"})
        top: dict[str, Any] = {"steps": F.Dataset(steps)}
        meta = {"episode_id": bridge["episode_id"], "success": bridge["success"]}
        if BRIDGE_LIKE[variant]:
            top["episode_metadata"] = F.FeaturesDict({"file_path": F.Text(), **meta})
        else:
            top.update(meta)
        return F.FeaturesDict(top)
    return features


def _bridge_like_episode(orig: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    def episode(variant: str, split: str, index: int, length: int) -> dict[str, Any]:
        if variant not in BRIDGE_LIKE:
            return orig(variant, split, index, length)
        ep = orig("bridge", split, index, length)
        for step in ep["steps"]:
            del step["observation"]["depth"]
        meta = {"episode_id": ep.pop("episode_id"), "success": ep.pop("success")}
        if BRIDGE_LIKE[variant]:
            ep["episode_metadata"] = {"file_path": f"raw/{split}/episode_{index}.npy", **meta}
        else:
            ep.update(meta)
        return ep
    return episode


@pytest.fixture(scope="module")
def bridge_like(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """variant -> version folder, written by tfds itself (rlds_gen's builder)."""
    data_dir = tmp_path_factory.mktemp("bridge_like")
    with pytest.MonkeyPatch.context() as mp:
        for variant in BRIDGE_LIKE:
            mp.setitem(rlds_gen.VARIANTS, variant, BRIDGE_SPLITS)
            mp.setitem(rlds_gen.NUM_SHARDS, variant, 1)
        mp.setattr(rlds_gen, "_features", _bridge_like_features(rlds_gen._features))
        mp.setattr(rlds_gen, "_episode", _bridge_like_episode(rlds_gen._episode))
        return {variant: rlds_gen.write_rlds_dataset(data_dir, variant) for variant in BRIDGE_LIKE}


def _lerobot_key(target: str, role: str | None) -> str:
    """The LeRobot feature of a non-action tensor (the writer's naming table): observation/<rest> ->
    observation.<rest, / as .>."""
    return "observation.state" if role == "state" else target.replace("/", ".")


def _step_text(v: Any) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


@pytest.mark.xdist_group("any_to_any_rlds_to_lerobot")  # tfds is imported (and the fixtures written) once
@pytest.mark.parametrize("case", ["pusher", *BRIDGE_LIKE])
def test_rlds_to_lerobot(case: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    src = _pusher(request.getfixturevalue("shared")) if case == "pusher" \
        else request.getfixturevalue("bridge_like")[case]
    top = json.loads((src / "features.json").read_text())["featuresDict"]["features"]
    assert ("episode_metadata" in top) == (case != "bridge_like"), sorted(top)
    out = tmp_path / "out"
    _cli("run", str(src), str(out), "--to", "lerobot", "--fps", "5")
    mapping = load_mapping((out / "mapping.yaml").read_text())
    info = json.loads((out / "meta/info.json").read_text())
    feats = info["features"]
    splits = [s["name"] for s in json.loads((src / "dataset_info.json").read_text())["splits"]]
    want = [ep for split in splits for ep in rlds_gen.tfds_episodes(src, split)]  # tfds' values, reader order

    # action: one float32 feature, the action leaves concatenated in mapping order
    actions = [fm for fm in mapping.steps if fm.role == "action"]
    assert actions and all(fm.kind == "tensor" for fm in actions)
    if case != "pusher":
        assert len(actions) == 6, [fm.source for fm in actions]  # world_vector, rotation_delta, open_gripper, ...
    sizes = [int(np.prod(fm.shape or [1])) for fm in actions]
    assert feats["action"]["dtype"] == "float32" and feats["action"]["shape"] == [sum(sizes)]
    if len(actions) > 1:  # each component named after its leaf (`world_vector_0`, `open_gripper`), in that order
        names = [n for fm, size in zip(actions, sizes) for base in [fm.target.removeprefix("action/")]
                 for n in ([base] if size == 1 else [f"{base}_{i}" for i in range(size)])]
        assert feats["action"]["names"] == names
    # every other numeric step tensor (observations, and `other` data) is its own feature
    others = {_lerobot_key(fm.target, fm.role): fm for fm in mapping.steps
              if fm.kind == "tensor" and fm.role != "action"}
    if case != "pusher":
        assert set(others) == {"observation.state", "observation.natural_language_embedding",
                               "observation.clip_function_input.workspace_bounds", "observation.heightmap"}
    cameras = [fm for fm in mapping.steps if fm.kind == "image"]
    data_feats = {k for k, f in feats.items() if k not in BOOKKEEPING and f["dtype"] != "video"}
    discount = {"discount"} if mapping.defaults.discount_source else set()  # a source discount is kept
    assert data_feats == {"action", "next.reward", "next.done", *discount, *others}, sorted(data_feats)
    video_keys = [k for k, f in feats.items() if f["dtype"] == "video"]  # in mapping order
    assert len(video_keys) == len(cameras) == (2 if case == "pusher" else 1)
    # observation/image_<x> -> observation.images.<x>; observation/image -> the last part of its source key
    assert [k.rsplit(".", 1)[-1] for k in video_keys] == [
        fm.target.split("/image_", 1)[1] if "/image_" in fm.target else fm.source.rsplit("/", 1)[-1] for fm in cameras]
    if case == "pusher":  # views order the cameras; wrist_image is renamed (robo_ray/cameras.py)
        assert [(fm.target, fm.view) for fm in cameras] == [("observation/image", "primary"),
                                                            ("observation/image_wrist", "wrist")]

    reader = open_reader(str(out), "lerobot")
    inv = reader.discover()
    assert [r.length for r in inv.refs] == [len(ep["steps/is_first"]) for ep in want], "episodes or lengths differ"
    language = "steps/language_instruction" if case == "pusher" else "steps/observation/natural_language_instruction"
    for k, (ref, src_ep) in enumerate(zip(inv.refs, want)):
        ep = reader.load_episode(ref)
        n = ep.length
        expect = np.concatenate([src_ep[f"steps/{fm.source}"].reshape(n, -1).astype(np.float32) for fm in actions], 1)
        assert ep.columns["action"].dtype == np.float32
        assert np.array_equal(ep.columns["action"], expect), f"episode {k}: action is not the concatenated leaves"
        for key, fm in others.items():
            got, src_vals = ep.columns[key], src_ep[f"steps/{fm.source}"]
            assert np.array_equal(got.astype(np.float64).reshape(src_vals.shape), src_vals.astype(np.float64)), \
                f"episode {k}: {key} differs from {fm.source}"
        assert np.array_equal(ep.columns["next.reward"].reshape(n), src_ep["steps/reward"])
        assert np.array_equal(ep.columns["next.done"].reshape(n), src_ep["steps/is_terminal"])
        texts = [_step_text(t) for t in src_ep[language]]
        assert ep.step_tasks == texts, f"episode {k}: tasks are not the language instruction"
        assert list(ref.tasks) == list(dict.fromkeys(texts))
        for fm, key in zip(cameras, video_keys):
            frames = _frames(out, ref.video_map[key], inv.fps)
            assert len(frames) == n, (k, key, len(frames))
            source = [_jpeg_pixels(b) for b in src_ep[f"steps/{fm.source}"]]
            worst = min(psnr(a, b) for a, b in zip(frames, source))
            assert worst >= MIN_PSNR, f"episode {k} {key}: worst frame {worst:.1f} dB"


# ---- c) RLDS -> ORTF -> RLDS ---------------------------------------------------------------------------------------
def test_rlds_to_ortf_and_back(shared: Path, tmp_path: Path) -> None:
    src = _pusher(shared)
    lossless = ("--set", "target.options.lossless=true")  # frames decode to the source's pixels
    _cli("run", str(src), str(tmp_path / "ortf"), "--to", "ortf", "--fps", "20", *lossless)
    _cli("run", str(tmp_path / "ortf"), str(tmp_path / "back"), "--image-format", "png")
    a, b = open_reader(str(src), "rlds"), open_reader(str(_rlds_output(tmp_path / "back")), "rlds")
    inv_a, inv_b = a.discover(), b.discover()
    assert [r.length for r in inv_b.refs] == [r.length for r in inv_a.refs], "episodes or lengths differ"
    by_name = {f.name: k for k, f in b.features.items()}
    lowdim = [k for k, f in a.features.items() if f.kind != "image" and f.role != "metadata"]
    assert {"action", "observation/state", "reward", "discount", "is_terminal", "language_instruction"} <= set(lowdim)
    cams_a = [k for k, f in a.features.items() if f.kind == "image"]
    cams_b = [k for k, f in b.features.items() if f.kind == "image"]
    assert len(cams_b) == len(cams_a) == 2
    for k, (ra, rb) in enumerate(zip(inv_a.refs, inv_b.refs)):
        ea, eb = a.load_episode(ra), b.load_episode(rb)
        assert eb.metadata["episode_id"] == ea.metadata["episode_id"] == k
        assert eb.step_tasks == ea.step_tasks
        for key in lowdim:
            other = by_name.get(a.features[key].name)
            assert other is not None, f"{key} ({a.features[key].name}) is missing after RLDS -> ORTF -> RLDS"
            _assert_same_column(ea.columns[key], eb.columns[other], f"episode {k}: {key}")
        for ca, cb in zip(sorted(cams_a), sorted(cams_b)):  # observation/image -> observation/image_image, ...
            assert len(eb.images[cb]) == len(ea.images[ca]) == ra.length
            assert all(bytes(x[:8]) == b"\x89PNG\r\n\x1a\n" for x in eb.images[cb])
            for t, (x, y) in enumerate(zip(ea.images[ca], eb.images[cb])):
                assert np.array_equal(_jpeg_pixels(y), _jpeg_pixels(x)), f"episode {k} {ca} step {t}: pixels differ"


# ---- d) splits -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pusher_all(shared: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pusher sample (train 3 + val 1) to RLDS without --split."""
    out = tmp_path_factory.mktemp("pusher_all") / "out"
    _cli("run", str(_pusher(shared)), str(out))
    return _rlds_output(out)


def _same_episodes(src: Any, src_refs: list, out: Any, out_refs: list) -> None:
    """Same lengths, steps, metadata and image bytes (RLDS -> RLDS passes JPEG bytes through)."""
    assert [r.length for r in out_refs] == [r.length for r in src_refs]
    for ra, rb in zip(src_refs, out_refs):
        ea, eb = src.load_episode(ra), out.load_episode(rb)
        assert eb.metadata["file_path"] == ea.metadata["file_path"]
        assert eb.metadata["episode_id"] == ea.metadata["episode_id"]
        for key, v in ea.columns.items():
            _assert_same_column(v, eb.columns[key], f"{ra.source_id}: {key}")
        renamed = {"observation/wrist_image": "observation/image_wrist"}  # camera names (robo_ray/cameras.py)
        assert eb.images == {renamed.get(k, k): v for k, v in ea.images.items()}, \
            f"{ra.source_id}: image bytes were not passed through"


@pytest.mark.xdist_group("any_to_any_pusher_splits")
def test_split_selection(shared: Path, pusher_all: Path, tmp_path: Path) -> None:
    src = open_reader(str(_pusher(shared)), "rlds")
    refs = src.discover().refs
    assert [r.split for r in refs] == ["train", "train", "train", "val"]
    _cli("run", str(_pusher(shared)), str(tmp_path / "val"), "--split", "val")
    val = open_reader(str(_rlds_output(tmp_path / "val")), "rlds")
    _same_episodes(src, [r for r in refs if r.split == "val"], val, val.discover().refs)
    every = open_reader(str(pusher_all), "rlds")
    _same_episodes(src, refs, every, every.discover().refs)


@pytest.mark.xdist_group("any_to_any_pusher_splits")
def test_split_of_every_episode_is_kept(shared: Path, pusher_all: Path) -> None:
    src = [r.split for r in open_reader(str(_pusher(shared)), "rlds").discover().refs]
    out = [r.split for r in open_reader(str(pusher_all), "rlds").discover().refs]
    assert out == src, (f"RLDS -> RLDS without --split: the output's splits are {out}, the source's {src}; "
                        "FORMATS Part 6 and `--split`'s help ('default: all, kept per episode') say the split of "
                        "every episode is kept, but the RLDS writer puts every episode in `train`")
