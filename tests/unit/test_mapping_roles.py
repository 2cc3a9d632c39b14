"""Issue #13: readers declare what each feature is (role, canonical name, scalar, note), the default mapping is built
from those declarations only (no format names in robo_ray/mapping.py), and detection is each reader's `sniff`."""
from __future__ import annotations

import ast
import json
import re
import warnings
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from robo_ray.episode import FeatureSpec
from robo_ray.errors import (DataCorrupt, DataMissing, SourceFormatError, StorageError, UnknownFormat, UnsafeInput)
from robo_ray.formats.lerobot.reader import LeRobotReader, parse_features
from robo_ray.formats.minari.reader import MinariReader
from robo_ray.formats.minari.spaces import declare_features as minari_declare
from robo_ray.formats.minari.spaces import space_features
from robo_ray.formats.ortf.reader import OrtfReader
from robo_ray.formats.ortf.reader import declare_features as ortf_declare
from robo_ray.mapping import default_mapping
from robo_ray.readers import INSTALL_HINTS, REGISTRY, detect_format, open_reader, reader_class
from robo_ray.readers.base import BUILTIN_METADATA, BaseReader, DatasetFiles, Inventory, unique_names

REPO = Path(__file__).resolve().parents[2]
FORMAT_WORDS = re.compile(r"rlds|ortf|lerobot|minari", re.IGNORECASE)
# Modules that must name no format outside docstrings and comments (issue #13). robo_ray/stages/*.py and
# robo_ray/ray_exec/*.py join this list once the writer-side restructuring of issue #13 has landed.
FORMAT_NEUTRAL = ["robo_ray/mapping.py"]


# ---- LeRobot --------------------------------------------------------------------------------------------------
def _lerobot_features(**extra: dict) -> dict[str, FeatureSpec]:
    feats = {
        "observation.state": {"dtype": "float32", "shape": [6]},
        "action": {"dtype": "float32", "shape": [4]},
        "observation.images.top": {"dtype": "video", "shape": [48, 64, 3], "names": ["height", "width", "channel"]},
        "timestamp": {"dtype": "float32", "shape": [1]},
        "frame_index": {"dtype": "int64", "shape": [1]},
        "episode_index": {"dtype": "int64", "shape": [1]},
        "index": {"dtype": "int64", "shape": [1]},
        "task_index": {"dtype": "int64", "shape": [1]},
    }
    feats.update(extra)
    return parse_features(feats)


def test_lerobot_roles_and_names() -> None:
    f = _lerobot_features(**{
        "next.reward": {"dtype": "float32", "shape": [1]}, "next.done": {"dtype": "bool", "shape": [1]},
        "observation.velocity.x": {"dtype": "float64", "shape": [1]}, "misc.flag": {"dtype": "bool", "shape": [2]},
        "language": {"dtype": "string", "shape": [1]}})
    assert (f["observation.state"].role, f["observation.state"].name, f["observation.state"].scalar) == \
        ("state", "observation/state", False)
    assert (f["action"].role, f["action"].name) == ("action", "action")
    assert (f["observation.images.top"].role, f["observation.images.top"].name) == ("camera", "observation/image")
    assert (f["next.reward"].role, f["next.done"].role) == ("reward", "terminal")
    vel = f["observation.velocity.x"]
    assert (vel.role, vel.name, vel.scalar) == ("observation", "observation/velocity_x", True)
    flag = f["misc.flag"]
    assert (flag.role, flag.name, flag.scalar) == ("other", "observation/misc_flag", False)
    for key in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        assert f[key].role == "bookkeeping" and "bookkeeping" in f[key].note
    assert f["language"].role == "other" and "no RLDS tensor form" in f["language"].note


def test_lerobot_several_cameras_chw_and_aliases() -> None:
    f = parse_features({
        "observation.images.cam_high": {"dtype": "video", "shape": [3, 48, 64],
                                        "names": ["channels", "height", "width"]},
        "observation.images.wrist-left": {"dtype": "image", "shape": [48, 64, 3]},
        "actions": {"dtype": "float32", "shape": [2]}, "state": {"dtype": "float32", "shape": [1]}})
    high, wrist = f["observation.images.cam_high"], f["observation.images.wrist-left"]
    assert (high.name, high.channels_first, high.shape) == ("observation/image_cam_high", True, (48, 64, 3))
    assert (wrist.name, wrist.channels_first) == ("observation/image_wrist_left", False)
    assert (f["actions"].role, f["actions"].name) == ("action", "action")
    assert (f["state"].role, f["state"].name, f["state"].scalar) == ("state", "observation/state", True)


# ---- Minari ---------------------------------------------------------------------------------------------------
def _box(*shape: int, dtype: str = "float32", low: float = -1.0, high: float = 1.0) -> dict:
    return {"type": "Box", "dtype": dtype, "shape": list(shape), "low": low, "high": high}


def _minari(obs: dict, act: dict, extras: tuple[FeatureSpec, ...] = ()) -> dict[str, FeatureSpec]:
    feats = space_features(obs, "observations", True, "observation_space")
    feats += space_features(act, "actions", True, "action_space")
    feats += [FeatureSpec(k, "tensor", d, ()) for k, d in (("rewards", "float64"), ("terminations", "bool"),
                                                             ("truncations", "bool"))]
    feats += [*extras, FeatureSpec("is_terminal", "tensor", "bool", ()),
              FeatureSpec("discount", "tensor", "float32", ())]
    return minari_declare({f.key: f for f in feats})


def test_minari_box_roles_and_step_fields() -> None:
    f = _minari(_box(3), _box(1), (FeatureSpec("infos/success", "tensor", "bool", ()),))
    assert (f["observations"].role, f["observations"].name) == ("state", "observation/state")
    assert (f["actions"].role, f["actions"].name) == ("action", "action")
    assert [f[k].role for k in ("rewards", "is_terminal", "discount")] == ["reward", "terminal", "discount"]
    assert [f[k].name for k in ("terminations", "truncations", "infos/success")] == \
        ["terminated", "truncated", "info/success"]


def test_minari_dict_tuple_image_text_and_collisions() -> None:
    obs = {"type": "Dict", "subspaces": {
        "pixels": _box(32, 32, 3, dtype="uint8", low=0, high=255), "a-b": _box(2), "a_b": _box(2),
        "pair": {"type": "Tuple", "subspaces": [_box(1), {"type": "Discrete", "n": 3}]},
        "note": {"type": "Text", "max_length": 4}}}
    f = _minari(obs, {"type": "Dict", "subspaces": {"arm": _box(3)}})
    assert (f["observations/pixels"].role, f["observations/pixels"].name) == ("camera", "observation/pixels")
    assert f["observations/a-b"].name == "observation/a_b" and f["observations/a_b"].name == "observation/a_b_2"
    assert f["observations/pair/_index_0"].name == "observation/pair/index_0"
    assert f["observations/pair/_index_1"].role == "observation"
    assert f["observations/note"].note == "text space (no RLDS tensor form); kept out"
    assert (f["actions/arm"].role, f["actions/arm"].name) == ("action", "action/arm")


# ---- ORTF -----------------------------------------------------------------------------------------------------
def _t(key: str, dtype: str = "float32", shape: tuple[int, ...] = ()) -> FeatureSpec:
    return FeatureSpec(key, "tensor", dtype, shape)


def test_ortf_roles_and_names() -> None:
    feats = [_t("episode_id"), _t("step_index", "int64"), _t("is_first", "bool"), _t("is_last", "bool"),
             _t("is_terminal", "bool"), _t("reward"), _t("discount"), _t("task_id", "int64"), _t("action", shape=(7,)),
             _t("observation.images.wrist.frame_index", "int64"), _t("observation.images.top.frame_index", "int64"),
             _t("observation.images.depth.frame_index", "int64"), _t("observation.state.joints", shape=(7,)),
             _t("observation.state.grip", shape=(1,)), _t("observation.x-y"), _t("observation.x_y"),
             FeatureSpec("comment", "string", "string", ()), _t("observation.state", shape=(8,)),
             FeatureSpec("observation.images.wrist", "video", "uint8", (24, 32, 3), codec="h264"),
             FeatureSpec("observation.images.top", "video", "uint8", (24, 32, 3), codec="h264"),
             FeatureSpec("observation.images.depth", "image", "uint16", (12, 16, 1), codec="depth16")]
    f = ortf_declare({x.key: x for x in feats})
    assert [f[k].role for k in ("is_first", "is_last", "is_terminal", "reward", "discount")] == \
        ["is_first", "is_last", "terminal", "reward", "discount"]
    for key in ("episode_id", "step_index", "task_id", "observation.images.top.frame_index"):
        assert f[key].role == "bookkeeping" and f[key].note.startswith("bookkeeping column")
    assert (f["observation.state"].role, f["observation.state"].name) == ("state", "observation/state")
    assert (f["observation.state.joints"].role, f["observation.state.joints"].name) == \
        ("observation", "observation/joints")
    assert f["observation.x-y"].name == "observation/x_y" and f["observation.x_y"].name == "observation/x_y_2"
    assert (f["observation.images.wrist"].role, f["observation.images.wrist"].name) == \
        ("camera", "observation/image_wrist")
    assert (f["observation.images.depth"].role, f["observation.images.depth"].name) == ("depth", "observation/depth")
    assert f["comment"].note == "string column (no RLDS tensor form); kept out"


def test_ortf_single_state_component_is_the_state() -> None:
    f = ortf_declare({"observation.state.state": _t("observation.state.state", shape=(6,)),
                      "observation.state.extra": _t("observation.state.extra", shape=(2,))})
    assert (f["observation.state.state"].role, f["observation.state.state"].name) == ("state", "observation/state")


# ---- the mapping uses declarations only ------------------------------------------------------------------------
def _inventory(features: dict[str, FeatureSpec], fmt: str = "anything", **kw) -> Inventory:
    return Inventory(dataset_name="ds", dataset_root="/x", source_format=fmt, source_version="v1", episodes_count=0,
                     total_steps=0, features=features, refs=[], fps=10.0, **kw)


def test_default_mapping_from_roles() -> None:
    feats = {
        "s": FeatureSpec("s", "tensor", "float64", (3,), role="state", name="observation/state"),
        "one": FeatureSpec("one", "tensor", "int16", (1,), role="observation", name="observation/one", scalar=True),
        "cam": FeatureSpec("cam", "video", "uint8", (4, 5, 3), declared_shape=(3, 4, 5), codec="av1", role="camera",
                           name="observation/image", channels_first=True),
        "d": FeatureSpec("d", "image", "uint16", (4, 5, 1), codec="depth16", role="depth", name="observation/depth"),
        "r": FeatureSpec("r", "tensor", "float32", (), role="reward"),
        "r2": FeatureSpec("r2", "tensor", "float32", (), role="reward"),
        "disc": FeatureSpec("disc", "tensor", "float32", (), role="discount"),
        "first": FeatureSpec("first", "tensor", "bool", (), role="is_first"),
        "last": FeatureSpec("last", "tensor", "bool", (), role="is_last"),
        "term": FeatureSpec("term", "tensor", "bool", (), role="terminal"),
        "idx": FeatureSpec("idx", "tensor", "int64", (), role="bookkeeping", note="index column"),
        "txt": FeatureSpec("txt", "string", "string", ()),
        "raw.thing": FeatureSpec("raw.thing", "tensor", "uint8", (2,)),  # undeclared: `other`, name from the key
    }
    inv = _inventory(feats, metadata_types={**BUILTIN_METADATA, "seed": "int", "note": "text"}, language_source="")
    m = default_mapping(inv)
    steps = {fm.source: fm for fm in m.steps}
    assert [fm.source for fm in m.steps] == ["s", "one", "cam", "d", "raw.thing"]
    assert (steps["s"].target, steps["s"].role, steps["s"].dtype, steps["s"].transform) == \
        ("observation/state", "state", "float32", "float64->float32")
    assert (steps["one"].shape, steps["one"].dtype) == ([], "int64")
    assert steps["cam"].transform.startswith("CHW->HWC, decode av1") and steps["cam"].role == "camera"
    assert (steps["d"].dtype, m.encoding_of(steps["d"]), steps["d"].role) == ("uint16", "png", "depth")
    assert (steps["raw.thing"].target, steps["raw.thing"].role) == ("raw/thing", "other")
    d = m.defaults
    assert (d.reward_source, d.discount_source, d.is_first_source, d.is_last_source, d.is_terminal_source) == \
        ("r", "disc", "first", "last", "term")
    assert d.language_source == ""
    assert m.dropped["idx"] == "index column" and "r2" in m.dropped and "txt" in m.dropped
    assert m.episode_metadata == ["episode_id", "file_path", "seed", "note"]
    assert m.episode_metadata_types == {"seed": "int", "note": "text"}
    assert m.unmapped(feats) == []
    # the source format's name plays no part
    other = default_mapping(_inventory(feats, fmt="something-else", metadata_types=inv.metadata_types,
                                       language_source="")).model_dump()
    assert {**other, "source_format": "anything"} == m.model_dump()


def _code_words(source: str) -> list[str]:
    """Identifiers and string literals of a module, without its docstrings and comments."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str)}
    words: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.append(node.value)
        elif isinstance(node, ast.Name):
            words.append(node.id)
        elif isinstance(node, ast.Attribute):
            words.append(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            words.append(node.name)
        elif isinstance(node, (ast.arg, ast.keyword)):
            words.append(node.arg or "")
        elif isinstance(node, ast.alias):
            words += [node.name, node.asname or ""]
        elif isinstance(node, ast.ImportFrom):
            words.append(node.module or "")
    return words


def test_format_word_check_sees_code_not_docs() -> None:
    src = '"""About LeRobot."""\n# ortf here\ndef f(x):\n    """Minari."""\n    return x == "minari"\n'
    assert [w for w in _code_words(src) if FORMAT_WORDS.search(w)] == ["minari"]
    assert [w for w in _code_words("LEROBOT_KEYS = 1\n") if FORMAT_WORDS.search(w)] == ["LEROBOT_KEYS"]


@pytest.mark.parametrize("rel", FORMAT_NEUTRAL)
def test_module_names_no_format(rel: str) -> None:
    found = [w for w in _code_words((REPO / rel).read_text()) if FORMAT_WORDS.search(w)]
    assert not found, f"{rel} names a format outside docstrings/comments: {found}"


# ---- detection and the base class -------------------------------------------------------------------------------
# Readers built on BaseReader (the RLDS reader, formats/rlds/reader.py, still has its own file helpers)
BASE_READERS = ["lerobot", "ortf", "minari", "rlds"]


def test_every_reader_declares_its_detection() -> None:
    for fmt in REGISTRY:
        cls = reader_class(fmt)
        assert cls.format_name == fmt and "sniff" in cls.__dict__, f"{fmt} reader must declare its own detection"
    assert list(REGISTRY)[:3] == ["lerobot", "ortf", "minari"]
    assert set(INSTALL_HINTS) <= set(REGISTRY)


@pytest.mark.parametrize("fmt", BASE_READERS)
def test_readers_share_one_base_class(fmt: str) -> None:
    cls = reader_class(fmt)
    assert issubclass(cls, BaseReader) and cls.sniff_hint
    for helper in ("path", "url_for", "_exists", "exists", "open_binary", "_read_bytes", "_read_json", "_read_jsonl",
                   "_read_parquet", "last_table"):
        assert helper not in cls.__dict__, f"{fmt} reader has its own copy of {helper}"


def _touch(path: Path, data: bytes = b"{}") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_sniff(tmp_path: Path) -> None:
    fs = fsspec.filesystem("file")
    _touch(tmp_path / "l/meta/info.json")
    _touch(tmp_path / "o/meta/manifest.json")
    _touch(tmp_path / "m/data/main_data.hdf5")
    _touch(tmp_path / "a/data/metadata.json")
    _touch(tmp_path / "f.hdf5")
    assert LeRobotReader.sniff(fs, str(tmp_path / "l")) and not LeRobotReader.sniff(fs, str(tmp_path / "o"))
    assert OrtfReader.sniff(fs, str(tmp_path / "o")) and not OrtfReader.sniff(fs, str(tmp_path / "l"))
    for rel in ("m", "m/data", "a", "a/data", "f.hdf5"):
        assert MinariReader.sniff(fs, str(tmp_path / rel)), rel
    assert not MinariReader.sniff(fs, str(tmp_path / "l")) and not MinariReader.sniff(fs, str(tmp_path / "l/meta"))
    assert detect_format(str(tmp_path / "l")) == "lerobot" and detect_format(str(tmp_path / "o")) == "ortf"
    assert detect_format(str(tmp_path / "f.hdf5")) == "minari"


def test_unknown_format_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty").mkdir()
    _touch(tmp_path / "x.txt")
    with pytest.raises(UnknownFormat, match=re.escape(
            "no meta/info.json (LeRobot), meta/manifest.json (ORTF)") + r",? .*data/main_data.hdf5 / "
            r"data/metadata.json \(Minari\).* found"):
        detect_format(str(tmp_path / "empty"))
    with pytest.raises(UnknownFormat, match="a file, and not a Minari main_data.hdf5"):
        detect_format(str(tmp_path / "x.txt"))
    # a reader whose module cannot be imported is skipped and named, with its install hint
    monkeypatch.setitem(REGISTRY, "bogus", "robo_ray.no_such_module:Reader")
    monkeypatch.setitem(INSTALL_HINTS, "bogus", "pip install bogus")
    with pytest.raises(UnknownFormat, match="not checked: the bogus reader cannot be loaded .*pip install bogus"):
        detect_format(str(tmp_path / "empty"))
    with pytest.raises(Exception, match="pip install bogus"):
        open_reader(str(tmp_path / "empty"), "bogus")


class _Files(DatasetFiles):
    def __init__(self, fs, root: str) -> None:
        self.fs, self.root = fs, root


def test_guarded_reads(tmp_path: Path) -> None:
    files = _Files(fsspec.filesystem("file"), str(tmp_path))
    _touch(tmp_path / "meta/a.json", b'{"a": 1}')
    _touch(tmp_path / "meta/bad.json", b"{nope")
    _touch(tmp_path / "meta/latin.json", b'{"a": "\xe9"}')
    _touch(tmp_path / "meta/x.jsonl", b'{"a": 1}\n\n{"b": 2}\n[3]\n')
    _touch(tmp_path / "data/cut.parquet", b"PAR1 not really")
    pq.write_table(pa.table({"x": [1, 2]}), tmp_path / "data/ok.parquet")
    assert files._read_json("meta/a.json") == {"a": 1}
    with pytest.raises(SourceFormatError, match="meta/missing.json: file is missing"):
        files._read_json("meta/missing.json")
    with pytest.raises(SourceFormatError, match="meta/bad.json: not valid JSON"):
        files._read_json("meta/bad.json")
    with pytest.raises(SourceFormatError, match="meta/latin.json: not valid JSON"):
        files._read_json("meta/latin.json")
    with pytest.raises(UnsafeInput, match="meta/a.json: 8 bytes exceeds the 4-byte metadata limit"):
        files._read_bytes("meta/a.json", limit=4)
    lines = files._read_jsonl("meta/x.jsonl")
    assert next(lines) == (1, {"a": 1}) and next(lines) == (3, {"b": 2})
    with pytest.raises(SourceFormatError, match="meta/x.jsonl:4: expected a JSON object"):
        next(lines)
    assert files._read_parquet("data/ok.parquet")["x"].to_pylist() == [1, 2]
    assert files.last_table("data/ok.parquet") is files.last_table("data/ok.parquet")
    with pytest.raises(DataMissing, match="data/none.parquet: parquet file is missing"):
        files._read_parquet("data/none.parquet")
    with pytest.raises(SourceFormatError, match="parquet file is missing"):
        files._read_parquet("data/none.parquet", error=SourceFormatError)
    with pytest.raises(DataCorrupt, match="data/cut.parquet: unreadable parquet"):
        files._read_parquet("data/cut.parquet")


class _Unreachable:
    """A filesystem whose every call fails the way a store's client does after its retries."""

    protocol = "flaky"

    def unstrip_protocol(self, path: str) -> str:
        return f"flaky://{path}"

    def __getattr__(self, name: str):
        def fail(*args, **kwargs):
            raise ConnectionResetError(104, "Connection reset by peer")
        return fail


def test_storage_failures_name_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROBO_RAY_STORAGE_ATTEMPTS", "2")
    monkeypatch.setenv("ROBO_RAY_STORAGE_BACKOFF_S", "0")
    files = _Files(_Unreachable(), "bucket/ds")
    for call in (lambda: files.exists("meta/info.json"), lambda: files._read_json("meta/info.json"),
                 lambda: files._read_parquet("data/x.parquet"), lambda: files.open_binary("videos/a.mp4")):
        with pytest.raises(StorageError, match="flaky://bucket/ds/"):
            call()


def test_inventory_declarations_of_each_reader(tmp_path: Path) -> None:
    from tests.fixtures import minari_gen, ortf_gen
    from tests.fixtures.lerobot_gen import DatasetSpec, write_lerobot_dataset

    lerobot = open_reader(str(write_lerobot_dataset(tmp_path / "l", DatasetSpec(
        episode_lengths=[3], with_reward_done=True)))).discover()
    assert (lerobot.metadata_types, lerobot.language_source) == (BUILTIN_METADATA, "task")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folder = minari_gen.write_legacy_v04(tmp_path / "m", lengths=(3,))
    with open_reader(str(folder)) as reader:
        minari = reader.discover()
    assert (minari.metadata_types, minari.language_source) == ({**BUILTIN_METADATA, "seed": "int"}, "")
    assert {k: (f.role, f.name) for k, f in minari.features.items()}["observations/pos"] == \
        ("observation", "observation/pos")
    ortf = open_reader(str(ortf_gen.write_ortf_native(tmp_path / "o", depth="npz"))).discover()
    assert ortf.language_source == "task" and list(ortf.metadata_types)[:3] == \
        ["episode_id", "file_path", "ortf_episode_id"]
    for inv in (lerobot, minari, ortf):
        assert all(f.role for f in inv.features.values()), inv.source_format
        names = [f.name for f in inv.features.values() if f.role in ("state", "observation", "action", "camera",
                                                                     "depth", "other") and f.kind != "string"]
        assert len(names) == len(set(names)) and all(names), names
        roles = {fm.source: fm.role for fm in default_mapping(inv).steps}
        assert roles == {k: f.role for k, f in inv.features.items() if k in roles}
    json.dumps({k: f.role for k, f in ortf.features.items()})


def test_unique_names_suffixes_data_only() -> None:
    feats = {k: FeatureSpec(k, "tensor", "float32", (), role=r, name=n) for k, r, n in (
        ("a", "observation", "x"), ("b", "reward", "x"), ("c", "other", "x"), ("d", "state", "x"))}
    assert [f.name for f in unique_names(feats).values()] == ["x", "x", "x_2", "x_3"]
