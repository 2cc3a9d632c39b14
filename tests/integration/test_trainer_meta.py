"""Issue #28 items 4 and 5: the LeRobot target's files for openpi and GR00T, read by re-implementations of their own
loading code in their own venv (tests/compat/openpi_norm_stats.py, tests/compat/gr00t_modality.py; numpy 1.26.4,
pydantic 2.11.5, numpydantic 1.6.9 as openpi's uv.lock pins them).

* openpi: DST/norm_stats.json loads through openpi's NormStats / _NormStatsDict (every field an ndarray of the
  feature's size; save + load gives the same arrays); its mean / std equal numpy's over the written values (float64),
  its q01 / q99 lie between numpy's order statistics at q -/+ the KLL rank error; z-score normalization with it
  centres the data (mean 0, std 1) and quantile normalization maps it into [-1, 1] but for the 1% tails; openpi's own
  RunningStats over the same values agrees (mean / std; quantiles within its histogram's bin). 1,800 steps in 3
  units: the statistics are merged sketches beyond KLL's exact size (k = 1,000).
* GR00T: meta/modality.json validates against GR00T's LeRobotModalityMetadata; its state / action slices tile
  observation.state and action exactly and slice meta/stats.json to the group widths; every camera maps to its
  info.json feature (resolution, channels, fps); the language annotation reads task_index.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from robo_ray.formats.lerobot.layout import plan_layout
from robo_ray.formats.lerobot.trainer_meta import modality_json, slice_problems
from robo_ray.mapping import Defaults, FieldMap, Mapping
from robo_ray.stats import RANK_ERROR
from tests.compat.venvs import GR00T_MODALITY, OPENPI_NORM_STATS, clean_env, ensure_trainers_venv
from tests.conformance import writer_cases as wc
from tests.fixtures.lerobot_gen import CameraSpec, DatasetSpec, write_lerobot_dataset

pytestmark = pytest.mark.timeout(600)

STATE_ONLY = DatasetSpec(version="v2.1", episode_lengths=[700, 600, 500], cameras=[], state_dim=5, action_dim=3)
TWO_CAMS = DatasetSpec(version="v2.1", episode_lengths=[6, 5], cameras=[CameraSpec(wc.TOP), CameraSpec(wc.WRIST)],
                       tasks_per_episode=[["pick"], ["place"]])


def _convert(tmp: Path, spec: DatasetSpec) -> Path:
    src = write_lerobot_dataset(tmp / "src", spec)
    out = tmp / "out"
    outcome = wc.run_in_process(wc.load_writer_case("lerobot"), src, out, "lerobot-v21-1cam")
    assert outcome.exit_code == 0, outcome.message
    return out


def _script(script: Path, *args: str) -> dict:
    proc = subprocess.run([str(ensure_trainers_venv()), str(script), *map(str, args)], capture_output=True,
                          text=True, env=clean_env(), timeout=300)
    lines = [x for x in proc.stdout.splitlines() if x.strip()]
    assert lines, f"{script.name}: no output (exit {proc.returncode})\n{proc.stderr[-3000:]}"
    out = json.loads(lines[-1])
    assert proc.returncode == 0 and out["ok"], f"{script.name}: {out.get('error')}\n{proc.stderr[-3000:]}"
    return out


def _written(out: Path) -> dict[str, np.ndarray]:
    """openpi's keys -> every written step's values (the data parquet files in order)."""
    table = pa.concat_tables([pq.read_table(p) for p in sorted(out.glob("data/chunk-*/file-*.parquet"))])
    return {key: np.stack(table[col].to_numpy(zero_copy_only=False)).astype(np.float64)
            for key, col in (("state", "observation.state"), ("actions", "action"))}


@pytest.fixture(scope="module")
def state_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _convert(tmp_path_factory.mktemp("openpi"), STATE_ONLY)


def test_openpi_loads_our_norm_stats(state_only: Path, tmp_path: Path) -> None:
    values = _written(state_only)
    assert len(values["state"]) == 1800
    npz = tmp_path / "values.npz"
    np.savez(npz, **values)
    res = _script(OPENPI_NORM_STATS, state_only, npz)
    assert res["versions"] == {"numpy": "1.26.4", "pydantic": "2.11.5", "numpydantic": "1.6.9"}
    assert res["keys"] == ["actions", "state"]
    stats = json.loads((state_only / "norm_stats.json").read_text())["norm_stats"]
    n_units = len(json.loads((state_only / "ledger.json").read_text())["shards"])
    assert n_units == 3, "one unit per episode: the statistics must be merged across units"
    for key, dims in (("state", 5), ("actions", 3)):
        r, x, ours = res["per_key"][key], values[key], stats[key]
        assert r["types"] == dict.fromkeys(("mean", "std", "q01", "q99"), "ndarray")
        assert r["shapes"] == dict.fromkeys(("mean", "std", "q01", "q99"), [dims]) and r["round_trip_equal"]
        np.testing.assert_allclose(ours["mean"], x.mean(0), rtol=0, atol=1e-12)
        np.testing.assert_allclose(ours["std"], x.std(0), rtol=1e-12, atol=1e-12)
        n = len(x)
        for name, q in (("q01", 0.01), ("q99", 0.99)):
            lo = np.quantile(x, max(q - RANK_ERROR - 1 / n, 0), axis=0, method="lower")
            hi = np.quantile(x, min(q + RANK_ERROR + 1 / n, 1), axis=0, method="higher")
            v = np.asarray(ours[name])
            assert np.all((lo <= v) & (v <= hi)), (key, name, lo, v, hi)
            assert not np.allclose(v, np.quantile(x, 0.5, axis=0)), "quantiles must not be the median"
        np.testing.assert_allclose(r["zscore_mean"], 0.0, atol=1e-9)
        np.testing.assert_allclose(r["zscore_std"], 1.0, atol=1e-4)
        assert np.all(np.asarray(r["quantile_min"]) <= -1.0 + 1e-6) and np.all(np.asarray(r["quantile_max"]) >= 1.0)
        assert 0.95 <= r["quantile_inside"] <= 0.99, r["quantile_inside"]  # ~1% below q01 and ~1% above q99
        own = r["openpi_running"]  # what openpi's compute_norm_stats would have written
        np.testing.assert_allclose(ours["mean"], own["mean"], atol=1e-9)
        np.testing.assert_allclose(ours["std"], own["std"], atol=1e-6)
        bin_width = (x.max(0) - x.min(0)) / 5000
        for name, q in (("q01", 0.01), ("q99", 0.99)):
            rank = (x < np.asarray(own[name])).mean(0)  # openpi's value's rank vs ours: both near q
            assert np.all(np.abs(rank - q) <= RANK_ERROR + 2 / n), (key, name, rank)
            gap = np.abs(np.asarray(ours[name]) - np.asarray(own[name]))
            spread = np.quantile(x, q + RANK_ERROR + 2 / n, axis=0) - np.quantile(x, q - RANK_ERROR - 2 / n, axis=0)
            assert np.all(gap <= spread + bin_width), (key, name, gap, spread)


def test_gr00t_reads_our_modality(tmp_path: Path) -> None:
    out = _convert(tmp_path, TWO_CAMS)
    res = _script(GR00T_MODALITY, out)
    info = json.loads((out / "meta" / "info.json").read_text())
    assert res["stats_valid"], res["stats_error"]
    for modality, column, dims in (("state", "observation.state", 6), ("action", "action", 4)):
        groups = res[modality]
        assert groups and all(g["column"] == column for g in groups.values())
        covered = sorted((g["start"], g["end"]) for g in groups.values())
        assert covered[0][0] == 0 and covered[-1][1] == dims == info["features"][column]["shape"][0]
        assert all(a[1] == b[0] for a, b in zip(covered, covered[1:])), covered
        for g in groups.values():
            assert g["continuous"] and g["absolute"] and g["shape"] == [g["end"] - g["start"]]
            for stat in ("mean", "std", "min", "max", "q01", "q99"):
                assert len(g["stats"][stat]) == g["end"] - g["start"], (modality, stat)
    assert res["video"] == {cam: {"original_key": f"observation.images.{cam}", "resolution": [64, 48],
                                  "channels": 3, "fps": 20} for cam in ("top", "wrist")}
    assert res["annotation"] == {"human.task_description": {"column": "task_index", "in_features": True}}
    tasks = pq.read_table(out / "meta" / "tasks.parquet").to_pandas()
    assert sorted(tasks.index) == ["pick", "place"]  # what task_index points at


def _fm(source: str, target: str, shape: list[int], role: str, kind: str = "tensor") -> FieldMap:
    dtype = "uint8" if kind == "image" else "float32"
    return FieldMap(source=source, target=target, kind=kind, dtype=dtype, shape=shape, role=role)


def test_modality_groups_of_a_nested_action_and_two_state_features() -> None:
    """An RLDS-like mapping: action world_vector[3] + rotation_delta[3] + open_gripper (scalar) concatenated, the
    state plus a second state-role tensor in its own column, no language: the slices tile each column once."""
    mapping = Mapping(dataset_name="nested", steps=[
        _fm("obs/state", "observation/state", [7], "state"),
        _fm("obs/joint_vel", "observation/joint_vel", [2], "state"),
        _fm("obs/other", "observation/other", [4], "observation"),
        _fm("act/wv", "action/world_vector", [3], "action"),
        _fm("act/rd", "action/rotation_delta", [3], "action"),
        _fm("act/g", "action/open_gripper", [], "action"),
        _fm("obs/image", "observation/image_main", [32, 48, 3], "camera", "image")],
        defaults=Defaults(language_source=""))
    layout = plan_layout(mapping)
    m = modality_json(layout, mapping)
    assert m["state"] == {"state": {"start": 0, "end": 7, "dtype": "float32"},
                          "joint_vel": {"start": 0, "end": 2, "dtype": "float32",
                                        "original_key": "observation.joint_vel"}}
    assert m["action"] == {"world_vector": {"start": 0, "end": 3, "dtype": "float32"},
                           "rotation_delta": {"start": 3, "end": 6, "dtype": "float32"},
                           "open_gripper": {"start": 6, "end": 7, "dtype": "float32"}}
    assert m["video"] == {"main": {"original_key": "observation.images.main"}} and "annotation" not in m
    assert slice_problems(m, layout) == []
    m["action"]["rotation_delta"]["end"] = 5  # a gap at 5
    assert any("gap" in p for p in slice_problems(m, layout))
    m["action"]["rotation_delta"]["end"] = 6
    del m["state"]["state"]
    assert any("observation.state" in p for p in slice_problems(m, layout))
