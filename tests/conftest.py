"""Shared test fixtures: where ../shared is, a CLI runner, and an RLDS loader that goes through the real tfds."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
# every Ray instance of the tests is a loopback-only throwaway; one auth mode for the whole process: Ray 2.60 fixes it
# at the process's first ray.init (token when ~/.ray/auth_token exists; env and cached RayConfig, never reset by
# ray.shutdown), and a later cluster of the other mode kills every actor at creation (docs/NOTES.md, "The trap")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def shared_dir() -> Path:
    return Path(os.environ.get("ROBO_RAY_SHARED", REPO.parent / "shared")).resolve()


def require_shared(rel: str = "samples") -> Path:
    """shared_dir() / rel, or the test fails in one line naming the path: a missing ../shared is never a skip."""
    path = shared_dir() / rel
    if not path.exists():
        pytest.fail(f"shared data not found: {path} (set ROBO_RAY_SHARED to the shared folder)", pytrace=False)
    return path


@pytest.fixture(scope="session")
def shared() -> Path:
    require_shared("samples")
    return shared_dir()


def convert_in_process(src: Path | str, out: Path, target: str, *overrides: str, fps: float | None = None,
                       source_options: dict[str, Any] | None = None,
                       storage_options: dict[str, Any] | None = None) -> Any:
    """`run_pipeline` in this process (no read-back unless an override asks), asserting exit 0; `fps` is the
    source's --fps."""
    from robo_ray.config import load_config
    from robo_ray.stages.pipeline import run_pipeline

    options = {**(source_options or {}), **({"fps": fps} if fps is not None else {})}
    fields: dict[str, Any] = {"source.url": str(src), "target.url": str(out), "target.format": target}
    if options:
        fields["source.options"] = options
    if storage_options:
        fields["source.storage_options"] = storage_options
    outcome = run_pipeline(load_config(None, ["validate.tfds_readback=false", *overrides], **fields))
    assert outcome.exit_code == 0, outcome.message
    return outcome


def source_cache(factory: pytest.TempPathFactory, make: Callable[[str, Path], Path]) -> Callable[[str], Path]:
    """`get(name)`: the source `make(name, a new temp folder)` wrote, written once per name (a module fixture's)."""
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            cache[name] = make(name, factory.mktemp(name))
        return cache[name]
    return get


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `robo-ray` as a user would, in a subprocess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "robo_ray.cli", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=REPO)


def load_rlds(version_dir: Path) -> list[dict[str, Any]]:
    """Every episode through tfds.builder_from_directory, as numpy (images decoded by tfds)."""
    import tensorflow_datasets as tfds

    builder = tfds.builder_from_directory(str(version_dir))
    episodes = []
    for ep in tfds.as_numpy(builder.as_dataset(split="train")):
        steps = ep["steps"]
        episodes.append({"episode_metadata": ep["episode_metadata"], "steps": _stack_steps(steps)})
    return sorted(episodes, key=lambda e: int(e["episode_metadata"]["episode_id"]))


def _stack_steps(steps: Any) -> dict[str, Any]:
    out: dict[str, list] = {}
    for step in steps:
        _flatten(step, "", out)
    return {k: np.stack(v) if v and isinstance(v[0], np.ndarray) else np.array(v) for k, v in out.items()}


def _flatten(d: dict, prefix: str, out: dict[str, list]) -> None:
    for k, v in d.items():
        if isinstance(v, dict):
            _flatten(v, f"{prefix}{k}/", out)
        else:
            out.setdefault(f"{prefix}{k}", []).append(v)


@pytest.fixture(scope="module")
def lerobot_python() -> Path:
    """The python of lerobot 0.6.1's own venv (tests/compat/venvs.py: built once, then reused); a venv that cannot
    be built fails the test that needs it."""
    from tests.compat.venvs import VenvError, ensure_lerobot_venv_timed

    try:
        python, seconds = ensure_lerobot_venv_timed()
    except VenvError as e:
        pytest.fail(f"the lerobot 0.6.1 venv could not be built: {e}")
    print(f"lerobot venv: {'reused' if seconds is None else f'built in {seconds:.0f} s'}", file=sys.stderr)
    return python


def all_episodes(url: str) -> list[Any]:
    """Every episode of a dataset through robo-ray's reader for it, in its order (source-named columns)."""
    from robo_ray.readers import open_reader

    reader = open_reader(url)
    try:
        return [reader.load_episode(r) for r in reader.discover().refs]
    finally:
        reader.close()


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def decode_all_frames(path: Path) -> list[tuple[float, np.ndarray]]:
    """(time, RGB) of every frame of an MP4, decoded with PyAV independently of robo_ray."""
    import av

    with av.open(str(path)) as c:
        return [(float(f.time), f.to_ndarray(format="rgb24")) for f in c.decode(c.streams.video[0])]


def wait_for(cond: Callable[[], Any], timeout: float, what: str, step: float = 0.1) -> Any:
    """Poll `cond` until it returns something truthy (returned); fail the test after `timeout` seconds."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = cond()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def sigkill_when(proc: subprocess.Popen, cond: Callable[[], Any], timeout: float, what: str) -> None:
    """SIGKILL a running driver once `cond` holds (it must still be running then: no clean exit allowed)."""
    try:
        wait_for(lambda: proc.poll() is not None or cond(), timeout, what)
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:] if proc.stdout else "driver exited early"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


class UnitCheckSpy:
    """Records who re-reads units during a run: `calls` (unit, made on a worker (no inventory, empty ledger), made
    during Publisher.finish) per `Writer.verify_unit`, the checks it returned, and `re_reads` (unit) per call of the
    verifier's `check_unit` (the one place a unit's files are re-read)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, writer_cls: type, verifier_cls: type) -> None:
        from robo_ray.stages.publisher import Publisher

        self.calls: list[tuple[int, bool, bool]] = []
        self.checks: list[Any] = []
        self.re_reads: list[int] = []
        finishing: list[bool] = []
        verify_unit, check_unit, finish = writer_cls.verify_unit, verifier_cls.check_unit, Publisher.finish
        spy = self

        def counted_verify_unit(self, result, ctx):
            spy.calls.append((result.shard_index, ctx.inv is None and ctx.ledger == {}, bool(finishing)))
            check = verify_unit(self, result, ctx)
            spy.checks.append(check)
            return check

        def counted_check_unit(self, result):
            spy.re_reads.append(result.shard_index)
            return check_unit(self, result)

        def flagged_finish(self):
            finishing.append(True)
            try:
                return finish(self)
            finally:
                finishing.clear()

        monkeypatch.setattr(writer_cls, "verify_unit", counted_verify_unit)
        monkeypatch.setattr(verifier_cls, "check_unit", counted_check_unit)
        monkeypatch.setattr(Publisher, "finish", flagged_finish)
