"""The destination's run lock: one run writes into a destination at a time.

`run.lock` is created with a conditional create (local hard link, S3 If-None-Match, GCS ifGenerationMatch=0), so of
two runs started together exactly one proceeds; the other stops with OutputConflict (exit 4). A run that dies leaves
its lock behind: `--resume` or `--overwrite` take it over (the user says the previous run is gone)."""
from __future__ import annotations

import json
import os
import socket
import uuid
from datetime import datetime, timezone
from typing import Any

from robo_ray.errors import OutputConflict
from robo_ray.storage import create_exclusive, join, write_text_atomic

LOCK_NAME = "run.lock"


def _read(fs, path: str) -> dict[str, Any]:
    try:
        return json.loads(fs.cat_file(path))
    except Exception:  # unreadable lock: still a lock
        return {}


def _conflict(fs, path: str, out_url: str) -> OutputConflict:
    other = _read(fs, path)
    who = f"run {other.get('run_id', '?')} on {other.get('host', '?')} (pid {other.get('pid', '?')}, started " \
          f"{other.get('started_at', '?')})"
    return OutputConflict(f"{out_url} is being written by another {who}; wait for it to finish, or if it died, "
                          "rerun with --resume (or --overwrite)", code="RR403")


def check_not_locked(fs, out_root: str, out_url: str, take_over: bool) -> None:
    """Refuse early (before touching anything) when another run holds the destination."""
    path = join(out_root, LOCK_NAME)
    if not take_over and fs.exists(path):
        raise _conflict(fs, path, out_url)


class RunLock:
    """Holds `run.lock` for this run; `release` removes it only while it is still ours."""

    def __init__(self, fs, out_root: str, out_url: str) -> None:
        self.fs, self.path, self.out_url = fs, join(out_root, LOCK_NAME), out_url
        self.run_id = uuid.uuid4().hex[:12]
        self.previous: dict[str, Any] | None = None

    def _body(self) -> bytes:
        started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return json.dumps({"run_id": self.run_id, "host": socket.gethostname(), "pid": os.getpid(),
                           "started_at": started}).encode()

    def acquire(self, take_over: bool = False) -> "RunLock":
        if take_over and self.fs.exists(self.path):
            self.previous = _read(self.fs, self.path)
            write_text_atomic(self.fs, self.path, self._body().decode())
            return self
        try:
            create_exclusive(self.fs, self.path, self._body())
        except FileExistsError:
            raise _conflict(self.fs, self.path, self.out_url) from None
        return self

    def release(self) -> None:
        try:
            if _read(self.fs, self.path).get("run_id") == self.run_id:
                self.fs.rm(self.path)
        except FileNotFoundError:
            pass
