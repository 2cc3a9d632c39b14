"""tests/compat/venvs.py: a venv is built once per requirements digest, reused after, rebuilt when the requirements
change, built once when two processes ask at the same time, and by pip when uv cannot be had. Uses an empty
requirements file, so nothing is downloaded (each build is `python -m venv`, ~3 s)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.compat.venvs import MARKER, REPO, VenvError, ensure_venv, find_python, requirements_digest

pytestmark = pytest.mark.slow


@pytest.fixture
def reqs(tmp_path: Path) -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text("# nothing to install\n")
    return path


def test_built_once_reused_then_rebuilt(tmp_path: Path, reqs: Path) -> None:
    venv = tmp_path / "v"
    python, seconds = ensure_venv(venv, reqs, sys.executable)
    assert python == venv / "bin" / "python" and python.exists() and seconds is not None
    assert (venv / MARKER).read_text().strip() == requirements_digest(reqs)
    reuse = ensure_venv(venv, reqs, lambda: pytest.fail("must not ask for an interpreter when reusing"))
    assert reuse == (python, None)
    (venv / MARKER).unlink()  # as if the build had died before its last step: rebuilt
    assert ensure_venv(venv, reqs, sys.executable)[1] is not None
    (venv / "stale").touch()
    reqs.write_text("# changed\n")  # other requirements: rebuilt from scratch
    assert ensure_venv(venv, reqs, sys.executable)[1] is not None and not (venv / "stale").exists()


def test_concurrent_builders_build_once(tmp_path: Path, reqs: Path) -> None:
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
            "from tests.compat.venvs import ensure_venv; "
            "print(ensure_venv(Path(sys.argv[2]), Path(sys.argv[3]), sys.executable)[1] is not None)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(REPO), str(tmp_path / "v"), str(reqs)],
                              stdout=subprocess.PIPE, text=True) for _ in range(3)]
    built = [p.communicate(timeout=300)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs) and sorted(built) == ["False", "False", "True"]


def test_uv_that_cannot_be_had_falls_back_to_pip(tmp_path: Path, reqs: Path) -> None:
    python, seconds = ensure_venv(tmp_path / "v", reqs, sys.executable, uv="999.0")
    assert seconds is not None and (tmp_path / "v" / MARKER).is_file()


def test_find_python(monkeypatch) -> None:
    monkeypatch.setenv("ROBO_RAY_TEST_PY", "/nonexistent/python3.12")
    with pytest.raises(VenvError, match="ROBO_RAY_TEST_PY"):
        find_python((3, 12), "ROBO_RAY_TEST_PY", ("python3.12",))
    monkeypatch.setenv("ROBO_RAY_TEST_PY", sys.executable)
    assert find_python(sys.version_info[:2], "ROBO_RAY_TEST_PY", ()) == sys.executable
    monkeypatch.delenv("ROBO_RAY_TEST_PY")
    with pytest.raises(VenvError, match="no Python >= 9.9"):
        find_python((9, 9), "ROBO_RAY_TEST_PY", ("python9.9",))
