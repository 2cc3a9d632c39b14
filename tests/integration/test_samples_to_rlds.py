"""Issue 2, acceptance 2: the lerobot-written samples convert to RLDS that tfds loads, with exact low-dim values,
images within 38 dB PSNR of the source frames at the same timestamps, and the task text as language_instruction.

The expectations are computed here straight from the source files (pyarrow + PyAV), not through robo_ray."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.conftest import decode_all_frames, load_rlds, psnr, run_cli

pytestmark = pytest.mark.slow


def _v21_expected(root: Path) -> list[dict]:
    tasks = {json.loads(line)["task_index"]: json.loads(line)["task"]
             for line in (root / "meta/tasks.jsonl").read_text().splitlines() if line.strip()}
    out = []
    for line in (root / "meta/episodes.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        e = json.loads(line)
        idx = e["episode_index"]
        df = pq.read_table(root / f"data/chunk-000/episode_{idx:06d}.parquet").to_pandas()
        out.append({"index": idx, "length": e["length"], "df": df, "tasks": tasks,
                    "videos": {"observation.images.top": (
                        root / f"videos/chunk-000/observation.images.top/episode_{idx:06d}.mp4", 0.0)}})
    return out


def _v30_expected(root: Path) -> list[dict]:
    tdf = pd.read_parquet(root / "meta/tasks.parquet")
    tasks = {int(row.task_index): str(name) for name, row in tdf.iterrows()}
    eps = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pandas()
    data = pq.read_table(root / "data/chunk-000/file-000.parquet").to_pandas()
    out = []
    for _, e in eps.iterrows():
        idx = int(e["episode_index"])
        df = data[data["episode_index"] == idx].reset_index(drop=True)
        videos = {}
        for cam in ("observation.images.top", "observation.images.side"):
            videos[cam] = (root / f"videos/{cam}/chunk-000/file-000.mp4", float(e[f"videos/{cam}/from_timestamp"]))
        out.append({"index": idx, "length": int(e["length"]), "df": df, "tasks": tasks, "videos": videos})
    return out


CASES = {
    "lerobot_v30_av1_2cam": (_v30_expected, {"observation.images.top": "observation/image_top",
                                             "observation.images.side": "observation/image_side"}),
    "lerobot_v21_h264_1cam": (_v21_expected, {"observation.images.top": "observation/image"}),
}


@pytest.mark.parametrize("sample", sorted(CASES))
def test_sample_converts_exactly(sample: str, shared: Path, tmp_path: Path) -> None:
    src = shared / "samples" / sample
    proc = run_cli("run", str(src), str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    expected_fn, cams = CASES[sample]
    expected = expected_fn(src)
    episodes = load_rlds(tmp_path / "out" / "rlds" / sample / "1.0.0")

    assert [int(e["episode_metadata"]["episode_id"]) for e in episodes] == [e["index"] for e in expected]
    frame_cache: dict[Path, list] = {}
    psnrs = []
    for got, exp in zip(episodes, expected):
        steps, df = got["steps"], exp["df"]
        assert len(steps["is_first"]) == exp["length"] == len(df)
        state = np.stack(df["observation.state"].to_numpy()).astype(np.float32)
        action = np.stack(df["action"].to_numpy()).astype(np.float32)
        assert steps["observation/state"].dtype == np.float32
        np.testing.assert_array_equal(steps["observation/state"], state)
        np.testing.assert_array_equal(steps["action"], action)
        np.testing.assert_array_equal(steps["reward"], df["next.reward"].to_numpy(np.float32))
        assert steps["is_first"].tolist() == [True] + [False] * (len(df) - 1)
        assert steps["is_last"].tolist() == [False] * (len(df) - 1) + [True]
        want_lang = [exp["tasks"][int(t)] for t in df["task_index"]]
        assert [s.decode() for s in steps["language_instruction"]] == want_lang
        assert got["episode_metadata"]["file_path"].decode().startswith("data/chunk-000/")
        for cam, target in cams.items():
            path, t0 = exp["videos"][cam]
            frames = frame_cache.setdefault(path, decode_all_frames(path))
            images = steps[target]
            for i, ts in enumerate(df["timestamp"].to_numpy()):
                q = t0 + float(ts)
                t, src_rgb = min(frames, key=lambda f: abs(f[0] - q))
                assert abs(t - q) < 1e-3
                assert images[i].shape == src_rgb.shape
                psnrs.append(psnr(images[i], src_rgb))
    assert psnrs and float(np.mean(psnrs)) >= 38.0, f"mean PSNR {np.mean(psnrs):.1f} dB"
    report = (tmp_path / "out" / "validation_report.md").read_text()
    assert "PASSED" in report
