"""The tfds read-back in a child process, started early.

TensorFlow's import costs ~7 s of CPU and ~0.5 GB here. The read-back runs in a child interpreter that imports
tensorflow_datasets as soon as it starts, and the run starts it before the conversion (`prewarm`, from the RLDS
writer's `prepare_verify`), so the import overlaps the conversion and TensorFlow never enters the process that
converts or publishes. The child answers one request per line on stdin with one JSON line on stdout.

This file runs as a script in the child (`python readback.py`): it imports only the standard library at the top.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any

READY_TIMEOUT_S = 600.0


class ReadbackUnavailable(Exception):
    """tensorflow-datasets is not installed (the plain install): the read-back is skipped."""


class ReadbackProcess:
    """One child interpreter that imports tfds at start and counts episodes / steps of datasets on request."""

    def __init__(self) -> None:
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_ENABLE_ONEDNN_OPTS": "0"}
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
        self.lock = threading.Lock()

    def count(self, directory: str, splits: list[str], timeout: float = READY_TIMEOUT_S) -> tuple[int, int]:
        """(episodes, steps) tfds.builder_from_directory reads in `splits` of `directory`. Raises
        ReadbackUnavailable without tfds, RuntimeError with the child's one-line error otherwise."""
        with self.lock:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the read-back process exited with code {self.proc.returncode}")
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(json.dumps({"dir": directory, "splits": splits}) + "\n")
            self.proc.stdin.flush()
            reply = _read_line(self.proc, timeout)
        if reply.get("unavailable"):
            raise ReadbackUnavailable(reply["unavailable"])
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return int(reply["episodes"]), int(reply["steps"])

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()


def _read_line(proc: subprocess.Popen, timeout: float) -> dict[str, Any]:
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)  # type: ignore
    reader.start()
    reader.join(timeout)
    if not box or not box[0]:
        proc.kill()
        raise RuntimeError("the read-back process gave no answer" + ("" if box else f" within {timeout:.0f} s"))
    return json.loads(box[0])


_warm: ReadbackProcess | None = None
_warm_lock = threading.Lock()


def prewarm() -> None:
    """Start the child now (idempotent), so tfds is imported by the time the read-back runs."""
    global _warm
    with _warm_lock:
        if _warm is None or _warm.proc.poll() is not None:
            _warm = ReadbackProcess()


def readback_process() -> ReadbackProcess:
    """The prewarmed child, or a new one."""
    prewarm()
    assert _warm is not None
    return _warm


# ---- the child --------------------------------------------------------------------------------------------------
def _serve() -> None:
    try:
        import tensorflow  # noqa: F401 - TensorFlow now (what the prewarm is for), not on the first request
        import tensorflow_datasets as tfds
        builder_from_directory = tfds.builder_from_directory
    except ImportError as exc:
        tfds, missing = None, f"{exc}"
    else:
        missing = ""
    for line in sys.stdin:
        try:
            req = json.loads(line)
            if tfds is None:
                reply: dict[str, Any] = {"unavailable": missing}
            else:
                reply = _count(tfds, builder_from_directory(req["dir"]), req["splits"])
        except Exception as exc:  # noqa: BLE001 - any tfds/TF failure: one line back to the parent
            reply = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def _count(tfds: Any, builder: Any, splits: list[str]) -> dict[str, int]:
    eps = steps = 0
    for split in splits:  # a split, or a slice of one ("train[0:1000]": tfds reads only the shards it spans)
        if not builder.info.splits[split.split("[", 1)[0]].num_examples:
            continue  # tfds cannot build an empty split
        for ep in builder.as_dataset(split=split, decoders={"steps": tfds.decode.SkipDecoding()}):
            eps += 1
            steps += int(ep["steps"]["is_first"].shape[0])
    return {"episodes": eps, "steps": steps}


if __name__ == "__main__":
    _serve()
