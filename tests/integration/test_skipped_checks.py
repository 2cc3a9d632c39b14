"""A check that cannot run is recorded as skipped with its reason (issue #30): never passed, never failed. The
RLDS target's tfds read-back without tensorflow-datasets (the child process that would read back finds neither
tensorflow nor tfds: both shadowed by modules that raise ImportError) and with the read-back turned off. The run
exits 0 and every report says "skipped" with the reason (test_plain_install.py does the same in a real plain venv)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.fixtures.lerobot_gen import DatasetSpec, write_lerobot_dataset

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_lerobot_dataset(tmp_path_factory.mktemp("skipped") / "src", DatasetSpec(episode_lengths=[8, 9]))


def _without_tfds(tmp: Path) -> dict[str, str]:
    """An environment where `import tensorflow` and `import tensorflow_datasets` raise ImportError."""
    shadow = tmp / "no_tf"
    for name in ("tensorflow", "tensorflow_datasets"):
        (shadow / name).mkdir(parents=True)
        (shadow / name / "__init__.py").write_text(f'raise ImportError("No module named {name} (shadowed)")\n')
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(shadow), os.environ.get("PYTHONPATH", "")) if p)}


def _readback(out: Path) -> tuple[dict, dict]:
    summary = json.loads((out / "diff_summary.json").read_text())
    return next(c for c in summary["checks"] if c["name"] == "tfds read-back"), summary


@pytest.mark.parametrize("case", ["tfds missing", "turned off"])
def test_tfds_readback_is_skipped_with_its_reason(src: Path, tmp_path: Path, case: str) -> None:
    out = tmp_path / "out"
    if case == "tfds missing":
        proc = run_cli("run", str(src), str(out), "--to", "rlds", env=_without_tfds(tmp_path))
        reason = "tensorflow-datasets is not installed (pip install 'robo-ray[tf]'"
    else:
        proc = run_cli("run", str(src), str(out), "--to", "rlds", "--set", "validate.tfds_readback=false")
        reason = "turned off (validate.tfds_readback: false, or --no-tfds)"
    assert proc.returncode == 0, proc.stderr[-3000:]
    check, summary = _readback(out)
    assert check["status"] == "skipped" and check["passed"] is False and check["detail"].startswith(reason), check
    assert summary["passed"] is True and summary["counts"]["skipped"] == 1 and summary["counts"]["failed"] == 0
    assert summary["counts"]["passed"] == len(summary["checks"]) - 1
    assert f"| tfds read-back | ⏭️ skipped | {reason}" in (out / "validation_report.md").read_text()
    final = (out / "final_report.md").read_text()
    assert f"- ⏭️ skipped tfds read-back: {reason}" in final and "(" in final.split("Status: ", 1)[1], final
    assert "1 skipped)" in final.split("Status: ", 1)[1].splitlines()[0]
    page = (out / "report.html").read_text()
    assert '<span class="skip" data-status="skipped">– skipped</span></td><td>tfds read-back</td>' in page
    val = run_cli("validate", str(out), "--no-tfds")
    assert val.returncode == 0 and "0 failed, 1 skipped" in val.stdout, val.stdout + val.stderr[-2000:]
    assert "validation skipped: tfds read-back: turned off" in val.stderr, val.stderr[-2000:]
