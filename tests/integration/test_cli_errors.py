"""Bad CLI input: one line on stderr, exit 2, no traceback (issue 2, acceptance 5)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.fixtures.lerobot_gen import DatasetSpec, write_lerobot_dataset


def _assert_one_line_usage_error(proc, needle: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]
    assert "Traceback" not in proc.stderr


def test_missing_source(tmp_path: Path) -> None:
    proc = run_cli("run", str(tmp_path / "nope"), str(tmp_path / "out"))
    _assert_one_line_usage_error(proc, "source not found")


def test_unknown_format(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "readme.txt").write_text("not a dataset")
    proc = run_cli("run", str(tmp_path / "src"), str(tmp_path / "out"))
    _assert_one_line_usage_error(proc, "unknown source format")


def test_unknown_format_name(tmp_path: Path) -> None:
    src = write_lerobot_dataset(tmp_path / "src", DatasetSpec(episode_lengths=[5]))
    proc = run_cli("run", str(src), str(tmp_path / "out"), "--format", "bogus")
    _assert_one_line_usage_error(proc, "unknown source format 'bogus'")


def test_unsupported_lerobot_version(tmp_path: Path) -> None:
    src = write_lerobot_dataset(tmp_path / "src", DatasetSpec(episode_lengths=[5]))
    info = (src / "meta/info.json").read_text().replace('"v2.1"', '"v9.9"')
    (src / "meta/info.json").write_text(info)
    proc = run_cli("run", str(src), str(tmp_path / "out"))
    _assert_one_line_usage_error(proc, "v9.9")


def test_non_empty_destination_without_overwrite(tmp_path: Path) -> None:
    src = write_lerobot_dataset(tmp_path / "src", DatasetSpec(episode_lengths=[5]))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "precious.txt").write_text("keep me")
    proc = run_cli("run", str(src), str(tmp_path / "out"))
    _assert_one_line_usage_error(proc, "not empty")
    assert (tmp_path / "out" / "precious.txt").read_text() == "keep me"
    # --overwrite refuses to delete files robo-ray did not write
    proc = run_cli("run", str(src), str(tmp_path / "out"), "--overwrite")
    _assert_one_line_usage_error(proc, "did not write")
    assert (tmp_path / "out" / "precious.txt").exists()


def test_overwrite_replaces_previous_output(tmp_path: Path) -> None:
    src = write_lerobot_dataset(tmp_path / "src", DatasetSpec(episode_lengths=[5, 6]))
    args = ("run", str(src), str(tmp_path / "out"), "--set", "validate.tfds_readback=false")
    assert run_cli(*args).returncode == 0
    proc = run_cli(*args)
    _assert_one_line_usage_error(proc, "not empty")
    assert run_cli(*args, "--overwrite").returncode == 0


@pytest.mark.parametrize("args,needle", [
    (("run",), "the following arguments are required"),
    (("run", "a", "b", "--set", "nonsense"), "--set expects key.path=value"),
    (("run", "a", "b", "--set", "images.jpeg_quality=500"), "images.jpeg_quality"),
    (("run", "a", "b", "--set", "no.such.key=1"), "invalid config"),
    (("frobnicate",), "invalid choice"),
])
def test_bad_arguments(args: tuple[str, ...], needle: str) -> None:
    _assert_one_line_usage_error(run_cli(*args), needle)


def test_exit_skips_the_interpreter_teardown(tmp_path: Path) -> None:
    """`robo-ray` ends with os._exit once everything is written: a native thread still alive during the
    interpreter's teardown (Arrow's, after a failed parquet read) can abort a finished run with SIGABRT (seen once
    in the bad-input corpus). An atexit hook planted in the child must therefore never run, and the exit code and
    the output must still be the run's."""
    hook = tmp_path / "hook"
    hook.mkdir()
    marker = tmp_path / "teardown-ran"
    (hook / "sitecustomize.py").write_text(
        "import atexit, pathlib\n"
        f"atexit.register(lambda: pathlib.Path({str(marker)!r}).write_text('ran'))\n")
    src = write_lerobot_dataset(tmp_path / "src", DatasetSpec(episode_lengths=[5, 6]))
    env = {"PYTHONPATH": os.pathsep.join(x for x in (str(hook), os.environ.get("PYTHONPATH")) if x)}
    proc = run_cli("run", str(src), str(tmp_path / "out"), "--set", "validate.tfds_readback=false", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "2 episodes" in proc.stdout, proc.stdout  # stdout was flushed before the exit
    assert (tmp_path / "out" / "final_report.md").exists()
    assert not marker.exists(), "the interpreter's teardown ran (atexit hooks): the exit is not os._exit"
    bad = run_cli("validate", str(tmp_path / "nope"), env=env)  # errors exit the same way, with their code
    assert bad.returncode == 2 and not marker.exists(), bad.stderr
