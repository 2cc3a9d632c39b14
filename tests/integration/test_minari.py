"""Minari -> RLDS, checked step for step against the real `minari` library (minari.load_dataset with
MINARI_DATASETS_PATH pointing at a copy): observations, actions, rewards, terminations, truncations and infos equal
the RLDS output (float64 stored as float32 is the only difference, and mapping.md says so); the T+1-th step holds
the final observation with is_last, is_terminal = terminations[-1], and zero action, reward and discount."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import h5py
import minari  # a test dependency (pip install -e .[test]): a missing install fails, it is not skipped
import numpy as np
import pytest

from robo_ray.config import load_config
from robo_ray.stages.pipeline import run_pipeline
from robo_ray.formats.rlds.example import decode_example
from robo_ray.formats.rlds.tfrecord import read_records
from tests.conftest import load_rlds, psnr
from tests.fixtures.minari_gen import make_dataset, write_legacy_v04

COLLECTED = [("box", "hdf5", True), ("dict", "hdf5", True), ("tuple", "hdf5", True), ("image", "hdf5", True),
             ("image", "hdf5", False), ("box", "arrow", True), ("tuple", "arrow", True), ("image", "arrow", True),
             ("image", "arrow", False)]


@pytest.fixture(scope="module")
def minari_root(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> Path:
    """A writable copy of the shared Minari samples plus the datasets collected here; MINARI_DATASETS_PATH set."""
    root = tmp_path_factory.mktemp("minari_root")
    shutil.copytree(shared / "samples" / "minari", root, dirs_exist_ok=True)
    for p in root.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    old = os.environ.get("MINARI_DATASETS_PATH")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kind, fmt, jpeg in COLLECTED:
            make_dataset(root, kind, fmt, jpeg)
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    yield root
    if old is None:
        os.environ.pop("MINARI_DATASETS_PATH", None)
    else:
        os.environ["MINARI_DATASETS_PATH"] = old


def _convert(source: str, out: Path, *overrides: str) -> Any:
    cfg = load_config(None, ["validate.tfds_readback=false", *overrides],
                      **{"source.url": source, "target.url": str(out)})
    outcome = run_pipeline(cfg)
    assert outcome.exit_code == 0, outcome.message
    return outcome


def _leaves(value: Any, prefix: str, top: str) -> dict[str, np.ndarray]:
    """Minari's decoded observation/action as {RLDS key: array}, by the default mapping's naming."""
    if isinstance(value, dict):
        out: dict[str, np.ndarray] = {}
        for k, v in value.items():
            out.update(_leaves(v, f"{prefix}/{k}", top))
        return out
    if isinstance(value, tuple):
        out = {}
        for i, v in enumerate(value):
            out.update(_leaves(v, f"{prefix}/index_{i}", top))
        return out
    return {prefix if prefix != top.split("|")[0] else top.split("|")[1]: np.asarray(value)}


def _raw_jpegs(dataset_dir: Path, fmt: str, ep_id: int, key: str) -> list[bytes]:
    """The JPEG bytes as stored in the source file, read without robo_ray or minari."""
    if fmt == "hdf5":
        with h5py.File(dataset_dir / "data" / "main_data.hdf5", "r") as f:
            return [np.asarray(b, np.uint8).tobytes() for b in f[f"episode_{ep_id}/observations/{key}"][()]]
    import pyarrow.ipc as ipc

    (part,) = sorted((dataset_dir / "data" / str(ep_id)).glob("*.arrow"))
    with ipc.open_file(str(part)) as r:
        return r.read_all().column("observations").combine_chunks().field(key).to_pylist()


def _records(version_dir: Path) -> dict[int, dict[str, Any]]:
    out = {}
    for shard in sorted(version_dir.glob("*.tfrecord-*")):
        with open(shard, "rb") as f:
            for rec in read_records(f):
                ex = decode_example(rec)
                out[int(ex["episode_metadata/episode_id"][0])] = ex
    return out


def assert_matches_minari(dataset_id: str, version_dir: Path, exact_images: bool) -> int:
    """Every step of every episode equals minari's own reading of the dataset. Returns the steps checked."""
    ds = minari.load_dataset(dataset_id)
    episodes = load_rlds(version_dir)
    records = _records(version_dir)
    fmt = ds.storage.metadata["data_format"]
    jpeg = bool(ds.storage.metadata.get("jpeg_encoding", True))
    src_dir = Path(os.environ["MINARI_DATASETS_PATH"], *dataset_id.split("/"))
    meta = list(ds.storage.get_episode_metadata(ds.episode_indices))
    assert len(episodes) == ds.total_episodes
    checked = 0
    for got, mep, emeta in zip(episodes, ds.iterate_episodes(), meta):
        steps = got["steps"]
        T = len(mep.rewards)
        assert int(got["episode_metadata"]["episode_id"]) == mep.id
        assert int(got["episode_metadata"]["seed"]) == int(emeta.get("seed", -1))
        assert len(steps["is_first"]) == T + 1
        obs = _leaves(mep.observations, "observation", "observation|observation/state")
        for key, want in obs.items():
            image = want.dtype == np.uint8 and want.ndim >= 3  # the one camera: observation/image (cameras.py)
            have = steps["observation/image" if image else key]
            if image:
                if exact_images:
                    np.testing.assert_array_equal(have, want.reshape(have.shape))
                else:
                    assert min(psnr(a, b) for a, b in zip(have, want)) >= 40.0
                    if jpeg:  # passed through, not re-encoded: the very bytes of the source file
                        raw = _raw_jpegs(src_dir, fmt, mep.id, key.split("/")[-1])
                        assert records[mep.id]["steps/observation/image"] == raw
                continue
            np.testing.assert_array_equal(have.reshape(T + 1, -1), want.astype(have.dtype).reshape(T + 1, -1))
        for key, want in _leaves(mep.actions, "action", "action|action").items():
            have = steps[key].reshape(T + 1, -1)
            np.testing.assert_array_equal(have[:T], want.astype(have.dtype).reshape(T, -1))
            assert not have[T].any()
        np.testing.assert_array_equal(steps["reward"][:T], mep.rewards.astype(np.float32))
        np.testing.assert_array_equal(steps["terminated"][:T], mep.terminations)
        np.testing.assert_array_equal(steps["truncated"][:T], mep.truncations)
        for key, want in (mep.infos or {}).items():
            have = steps[f"info/{key}"]
            np.testing.assert_array_equal(have, np.asarray(want).astype(have.dtype).reshape(have.shape))
        # the last step: final observation, invalid (zero) action, reward and discount; RLDS flags
        assert steps["reward"][T] == 0 and not steps["terminated"][T] and not steps["truncated"][T]
        assert steps["is_last"].tolist() == [False] * T + [True]
        assert steps["is_first"].tolist() == [True] + [False] * T
        assert steps["is_terminal"].tolist() == [False] * T + [bool(mep.terminations[-1])]
        want_discount = np.where(mep.terminations, 0.0, 1.0).tolist() + [0.0]
        assert steps["discount"].tolist() == want_discount
        checked += T + 1
    return checked


@pytest.mark.parametrize("sample,source", [("pendulum/random-v0", "id"),
                                           ("pointmaze/umaze-random-v0", "main_data.hdf5")])
def test_sample_matches_minari(minari_root: Path, tmp_path: Path, sample: str, source: str) -> None:
    url = sample if source == "id" else str(minari_root / sample / "data" / "main_data.hdf5")
    outcome = _convert(url, tmp_path / "out")
    assert assert_matches_minari(sample, Path(outcome.dataset_dir), exact_images=False) > 0
    mapping_md = (tmp_path / "out" / "mapping.md").read_text()
    inventory = json.loads((tmp_path / "out" / "inventory.json").read_text())
    assert inventory["source_format"] == "minari"
    declared = inventory["declared"]
    assert declared["env_spec"]["id"] in ("Pendulum-v1", "PointMaze_UMaze-v3")
    assert declared["author"] == ["holdout-generator"] and declared["algorithm_name"] == "random"
    if sample.startswith("pointmaze"):  # float64 observations: the only difference, recorded in mapping.md
        assert "## Type Narrowing" in mapping_md and "`observations/observation` (float64->float32)" in mapping_md


@pytest.mark.parametrize("kind,fmt,jpeg", COLLECTED, ids=[f"{k}-{f}{'' if j else '-raw'}" for k, f, j in COLLECTED])
def test_collected_dataset_matches_minari(minari_root: Path, tmp_path: Path, kind: str, fmt: str,
                                          jpeg: bool) -> None:
    dataset_id = f"test/{kind}-{fmt}{'' if jpeg else '-raw'}-v0"
    lossless = kind == "image" and not jpeg
    outcome = _convert(dataset_id, tmp_path / "out", *(["images.encoding=png"] if lossless else []))
    assert assert_matches_minari(dataset_id, Path(outcome.dataset_dir), exact_images=lossless) == 37


def test_version_left_out_resolves_to_newest(minari_root: Path) -> None:
    from robo_ray.readers import resolve_source

    assert resolve_source("pendulum/random") == str(minari_root / "pendulum" / "random-v0")


def test_legacy_v04_dataset(tmp_path: Path) -> None:
    folder = write_legacy_v04(tmp_path / "src", lengths=(6, 4))
    outcome = _convert(str(folder), tmp_path / "out")
    episodes = load_rlds(Path(outcome.dataset_dir))
    inventory = json.loads((tmp_path / "out" / "inventory.json").read_text())
    assert inventory["source_version"] == "0.4.3" and inventory["declared"]["author"] == "robo-ray tests"
    with h5py.File(folder / "data" / "main_data.hdf5", "r") as f:
        for got in episodes:
            g = f[f"episode_{int(got['episode_metadata']['episode_id'])}"]
            steps, T = got["steps"], len(g["rewards"])
            for key in ("pos", "goal", "count"):
                have, want = steps[f"observation/{key}"], g[f"observations/{key}"][()]
                np.testing.assert_array_equal(have, want.astype(have.dtype))
            np.testing.assert_array_equal(steps["action"], list(g["actions"][()]) + [0])
            np.testing.assert_array_equal(steps["reward"], np.append(g["rewards"][()], 0).astype(np.float32))
            assert steps["is_terminal"].tolist() == [False] * T + [True]
            assert int(got["episode_metadata"]["seed"]) == int(g.attrs["seed"])
