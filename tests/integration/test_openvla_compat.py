"""Issue acceptance: the output also loads with tensorflow-datasets 4.9.3 on TensorFlow 2.15 (what OpenVLA pins),
including a slice such as `train[:50%]`, and with `SkipDecoding` on `steps` as dlimp does.

The reader runs in its own venv built from tests/compat/requirements-openvla.txt (TF 2.15 cannot share the project's
venv: numpy<2, protobuf<4.21). The venv lives at $ROBO_RAY_COMPAT_VENV (default <repo>/.cache/venv-tf215), is built
once and reused while the sha256 of the requirements file matches its marker; concurrent xdist workers serialize on a
file lock next to it. Building it needs the package index (a few minutes); reusing it takes no time.

    pytest -m compat tests/integration/test_openvla_compat.py
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.compat.venvs import VenvError, clean_env, ensure_venv
from tests.conftest import REPO, require_shared, run_cli

# xdist_group: under `--dist loadgroup` one worker would convert once and run all four. With pytest 9.2 + xdist 3.8
# the group is silently ignored (pytest-xdist#1386: xdist renames item._nodeid, pytest 9.2 reads item._id), so each
# worker may convert the sample itself (~8 s); the venv is still built once thanks to the file lock.
pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(3600),
              pytest.mark.xdist_group("openvla_compat")]

COMPAT = REPO / "tests" / "compat"
REQUIREMENTS = COMPAT / "requirements-openvla.txt"
SCRIPT = COMPAT / "openvla_read.py"
SAMPLE = "lerobot_v30_av1_2cam"
EXPECT = ["--episodes", "4", "--steps", "420", "--image-shape", "96,128,3"]


def compat_venv_dir() -> Path:
    return Path(os.environ.get("ROBO_RAY_COMPAT_VENV", REPO / ".cache" / "venv-tf215")).absolute()


def _base_python() -> str:
    """An interpreter TF 2.15 has wheels for (CPython 3.9-3.11); the project itself pins 3.11."""
    if (3, 9) <= sys.version_info[:2] <= (3, 11):
        return sys.executable
    found = shutil.which("python3.11")
    if not found:
        pytest.fail(f"TF 2.15 needs Python 3.9-3.11 to build {compat_venv_dir()}; running on "
                    f"{sys.version.split()[0]} and no python3.11 on PATH")
    return found


def ensure_compat_venv() -> tuple[Path, float | None]:
    """(python of the TF 2.15 venv, seconds spent building it or None if reused). Idempotent and race-free."""
    try:
        return ensure_venv(compat_venv_dir(), REQUIREMENTS, _base_python)
    except VenvError as e:
        pytest.fail(str(e))


def run_openvla_read(python: Path, version_dir: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = clean_env(TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([str(python), str(SCRIPT), str(version_dir), *args], capture_output=True, text=True,
                          env=env, timeout=900, cwd=version_dir)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines, f"openvla_read.py printed nothing on stdout (exit {proc.returncode}); stderr:\n{proc.stderr[-4000:]}"
    try:
        summary = json.loads(lines[-1])
    except json.JSONDecodeError:
        pytest.fail(f"openvla_read.py's last stdout line is not JSON: {lines[-1][:500]!r}\n{proc.stderr[-4000:]}")
    return proc, summary


@pytest.fixture(scope="module")
def compat_python() -> Path:  # tests request it after `converted`, so a missing sample skips before any build
    python, seconds = ensure_compat_venv()
    print(f"\ncompat venv {compat_venv_dir()}: " + ("reused" if seconds is None else f"built in {seconds:.0f} s"),
          file=sys.stderr)
    return python


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    src = require_shared(f"samples/{SAMPLE}")
    dst = tmp_path_factory.mktemp("openvla") / "out"
    proc = run_cli("run", str(src), str(dst))
    assert proc.returncode == 0, f"robo-ray run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    version_dir = dst / "rlds" / SAMPLE / "1.0.0"
    assert (version_dir / "dataset_info.json").is_file(), f"no dataset_info.json under {version_dir}"
    return version_dir


def test_output_loads_with_tf215_tfds493(converted: Path, compat_python: Path) -> None:
    proc, s = run_openvla_read(compat_python, converted, *EXPECT)
    assert proc.returncode == 0 and s["ok"], f"{s.get('check')}: {s.get('error')}\n{proc.stderr[-4000:]}"
    assert s["tfds"] == "4.9.3" and s["tensorflow"].startswith("2.15."), (s["tfds"], s["tensorflow"])
    assert (s["episodes"], s["steps"]) == (4, 420)
    # (b) Octo/OpenVLA's tfds.builder(name, data_dir=...) finds these very files, with and without :version
    assert s["builder_by_name"] == {SAMPLE: "ok", f"{SAMPLE}:1.0.0": "ok"}
    # (c) slices, counted by reading and checked inside the script against tfds' own split arithmetic
    assert s["slices"]["train[:50%]"] == 2 and s["slices"]["train[50%:]"] == 2 and s["slices_sum"] == 4
    assert s["slices"]["train[:95%]"] + s["slices"]["train[95%:]"] == 4
    # (a) both cameras, decoded by tfds and by tf.io.decode_image
    assert s["images"] == {f"observation/{k}": {"shape": [96, 128, 3], "dtype": "uint8", "encoding": "jpeg"}
                           for k in ("image_top", "image_side")}
    # (d) dlimp's from_rlds path
    assert s["dlimp"]["episodes"] == 4 and s["dlimp"]["steps"] == 420
    assert s["dlimp"]["language_instruction_dtype"] == "string"
    assert s["dlimp"]["metadata_leaves"] == ["episode_metadata/episode_id", "episode_metadata/file_path"]


def _set(key: str, value):
    def mutate(info: dict) -> None:
        info[key] = value
    return mutate


def _shard_lengths(info: dict) -> None:  # + 1: the sample's shards hold one episode each (- 1: 'Shard empty')
    info["splits"][0]["shardLengths"] = [str(int(n) + 1) for n in info["splits"][0]["shardLengths"]]


@pytest.mark.parametrize("mutate, failed_check, message", [
    # a field newer tfds writes but 4.9.3's DatasetInfo proto lacks: json_format.Parse rejects unknown keys
    pytest.param(_set("nondeterministicOrder", True), "a_builder_from_directory", "nondeterministicOrder",
                 id="unknown-key-nondeterministicOrder"),
    # an "ordered" dataset cannot be read with shuffle_files=True, which dlimp always passes
    pytest.param(_set("disableShuffling", True), "d_dlimp", "ordered dataset", id="disableShuffling"),
    # shard lengths that do not match the records: tfds' cardinality assertion
    pytest.param(_shard_lengths, "a_builder_from_directory", "expected to contain", id="shardLengths-off-by-one"),
])
def test_compat_check_fails_on_broken_output(converted: Path, compat_python: Path, tmp_path: Path,
                                             mutate, failed_check: str, message: str) -> None:
    """The compat check is not vacuous: a copy of the output with a corrupted dataset_info.json must fail it."""
    broken = tmp_path / "rlds" / SAMPLE / "1.0.0"
    shutil.copytree(converted, broken)
    info_path = broken / "dataset_info.json"
    info = json.loads(info_path.read_text())
    mutate(info)
    info_path.write_text(json.dumps(info, indent=2, sort_keys=True))
    proc, s = run_openvla_read(compat_python, broken, *EXPECT)
    assert proc.returncode != 0 and s["ok"] is False, f"corrupted output passed the compat check: {s}"
    assert s["check"] == failed_check and message in s["error"], s
    assert f"FAILED [{failed_check}]" in proc.stderr
