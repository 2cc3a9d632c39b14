"""A generated corpus of bad inputs (issue #9): one small dataset folder per case, each built from a valid generated
fixture (tests/fixtures/lerobot_gen.py, minari_gen.py) with one thing broken, and the outcome robo-ray must give.

Every case names what `robo-ray run CASE_DIR DST` must do:

* ``quarantine``: the run goes on, the listed episodes are quarantined with ``code`` (one ``quarantined[CODE]
  episode=N file=...`` line each), every other episode is converted, exit ``exit_code`` (3 over the default
  threshold, 0 when the case raises ``convert.max_quarantine_fraction``);
* ``refuse``: nothing is converted, one ``error[RRxxx]: ...`` line naming the file, exit 2;
* ``ok``: everything converts (``convert.nan_policy=allow``).

Things an unsafe case points at outside its folder (path templates that climb out or are absolute, an HDF5 external
link, a virtual dataset's source) exist for real under ``<corpus>/outside/<case>/``, so a reader that followed them
would find data there: tests/integration/test_path_watch.py checks that nothing there is ever opened.

Tiny on purpose (4 episodes of 9-15 steps, 64x48 H.264): the whole corpus builds in a few seconds.

CLI: ``python -m tests.corpus.build_corpus OUT`` builds the corpus under OUT and prints the table of cases.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robo_ray.safety import MAX_JSON_BYTES
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, _encode_mp4, expected_frame, write_lerobot_dataset

LENGTHS = [12, 10, 14, 9]
FPS = 20
CAMERA = "observation.images.top"
# quarantine cases keep validation to the shards (the tfds read-back imports TensorFlow: 4 s a run); the corpus
# test runs one case with the read-back on, and loads one output through tfds itself
FAST = ("--set", "validate.tfds_readback=false")
ALLOW_ALL = ("--set", "convert.max_quarantine_fraction=1.0")


@dataclass(frozen=True)
class Case:
    """One broken dataset and what `robo-ray run` must make of it."""

    name: str
    base: str  # "v2.1" | "v3.0" | "minari" | "robomimic" | "aloha" | "zarr" | "umi" | "rosbag": the valid fixture
    what: str  # what is broken, in words
    outcome: str  # "quarantine" | "refuse" | "ok"
    code: str  # the stable code on stderr (EPxxx for quarantines, RRxxx for refusals); "" for "ok"
    exit_code: int
    episodes: tuple[int, ...] = ()  # the quarantined episodes
    names: tuple[str, ...] = ()  # what the stderr line(s) must name (file, key)
    args: tuple[str, ...] = FAST  # extra CLI arguments

    @property
    def total(self) -> int:
        return 4


# ---- small editing helpers ------------------------------------------------------------------------------------
def v2_data(ep: int) -> str:
    return f"data/chunk-000/episode_{ep:06d}.parquet"


def v2_video(ep: int) -> str:
    return f"videos/chunk-000/{CAMERA}/episode_{ep:06d}.mp4"


V3_DATA = "data/chunk-000/file-000.parquet"
V3_VIDEO = f"videos/{CAMERA}/chunk-000/file-000.mp4"
V3_EPISODES = "meta/episodes/chunk-000/file-000.parquet"
MINARI_FILE = "data/main_data.hdf5"
MINARI_ID = "test/box-hdf5-v0"
ROBOMIMIC_FILE = "demo.hdf5"
PUSHT_STORE = "pusht.zarr"
UMI_STORE = "replay_buffer.zarr.zip"


def edit_json(path: Path, fn: Callable[[Any], Any]) -> None:
    obj = json.loads(path.read_text())
    path.write_text(json.dumps(fn(obj) or obj, indent=4))


def edit_info(root: Path, **changes: Any) -> None:
    edit_json(root / "meta/info.json", lambda info: info.update(changes))


def edit_feature(root: Path, key: str, **changes: Any) -> None:
    edit_json(root / "meta/info.json", lambda info: info["features"][key].update(changes))


def edit_table(path: Path, fn: Callable[[pa.Table], pa.Table]) -> None:
    pq.write_table(fn(pq.read_table(path)), path)


def set_column(table: pa.Table, name: str, values: Any, type_: pa.DataType | None = None) -> pa.Table:
    arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values, type_)
    return table.set_column(table.column_names.index(name), name, arr)


def video_packets(path: Path) -> list[tuple[int, int]]:
    """(byte offset, size) of every video packet, in decode order."""
    with av.open(str(path)) as c:
        return [(p.pos, p.size) for p in c.demux(c.streams.video[0]) if p.size]


def truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def mp4_boxes(data: bytes) -> dict[bytes, tuple[int, int]]:
    """Top-level MP4 boxes: type -> (offset, size)."""
    out: dict[bytes, tuple[int, int]] = {}
    pos = 0
    while pos + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if size == 1:
            size = struct.unpack(">Q", data[pos + 8:pos + 16])[0]
        out[kind] = (pos, size or len(data) - pos)
        pos += size or len(data)
    return out


def remux_faststart(path: Path) -> None:
    """Rewrite an MP4 with its index (moov) before the frames, as lerobot's v3.0 files are, so that a cut file still
    opens and the cut lands in the frame data."""
    tmp = path.with_suffix(".faststart.mp4")
    with av.open(str(path)) as src, av.open(str(tmp), "w", format="mp4", options={"movflags": "faststart"}) as dst:
        stream = dst.add_stream_from_template(src.streams.video[0])
        for packet in src.demux(src.streams.video[0]):
            if packet.dts is None:
                continue
            packet.stream = stream
            dst.mux(packet)
    os.replace(tmp, path)


def reencode(root: Path, ep: int, frames: int) -> None:
    """Episode `ep`'s MP4 (v2.x layout) encoded again with `frames` frames (the parquet keeps its rows)."""
    cam = CameraSpec(key=CAMERA)
    _encode_mp4(root / v2_video(ep), (expected_frame(ep, i, 0, cam.height, cam.width) for i in range(frames)), FPS,
                cam)


# ---- the mutations --------------------------------------------------------------------------------------------
def _mp4_zero(root: Path, outside: Path) -> None:
    (root / v2_video(2)).write_bytes(b"")


LFS_POINTER = (b"version https://git-lfs.github.com/spec/v1\n"
               b"oid sha256:e7b5e1e8ef317d14ff6981995046adce76fd23fc8db47578690743ca162a9f79\nsize 67188\n")


def _lfs_pointer_mp4(root: Path, outside: Path) -> None:
    """A clone without git-lfs: episode 2's MP4 is a pointer file."""
    (root / v2_video(2)).write_bytes(LFS_POINTER)


def _lfs_pointer_parquet(root: Path, outside: Path) -> None:
    (root / v2_data(3)).write_bytes(LFS_POINTER)


def _mp4_cut_mid_stream_v2(root: Path, outside: Path) -> None:
    path = root / v2_video(2)
    pos, size = video_packets(path)[7]  # moov is at the end of a v2.x file: a cut loses the index
    truncate(path, pos + size // 2)


def _mp4_cut_mid_stream_v3(root: Path, outside: Path) -> None:
    path = root / V3_VIDEO  # one faststart file for the 4 episodes (frames 0-11, 12-21, 22-35, 36-44)
    pos, size = video_packets(path)[25]  # inside episode 2's 4th frame
    truncate(path, pos + size // 2)


def _mp4_cut_first_frame(root: Path, outside: Path) -> None:
    path = root / v2_video(2)
    remux_faststart(path)
    pos, size = video_packets(path)[0]
    truncate(path, pos + size // 2)


def _mp4_extra_frame(root: Path, outside: Path) -> None:
    reencode(root, 2, LENGTHS[2] + 1)


def _mp4_missing_frame(root: Path, outside: Path) -> None:
    reencode(root, 2, LENGTHS[2] - 1)


def _timestamps_off(root: Path, outside: Path) -> None:
    def shift(t: pa.Table) -> pa.Table:  # 20 ms late: less than a frame (50 ms), far more than the 0.1 ms tolerance
        ts = t["timestamp"].to_numpy() + np.float32(0.02)
        return set_column(t, "timestamp", ts.astype(np.float32), pa.float32())
    edit_table(root / v2_data(2), shift)


def _mp4_garbage_payload(root: Path, outside: Path) -> None:
    """Header and index intact, every frame's bytes replaced by noise."""
    path = root / v2_video(2)
    data = bytearray(path.read_bytes())
    off, size = mp4_boxes(bytes(data))[b"mdat"]
    noise = np.random.default_rng(9).integers(0, 256, size - 8, dtype=np.uint8).tobytes()
    data[off + 8:off + size] = noise
    path.write_bytes(bytes(data))


def _mp4_unknown_codec(root: Path, outside: Path) -> None:
    """The sample entry's codec tag `avc1` becomes `zzzz`: a well-formed MP4 of a codec FFmpeg does not know."""
    path = root / v2_video(2)
    data = path.read_bytes()
    at = data.index(b"avc1", data.index(b"stsd"))
    path.write_bytes(data[:at] + b"zzzz" + data[at + 4:])


def _parquet_cut_footer(root: Path, outside: Path) -> None:
    path = root / v2_data(2)
    truncate(path, path.stat().st_size - 10)


def _parquet_missing_column(root: Path, outside: Path) -> None:
    edit_table(root / v2_data(2), lambda t: t.drop_columns(["action"]))


def _parquet_wrong_dtype(root: Path, outside: Path) -> None:
    def as_text(t: pa.Table) -> pa.Table:
        rows = [[f"a{v:.3f}" for v in row] for row in t["action"].to_pylist()]
        return set_column(t, "action", rows, pa.list_(pa.string()))
    edit_table(root / v2_data(2), as_text)


def _parquet_list_length(root: Path, outside: Path) -> None:
    def shorter(t: pa.Table) -> pa.Table:  # 3 values a row, info.json declares shape [4]
        return set_column(t, "action", [row[:3] for row in t["action"].to_pylist()], pa.list_(pa.float32()))
    edit_table(root / v2_data(2), shorter)


def _v3_meta_duplicate_index(root: Path, outside: Path) -> None:
    def dup(t: pa.Table) -> pa.Table:
        idx = t["episode_index"].to_pylist()
        idx[2] = 1
        return set_column(t, "episode_index", idx, t.schema.field("episode_index").type)
    edit_table(root / V3_EPISODES, dup)


def _v3_data_duplicate_index(root: Path, outside: Path) -> None:
    """Episode 1's rows in the shared data file carry episode_index 2: episode 2 appears twice, episode 1 never."""
    def dup(t: pa.Table) -> pa.Table:
        idx = t["episode_index"].to_numpy().copy()
        idx[idx == 1] = 2
        return set_column(t, "episode_index", idx, pa.int64())
    edit_table(root / V3_DATA, dup)


def _jsonl_duplicate_index(root: Path, outside: Path) -> None:
    path = root / "meta/episodes.jsonl"
    lines = path.read_text().splitlines()
    row = json.loads(lines[2])
    row["episode_index"] = 1
    lines[2] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")


def _nan_actions(root: Path, outside: Path) -> None:
    """Episode 1 has a NaN action at step 5, episode 2 an Inf at step 3."""
    for ep, step, value in ((1, 5, float("nan")), (2, 3, float("inf"))):
        def poison(t: pa.Table, step: int = step, value: float = value) -> pa.Table:
            rows = t["action"].to_pylist()
            rows[step][1] = value
            return set_column(t, "action", rows, t.schema.field("action").type)
        edit_table(root / v2_data(ep), poison)


def _template_dotdot(root: Path, outside: Path) -> None:
    rel = os.path.relpath(outside, root)  # ../../outside/<case>
    edit_info(root, data_path=f"{rel}/data/episode_{{episode_index:06d}}.parquet")


def _template_absolute(root: Path, outside: Path) -> None:
    edit_info(root, video_path=f"{outside}/videos/episode_{{episode_index:06d}}.mp4")


def _template_url(root: Path, outside: Path) -> None:
    edit_info(root, data_path=f"file://{outside}/data/episode_{{episode_index:06d}}.parquet")


def _template_attribute(root: Path, outside: Path) -> None:
    edit_info(root, data_path="data/{episode_index.__class__}/episode_{episode_index:06d}.parquet")


def _template_huge_width(root: Path, outside: Path) -> None:
    edit_info(root, data_path="data/chunk-000/episode_{episode_index:>99999999}.parquet")


def _shape_negative(root: Path, outside: Path) -> None:
    edit_feature(root, "action", shape=[-4])


def _shape_enormous(root: Path, outside: Path) -> None:
    edit_feature(root, "observation.state", shape=[60000, 60000, 3])


def _total_episodes_huge(root: Path, outside: Path) -> None:
    path = root / "meta/info.json"
    path.write_text(path.read_text().replace('"total_episodes": 4,', '"total_episodes": 1e12,'))
    assert "1e12" in path.read_text()


def _jsonl_not_json(root: Path, outside: Path) -> None:
    path = root / "meta/episodes.jsonl"
    lines = path.read_text().splitlines()
    lines.insert(2, '{"episode_index": 9, "length": 3,')
    path.write_text("\n".join(lines) + "\n")


def _info_too_large(root: Path, outside: Path) -> None:
    """The real info.json padded (sparse, no disk used) past the metadata size limit."""
    truncate(root / "meta/info.json", MAX_JSON_BYTES + 1)


def _h5_replace(group: Any, name: str, data: np.ndarray) -> None:
    del group[name]
    group.create_dataset(name, data=data)


def _minari_external_link(root: Path, outside: Path) -> None:
    import h5py

    with h5py.File(root / MINARI_FILE, "r+") as f:
        del f["episode_1/observations"]
        f["episode_1/observations"] = h5py.ExternalLink(str(outside / "bait.hdf5"), "/observations")


def _minari_virtual_dataset(root: Path, outside: Path) -> None:
    import h5py

    source = outside / "bait.hdf5"
    with h5py.File(source, "r") as f:
        shape, dtype = f["observations"].shape, f["observations"].dtype
    layout = h5py.VirtualLayout(shape=shape, dtype=dtype)
    layout[:] = h5py.VirtualSource(str(source), "observations", shape=shape)
    with h5py.File(root / MINARI_FILE, "r+") as f:
        del f["episode_2/observations"]
        f["episode_2"].create_virtual_dataset("observations", layout)


def _minari_obs_off_by_one(root: Path, outside: Path) -> None:
    import h5py

    with h5py.File(root / MINARI_FILE, "r+") as f:
        g = f["episode_1"]
        _h5_replace(g, "observations", g["observations"][:-1])  # T rows instead of T+1


def _minari_actions_off_by_one(root: Path, outside: Path) -> None:
    import h5py

    with h5py.File(root / MINARI_FILE, "r+") as f:
        g = f["episode_1"]
        acts = g["actions"][()]
        _h5_replace(g, "actions", np.concatenate([acts, acts[-1:]]))  # T+1 actions for T transitions


def _minari_oversized(root: Path, outside: Path) -> None:
    """episode_3's infos/extra declares 70000 values a step: beyond the limits, refused before anything is read (the
    dataset is chunked and empty, so the file stays tiny)."""
    import h5py

    with h5py.File(root / MINARI_FILE, "r+") as f:
        rows = f["episode_3/observations"].shape[0]
        f["episode_3/infos"].create_dataset("extra", shape=(rows, 70000), dtype="f8", chunks=(1, 1000))


def _robomimic_soft_link(root: Path, outside: Path) -> None:
    import h5py

    with h5py.File(root / ROBOMIMIC_FILE, "r+") as f:
        del f["data/demo_2/obs/object"]
        f["data/demo_2/obs/object"] = h5py.SoftLink("/data/demo_0/obs/object")


def _robomimic_external_link(root: Path, outside: Path) -> None:
    import h5py

    with h5py.File(root / ROBOMIMIC_FILE, "r+") as f:
        del f["data/demo_1/obs/object"]
        f["data/demo_1/obs/object"] = h5py.ExternalLink(str(outside / "bait.hdf5"), "/observations")


def _cut(rel: str) -> Callable[[Path, Path], None]:
    def cut(root: Path, outside: Path) -> None:
        truncate(root / rel, int((root / rel).stat().st_size * 0.6))
    return cut


def _aloha_jpeg_length(root: Path, outside: Path) -> None:
    import h5py

    with h5py.File(root / "episode_1.hdf5", "r+") as f:
        width = f["observations/images/cam_high"].shape[1]
        f["compress_len"][0, 3] = width + 100  # the length runs past the end of its row


def _aloha_external_link(root: Path, outside: Path) -> None:
    import h5py

    with h5py.File(root / "episode_3.hdf5", "r+") as f:
        del f["observations/qvel"]
        f["observations/qvel"] = h5py.ExternalLink(str(outside / "bait.hdf5"), "/observations")


def _zarr_group(root: Path) -> Any:
    import zarr

    return zarr.open_group(str(root / PUSHT_STORE), mode="r+")


def _zarr_ends_past_data(root: Path, outside: Path) -> None:
    _zarr_group(root)["meta/episode_ends"][-1] += 5  # the last episode runs 5 steps past every array


def _zarr_ends_decreasing(root: Path, outside: Path) -> None:
    ends = _zarr_group(root)["meta/episode_ends"]
    ends[2] = ends[0] - 1


def _zarr_rows_short(root: Path, outside: Path) -> None:
    g = _zarr_group(root)
    g["data/action"].resize((sum(LENGTHS) - 4, 2))  # episode 3 lacks its last 4 actions


def _zarr_unknown_codec(root: Path, outside: Path) -> None:
    edit_json(root / PUSHT_STORE / "data/img/.zarray", lambda z: z.update(compressor={"id": "zfp_nonexistent"}))


def _zarr_huge_shape(root: Path, outside: Path) -> None:
    edit_json(root / PUSHT_STORE / "data/state/.zarray", lambda z: z.update(shape=[sum(LENGTHS), 60000, 60000]))


def _zarr_missing_chunk(root: Path, outside: Path) -> None:
    (root / PUSHT_STORE / "data/img/6.0.0.0").unlink()  # frames 24..27: episode 2 (rows 22..35)


def _umi_jpegxl_noise(root: Path, outside: Path) -> None:
    """Frame 14 of camera0 (episode 1: rows 12..21) replaced with noise inside the zip store."""
    import zipfile

    path = root / UMI_STORE
    with zipfile.ZipFile(path) as src:
        items = [(i, src.read(i)) for i in src.infolist()]
    with zipfile.ZipFile(path, "w") as dst:
        for info, payload in items:
            dst.writestr(info, bytes(range(251)) * 3 if info.filename == "data/camera0_rgb/14.0.0.0" else payload)


# ---- the table ------------------------------------------------------------------------------------------------
def _rosbag_no_definition(root: Path, outside: Path) -> None:
    from tests.fixtures import rosbag_gen

    rosbag_gen.rewrite(root, 1, msgdefs=rosbag_gen.without_definition("/cam_side/image_raw/compressed"))


def _rosbag_time_back(root: Path, outside: Path) -> None:
    from tests.fixtures import rosbag_gen

    rosbag_gen.rewrite(root, 2, messages=lambda m: rosbag_gen.stamps_going_back(m, "/joint_states"))


def _rosbag_gap(root: Path, outside: Path) -> None:
    from tests.fixtures import rosbag_gen

    rosbag_gen.rewrite(root, 0, messages=lambda m: rosbag_gen.drop_frames(m, "/cam_wrist/image_raw", 5, 5))


def _q(name: str, base: str, what: str, code: str, episodes: tuple[int, ...], names: tuple[str, ...],
       exit_code: int = 3, args: tuple[str, ...] = FAST) -> Case:
    return Case(name, base, what, "quarantine", code, exit_code, episodes, names, args)


def _r(name: str, base: str, what: str, code: str, names: tuple[str, ...]) -> Case:
    return Case(name, base, what, "refuse", code, 2, (), names)


CASES: list[Case] = [
    _q("mp4_zero_bytes", "v2.1", "episode 2's MP4 is empty (run with the default tfds read-back)", "EP102", (2,),
       (v2_video(2),), args=()),
    _q("mp4_cut_mid_stream_v2", "v2.1", "episode 2's MP4 cut at its 8th frame (its index, at the end, is lost)",
       "EP102", (2,), (v2_video(2),)),
    _q("mp4_cut_mid_stream_v3", "v3.0", "the shared v3.0 MP4 cut inside episode 2's 4th frame", "EP102", (2, 3),
       (V3_VIDEO,)),
    _q("mp4_cut_in_first_frame", "v2.1", "episode 2's (faststart) MP4 cut inside its first frame", "EP102", (2,),
       (v2_video(2),)),
    _q("mp4_one_frame_more", "v2.1", "episode 2's MP4 has one frame more than its parquet rows", "EP103", (2,),
       (v2_video(2),)),
    _q("mp4_one_frame_fewer", "v2.1", "episode 2's MP4 has one frame fewer than its parquet rows", "EP103", (2,),
       (v2_video(2),)),
    _q("timestamps_off", "v2.1", "episode 2's parquet timestamps are 20 ms late (tolerance 0.1 ms)", "EP104", (2,),
       (v2_video(2),)),
    _q("mp4_garbage_payload", "v2.1", "episode 2's MP4: valid header and index, the frame bytes are noise",
       "EP102", (2,), (v2_video(2),)),
    _q("mp4_unknown_codec", "v2.1", "episode 2's MP4 declares a codec FFmpeg does not know ('zzzz')", "EP102",
       (2,), (v2_video(2),)),
    _q("parquet_cut_footer", "v2.1", "episode 2's parquet lost its last 10 bytes (footer)", "EP202", (2,),
       (v2_data(2),)),
    _q("lfs_pointer_mp4", "v2.1", "a clone without git-lfs: episode 2's MP4 is a Git LFS pointer file", "EP102",
       (2,), (v2_video(2), "Git LFS pointer")),
    _q("lfs_pointer_parquet", "v2.1", "a clone without git-lfs: episode 3's parquet is a Git LFS pointer file",
       "EP202", (3,), (v2_data(3), "Git LFS pointer")),
    _q("parquet_missing_column", "v2.1", "episode 2's parquet has no `action` column", "EP202", (2,),
       (v2_data(2), "action")),
    _q("parquet_wrong_dtype", "v2.1", "episode 2's `action` holds strings", "EP202", (2,), (v2_data(2), "action")),
    _q("parquet_list_length", "v2.1", "episode 2's `action` lists have 3 values, info.json declares [4]", "EP202",
       (2,), (v2_data(2), "action")),
    _q("parquet_duplicate_episode_index_v3", "v3.0", "the v3.0 data file labels episode 1's rows as episode 2",
       "EP202", (1, 2), (V3_DATA,)),
    _r("meta_duplicate_episode_index_v3", "v3.0", "meta/episodes lists episode_index 1 twice", "RR300",
       (V3_EPISODES, "duplicate episode_index 1")),
    _r("jsonl_duplicate_episode_index", "v2.1", "meta/episodes.jsonl lists episode_index 1 twice", "RR300",
       ("meta/episodes.jsonl:3", "duplicate episode_index 1")),
    _q("nan_policy_quarantine", "v2.1", "NaN (episode 1) and Inf (episode 2) actions, nan_policy=quarantine, "
       "threshold 100%", "EP203", (1, 2), ("action",), exit_code=0, args=(*FAST, *ALLOW_ALL)),
    _q("nan_policy_fail", "v2.1", "NaN / Inf actions, nan_policy=fail (fails even under a 100% threshold)", "EP203",
       (1, 2), ("action",), args=(*FAST, *ALLOW_ALL, "--set", "convert.nan_policy=fail")),
    Case("nan_policy_allow", "v2.1", "NaN / Inf actions, nan_policy=allow: converted as they are", "ok", "", 0,
         args=(*FAST, "--set", "convert.nan_policy=allow")),
    _r("template_dotdot", "v2.1", "data_path climbs out with ../", "RR301", ("meta/info.json", "data_path")),
    _r("template_absolute", "v2.1", "video_path is an absolute path", "RR301", ("meta/info.json", "video_path")),
    _r("template_url_scheme", "v2.1", "data_path is a file:// URL", "RR301", ("meta/info.json", "data_path")),
    _r("template_attribute", "v2.1", "data_path uses {episode_index.__class__}", "RR301",
       ("meta/info.json", "data_path")),
    _r("template_huge_width", "v2.1", "data_path uses {episode_index:>99999999}", "RR301",
       ("meta/info.json", "data_path")),
    _r("shape_negative", "v2.1", "`action` has shape [-4]", "RR301", ("meta/info.json", "action")),
    _r("shape_enormous", "v2.1", "`observation.state` has shape [60000, 60000, 3]", "RR301",
       ("meta/info.json", "observation.state")),
    _r("total_episodes_1e12", "v2.1", "info.json says total_episodes: 1e12", "RR301",
       ("meta/info.json", "total_episodes")),
    _r("episodes_jsonl_not_json", "v2.1", "meta/episodes.jsonl line 3 is not JSON", "RR300",
       ("meta/episodes.jsonl:3",)),
    _r("info_json_too_large", "v2.1", "meta/info.json is 1 byte over the metadata size limit", "RR301",
       ("meta/info.json",)),
    _r("minari_external_link", "minari", "episode_1/observations is an HDF5 external link to a file outside",
       "RR301", (MINARI_FILE, "external link")),
    _q("minari_virtual_dataset", "minari", "episode_2/observations is a virtual dataset over a file outside",
       "EP207", (2,), (MINARI_FILE, "virtual dataset")),
    _q("minari_observations_off_by_one", "minari", "episode_1 has T observations instead of T+1", "EP202", (1,),
       (MINARI_FILE, "observations")),
    _q("minari_actions_off_by_one", "minari", "episode_1 has T+1 actions for T transitions", "EP202", (1,),
       (MINARI_FILE, "actions")),
    _q("minari_oversized_dataset", "minari", "episode_3 has a dataset of 70000 values a step (limit 65536 a dim)",
       "EP206", (3,), (MINARI_FILE, "/episode_3/infos/extra")),
    _q("robomimic_soft_link_in_demo", "robomimic", "demo_2's obs/object is a soft link to demo_0's", "EP207", (2,),
       (ROBOMIMIC_FILE, "demo_2", "soft link")),
    _q("robomimic_external_link_in_demo", "robomimic", "demo_1's obs/object is an external link to a file outside",
       "EP207", (1,), (ROBOMIMIC_FILE, "demo_1", "external link")),
    _r("robomimic_truncated", "robomimic", "the robomimic file cut to 60% of its bytes", "RR300",
       (ROBOMIMIC_FILE, "not a readable HDF5 file")),
    _q("aloha_truncated_episode", "aloha", "episode_2.hdf5 cut to 60% of its bytes", "EP202", (2,),
       ("episode_2.hdf5", "not a readable HDF5 file")),
    _q("aloha_jpeg_length_beyond_row", "aloha", "episode_1's compress_len[0, 3] runs past its JPEG row", "EP202",
       (1,), ("episode_1.hdf5", "compress_len")),
    _q("aloha_external_link", "aloha", "episode_3's /observations/qvel is an external link to a file outside",
       "EP207", (3,), ("episode_3.hdf5", "external link")),
    _q("zarr_episode_ends_past_data", "zarr", "meta/episode_ends runs 5 steps past the data", "EP202", (3,),
       (PUSHT_STORE, "episode_ends")),
    _r("zarr_episode_ends_decreasing", "zarr", "meta/episode_ends decreases at episode 2", "RR300",
       (PUSHT_STORE, "meta/episode_ends", "decreasing")),
    _q("zarr_rows_short", "zarr", "data/action has 4 rows fewer than the episodes", "EP202", (3,),
       (PUSHT_STORE, "data/action")),
    _r("zarr_unknown_codec", "zarr", "data/img's compressor is a codec nobody knows", "RR300",
       (PUSHT_STORE, "data/img/.zarray", "zfp_nonexistent")),
    _r("zarr_huge_shape", "zarr", "data/state declares 60000x60000 values a step", "RR301",
       (PUSHT_STORE, "data/state/.zarray")),
    _q("zarr_missing_chunk", "zarr", "a chunk of data/img (episode 2's frames) is gone", "EP201", (2,),
       (PUSHT_STORE, "data/img/6.0.0.0")),
    _q("umi_jpegxl_chunk_noise", "umi", "one JPEG-XL frame of episode 1 in the zip store is noise", "EP202", (1,),
       (UMI_STORE, "camera0_rgb")),
    _q("rosbag_missing_definition", "rosbag", "episode_1.mcap stores /cam_side/image_raw/compressed's schema with "
       "an empty message definition", "EP202", (1,), ("episode_1.mcap", "no message definition")),
    _q("rosbag_time_goes_back", "rosbag", "episode_2.mcap: a /joint_states header stamp 100 ms before the one it "
       "follows", "EP211", (2,), ("episode_2.mcap", "/joint_states", "go back")),
    _q("rosbag_truncated", "rosbag", "episode_3.mcap cut to 60% of its bytes", "EP202", (3,),
       ("episode_3.mcap", "not a readable bag")),
    _q("rosbag_gap_beyond_skew", "rosbag", "episode_0.mcap: /cam_wrist/image_raw stalls for 5 frames (0.6 s at "
       "10 Hz; the default skew is 2 intervals)", "EP210", (0,), ("episode_0.mcap", "/cam_wrist/image_raw")),
]

MUTATIONS: dict[str, Callable[[Path, Path], None]] = {
    "mp4_zero_bytes": _mp4_zero,
    "mp4_cut_mid_stream_v2": _mp4_cut_mid_stream_v2,
    "mp4_cut_mid_stream_v3": _mp4_cut_mid_stream_v3,
    "mp4_cut_in_first_frame": _mp4_cut_first_frame,
    "mp4_one_frame_more": _mp4_extra_frame,
    "mp4_one_frame_fewer": _mp4_missing_frame,
    "timestamps_off": _timestamps_off,
    "mp4_garbage_payload": _mp4_garbage_payload,
    "mp4_unknown_codec": _mp4_unknown_codec,
    "parquet_cut_footer": _parquet_cut_footer,
    "lfs_pointer_mp4": _lfs_pointer_mp4,
    "lfs_pointer_parquet": _lfs_pointer_parquet,
    "parquet_missing_column": _parquet_missing_column,
    "parquet_wrong_dtype": _parquet_wrong_dtype,
    "parquet_list_length": _parquet_list_length,
    "parquet_duplicate_episode_index_v3": _v3_data_duplicate_index,
    "meta_duplicate_episode_index_v3": _v3_meta_duplicate_index,
    "jsonl_duplicate_episode_index": _jsonl_duplicate_index,
    "nan_policy_quarantine": _nan_actions,
    "nan_policy_fail": _nan_actions,
    "nan_policy_allow": _nan_actions,
    "template_dotdot": _template_dotdot,
    "template_absolute": _template_absolute,
    "template_url_scheme": _template_url,
    "template_attribute": _template_attribute,
    "template_huge_width": _template_huge_width,
    "shape_negative": _shape_negative,
    "shape_enormous": _shape_enormous,
    "total_episodes_1e12": _total_episodes_huge,
    "episodes_jsonl_not_json": _jsonl_not_json,
    "info_json_too_large": _info_too_large,
    "minari_external_link": _minari_external_link,
    "minari_virtual_dataset": _minari_virtual_dataset,
    "minari_observations_off_by_one": _minari_obs_off_by_one,
    "minari_actions_off_by_one": _minari_actions_off_by_one,
    "minari_oversized_dataset": _minari_oversized,
    "robomimic_soft_link_in_demo": _robomimic_soft_link,
    "robomimic_external_link_in_demo": _robomimic_external_link,
    "robomimic_truncated": _cut(ROBOMIMIC_FILE),
    "aloha_truncated_episode": _cut("episode_2.hdf5"),
    "aloha_jpeg_length_beyond_row": _aloha_jpeg_length,
    "aloha_external_link": _aloha_external_link,
    "zarr_episode_ends_past_data": _zarr_ends_past_data,
    "zarr_episode_ends_decreasing": _zarr_ends_decreasing,
    "zarr_rows_short": _zarr_rows_short,
    "zarr_unknown_codec": _zarr_unknown_codec,
    "zarr_huge_shape": _zarr_huge_shape,
    "zarr_missing_chunk": _zarr_missing_chunk,
    "umi_jpegxl_chunk_noise": _umi_jpegxl_noise,
    "rosbag_missing_definition": _rosbag_no_definition,
    "rosbag_time_goes_back": _rosbag_time_back,
    "rosbag_truncated": _cut("episode_3.mcap"),
    "rosbag_gap_beyond_skew": _rosbag_gap,
}
CASES_BY_NAME = {c.name: c for c in CASES}
assert set(MUTATIONS) == set(CASES_BY_NAME), "every case needs a mutation"


# ---- building -------------------------------------------------------------------------------------------------
def bases_in(base_dir: Path) -> dict[str, Path]:
    """The valid fixtures the cases start from, by `Case.base`."""
    return {"v2.1": base_dir / "v2.1", "v3.0": base_dir / "v3.0", "minari": base_dir / "minari" / MINARI_ID,
            "robomimic": base_dir / "robomimic", "aloha": base_dir / "aloha", "zarr": base_dir / "zarr",
            "umi": base_dir / "umi", "rosbag": base_dir / "rosbag"}


def _build_bases(base_dir: Path) -> dict[str, Path]:
    bases = bases_in(base_dir)
    spec = dict(episode_lengths=list(LENGTHS), fps=FPS, cameras=[CameraSpec(key=CAMERA)])
    for v in ("v2.1", "v3.0"):
        write_lerobot_dataset(bases[v], DatasetSpec(version=v, **spec))
    from tests.fixtures.aloha_gen import write_dataset
    from tests.fixtures.minari_gen import make_dataset
    from tests.fixtures.robomimic_gen import write_robomimic

    write_robomimic(bases["robomimic"] / ROBOMIMIC_FILE, tuple(LENGTHS), (48, 64), masks=False)
    write_dataset(bases["aloha"], tuple(LENGTHS))
    from tests.fixtures.zarr_gen import write_pusht, write_umi

    write_pusht(bases["zarr"] / PUSHT_STORE, tuple(LENGTHS), (48, 64))
    write_umi(bases["umi"] / UMI_STORE, tuple(LENGTHS), (48, 64))
    from tests.fixtures import rosbag_gen

    rosbag_gen.write_dataset(bases["rosbag"], "mcap", episodes=4)

    old = os.environ.get("MINARI_DATASETS_PATH")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert make_dataset(base_dir / "minari", "box", "hdf5", episodes=4) == MINARI_ID
    finally:
        if old is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = old
    return bases


def build_outside(outside: Path, bases: dict[str, Path]) -> None:
    """Real data where the escaping cases point: a reader that followed them would succeed in reading it."""
    import h5py

    for ep in range(len(LENGTHS)):
        for rel, sub in ((v2_data(ep), "data"), (v2_video(ep), "videos")):
            dst = outside / sub / Path(rel).name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(bases["v2.1"] / rel, dst)
    with h5py.File(bases["minari"] / MINARI_FILE, "r") as src, h5py.File(outside / "bait.hdf5", "w") as f:
        f.create_dataset("observations", data=src["episode_1/observations"][()])


def build_corpus(out: Path, names: list[str] | None = None) -> dict[str, Path]:
    """Build the corpus under `out` (created; must not hold a previous corpus): `out/cases/<name>/` per case, and
    `out/outside/<name>/` with what that case could point at (one per case, so a watch on it blames the right
    case). Returns {case name: dataset folder}."""
    out = Path(out).resolve()
    bases = _build_bases(out / "bases")
    paths: dict[str, Path] = {}
    for case in CASES:
        if names is not None and case.name not in names:
            continue
        dst = out / "cases" / case.name
        shutil.copytree(bases[case.base], dst)
        build_outside(outside_of(dst), bases)
        MUTATIONS[case.name](dst, outside_of(dst))
        paths[case.name] = dst
    return paths


def outside_of(case_dir: Path) -> Path:
    """The folder of real data a case's escaping references point at (nothing may ever open it)."""
    return case_dir.parent.parent / "outside" / case_dir.name


def table() -> str:
    """The cases as a Markdown table."""
    rows = ["| case | broken | outcome | code | exit | episodes |", "|---|---|---|---|---|---|"]
    for c in CASES:
        rows.append(f"| {c.name} | {c.what} | {c.outcome} | {c.code or '-'} | {c.exit_code} | "
                    f"{', '.join(map(str, c.episodes)) or '-'} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Build the bad-input corpus and print its table of cases.")
    p.add_argument("out", type=Path)
    p.add_argument("--case", action="append", help="build only this case (repeatable)")
    a = p.parse_args(argv)
    if a.out.exists() and any(a.out.iterdir()):
        print(f"{a.out} is not empty", file=sys.stderr)
        return 2
    paths = build_corpus(a.out, a.case)
    print(table())
    print(f"\n{len(paths)} cases under {a.out}/cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
