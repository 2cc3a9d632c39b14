"""The reader conformance suite (DESIGN §3): every reader, on the shared samples and on generated fixtures, must
discover and load every episode consistently with its default mapping, have picklable refs and inventory, convert
to byte-identical shards on a second run, and turn every case of the bad-input corpus into one clear error."""
from __future__ import annotations

import json
import pickle
import shutil
import warnings
from pathlib import Path
from typing import Any, Callable

import h5py
import numpy as np
import pytest
import zarr

from robo_ray.config import load_config
from robo_ray.errors import (DataCorrupt, DataMissing, EpisodeDataOutside, EpisodeError, EpisodeTooLarge, RoboRayError,
                             SourceFormatError, UnknownFormat, UnsafeInput)
from robo_ray.formats.rosbag.errors import GapBeyondSkew, TimeGoesBack
from robo_ray.mapping import default_mapping
from robo_ray.readers import detect_format, open_reader
from robo_ray.stages.pipeline import run_pipeline
from tests.conftest import require_shared
from tests.fixtures import aloha_gen, minari_gen, ortf_gen, robomimic_gen, rosbag_gen, zarr_gen
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset

Maker = Callable[[Path], Path]


def _sample(rel: str) -> Maker:
    def make(tmp: Path) -> Path:
        return require_shared(f"samples/{rel}")
    return make


def _lerobot(spec: DatasetSpec) -> Maker:
    return lambda tmp: write_lerobot_dataset(tmp / "lerobot", spec)


def _minari(kind: str, fmt: str, jpeg: bool = True) -> Maker:
    def make(tmp: Path) -> Path:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dataset_id = minari_gen.make_dataset(tmp, kind, fmt, jpeg)
        return tmp.joinpath(*dataset_id.split("/"))
    return make


def _ortf_from_lerobot(tmp: Path) -> Path:
    from robo_ray.formats.ortf.api import write_ortf

    src = write_lerobot_dataset(tmp / "lerobot", DatasetSpec(version="v2.1", episode_lengths=[6, 5]))
    write_ortf(str(src), str(tmp / "ortf"))
    return tmp / "ortf"


# (format, maker) per case: the samples first, then generated fixtures
CASES: dict[str, tuple[str, Maker]] = {
    "lerobot-sample-v21": ("lerobot", _sample("lerobot_v21_h264_1cam")),
    "lerobot-gen-v30-2cam": ("lerobot", _lerobot(DatasetSpec(
        version="v3.0", episode_lengths=[6, 5, 4], episodes_per_file=2, with_reward_done=True,
        cameras=[CameraSpec("observation.images.top"), CameraSpec("observation.images.wrist", storage="image")]))),
    "minari-sample-pendulum": ("minari", _sample("minari/pendulum/random-v0")),
    "minari-sample-pointmaze": ("minari", _sample("minari/pointmaze/umaze-random-v0")),
    "minari-gen-image-jpeg-hdf5": ("minari", _minari("image", "hdf5")),
    "minari-gen-image-raw-arrow": ("minari", _minari("image", "arrow", jpeg=False)),
    "minari-gen-tuple-arrow": ("minari", _minari("tuple", "arrow")),
    "minari-gen-legacy-v04": ("minari", lambda tmp: minari_gen.write_legacy_v04(tmp)),
    "ortf-gen-native": ("ortf", lambda tmp: ortf_gen.write_ortf_native(tmp / "ortf")),
    "ortf-gen-from-lerobot": ("ortf", _ortf_from_lerobot),
    "robomimic-gen-image": ("robomimic", lambda tmp: robomimic_gen.write_robomimic(tmp / "lift" / "image.hdf5").parent),
    "robomimic-gen-libero-suite": ("robomimic", lambda tmp: robomimic_gen.write_libero_suite(tmp / "libero_10")),
    "robomimic-gen-isaaclab": ("robomimic", lambda tmp: robomimic_gen.write_isaaclab(tmp / "isaac" / "ds.hdf5")),
    "aloha-gen-jpeg": ("aloha", lambda tmp: aloha_gen.write_dataset(tmp / "aloha_task")),
    "aloha-gen-sim-raw": ("aloha", lambda tmp: aloha_gen.write_dataset(tmp / "sim_task", compress=False, sim=True,
                                                                       cameras=("top", "angle"))),
    "zarr-gen-pusht-dir": ("zarr", lambda tmp: zarr_gen.write_pusht(tmp / "pusht" / "pusht.zarr").parent),
    "zarr-gen-dp-zip": ("zarr", lambda tmp: zarr_gen.write_dp_zip(tmp / "lift" / "image.hdf5.zarr.zip").parent),
    "zarr-gen-umi-zip": ("zarr", lambda tmp: zarr_gen.write_umi(tmp / "umi" / "replay_buffer.zarr.zip",
                                                               cameras=2).parent),
    "rosbag-gen-mcap": ("rosbag", lambda tmp: rosbag_gen.write_dataset(tmp / "bags", "mcap")),
    "rosbag-gen-rosbag2-sqlite3": ("rosbag", lambda tmp: rosbag_gen.write_dataset(tmp / "bags", "rosbag2_sqlite3")),
    "rosbag-gen-ros1-depth": ("rosbag", lambda tmp: rosbag_gen.write_dataset(tmp / "bags", "ros1",
                                                                             with_depth=True)),
}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Each case's dataset, made once per module."""
    cache: dict[str, Path] = {}

    def get(case: str) -> Path:
        if case not in cache:
            cache[case] = CASES[case][1](tmp_path_factory.mktemp(case))
        return cache[case]
    return get


@pytest.mark.parametrize("case", list(CASES))
def test_discover_and_load_every_episode(case: str, made: Callable[[str], Path]) -> None:
    fmt, _ = CASES[case]
    src = made(case)
    assert detect_format(str(src)) == fmt
    reader = open_reader(str(src))
    inv = reader.discover()
    assert inv.source_format == fmt and inv.refs, inv
    assert not [f for f in inv.findings if f.level == "error"], inv.findings
    assert inv.episodes_count == len(inv.refs) and inv.total_steps == sum(r.length for r in inv.refs)
    assert len({r.episode_index for r in inv.refs}) == len(inv.refs)
    json.dumps(inv.declared)  # goes into inventory.json
    mapping = default_mapping(inv)
    mapping.check_against(inv.features)
    assert mapping.unmapped(inv.features) == []
    for ref in inv.refs:
        ep = reader.load_episode(ref)
        assert ep.length == ref.length and ep.episode_index == ref.episode_index
        for fm in mapping.steps:
            if fm.kind == "image":
                assert fm.source in ep.images or fm.source in ep.videos
                if fm.source in ep.images:
                    assert len(ep.images[fm.source]) == ep.length
            else:
                assert ep.columns[fm.source].shape[0] == ep.length, fm.source
        for src_key in mapping.defaults.sources():
            assert ep.columns[src_key].reshape(-1).shape == (ep.length,), src_key
        assert len(ep.step_tasks) == ep.length
        assert set(mapping.episode_metadata) <= set(ep.metadata)
        for path in ref.source_files():
            assert reader.exists(path), path


@pytest.mark.parametrize("case", list(CASES))
def test_refs_and_inventory_are_picklable(case: str, made: Callable[[str], Path]) -> None:
    reader = open_reader(str(made(case)))
    inv = reader.discover()
    refs = pickle.loads(pickle.dumps(inv.refs))
    assert refs == inv.refs and hash(refs[0]) == hash(inv.refs[0])
    again = pickle.loads(pickle.dumps(inv))
    assert again.refs == inv.refs and set(again.features) == set(inv.features)
    clone = pickle.loads(pickle.dumps(reader))  # a reader shipped to a worker still loads
    ep = clone.load_episode(refs[-1])
    assert ep.length == refs[-1].length


@pytest.mark.parametrize("case", list(CASES))
def test_second_run_gives_the_same_shards(case: str, made: Callable[[str], Path], tmp_path: Path) -> None:
    src = made(case)
    digests = []
    for run in ("a", "b"):
        cfg = load_config(None, ["validate.tfds_readback=false", "validate.sample_episodes=2", "plan.min_shards=2"],
                          **{"source.url": str(src), "target.url": str(tmp_path / run)})
        outcome = run_pipeline(cfg)
        assert outcome.exit_code == 0, outcome.message
        shards = sorted(Path(outcome.dataset_dir).glob("*.tfrecord-*"))
        assert shards
        digests.append({p.name: p.read_bytes() for p in shards})
        digests[-1]["features.json"] = (Path(outcome.dataset_dir) / "features.json").read_bytes()
    assert digests[0] == digests[1]


# ---- the bad-input corpus -------------------------------------------------------------------------------------
def _copy(src: Path, tmp: Path) -> Path:
    dst = tmp / "bad"
    shutil.copytree(src, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def _edit_json(rel: str, fn: Callable[[Any], Any]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        p = root / rel
        value = fn(json.loads(p.read_text()))
        p.write_text(value if isinstance(value, str) else json.dumps(value))
    return edit


def _h5(fn: Callable[[h5py.File], None]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        with h5py.File(root / "data" / "main_data.hdf5", "a") as f:
            fn(f)
    return edit


def _virtual(f: h5py.File) -> None:
    layout = h5py.VirtualLayout(shape=(101, 3), dtype="float32")
    layout[:] = h5py.VirtualSource("elsewhere.h5", "/x", shape=(101, 3))
    del f["episode_1/observations"]
    f["episode_1"].create_virtual_dataset("observations", layout)


def _huge(f: h5py.File) -> None:
    f["episode_1"].create_dataset("huge", shape=(101, 70000), dtype="uint8", chunks=(1, 1000))


def _obs_rows(f: h5py.File) -> None:
    data = f["episode_1/observations"][()]
    del f["episode_1/observations"]
    f["episode_1"].create_dataset("observations", data=data[:-5])


def _robomimic(fn: Callable[[h5py.File], None]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        with h5py.File(root / "image.hdf5", "a") as f:
            fn(f)
    return edit


def _relink(group: h5py.Group, name: str, link: Any) -> None:
    del group[name]
    group[name] = link


def _replace(group: h5py.Group, name: str, kwargs: dict[str, Any]) -> None:
    del group[name]
    group.create_dataset(name, **kwargs)


def _aloha(rel: str, fn: Callable[[h5py.File], None]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        with h5py.File(root / rel, "a") as f:
            fn(f)
    return edit


def _jpeg_length_past_row(f: h5py.File) -> None:
    f["compress_len"][0, 3] = f["observations/images/cam_high"].shape[1] + 100


def _truncate(rel: str, keep: float) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        p = root / rel
        p.write_bytes(p.read_bytes()[:int(p.stat().st_size * keep)])
    return edit


def _ortf_edit_parquet(rel: str, fn: Callable[[Any], Any]) -> Callable[[Path], None]:
    import pyarrow.parquet as pq

    def edit(root: Path) -> None:
        table = fn(pq.read_table(root / rel))
        pq.write_table(table, root / rel)
    return edit


def _video_escape(table: Any) -> Any:
    import pyarrow as pa

    rows = table.to_pylist()
    rows[0]["video_files"]["cam_wrist"] = "../../../etc/passwd"
    return pa.Table.from_pylist(rows, schema=table.schema)


def _length_off(table: Any) -> Any:
    import pyarrow as pa

    rows = table.to_pylist()
    rows[0]["length"] += 3
    return pa.Table.from_pylist(rows, schema=table.schema)


def _unlink(rel: str) -> Callable[[Path], None]:
    return lambda root: (root / rel).unlink()


def _zarr(fn: Callable[[zarr.Group], None]) -> Callable[[Path], None]:
    """An edit through zarr itself on the Push-T directory store."""
    def edit(root: Path) -> None:
        fn(zarr.open_group(str(root / "pusht.zarr"), mode="r+"))
    return edit


def _set_ends(ends: list[int]) -> Callable[[zarr.Group], None]:
    def edit(g: zarr.Group) -> None:
        g["meta/episode_ends"][:] = np.array(ends, dtype=np.int64)
    return edit


def _resize_rows(g: zarr.Group) -> None:
    g["data/action"].resize((30, 2))  # episode 3 (rows 28..37) runs past it


def _zarray(key: str, **changes: Any) -> Callable[[Path], None]:
    return _edit_json(f"pusht.zarr/data/{key}/.zarray", lambda d: {**d, **changes})


def _zip_member(rel: str, member: str, data: bytes) -> Callable[[Path], None]:
    """Rewrite a zip store with one member's bytes replaced (zipfile, as zarr.ZipStore stores them)."""
    import zipfile

    def edit(root: Path) -> None:
        path = root / rel
        with zipfile.ZipFile(path) as src:
            items = [(i, src.read(i)) for i in src.infolist()]
        with zipfile.ZipFile(path, "w") as dst:
            for info, payload in items:
                dst.writestr(info, data if info.filename == member else payload)
    return edit


# case -> (base case, mutation, stage "open" (open_reader + discover), "load" (load_episode) or "frames" (its frames
# read too), expected error)
BAD: dict[str, tuple[str, Callable[[Path], None], str, type[RoboRayError]]] = {
    "lerobot-info-not-json": ("lerobot-gen-v30-2cam", _edit_json("meta/info.json", lambda d: "{"), "open",
                              SourceFormatError),
    "lerobot-unknown-version": ("lerobot-gen-v30-2cam", _edit_json("meta/info.json", lambda d: {
        **d, "codebase_version": "v9.0"}), "open", UnknownFormat),
    "lerobot-path-escape": ("lerobot-gen-v30-2cam", _edit_json("meta/info.json", lambda d: {
        **d, "data_path": "../{chunk_index}/{file_index}.parquet"}), "open", UnsafeInput),
    "minari-metadata-not-json": ("minari-sample-pendulum", _edit_json("data/metadata.json", lambda d: "[1,"),
                                 "open", SourceFormatError),
    "minari-unsupported-space": ("minari-sample-pendulum", _edit_json("data/metadata.json", lambda d: {
        **d, "observation_space": json.dumps({"type": "Graph"})}), "open", SourceFormatError),
    "minari-not-hdf5": ("minari-sample-pendulum", lambda r: (r / "data" / "main_data.hdf5").write_bytes(b"x" * 64),
                        "open", SourceFormatError),
    "minari-external-link": ("minari-sample-pendulum", _h5(lambda f: f["episode_0"].__setitem__(
        "ext", h5py.ExternalLink("other.h5", "/x"))), "open", UnsafeInput),
    "minari-soft-link": ("minari-sample-pendulum", _h5(lambda f: f.__setitem__(
        "episode_9", h5py.SoftLink("/episode_0"))), "open", UnsafeInput),
    "minari-virtual-dataset": ("minari-sample-pendulum", _h5(_virtual), "load", EpisodeDataOutside),
    "minari-huge-dataset": ("minari-sample-pendulum", _h5(_huge), "load", EpisodeTooLarge),
    "minari-observation-rows": ("minari-sample-pendulum", _h5(_obs_rows), "load", DataCorrupt),
    "robomimic-truncated": ("robomimic-gen-image", _truncate("image.hdf5", 0.6), "open", SourceFormatError),
    "robomimic-soft-link-in-demo": ("robomimic-gen-image", _robomimic(lambda f: _relink(
        f["data/demo_2/obs"], "object", h5py.SoftLink("/data/demo_0/obs/object"))), "load", EpisodeDataOutside),
    "robomimic-external-link": ("robomimic-gen-image", _robomimic(lambda f: f.__setitem__(
        "extra", h5py.ExternalLink("other.h5", "/x"))), "open", UnsafeInput),
    "robomimic-huge-dataset": ("robomimic-gen-image", _robomimic(lambda f: _replace(
        f["data/demo_1"], "states", dict(shape=(12, 70000), dtype="uint8", chunks=(1, 1000)))), "load",
        EpisodeTooLarge),
    "robomimic-rows-off": ("robomimic-gen-image", _robomimic(lambda f: _replace(
        f["data/demo_3/obs"], "object", dict(data=np.zeros((3, 10))))), "load", DataCorrupt),
    "aloha-truncated-episode": ("aloha-gen-jpeg", _truncate("episode_2.hdf5", 0.6), "load", DataCorrupt),
    "aloha-jpeg-length-beyond-row": ("aloha-gen-jpeg", _aloha("episode_1.hdf5", _jpeg_length_past_row), "load",
                                     DataCorrupt),
    "aloha-soft-link": ("aloha-gen-jpeg", _aloha("episode_3.hdf5", lambda f: _relink(
        f["observations"], "qvel", h5py.SoftLink("/observations/qpos"))), "load", EpisodeDataOutside),
    "aloha-huge-camera": ("aloha-gen-sim-raw", _aloha("episode_2.hdf5", lambda f: _replace(
        f["observations/images"], "top", dict(shape=(10, 60000, 60000, 3), dtype="uint8", chunks=(1, 8, 8, 3)))),
        "load", EpisodeTooLarge),
    "rosbag-missing-definition": ("rosbag-gen-mcap", lambda r: rosbag_gen.rewrite(
        r, 1, msgdefs=rosbag_gen.without_definition("/cam_side/image_raw/compressed")), "load", DataCorrupt),
    "rosbag-time-goes-back": ("rosbag-gen-mcap", lambda r: rosbag_gen.rewrite(
        r, 2, messages=lambda m: rosbag_gen.stamps_going_back(m, "/joint_states")), "load", TimeGoesBack),
    "rosbag-truncated": ("rosbag-gen-rosbag2-sqlite3", _truncate("episode_1/episode_1.db3", 0.5), "load",
                         DataCorrupt),
    "rosbag-gap-beyond-skew": ("rosbag-gen-mcap", lambda r: rosbag_gen.rewrite(
        r, 0, messages=lambda m: rosbag_gen.drop_frames(m, "/cam_wrist/image_raw", 5, 5)), "load", GapBeyondSkew),
    "ortf-unknown-version": ("ortf-gen-native", _edit_json("meta/manifest.json", lambda d: {
        **d, "ortf_version": "1.0"}), "open", UnknownFormat),
    "ortf-no-episodes-index": ("ortf-gen-native", _unlink("meta/episodes.parquet"), "open", SourceFormatError),
    "ortf-video-path-escape": ("ortf-gen-native", _ortf_edit_parquet("meta/episodes.parquet", _video_escape),
                               "open", UnsafeInput),
    "ortf-missing-flag-column": ("ortf-gen-native", _ortf_edit_parquet(
        "data/chunk-000/steps.parquet", lambda t: t.drop_columns(["is_last"])), "open", SourceFormatError),
    "ortf-length-mismatch": ("ortf-gen-native", _ortf_edit_parquet("meta/episodes.parquet", _length_off), "load",
                             DataCorrupt),
    "zarr-episode-ends-decreasing": ("zarr-gen-pusht-dir", _zarr(_set_ends([9, 21, 15, 38])), "open",
                                     SourceFormatError),
    "zarr-episode-ends-negative": ("zarr-gen-pusht-dir", _zarr(_set_ends([-1, 21, 28, 38])), "open",
                                   SourceFormatError),
    "zarr-episode-ends-past-data": ("zarr-gen-pusht-dir", _zarr(_set_ends([9, 21, 28, 45])), "load", DataCorrupt),
    "zarr-rows-off": ("zarr-gen-pusht-dir", _zarr(_resize_rows), "load", DataCorrupt),
    "zarr-huge-shape": ("zarr-gen-pusht-dir", _zarray("state", shape=[38, 70000, 70000]), "open", UnsafeInput),
    "zarr-huge-chunk": ("zarr-gen-pusht-dir", _zarray("img", chunks=[100000, 48, 48, 3]), "open", UnsafeInput),
    "zarr-unknown-codec": ("zarr-gen-pusht-dir", _zarray("img", compressor={"id": "no_such_codec"}), "open",
                           SourceFormatError),
    "zarr-object-dtype-in-index": ("zarr-gen-pusht-dir", _edit_json(
        "pusht.zarr/meta/episode_ends/.zarray", lambda d: {**d, "dtype": "|O"}), "open", SourceFormatError),
    "zarr-missing-chunk": ("zarr-gen-pusht-dir", _unlink("pusht.zarr/data/img/5.0.0.0"), "frames", DataMissing),
    "zarr-jpegxl-chunk-noise": ("zarr-gen-umi-zip", _zip_member("replay_buffer.zarr.zip", "data/camera1_rgb/12.0.0.0",
                                                                bytes(range(256)) * 4), "frames", DataCorrupt),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_clear_error(case: str, made: Callable[[str], Path], tmp_path: Path) -> None:
    base, mutate, stage, expected = BAD[case]
    src = _copy(made(base), tmp_path)
    mutate(src)
    with pytest.raises(RoboRayError) as info:
        reader = open_reader(str(src))
        inv = reader.discover()
        if stage in ("load", "frames"):
            for ref in inv.refs:
                ep = reader.load_episode(ref)
                for frames in ep.images.values() if stage == "frames" else ():  # lazy frames: read as a writer does
                    list(getattr(frames, "array", frames))
    exc = info.value
    assert isinstance(exc, expected), (type(exc), exc)
    assert "\n" not in str(exc) and str(exc)
    if stage == "open":  # metadata problems stop the run with exit 2; episode problems are quarantined
        assert exc.exit_code == 2
    else:
        assert isinstance(exc, (EpisodeError, UnsafeInput))
    assert np.all([c.isprintable() for c in exc.line()])
