"""Issue 17 (first half): the RLDS source reader, checked against tfds itself.

Datasets: two written by the real tfds (tests/fixtures/rlds_gen.py: an OXE-template one and a bridge/kuka-like one),
the shared pusher_rlds sample (tfds GeneratorBasedBuilder), and robo-ray's own RLDS output of a LeRobot sample.
Every value the reader returns is compared with what `tfds.builder_from_directory(...).as_dataset` returns; images
must be the stored encoded bytes, byte for byte."""
from __future__ import annotations

import json
import pickle
import shutil
import struct
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from fsspec.implementations.local import LocalFileSystem

from robo_ray.errors import (ConfigError, DataCorrupt, EpisodeError, SourceFormatError, SourceNotFound,
                             UnknownFormat, UnsafeInput)
from robo_ray.formats.rlds.reader import RldsReader
from tests.conftest import require_shared, run_cli, shared_dir
from tests.fixtures import rlds_gen

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("rlds_reader")]  # one worker builds the fixtures
PUSHER_REL = "samples/rlds/pusher_rlds/1.0.0"
PUSHER = shared_dir() / PUSHER_REL
LEROBOT_SAMPLE_REL = "samples/lerobot_v21_h264_1cam"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tfds data_dir holding both generated variants (written once per module)."""
    root = tmp_path_factory.mktemp("tfds_data")
    for variant in rlds_gen.VARIANTS:
        rlds_gen.write_rlds_dataset(root, variant)
    return root


@pytest.fixture(scope="module")
def robo_ray_output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sample = require_shared(LEROBOT_SAMPLE_REL)
    out = tmp_path_factory.mktemp("robo_ray_out") / "out"
    proc = run_cli("run", str(sample), str(out), "--image-format", "png")
    assert proc.returncode == 0, proc.stderr
    return out / "rlds" / "lerobot_v21_h264_1cam" / "1.0.0"


def _dataset(case: str, data_dir: Path, robo_ray_output: Callable[[], Path]) -> Path:
    if case == "pusher":
        return require_shared(PUSHER_REL)
    if case == "robo_ray_output":
        return robo_ray_output()
    return data_dir / f"robo_ray_{case}" / rlds_gen.DATASET_VERSION


@pytest.fixture
def dataset(request: pytest.FixtureRequest, data_dir: Path) -> Callable[[str], Path]:
    return lambda case: _dataset(case, data_dir, lambda: request.getfixturevalue("robo_ray_output"))


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def _source_key(spec_key: str, per_step: bool) -> str:
    return f"steps/{spec_key}" if per_step else spec_key.removeprefix("episode/")


def _as_text(v: Any) -> Any:
    return v.decode("utf-8") if isinstance(v, bytes) else v


# ---- every value equals tfds' --------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["oxe", "bridge", "pusher", "robo_ray_output"])
def test_every_value_matches_tfds(case: str, dataset: Callable[[str], Path]) -> None:
    version_dir = dataset(case)
    reader = RldsReader(str(version_dir))
    inv = reader.discover()
    info = json.loads((version_dir / "dataset_info.json").read_text())
    assert inv.source_format == "rlds" and inv.source_version == version_dir.name
    assert inv.dataset_name == info["name"]
    assert [f.code for f in inv.findings if f.level == "error"] == []
    assert inv.fps == 0.0 and any(f.code == "R101" and "--fps" in f.message for f in inv.findings)
    assert len({r.episode_index for r in inv.refs}) == len(inv.refs) == inv.episodes_count
    assert inv.total_steps == sum(r.length for r in inv.refs)
    declared = {s["name"]: sum(int(n) for n in s["shardLengths"]) for s in info["splits"]}
    assert {s: sum(r.split == s for r in inv.refs) for s in declared} == declared
    per_step = {k: f.role != "metadata" for k, f in inv.features.items()}

    for split in declared:
        expected = rlds_gen.tfds_episodes(version_dir, split)
        refs = [r for r in inv.refs if r.split == split]
        assert [r.source_id for r in refs] == [f"{split}[{i}]" for i in range(len(refs))]
        assert len(refs) == len(expected)
        for ref, exp in zip(refs, expected):
            ep = reader.load_episode(ref)
            covered = {_source_key(k, per_step[k]) for k in inv.features}
            if "steps/is_first" not in exp:  # tfds returns no step keys for an episode of no steps
                assert ep.length == ref.length == 0 and ep.step_tasks == []
                assert all(len(v) == 0 for v in [*ep.columns.values(), *ep.images.values()])
                exp.update({k: [] for k in covered if k.startswith("steps/")})
            assert ep.length == ref.length == len(exp["steps/is_first"]), ref
            assert covered == set(exp), (covered ^ set(exp))  # nothing left out, nothing invented
            for key, spec in inv.features.items():
                want = exp[_source_key(key, per_step[key])]
                if spec.kind == "image":
                    assert ep.images[key] == list(want), key  # the stored encoded bytes, byte for byte
                elif spec.role == "metadata":
                    got = ep.metadata[spec.name.removeprefix("episode_metadata/")]
                    assert got == _as_text(want.item() if isinstance(want, np.generic) else want), key
                    assert type(got) is type(_as_text(want.item() if isinstance(want, np.generic) else want))
                elif spec.kind == "string":
                    assert ep.columns[key].tolist() == [_as_text(v) for v in want], key
                elif ep.length:
                    got = ep.columns[key]
                    assert got.dtype == want.dtype and got.shape == want.shape, (key, got.dtype, want.dtype)
                    np.testing.assert_array_equal(got, want, err_msg=key)
            lang = next((k for k in ("language_instruction", "observation/natural_language_instruction")
                         if k in inv.features), None)
            assert ep.step_tasks == (ep.columns[lang].tolist() if lang else [""] * ep.length)
            # Episode.metadata: the source's values, plus episode_id / file_path when the source has none
            assert list(ep.metadata) and set(ep.metadata) == set(reader.metadata_types)
            py = {"int": int, "float": float, "text": str, "bool": bool}
            assert all(type(ep.metadata[k]) is py[t] for k, t in reader.metadata_types.items()), ep.metadata
            if "episode_metadata/episode_id" not in exp and "episode_id" not in exp:
                assert ep.metadata["episode_id"] == ref.episode_index
            if "episode_metadata/file_path" not in exp:
                assert ep.metadata["file_path"] == ref.data_path


def test_roles_and_names_oxe_template() -> None:
    require_shared(PUSHER_REL)
    feats = RldsReader(str(PUSHER)).features
    roles = {k: (f.role, f.name, f.kind) for k, f in feats.items()}
    assert roles == {
        "action": ("action", "action", "tensor"),
        "discount": ("discount", "discount", "tensor"),
        "is_first": ("is_first", "is_first", "tensor"),
        "is_last": ("is_last", "is_last", "tensor"),
        "is_terminal": ("terminal", "is_terminal", "tensor"),
        "language_instruction": ("language", "language_instruction", "string"),
        "observation/image": ("camera", "observation/image", "image"),
        "observation/wrist_image": ("camera", "observation/wrist_image", "image"),
        "observation/state": ("state", "observation/state", "tensor"),
        "reward": ("reward", "reward", "tensor"),
        "episode_metadata/file_path": ("metadata", "episode_metadata/file_path", "string"),
    }
    assert feats["observation/image"].shape == (96, 128, 3) and feats["observation/image"].codec == "jpeg"
    assert feats["observation/state"].shape == (23,) and feats["is_first"].scalar


def test_roles_and_names_bridge_like(data_dir: Path) -> None:
    feats = RldsReader(str(data_dir), name="robo_ray_bridge").features
    roles = {k: f.role for k, f in feats.items()}
    assert roles == {
        "action/world_vector": "action", "action/rotation_delta": "action", "action/open_gripper": "action",
        "action/terminate_episode": "action", "action/gripper": "action", "action/counts": "action",
        "observation/image": "camera", "observation/depth": "depth", "observation/state": "state",
        "observation/natural_language_instruction": "language", "observation/natural_language_embedding":
        "observation", "observation/clip_function_input/workspace_bounds": "observation",
        "observation/heightmap": "observation", "reward": "reward", "is_first": "is_first", "is_last": "is_last",
        "is_terminal": "terminal", "episode_id": "metadata", "success": "metadata"}
    assert feats["episode_id"].name == "episode_metadata/episode_id"
    assert feats["observation/image"].codec == "jpeg"  # features.json has no encodingFormat: sniffed
    assert feats["observation/depth"].dtype == "uint16" and feats["observation/depth"].shape == (32, 32, 1)
    assert feats["observation/state"].dtype == "float64" and "float32 precision" in feats["observation/state"].note
    names = [f.name for f in feats.values()]
    assert len(set(names)) == len(names)


def test_canonical_names_are_identifiers_and_never_nest() -> None:
    from robo_ray.formats.rlds.features import Leaf
    from robo_ray.formats.rlds.leaf_specs import build_specs

    leaves = [Leaf(("steps", "observation", "a/b"), "Tensor", "float32", (3,)),
              Leaf(("steps", "observation", "a"), "Tensor", "float32", (2,)),
              Leaf(("steps", "observation", "c/d"), "Tensor", "float32", (2,)),
              Leaf(("steps", "0-cam"), "Image", "uint8", (4, 4, 3), "png"),
              Leaf(("episode_metadata", "episode_id"), "Text", "string", ()),
              Leaf(("episode_id",), "Tensor", "int64", ())]
    specs, _, meta = build_specs(leaves)
    assert {k: f.name for k, f in specs.items()} == {
        "observation/a/b": "observation/a_b",  # `a` is a leaf: `a/b` would nest inside it
        "observation/a": "observation/a", "observation/c/d": "observation/c/d", "0-cam": "f0_cam",
        "episode_metadata/episode_id": "episode_metadata/source_episode_id",  # text: not the built-in int id
        "episode_id": "episode_metadata/episode_id"}
    assert meta == {"episode_metadata/episode_id": "source_episode_id", "episode_id": "episode_id"}


# ---- source forms and split selection ---------------------------------------------------------------------------
def _ids(reader: RldsReader) -> list[tuple[int, str | None, int]]:
    return [(r.episode_index, r.source_id, r.length) for r in reader.discover().refs]


def test_version_dataset_and_data_dir_forms(data_dir: Path, tmp_path: Path) -> None:
    version_dir = data_dir / "robo_ray_oxe" / "1.0.0"
    want = _ids(RldsReader(str(version_dir)))
    assert _ids(RldsReader(str(data_dir / "robo_ray_oxe"))) == want
    assert _ids(RldsReader(str(data_dir), name="robo_ray_oxe")) == want
    assert _ids(RldsReader(f"{data_dir}?name=robo_ray_oxe:1.0.0")) == want
    assert RldsReader(str(data_dir / "robo_ray_oxe")).root == str(version_dir)
    assert RldsReader.sniff(LocalFileSystem(), str(version_dir))
    assert RldsReader.sniff(LocalFileSystem(), str(data_dir / "robo_ray_oxe"))
    assert not RldsReader.sniff(LocalFileSystem(), str(data_dir))
    with pytest.raises(SourceFormatError, match="name"):
        RldsReader(str(data_dir))
    with pytest.raises(SourceNotFound):
        RldsReader(str(data_dir), name="no_such_dataset")
    # several versions: the newest x.y.z, or the one asked for
    ds = tmp_path / "multi"
    _copy(version_dir, ds / "1.0.0")
    _copy(version_dir, ds / "0.9.0")
    _copy(version_dir, ds / "1.10.0")
    (ds / "incomplete.abc_2.0.0").mkdir()
    assert RldsReader(str(ds)).version == "1.10.0"
    assert RldsReader(str(ds), version="0.9.0").version == "0.9.0"
    assert RldsReader(str(tmp_path), name="multi:1.0.0").version == "1.0.0"
    with pytest.raises(SourceNotFound, match="3.0.0"):
        RldsReader(str(ds), version="3.0.0")


def test_split_selection(data_dir: Path) -> None:
    src = str(data_dir / "robo_ray_bridge")
    every = RldsReader(src).discover().refs
    assert [r.split for r in every] == ["train", "train", "val", "test", "test"]
    for splits in (["val"], ["test", "train"], "train,test"):
        refs = RldsReader(src, splits=splits).discover().refs
        wanted = splits.split(",") if isinstance(splits, str) else splits
        assert refs == [r for r in every if r.split in wanted]  # same indices as a run over every split
    assert RldsReader(f"{src}?splits=val").discover().refs == [r for r in every if r.split == "val"]
    with pytest.raises(ConfigError, match="nope"):
        RldsReader(src, splits=["nope"])


# ---- damaged data: one clear episode error, the rest still loads ------------------------------------------------
def _records(shard: Path) -> list[tuple[int, int]]:
    data, out, pos = shard.read_bytes(), [], 0
    while pos < len(data):
        (n,) = struct.unpack("<Q", data[pos:pos + 8])
        out.append((pos, n + 16))
        pos += n + 16
    return out


def test_tampered_record_is_one_episode_error(data_dir: Path, tmp_path: Path) -> None:
    src = _copy(data_dir / "robo_ray_oxe" / "1.0.0", tmp_path / "v")
    shard = src / "robo_ray_oxe-train.tfrecord-00000-of-00002"
    data = bytearray(shard.read_bytes())
    offset, length = _records(shard)[1]
    data[offset + length // 2] ^= 0x40  # inside the record's data (an image), not its framing
    shard.write_bytes(bytes(data))
    reader = RldsReader(str(src))
    inv = reader.discover()
    bad = next(r for r in inv.refs if r.data_path == shard.name and r.locator == (offset, length))
    with pytest.raises(DataCorrupt) as info:
        reader.load_episode(bad)
    msg = info.value.line()
    assert info.value.code == "EP202" and shard.name in msg and f"episode {bad.episode_index}" in msg
    assert "CRC" in msg and "\n" not in msg
    for ref in inv.refs:
        if ref != bad:
            assert reader.load_episode(ref).length == ref.length


def test_broken_framing_missing_and_cut_shards(data_dir: Path, tmp_path: Path) -> None:
    src = _copy(data_dir / "robo_ray_oxe" / "1.0.0", tmp_path / "v")
    first = src / "robo_ray_oxe-train.tfrecord-00000-of-00002"
    data = bytearray(first.read_bytes())
    offset, _ = _records(first)[1]
    data[offset + 3] ^= 0x01  # the second record's length: its CRC no longer matches
    first.write_bytes(bytes(data))
    (src / "robo_ray_oxe-train.tfrecord-00001-of-00002").unlink()
    val = src / "robo_ray_oxe-val.tfrecord-00000-of-00002"
    val.write_bytes(val.read_bytes()[:-100])  # cut mid-record
    reader = RldsReader(str(src))
    inv = reader.discover()
    codes = sorted(f.code for f in inv.findings if f.level == "error")
    assert codes == ["R103", "R104", "R104"], inv.findings
    assert len(inv.refs) == 5  # every declared episode is a ref: loaded or quarantined, never dropped
    outcomes = {}
    for ref in inv.refs:
        try:
            reader.load_episode(ref)
            outcomes[ref.source_id] = "ok"
        except EpisodeError as exc:
            assert ref.data_path in str(exc) and f"episode {ref.episode_index}" in str(exc)
            outcomes[ref.source_id] = exc.code
    assert outcomes == {"train[0]": "ok", "train[1]": "EP202", "train[2]": "EP201", "val[0]": "EP202",
                        "val[1]": "ok"}


def test_corrupt_header_mid_shard_quarantines_the_rest_by_name(data_dir: Path, tmp_path: Path) -> None:
    """A corrupt length header hides the records after it: each declared episode behind it is still a ref,
    quarantined with its own line, and the next split keeps its indices (it used to shift them)."""
    src = _copy(data_dir / "robo_ray_oxe" / "1.0.0", tmp_path / "v")
    first = src / "robo_ray_oxe-train.tfrecord-00000-of-00002"
    offset, _ = _records(first)[0]
    data = bytearray(first.read_bytes())
    data[offset + 9] ^= 0xFF  # the first record's length CRC: nothing in this shard can be located
    first.write_bytes(bytes(data))
    declared = len(_records(data_dir / "robo_ray_oxe" / "1.0.0" / first.name))
    reader = RldsReader(str(src))
    inv = reader.discover()
    clean = RldsReader(str(data_dir / "robo_ray_oxe" / "1.0.0")).discover()
    assert [(r.episode_index, r.source_id) for r in inv.refs] == [(r.episode_index, r.source_id) for r in clean.refs]
    errors = [f for f in inv.findings if f.level == "error"]
    assert [f.code for f in errors] == ["R104"]
    if declared > 1:
        assert f"the {declared - 1} episode(s) declared after it" in errors[0].message
    for ref in inv.refs:
        if ref.data_path == first.name:
            with pytest.raises(DataCorrupt) as info:
                reader.load_episode(ref)
            assert f"episode {ref.episode_index}" in info.value.line() and first.name in info.value.line()
        else:
            assert reader.load_episode(ref).length == ref.length


def test_rlds_to_rlds_keeps_source_episode_ids_and_validates(data_dir: Path, tmp_path: Path) -> None:
    """An OXE dataset's own episode_metadata/episode_id (not robo-ray's index: its val episodes hold other ids) is
    written as it was, and validation still matches every record to its episode (by the ledger's order)."""
    import tensorflow_datasets as tfds

    src = data_dir / "robo_ray_oxe" / "1.0.0"
    out = tmp_path / "out"
    proc = run_cli("run", str(src), str(out), "--to", "rlds", "--mode", "in-process")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "validation passed" in proc.stdout
    want = {split: [int(e["episode_metadata"]["episode_id"]) for e in
                    tfds.as_numpy(tfds.builder_from_directory(str(src)).as_dataset(split=split))]
            for split in ("train", "val")}
    written = tfds.builder_from_directory(str(out / "rlds" / "robo_ray_oxe" / "1.0.0"))
    got = {split: [int(e["episode_metadata"]["episode_id"]) for e in tfds.as_numpy(written.as_dataset(split=split))]
           for split in ("train", "val")}
    assert got == want and want["val"] != list(range(len(want["train"]), len(want["train"]) + len(want["val"])))


def _obs(d: dict) -> dict:
    steps = d["featuresDict"]["features"]["steps"]["sequence"]["feature"]["featuresDict"]["features"]
    return steps["observation"]["featuresDict"]["features"]


def _state_dims(dims: list[str]) -> Callable[[dict], Any]:
    return lambda d: _obs(d)["state"]["tensor"]["shape"].update(dimensions=dims)


INFO, FEATURES = "dataset_info.json", "features.json"
BAD_METADATA: list[tuple[str, Callable[[dict], Any], type, str]] = [
    (INFO, lambda d: d.update(fileFormat="array_record"), UnknownFormat, "array_record"),
    (INFO, lambda d: d["splits"][0].update(filepathTemplate="../../{SPLIT}-{SHARD_INDEX}"), UnsafeInput, "escapes"),
    (INFO, lambda d: d["splits"][0].update(shardLengths=["1000000000000"]), UnsafeInput, "shard length"),
    (INFO, lambda d: d.update(name="../etc"), SourceFormatError, "name"),
    (FEATURES, _state_dims(["100000", "100000"]), UnsafeInput, "dim"),
    (FEATURES, _state_dims(["8"] * 9), UnsafeInput, "at most"),
    (FEATURES, _state_dims(["-5"]), UnsafeInput, "dim"),
    (FEATURES, lambda d: _obs(d)["image"]["image"]["shape"].update(dimensions=["4096"] * 3), UnsafeInput,
     "too large"),
    (FEATURES, lambda d: d["featuresDict"]["features"].pop("steps"), SourceFormatError, "steps"),
    (FEATURES, lambda d: _obs(d).update({"x" * 300: _obs(d)["state"]}), UnsafeInput, "too long"),
    (FEATURES, lambda d: _obs(d).update({"deep": _nest(40)}), UnsafeInput, "deeper"),
]


@pytest.mark.parametrize("case", range(len(BAD_METADATA)))
def test_bad_metadata_is_one_clear_refusal(case: int, data_dir: Path, tmp_path: Path) -> None:
    """dataset_info.json / features.json that cannot be trusted stop the run: one line, exit 2 (RR300/RR301)."""
    rel, edit, error, match = BAD_METADATA[case]
    src = _copy(data_dir / "robo_ray_oxe" / "1.0.0", tmp_path / "v")
    obj = json.loads((src / rel).read_text())
    edit(obj)
    (src / rel).write_text(json.dumps(obj))
    with pytest.raises(error, match=match) as exc:
        RldsReader(str(src)).discover()
    assert exc.value.exit_code == 2 and "\n" not in str(exc.value)


def _nest(depth: int) -> dict:
    node: dict = {"pythonClassName": "tensorflow_datasets.core.features.text_feature.Text", "text": {}}
    for _ in range(depth):
        node = {"pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
                "featuresDict": {"features": {"x": node}}}
    return node


def test_open_image_shape_and_unsupported_features(data_dir: Path, tmp_path: Path) -> None:
    """Image dims left open (-1) and a missing encodingFormat are read from the first stored image; a feature the
    reader cannot decode (a ragged Sequence inside steps) is a warning, and everything else still loads."""
    src = _copy(data_dir / "robo_ray_oxe" / "1.0.0", tmp_path / "v")
    feats = json.loads((src / "features.json").read_text())
    img = _obs(feats)["wrist_image"]["image"]
    img["shape"]["dimensions"] = ["-1", "-1", "3"]
    img.pop("encodingFormat")
    _obs(feats)["tracks"] = {"pythonClassName": "tensorflow_datasets.core.features.sequence_feature.Sequence",
                             "sequence": {"feature": _obs(feats)["state"], "length": "-1"}}
    (src / "features.json").write_text(json.dumps(feats))
    reader = RldsReader(str(src))
    spec = reader.features["observation/wrist_image"]
    assert spec.shape == (64, 64, 3) and spec.codec == "png"
    inv = reader.discover()
    assert {f.code for f in inv.findings} >= {"R105", "R106"}
    assert "observation/tracks" not in inv.features
    assert all(reader.load_episode(r).length == r.length for r in inv.refs)


def test_fps_from_metadata_or_caller(data_dir: Path, tmp_path: Path) -> None:
    src = _copy(data_dir / "robo_ray_oxe" / "1.0.0", tmp_path / "v")
    assert RldsReader(str(src), fps=12.5).fps == 12.5
    (src / "metadata.json").write_text(json.dumps({"control_frequency": 3.75}))
    reader = RldsReader(str(src))
    inv = reader.discover()
    assert inv.fps == 3.75 and not any(f.code == "R101" for f in inv.findings)
    ep = reader.load_episode(inv.refs[1])
    np.testing.assert_allclose(ep.timestamps, np.arange(ep.length) / 3.75)


# ---- what discover and load read ----------------------------------------------------------------------------
class CountingFS(LocalFileSystem):
    """The local filesystem, counting every byte read through it."""

    cachable = False

    def __init__(self) -> None:
        super().__init__()
        self.bytes_read = 0

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        f = super()._open(path, mode, **kwargs)
        read = f.read

        def counted(*args: Any) -> bytes:
            data = read(*args)
            self.bytes_read += len(data)
            return data
        f.read = counted
        return f


@pytest.mark.parametrize("case", ["oxe", "pusher"])
def test_discover_reads_a_small_fraction(case: str, dataset: Callable[[str], Path]) -> None:
    version_dir = dataset(case)
    reader = RldsReader(str(version_dir))
    reader.fs = counting = CountingFS()
    inv = reader.discover()
    shards = sum(p.stat().st_size for p in version_dir.glob("*.tfrecord-*"))
    assert counting.bytes_read < 0.10 * shards, (counting.bytes_read, shards)
    for ref in inv.refs:  # a load reads its record's byte range and nothing else
        counting.bytes_read = 0
        reader.load_episode(ref)
        assert counting.bytes_read == ref.locator[1]


def test_object_store_like_filesystem(data_dir: Path) -> None:
    """memory:// goes through robo-ray's retrying wrapper and ranged reads, as s3/gs would: same refs, same values."""
    import fsspec

    mem = fsspec.filesystem("memory")
    for p in (data_dir / "robo_ray_bridge").rglob("*"):
        if p.is_file():
            mem.pipe_file(f"/rlds_reader_test/{p.relative_to(data_dir)}", p.read_bytes())
    try:
        local = RldsReader(str(data_dir / "robo_ray_bridge"))
        remote = RldsReader("memory://rlds_reader_test", name="robo_ray_bridge")
        assert remote.version == "1.0.0" and remote.url.startswith("memory://")
        refs = remote.discover().refs
        assert refs == local.discover().refs
        for ref in refs:
            a, b = remote.load_episode(ref), local.load_episode(ref)
            assert a.images == b.images and a.metadata == b.metadata and a.step_tasks == b.step_tasks
            assert all(np.array_equal(a.columns[k], b.columns[k]) for k in b.columns)
    finally:
        mem.rm("/rlds_reader_test", recursive=True)


def test_refs_inventory_and_reader_are_picklable(data_dir: Path) -> None:
    reader = RldsReader(str(data_dir), name="robo_ray_bridge", splits=["train"])
    inv = reader.discover()
    assert pickle.loads(pickle.dumps(inv)).refs == inv.refs
    clone = pickle.loads(pickle.dumps(reader))
    ep = clone.load_episode(inv.refs[-1])
    np.testing.assert_array_equal(ep.columns["observation/state"],
                                  reader.load_episode(inv.refs[-1]).columns["observation/state"])
