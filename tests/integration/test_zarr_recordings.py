"""What robots record, as zarr replay buffers (issue #27 item 3): Diffusion Policy's ReplayBuffer (a Push-T-like
directory store, a robomimic task cached as a zip store with JPEG 2000 cameras) and UMI's replay_buffer.zarr.zip
(JPEG-XL cameras), written with zarr 2 + numcodecs + imagecodecs in the projects' layouts
(tests/fixtures/zarr_gen.py), convert to RLDS, LeRobot v3.0 and ORTF. The truth is read from the stores with zarr
alone (no robo_ray): episodes from meta/episode_ends, steps, exact low-dim values, frames in order within 30 dB
PSNR of zarr's decoded frames (exact on the lossless paths), the RLDS output loads in tfds; and one run reads a
store from S3 (moto) in place, with ranged reads only."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import zarr

from robo_ray.readers import detect_format, open_reader
from robo_ray.stages.source_frames import source_frames
from tests.conftest import convert_in_process as convert, load_rlds, psnr, source_cache
from tests.fixtures import zarr_gen
from tests.fixtures.servers import s3_server  # noqa: F401 - fixture

# name -> (writer, the store below tmp, rate without --fps, camera keys)
SOURCES: dict[str, tuple[Callable[[Path], Path], str, float]] = {
    "pusht": (lambda tmp: zarr_gen.write_pusht(tmp / "pusht" / "pusht_cchi_v7_replay.zarr"),
              "pusht/pusht_cchi_v7_replay.zarr", 10.0),
    "dp-robomimic-zip": (lambda tmp: zarr_gen.write_dp_zip(tmp / "lift" / "image_abs.hdf5.zarr.zip"),
                         "lift/image_abs.hdf5.zarr.zip", 0.0),
    "umi": (lambda tmp: zarr_gen.write_umi(tmp / "cup" / "replay_buffer.zarr.zip", cameras=2),
            "cup/replay_buffer.zarr.zip", 59.94),
    "dp-real-cache": (lambda tmp: zarr_gen.write_dp_real_cache(tmp / "real_pusht" / "4f3a.zarr.zip"),
                      "real_pusht/4f3a.zarr.zip", 0.0),
}
# the stored frames decode to what was written
EXACT = {"pusht": True, "dp-robomimic-zip": False, "umi": False, "dp-real-cache": False}


@dataclass
class TruthEpisode:
    """One episode as zarr reads it."""

    arrays: dict[str, np.ndarray]  # low-dim data keys
    frames: dict[str, np.ndarray]  # camera keys -> (T, H, W, 3) uint8

    @property
    def length(self) -> int:
        return len(next(iter(self.arrays.values())))


def truth_of(store_path: Path) -> list[TruthEpisode]:
    """Every episode of a store read with zarr alone (zarr.ZipStore for zip stores), images cast as stored."""
    store = zarr.ZipStore(str(store_path), mode="r") if store_path.is_file() else zarr.DirectoryStore(str(store_path))
    try:
        root = zarr.open_group(store, mode="r")
        ends = root["meta/episode_ends"][:]
        data = {k: root["data"][k][:] for k in root["data"].array_keys()}
    finally:
        store.close()
    out = []
    for s, e in zip([0, *ends[:-1]], ends):
        arrays = {k: v[s:e] for k, v in data.items() if v.ndim < 4 and k != "timestamp"}
        frames = {k: v[s:e].astype(np.uint8) for k, v in data.items() if v.ndim == 4}  # Push-T: float 0..255
        out.append(TruthEpisode(arrays, frames))
    return out


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    return source_cache(tmp_path_factory, lambda name, tmp: (SOURCES[name][0](tmp), tmp / SOURCES[name][1])[1])


def _target_name(key: str) -> str:
    """The step feature of a low-dim data key (state is observation/state; the rest observation/<key>)."""
    return "action" if key == "action" else "observation/state" if key == "state" else f"observation/{key}"


def _camera_name(key: str) -> str:
    """The RLDS camera feature of an image key (observation/image_<own words>)."""
    key = key.removeprefix("camera_") if key[7:].isdigit() else key  # DP real: camera_0 -> image_0
    words = [w for w in key.replace("_image", "").replace("_rgb", "").split("_") if w]
    return "observation/image" + ("_" + "_".join(words) if key != "img" else "")


# ---- discover -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(SOURCES))
def test_buffers_are_detected_and_inventoried(name: str, made: Callable[[str], Path]) -> None:
    src = made(name)
    truth = truth_of(src)
    assert detect_format(str(src)) == "zarr" and detect_format(str(src.parent)) == "zarr"  # the store or its folder
    inv = open_reader(str(src.parent)).discover()
    assert inv.source_format == "zarr" and inv.episodes_count == len(truth)
    assert [r.length for r in inv.refs] == [t.length for t in truth]
    assert inv.fps == SOURCES[name][2]
    assert ("F101" in {f.code for f in inv.findings}) == (SOURCES[name][2] == 0), inv.findings
    roles = {k: f.role for k, f in inv.features.items()}
    assert all(roles[k] == "camera" for k in truth[0].frames) and truth[0].frames
    assert all(roles[k] in ("action", "state", "observation") for k in truth[0].arrays)
    if "timestamp" in roles:
        assert roles["timestamp"] == "bookkeeping"
    assert inv.declared["store_kind"] == ("directory" if name == "pusht" else "zip")


# ---- RLDS -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(SOURCES))
def test_buffers_to_rlds_load_in_tfds(name: str, made: Callable[[str], Path], tmp_path: Path) -> None:
    src = made(name)
    truth = truth_of(src)
    outcome = convert(str(src), tmp_path / "out", "rlds")
    episodes = load_rlds(Path(outcome.dataset_dir))
    assert len(episodes) == len(truth)
    for ep, t in zip(episodes, truth):
        steps = ep["steps"]
        for key, want in t.arrays.items():
            got = steps[_target_name(key)]
            np.testing.assert_array_equal(got.reshape(t.length, -1), want.reshape(t.length, -1).astype(got.dtype))
        assert t.frames
        for key, frames in t.frames.items():
            got = steps[_camera_name(key)] if len(t.frames) > 1 else steps["observation/image"]
            assert got.shape == frames.shape
            worst = min(psnr(a, b) for a, b in zip(got, frames))
            assert worst >= 30, (key, worst)
            assert psnr(got[0], frames[-1]) < worst  # in order: the first frame is not the last one


# ---- LeRobot v3.0 and ORTF ------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["lerobot", "ortf"])
@pytest.mark.parametrize("name", list(SOURCES))
def test_buffers_to_lerobot_and_ortf(name: str, target: str, made: Callable[[str], Path], tmp_path: Path) -> None:
    src = made(name)
    truth = truth_of(src)
    outcome = convert(str(src), tmp_path / "out", target, fps=15.0)
    reader = open_reader(outcome.dataset_dir if target == "ortf" else str(tmp_path / "out"))
    inv = reader.discover()
    assert inv.fps == 15.0  # the stores hold no rate: --fps is used
    assert [r.length for r in inv.refs] == [t.length for t in truth]
    cams = [k for k, f in inv.features.items() if f.kind in ("video", "image")]
    assert len(cams) == len(truth[0].frames)
    for ref, t in zip(inv.refs, truth):
        ep = reader.load_episode(ref)
        if "action" in t.arrays:
            np.testing.assert_array_equal(ep.columns["action"].reshape(t.length, -1),
                                          t.arrays["action"].astype(np.float32))  # float64 (DP real) narrowed
        for cam, frames in zip(cams, t.frames.values()):  # both list cameras in key order
            got = source_frames(reader, ep, cam, list(range(t.length)))
            worst = min(psnr(a, b) for a, b in zip(got, frames))
            assert worst >= 30, (cam, worst)
    if target == "lerobot":
        info = json.loads((tmp_path / "out" / "meta" / "info.json").read_text())
        assert info["fps"] == 15 and info["total_episodes"] == len(truth)


def test_umi_low_dim_values_in_lerobot_are_exact(made: Callable[[str], Path], tmp_path: Path) -> None:
    """UMI's per-gripper arrays (no action key) land as observation features with the stored values; LeRobot
    wants an integer rate: UMI's 59.94 fps is stamped as 60 (target.options.fps)."""
    src = made("umi")
    truth = truth_of(src)
    convert(str(src), tmp_path / "out", "lerobot", "target.options.fps=60")
    reader = open_reader(str(tmp_path / "out"))
    inv = reader.discover()
    assert inv.fps == 60
    for ref, t in zip(inv.refs, truth):
        ep = reader.load_episode(ref)
        for key, want in t.arrays.items():
            col = next(k for k, f in inv.features.items() if f.name == f"observation/{key}")
            np.testing.assert_array_equal(ep.columns[col].reshape(t.length, -1),
                                          want.reshape(t.length, -1).astype(np.float32))


# ---- lossless paths -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["pusht", "umi-lossless"])
def test_lossless_output_is_exact(name: str, made: Callable[[str], Path], tmp_path: Path) -> None:
    """PNG output holds exactly the frames zarr decodes: Push-T's float 0..255 frames (Blosc, lossless), UMI's
    cameras written with lossless JPEG-XL."""
    src = made(name) if name == "pusht" else zarr_gen.write_umi(tmp_path / "u" / "replay_buffer.zarr.zip",
                                                                lossless=True)
    truth = truth_of(src)
    outcome = convert(str(src), tmp_path / "out", "rlds", "images.encoding=png")
    episodes = load_rlds(Path(outcome.dataset_dir))
    assert len(episodes) == len(truth)
    for i, (ep, t) in enumerate(zip(episodes, truth)):
        ((key, want),) = t.frames.items()
        np.testing.assert_array_equal(ep["steps"]["observation/image"], want)
        if name == "umi-lossless":  # and what was written, before the codec
            np.testing.assert_array_equal(want[0], zarr_gen.frame(i, 0, 32, 48))


# ---- object stores --------------------------------------------------------------------------------------------
def test_zip_and_dir_stores_convert_from_s3_in_place(s3_server, made: Callable[[str], Path],  # noqa: F811
                                                     tmp_path: Path) -> None:
    """UMI's zip store and a directory store, read from s3:// where they lie: the same RLDS shards as from the
    local copies, and the zip is only ever read in ranges (never downloaded whole)."""
    bucket = s3_server.make_bucket("zarr-src")
    fs = s3_server.fs()
    umi, pusht = made("umi"), made("pusht")
    fs.put(str(umi), f"{bucket}/{umi.parent.name}/replay_buffer.zarr.zip")
    fs.put(str(pusht), f"{bucket}/pusht/", recursive=True)
    opts = s3_server.storage_options()
    for name, url, local in (("umi", f"s3://{bucket}/{umi.parent.name}/replay_buffer.zarr.zip", umi),
                             ("pusht", f"s3://{bucket}/pusht/{pusht.name}", pusht)):
        s3_server.faults.clear()
        remote = convert(url, tmp_path / f"{name}_s3", "rlds", storage_options=opts)
        here = convert(str(local), tmp_path / f"{name}_local", "rlds")
        shards = sorted(p.name for p in Path(here.dataset_dir).glob("*.tfrecord-*"))
        assert shards
        for shard in shards:
            assert (Path(remote.dataset_dir) / shard).read_bytes() == (Path(here.dataset_dir) / shard).read_bytes()
        if name == "umi":
            gets = [(p, rng) for m, p, rng in s3_server.faults.requests if m == "GET" and p.endswith(".zarr.zip")]
            assert gets and all(rng.startswith("bytes=") for _, rng in gets), gets[:5]


# ---- bounded memory -------------------------------------------------------------------------------------------
def test_long_umi_episode_streams_in_bounded_memory(tmp_path: Path) -> None:
    """600 steps from two 240x320 JPEG-XL cameras (276 MB decoded): loading decodes nothing, and taking the
    frames step by step, as a writer does, keeps Python's allocations under 40 MB at any time."""
    import tracemalloc

    src = zarr_gen.write_umi_long(tmp_path / "long" / "replay_buffer.zarr.zip", 600, (240, 320), cameras=2)
    reader = open_reader(str(src))
    ref = reader.discover().refs[0]
    tracemalloc.start()
    try:
        ep = reader.load_episode(ref)
        assert tracemalloc.get_traced_memory()[0] < 2 << 20  # nothing decoded yet
        streams = [iter(ep.images[k].array) for k in sorted(ep.images)]
        taken = 0
        for frames in zip(*streams):
            assert all(f.shape == (240, 320, 3) for f in frames)
            taken += 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert taken == 600
    assert peak < 40 << 20, f"peak {peak >> 20} MB"


# ---- on Ray ---------------------------------------------------------------------------------------------------
def test_umi_zip_converts_on_ray_actors(made: Callable[[str], Path], tmp_path: Path) -> None:
    """The reader shipped to Ray actors (its zip store reopened there) converts every episode, the units are
    verified by the actors that wrote them, and a second run with --resume finds everything committed."""
    from tests.conftest import run_cli

    src, out = made("umi"), tmp_path / "out"
    args = ("--actors", "2", "--set", "validate.tfds_readback=false", "--set", "plan.min_shards=2")
    proc = run_cli("run", str(src), str(out), *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    truth = truth_of(src)
    assert f"{len(truth)} episodes / {sum(t.length for t in truth)} steps written" in proc.stdout + proc.stderr
    log = (out / "logs" / "convert.log").read_text()
    assert "units re-read by the workers that wrote them, 0 re-read at the end" in log, log[-2000:]
    again = run_cli("run", str(src), str(out), *args, "--resume")
    assert again.returncode == 0, again.stderr[-3000:]


# ---- detection and findings -----------------------------------------------------------------------------------
def test_detection_takes_only_replay_buffers(made: Callable[[str], Path], tmp_path: Path) -> None:
    """HDF5 recordings and LeRobot folders stay with their readers; --format zarr on them says what is missing; a
    folder of two stores is one clear error."""
    from robo_ray.errors import SourceFormatError
    from tests.fixtures import aloha_gen, robomimic_gen
    from tests.fixtures.lerobot_gen import DatasetSpec, write_lerobot_dataset

    robomimic = robomimic_gen.write_robomimic(tmp_path / "rm" / "image.hdf5", (4, 3), (16, 16))
    aloha = aloha_gen.write_dataset(tmp_path / "aloha", (4, 3), hw=(16, 16))
    lerobot = write_lerobot_dataset(tmp_path / "lr", DatasetSpec(version="v3.0", episode_lengths=[4, 3]))
    assert [detect_format(str(p)) for p in (robomimic, robomimic.parent, aloha, lerobot)] == \
        ["robomimic", "robomimic", "aloha", "lerobot"]
    for p in (robomimic, aloha):
        with pytest.raises(SourceFormatError, match="not a zarr replay buffer"):
            open_reader(str(p), "zarr")
    two = tmp_path / "two"
    zarr_gen.write_umi(two / "a.zarr.zip", (3,))
    zarr_gen.write_pusht(two / "b.zarr", (3,))
    with pytest.raises(SourceFormatError, match="holds 2 zarr stores"):
        detect_format(str(two))
    assert detect_format(str(two / "b.zarr")) == "zarr"


def test_dp_real_recording_says_its_videos_are_not_read(tmp_path: Path) -> None:
    """A Diffusion Policy real-robot recording folder (replay_buffer.zarr + videos/<ep>/<cam>.mp4): the buffer's
    arrays convert, and one warning (ZR104) says the camera videos beside it are not read (they used to be dropped
    without a word)."""
    src = zarr_gen.write_dp_real_recording(tmp_path / "real_pusht_20230105")
    for url in (src, src / "replay_buffer.zarr"):
        inv = open_reader(str(url)).discover()
        assert [r.length for r in inv.refs] == [6, 4]
        assert sorted(inv.features) == sorted([*zarr_gen.DP_REAL_LOW_DIM, "stage", "timestamp"])
        (videos,) = [f for f in inv.findings if f.code == "ZR104"]
        assert "videos/ beside replay_buffer.zarr holds 2 folder(s)" in videos.message
    plain = open_reader(str(zarr_gen.write_pusht(tmp_path / "p" / "pusht.zarr", (3,)))).discover()
    assert "ZR104" not in {f.code for f in plain.findings}


def test_findings_name_the_episodes(tmp_path: Path) -> None:
    """episode_ends past the data (ZR101), an empty episode (ZR102), rows after the last episode (ZR103) are
    warnings naming the episodes; those episodes are quarantined when loaded, the others load."""
    from robo_ray.errors import DataCorrupt, DataMissing

    src = zarr_gen.write_pusht(tmp_path / "p" / "pusht.zarr", (5, 6, 4, 7))
    g = zarr.open_group(str(src), mode="r+")
    g["meta/episode_ends"][:] = np.array([5, 5, 15, 25], dtype=np.int64)  # episode 1 empty, 3 past the 22 rows
    g["data/img"].resize((30, 48, 48, 3))  # and one array longer than the rest
    reader = open_reader(str(src))
    inv = reader.discover()
    by_code = {f.code: f.message for f in inv.findings}
    assert {"ZR101", "ZR102", "ZR103"} <= set(by_code), inv.findings
    assert "episodes 3 will be quarantined" in by_code["ZR101"] and "episodes 1 hold no steps" in by_code["ZR102"]
    with pytest.raises(DataMissing, match="episode 1: holds no steps"):
        reader.load_episode(inv.refs[1])
    with pytest.raises(DataCorrupt, match="episode 3: data/action has 22 rows"):
        reader.load_episode(inv.refs[3])
    for k in (0, 2):
        assert reader.load_episode(inv.refs[k]).length == [5, 10][k // 2]
