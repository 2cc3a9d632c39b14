"""Issue #27 acceptance: what robots record (robomimic / LIBERO HDF5, ALOHA HDF5, Diffusion Policy and UMI zarr,
ROS bags) converted to LeRobot v3.0 loads in the REAL lerobot 0.6.1 (`LeRobotDataset`, `ds[i]` on every frame, in
its own venv: tests/compat/venvs.py) and lerobot-doctor finds no FAIL. The values against each source are checked
by the family's own test (test_hdf5_recordings, test_zarr_recordings, test_rosbag_recordings); here: the episodes
and frames lerobot sees are the ones robo-ray wrote, and every sampled `ds[i]` value of every numeric
feature equals the row robo-ray wrote in its parquet (read with pyarrow)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow.parquet as pq
import pyarrow.types as pa_types
import pytest

from tests.compat.venvs import lerobot_read
from tests.conftest import run_cli
from tests.fixtures import aloha_gen, robomimic_gen, rosbag_gen, zarr_gen

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(1800),
              pytest.mark.xdist_group("lerobot_env")]

# family -> (writes the source below tmp and returns its URL, extra CLI arguments)
SOURCES: dict[str, tuple[Callable[[Path], Path], tuple[str, ...]]] = {
    "robomimic": (lambda tmp: robomimic_gen.write_robomimic(tmp / "lift" / "image.hdf5", (6, 9), (32, 32)), ()),
    "libero": (lambda tmp: robomimic_gen.write_libero_suite(tmp / "libero_10"), ()),
    "aloha": (lambda tmp: aloha_gen.write_dataset(tmp / "aloha", (7, 5)), ()),
    "zarr-pusht": (lambda tmp: zarr_gen.write_pusht(tmp / "pusht" / "pusht.zarr", (6, 8)).parent, ()),
    # UMI steps at 59.94 fps; LeRobot stores an integer rate, so the user says which (README)
    "zarr-umi": (lambda tmp: zarr_gen.write_umi(tmp / "umi" / "replay_buffer.zarr.zip", (5, 7)).parent,
                 ("--set", "target.options.fps=60")),
    "rosbag": (lambda tmp: rosbag_gen.write_dataset(tmp / "bags", "mcap", episodes=2), ()),
    # what `record -a` catches besides (#27 audit): two 16-bit PNG depth topics, two undecoded ones left out
    "rosbag-recorder": (lambda tmp: rosbag_gen.write_dataset(tmp / "bags", "rosbag2_sqlite3", episodes=2,
                                                             recorder_topics=True), ()),
    "zarr-dp-real": (lambda tmp: zarr_gen.write_dp_real_cache(tmp / "real" / "4f3a.zarr.zip", (5, 7)).parent,
                     ("--fps", "10")),
}


BOOKKEEPING = {"index", "frame_index", "episode_index", "timestamp", "task_index"}


def _numeric(t: object) -> bool:
    if pa_types.is_list(t) or pa_types.is_fixed_size_list(t) or pa_types.is_large_list(t):
        return _numeric(t.value_type)
    return pa_types.is_floating(t) or pa_types.is_integer(t)


def _written_rows(out: Path) -> dict[int, dict[str, np.ndarray]]:
    """index -> every numeric feature column (not bookkeeping) as robo-ray wrote it."""
    rows: dict[int, dict[str, np.ndarray]] = {}
    for path in sorted((out / "data").rglob("*.parquet")):
        table = pq.read_table(path)
        cols = [c for c in table.column_names if c not in BOOKKEEPING and _numeric(table.schema.field(c).type)]
        for i, index in enumerate(table.column("index").to_pylist()):
            rows[int(index)] = {c: np.asarray(table.column(c)[i].as_py(), np.float64) for c in cols}
    return rows


@pytest.mark.parametrize("family", list(SOURCES))
def test_recording_loads_in_lerobot(family: str, lerobot_python: Path, tmp_path: Path) -> None:
    make, extra = SOURCES[family]
    src, out = make(tmp_path / "src"), tmp_path / "out"
    r = run_cli("run", str(src), str(out), "--to", "lerobot", "--set", "validate.tfds_readback=false", *extra,
                timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    ledger = json.loads((out / "ledger.json").read_text())
    episodes = [e for s in ledger["shards"] for e in s["episodes"]]
    proc, s = lerobot_read(out, tmp_path / "read", "--all-frames", python=lerobot_python)
    assert proc.returncode == 0 and s["ok"], f"lerobot could not read {family}: {s}\n{proc.stderr[-3000:]}"
    summary = json.loads(Path(s["json"]).read_text())
    assert summary["num_episodes"] == len(episodes) >= 2
    assert summary["num_frames"] == sum(int(n) for _, n in episodes)
    assert summary["checked_frames"] >= summary["num_frames"]  # --all-frames: ds[i] on every frame (+ the samples)
    assert summary["video_keys"], f"{family}: no camera reached lerobot"
    written = _written_rows(out)
    compared = 0
    for sample in summary["samples"]:
        for key, want in written[int(sample["index"])].items():
            got = np.asarray(sample["values"][key]["value"], np.float64)
            np.testing.assert_array_equal(got, want, err_msg=f"{family} {key} at index {sample['index']}")
            compared += 1
    assert compared >= 2 * summary["num_episodes"]
    _, doctor = lerobot_read(out, tmp_path / "doctor", "--doctor", python=lerobot_python)
    if family == "zarr-umi":  # UMI records poses, no action (its trainer derives actions from later poses)
        assert doctor["failed"] == ["Training Readiness"] and "action" not in summary["features"], doctor
        report = json.loads(Path(doctor["json"]).read_text())
        fails = [m["message"] for c in report["checks"] for m in c["messages"] if m["severity"] == "FAIL"]
        assert fails == ["No action features found -- cannot train any policy"], fails
    else:
        assert doctor["ok"], f"lerobot-doctor FAILed {family}: {doctor}"
