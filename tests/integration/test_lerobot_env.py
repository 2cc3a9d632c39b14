"""The lerobot 0.6.1 tooling itself: tests/compat/venvs.py builds the venv, lerobot_reference.py writes a dataset with
lerobot's own writer, lerobot_read.py loads it back through LeRobotDataset / ds[i] and lerobot-doctor checks it.

Not a robo-ray conversion test (those use these scripts on robo-ray's output); this proves the scripts report what
lerobot really does, and that their checks are not vacuous (a shifted timestamp and a missing video must fail).
The venv is built once (~1.5 min, 5.4 GB, needs PyPI) at $ROBO_RAY_LEROBOT_VENV (default .cache/venv-lerobot061);
after that this module takes ~40 s.

    pytest -m compat tests/integration/test_lerobot_env.py
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.compat.venvs import VenvError, ensure_lerobot_venv, lerobot_read, lerobot_reference
from tests.fixtures.lerobot_gen import expected_frame

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(3600),
              pytest.mark.xdist_group("lerobot_env")]

FPS = 10
LENGTHS = (12, 9)
H, W = 48, 64
CAM = "observation.images.top"
TASKS = ("pick the cube", "place the cube")


def _episode(e: int, n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(100 + e)
    return {
        "observation.state": rng.normal(size=(n, 6)).astype(np.float32),
        "action": rng.uniform(-1, 1, (n, 4)).astype(np.float32),
        "next.reward": rng.normal(size=n).astype(np.float32),
        "next.done": np.arange(n) == n - 1,
        CAM: np.stack([expected_frame(e, t, 0, H, W) for t in range(n)]),
        # episode 1 switches task half way: a frame-level task, as robo-ray must write it
        "task": np.array([TASKS[1] if (e == 1 and t >= n // 2) else TASKS[0] for t in range(n)]),
    }


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[Path, dict[int, dict[str, np.ndarray]]]:
    eps = {e: _episode(e, n) for e, n in enumerate(LENGTHS)}
    npz = tmp_path_factory.mktemp("lerobot_src") / "frames.npz"
    np.savez(npz, fps=np.array(FPS), **{f"ep{e:03d}/{k}": v for e, ep in eps.items() for k, v in ep.items()})
    return npz, eps


@pytest.fixture(scope="module")
def lerobot_python() -> Path:
    try:
        return ensure_lerobot_venv(log=True)
    except VenvError as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def reference(source, lerobot_python: Path, tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("lerobot_ref") / "ds"
    proc, s = lerobot_reference(source[0], root, python=lerobot_python)
    assert proc.returncode == 0 and s["ok"], f"{s}\n{proc.stderr[-4000:]}"
    return root, s


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def test_reference_layout_is_lerobot_v30(reference) -> None:
    root, s = reference
    info = s["info"]
    assert s["lerobot"] == "0.6.1" and info["codebase_version"] == "v3.0" and info["fps"] == FPS
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (2, sum(LENGTHS), 2)
    assert sorted(s["files"]) == ["data/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-000.parquet",
                                  "meta/info.json", "meta/stats.json", "meta/tasks.parquet",
                                  f"videos/{CAM}/chunk-000/file-000.mp4"]
    vinfo = info["features"][CAM]["info"]  # lerobot's encoder defaults, as recorded by lerobot itself
    assert (vinfo["video.codec"], vinfo["video.pix_fmt"], vinfo["video.g"], vinfo["video.crf"]) == \
        ("av1", "yuv420p", 2, 30)
    episodes = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet")
    assert episodes.column(f"videos/{CAM}/from_timestamp").to_pylist() == [0.0, LENGTHS[0] / FPS]
    assert episodes.column(f"videos/{CAM}/to_timestamp").to_pylist() == [LENGTHS[0] / FPS, sum(LENGTHS) / FPS]


def test_read_back_through_lerobot_dataset(source, reference, lerobot_python: Path, tmp_path: Path) -> None:
    _, eps = source
    root, _ = reference
    proc, s = lerobot_read(root, tmp_path / "read", "--all-frames", python=lerobot_python)
    assert proc.returncode == 0 and s["ok"], f"{s}\n{proc.stderr[-4000:]}"
    assert s["checked_frames"] == 3 * len(LENGTHS) + sum(LENGTHS)  # samples + every frame (--all-frames)
    out = json.loads(Path(s["json"]).read_text())
    frames = np.load(s["npz"])
    assert (out["num_episodes"], out["num_frames"], out["fps"]) == (2, sum(LENGTHS), FPS)
    assert [e["length"] for e in out["episodes"]] == list(LENGTHS)
    assert [sorted(e["tasks"]) for e in out["episodes"]] == [[TASKS[0]], sorted(TASKS)]
    assert len(out["samples"]) == 3 * len(LENGTHS)
    for sample in out["samples"]:
        e, t = sample["episode_index"], sample["frame_index"]
        src = eps[e]
        assert sample["which"] == {0: "first", LENGTHS[e] // 2: "middle", LENGTHS[e] - 1: "last"}[t]
        assert sample["timestamp"] == float(np.float32(t / FPS))  # lerobot stores frame_index / fps as float32
        assert sample["task"] == src["task"][t]
        values = sample["values"]
        for key in ("observation.state", "action"):
            assert values[key]["dtype"] == "float32"
            assert np.array_equal(np.asarray(values[key]["value"], dtype=np.float32), src[key][t]), key
            assert np.array_equal(frames[f"{sample['index']}/{key}"], src[key][t]), key
        assert values["next.reward"]["value"] == float(src["next.reward"][t]) and values["next.reward"]["shape"] == []
        assert values["next.done"] == {"dtype": "bool", "shape": [], "value": bool(src["next.done"][t])}
        img = frames[sample["cameras"][CAM]]
        assert img.shape == (H, W, 3) and img.dtype == np.uint8
        psnr = _psnr(img, src[CAM][t])
        neighbours = [_psnr(img, src[CAM][u]) for u in (t - 1, t + 1) if 0 <= u < LENGTHS[e]]
        assert psnr > 35 and all(psnr > n + 3 for n in neighbours), (e, t, psnr, neighbours)


def test_doctor_passes_lerobots_own_output(reference, lerobot_python: Path, tmp_path: Path) -> None:
    root, _ = reference
    proc, s = lerobot_read(root, tmp_path / "doctor", "--doctor", python=lerobot_python)
    assert s["ok"] and s["failed"] == [] and s["lerobot_doctor"] == "0.2.0", f"{s}\n{proc.stderr[-4000:]}"
    report = json.loads(Path(s["json"]).read_text())
    assert len(report["checks"]) == 11 and all(c["severity"] in ("PASS", "WARN") for c in report["checks"])


def _shift_timestamps(root: Path, delta_per_episode: dict[int, float]) -> None:
    path = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    i = table.schema.get_field_index("timestamp")
    ts = table.column(i).to_numpy().copy()
    episode = table.column("episode_index").to_numpy()
    for e, delta in delta_per_episode.items():
        ts[episode == e] += np.float32(delta)
    shifted = pa.array(ts, pa.float32())
    pq.write_table(table.set_column(i, table.schema.field(i), shifted), path)  # schema metadata kept


def test_timestamp_tolerance_is_enforced(reference, lerobot_python: Path, tmp_path: Path) -> None:
    """ds[i] compares the parquet timestamp with the decoded frame's pts (1e-4 s, strict): episode 0 is moved by
    5e-5 s and still loads, episode 1 by 2e-4 s and fails. One run for both (each run imports torch: ~9 s)."""
    root = tmp_path / "ds"
    shutil.copytree(reference[0], root)
    _shift_timestamps(root, {0: 5e-5, 1: 2e-4})
    proc, s = lerobot_read(root, tmp_path / "read", "--frames", "middle", python=lerobot_python)
    assert proc.returncode == 1 and not s["ok"], s
    assert (s["stage"], s["error_type"]) == ("getitem", "FrameTimestampError"), s
    assert s["index"] == LENGTHS[0] + LENGTHS[1] // 2 and s["checked_frames"] == 1, s  # episode 0's frame passed


def test_missing_video_fails_without_the_hub(reference, lerobot_python: Path, tmp_path: Path) -> None:
    """A local dataset with a missing video makes lerobot try the Hub; offline, that is an immediate error."""
    root = tmp_path / "ds"
    shutil.copytree(reference[0], root)
    (root / f"videos/{CAM}/chunk-000/file-000.mp4").unlink()
    proc, s = lerobot_read(root, tmp_path / "read", python=lerobot_python, timeout=300)
    assert proc.returncode == 1 and not s["ok"] and s["stage"] == "load", s
