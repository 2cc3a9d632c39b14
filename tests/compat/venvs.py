"""Separate virtual environments for the compatibility checks (the real readers robo-ray's output must satisfy).

Each environment is built from one requirements file under tests/compat/ and reused while the sha256 of that file
matches the marker written into the venv (written last, atomically: a half-built venv has no marker and is rebuilt).
Concurrent builders (pytest-xdist workers, two pytest runs) serialize on an fcntl lock file next to the venv and
re-check after taking it, so a venv is built once. Nothing here imports pytest: failures raise VenvError.

    from tests.compat.venvs import ensure_lerobot_venv
    python = ensure_lerobot_venv()          # <repo>/.cache/venv-lerobot061/bin/python, built if needed

Environment variables: ROBO_RAY_LEROBOT_VENV (where the lerobot venv lives), ROBO_RAY_LEROBOT_PYTHON (the Python
3.12+ interpreter to build it from; default: the first of python3.12, python3.13 on PATH or in ~/.pyenv/versions
that actually runs).
"""
from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMPAT = REPO / "tests" / "compat"
MARKER = "robo_ray_requirements.sha256"

LEROBOT_REQUIREMENTS = COMPAT / "requirements-lerobot.txt"
LEROBOT_READ = COMPAT / "lerobot_read.py"
LEROBOT_REFERENCE = COMPAT / "lerobot_reference.py"
LEROBOT_MIN_PYTHON = (3, 12)  # lerobot 0.6.1: Requires-Python >=3.12
LEROBOT_UV = "0.13.9"  # installs the 5.4 GB venv in ~110 s where pip takes ~190 s (same machine, same load)


class VenvError(RuntimeError):
    """The venv could not be built (no suitable interpreter, pip failed, ...)."""


def requirements_digest(requirements: Path) -> str:
    return hashlib.sha256(requirements.read_bytes()).hexdigest()


def venv_ready(venv: Path, requirements: Path) -> bool:
    marker = venv / MARKER
    return ((venv / "bin" / "python").exists() and marker.is_file()
            and marker.read_text().strip() == requirements_digest(requirements))


def _run(cmd: list[str], what: str, timeout: float) -> None:
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout, env=clean_env())
    except subprocess.TimeoutExpired as e:
        raise VenvError(f"{what} timed out after {timeout:.0f} s: {' '.join(cmd)}") from e
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise VenvError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")


def ensure_venv(venv: Path, requirements: Path, base_python: str | Callable[[], str], *,
                pip_args: tuple[str, ...] = (), uv: str | None = None,
                timeout: float = 3000) -> tuple[Path, float | None]:
    """(python of the venv, seconds spent building it or None if reused). Idempotent and race-free.

    `base_python` may be a callable: it is only asked for an interpreter when a build is actually needed.
    `uv="0.13.9"` installs that uv into the venv with pip and lets it install the requirements (parallel downloads:
    ~40% less time for the multi-GB lerobot venv); if uv cannot be had, pip does it.
    """
    venv = venv.absolute()
    python = venv / "bin" / "python"
    if venv_ready(venv, requirements):
        return python, None
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be building it: wait, then re-check
        if venv_ready(venv, requirements):
            return python, None
        want = requirements_digest(requirements)
        base = base_python() if callable(base_python) else base_python
        t0 = time.monotonic()
        shutil.rmtree(venv, ignore_errors=True)  # stale (other requirements) or half-built
        _run([base, "-m", "venv", str(venv)], f"creating the venv {venv}", 600)
        what = f"installing -r {_shown(requirements)} into {venv}"
        if not (uv and _install_with_uv(python, requirements, uv, what, timeout)):
            _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", *pip_args,
                  "-r", str(requirements)], what, timeout)
        tmp = venv / f"{MARKER}.tmp"
        tmp.write_text(want + "\n")
        os.replace(tmp, venv / MARKER)  # written last: a crash before here leaves no marker -> rebuilt next time
        return python, time.monotonic() - t0


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _install_with_uv(python: Path, requirements: Path, uv: str, what: str, timeout: float) -> bool:
    """pip installs uv==`uv` into the venv, uv installs the requirements; False (pip's turn) if either fails."""
    try:
        _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", f"uv=={uv}"],
             f"pip install uv=={uv}", 600)
        # --compile-bytecode: PYTHONDONTWRITEBYTECODE=1 is set on these machines, so a module not compiled at install
        # time is compiled again at every import (importing lerobot: 18 s of CPU instead of 7 s)
        _run([str(python), "-m", "uv", "pip", "install", "-q", "--python", str(python), "--no-cache",
              "--compile-bytecode", "-r", str(requirements)], what + " with uv", timeout)
    except VenvError as e:
        print(f"{e}\nfalling back to pip", file=sys.stderr)
        return False
    return True


def _version_of(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=60, env=clean_env())
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:  # e.g. a pyenv shim for a version that is installed but not selected
        return None
    major, minor = out.stdout.strip().split(".")
    return int(major), int(minor)


def find_python(min_version: tuple[int, int], env_var: str, names: tuple[str, ...]) -> str:
    """An interpreter >= min_version: $env_var, else the first of `names` (PATH, then pyenv's versions) that runs."""
    if os.environ.get(env_var):
        found = os.environ[env_var]
        version = _version_of(found)
        if version is None or version < min_version:
            raise VenvError(f"${env_var}={found} is not a working Python >= {'.'.join(map(str, min_version))}")
        return found
    if sys.version_info[:2] >= min_version:
        return sys.executable
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates: list[str] = []
    for name in names:
        if shutil.which(name):
            candidates.append(shutil.which(name))
        minor = name.removeprefix("python")
        candidates += sorted(glob.glob(str(pyenv_root / "versions" / f"{minor}.*" / "bin" / "python3")), reverse=True)
        candidates += [f"/usr/bin/{name}", f"/usr/local/bin/{name}"]
    for cand in candidates:
        version = _version_of(cand) if Path(cand).exists() else None
        if version is not None and version >= min_version:
            return cand
    raise VenvError(f"no Python >= {'.'.join(map(str, min_version))} found (tried {', '.join(names)} on PATH and "
                    f"under {pyenv_root}/versions); set ${env_var} to one")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a child interpreter of another venv: none of this venv's PYTHONPATH / VIRTUAL_ENV."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(extra)
    return env


# --------------------------------------------------------------------------------------------------- lerobot 0.6.1


def lerobot_venv_dir() -> Path:
    return Path(os.environ.get("ROBO_RAY_LEROBOT_VENV", REPO / ".cache" / "venv-lerobot061")).absolute()


def ensure_lerobot_venv_timed() -> tuple[Path, float | None]:
    """(python of the lerobot 0.6.1 venv, build seconds or None if reused)."""
    return ensure_venv(lerobot_venv_dir(), LEROBOT_REQUIREMENTS,
                       lambda: find_python(LEROBOT_MIN_PYTHON, "ROBO_RAY_LEROBOT_PYTHON", ("python3.12", "python3.13")),
                       pip_args=("--no-cache-dir",), uv=LEROBOT_UV)


def ensure_lerobot_venv(log: bool = False) -> Path:
    """Python of the lerobot 0.6.1 + lerobot-doctor 0.2.0 venv (built on first use, ~1.5 min with uv, 5.4 GB).

    log=True says on stderr whether it was reused or built (and how long that took)."""
    python, seconds = ensure_lerobot_venv_timed()
    if log:
        print(f"lerobot venv {lerobot_venv_dir()}: " + ("reused" if seconds is None else f"built in {seconds:.0f} s"),
              file=sys.stderr)
    return python


def run_json_script(python: Path, script: Path, *args: str, timeout: float = 900,
                    cwd: Path | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    """Run one of the compat scripts and parse the single JSON line it prints last on stdout."""
    proc = subprocess.run([str(python), str(script), *map(str, args)], capture_output=True, text=True,
                          env=clean_env(SVT_LOG="1"), timeout=timeout, cwd=cwd)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        raise VenvError(f"{script.name} printed nothing on stdout (exit {proc.returncode}); "
                        f"stderr:\n{proc.stderr[-4000:]}")
    try:
        return proc, json.loads(lines[-1])
    except json.JSONDecodeError as e:
        raise VenvError(f"{script.name}'s last stdout line is not JSON: {lines[-1][:500]!r}\n"
                        f"{proc.stderr[-4000:]}") from e


def lerobot_read(root: Path, out: Path, *args: str, python: Path | None = None,
                 timeout: float = 900) -> tuple[subprocess.CompletedProcess, dict]:
    """tests/compat/lerobot_read.py ROOT --out OUT [args] in the lerobot venv; (process, stdout summary)."""
    return run_json_script(python or ensure_lerobot_venv(), LEROBOT_READ, root, "--out", out, *args, timeout=timeout)


def lerobot_reference(npz: Path, root: Path, *args: str, python: Path | None = None,
                      timeout: float = 900) -> tuple[subprocess.CompletedProcess, dict]:
    """tests/compat/lerobot_reference.py INPUT.npz ROOT [args] in the lerobot venv; (process, stdout summary)."""
    return run_json_script(python or ensure_lerobot_venv(), LEROBOT_REFERENCE, npz, root, *args, timeout=timeout)


# --------------------------------------------------------------------------------- openpi / GR00T metadata checks

TRAINERS_REQUIREMENTS = COMPAT / "requirements-trainers.txt"
OPENPI_NORM_STATS = COMPAT / "openpi_norm_stats.py"
GR00T_MODALITY = COMPAT / "gr00t_modality.py"


def trainers_venv_dir() -> Path:
    return Path(os.environ.get("ROBO_RAY_TRAINERS_VENV", REPO / ".cache" / "venv-trainers")).absolute()


def ensure_trainers_venv() -> Path:
    """Python of the numpy 1.26.4 / pydantic 2.11.5 / numpydantic 1.6.9 venv of openpi_norm_stats.py and
    gr00t_modality.py (built on first use from a Python >= 3.11, ~15 s; reused while requirements-trainers.txt is
    unchanged)."""
    python, _ = ensure_venv(trainers_venv_dir(), TRAINERS_REQUIREMENTS,
                            lambda: find_python((3, 11), "ROBO_RAY_TRAINERS_PYTHON", ("python3.11", "python3.12")),
                            timeout=900)
    return python


if __name__ == "__main__":  # python -m tests.compat.venvs  -> builds (or reuses) the lerobot venv, prints its python
    py, seconds = ensure_lerobot_venv_timed()
    print(py, "reused" if seconds is None else f"built in {seconds:.0f} s", file=sys.stderr)
    print(py)
