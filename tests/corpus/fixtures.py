"""The corpus and its runs as pytest fixtures, shared by tests/integration/test_bad_input_corpus.py (outcomes) and
tests/integration/test_path_watch.py (where the files went).

The corpus is built once per test session, and each case's `robo-ray run` happens once: under pytest-xdist the
workers share the session's temporary root and take turns through file locks, so whichever test needs a case first
runs it and the other reads its result. The run is the real CLI in a subprocess (tests.conftest.run_cli, 60 s
timeout), with every Python process of it recorded by tests/corpus/pathwatch.py (a passive audit hook) and an
inotify watch on the case's `outside/` folder.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import run_cli
from tests.corpus.build_corpus import CASES_BY_NAME, Case, build_corpus, outside_of
from tests.corpus.pathwatch import BaitWatch, read_logs, watch_env

CLI_TIMEOUT_S = 60


@dataclass(frozen=True)
class Corpus:
    root: Path

    def source(self, name: str) -> Path:
        return self.root / "cases" / name


@dataclass(frozen=True)
class CaseRun:
    """One `robo-ray run CASE OUT` and what it left: exit code, output streams, the output folder, the file
    accesses of its processes, the inotify events on its `outside/` folder."""

    case: Case
    source: Path
    out: Path
    returncode: int
    stdout: str
    stderr: str
    log_dir: Path
    bait_events: list[str]

    @property
    def records(self) -> list[dict[str, str]]:
        return read_logs(self.log_dir)

    @property
    def outside(self) -> Path:
        return outside_of(self.source)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _session_root(factory: pytest.TempPathFactory) -> Path:
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # xdist: <root>/popen-gwN


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    root = _session_root(tmp_path_factory) / "bad_input_corpus"
    with _locked(root.with_suffix(".lock")):
        if not (root / "built").exists():
            shutil.rmtree(root, ignore_errors=True)
            build_corpus(root)
            (root / "built").write_text("")
    return Corpus(root)


def case_run(corpus: Corpus, name: str) -> CaseRun:
    """The case's run (done now if no test ran it yet)."""
    case = CASES_BY_NAME[name]
    base = corpus.root / "runs" / name
    src = corpus.source(name)
    with _locked(base.with_suffix(".lock")):
        result = base / "result.json"
        if not result.exists():
            shutil.rmtree(base, ignore_errors=True)
            with BaitWatch(outside_of(src)) as watch:
                try:
                    proc = run_cli("run", str(src), str(base / "out"), *case.args, env=watch_env(base / "log"),
                                   timeout=CLI_TIMEOUT_S)
                    code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
                except subprocess.TimeoutExpired as exc:  # a hang is a failure of the case, reported as one
                    code, stdout, stderr = -1, str(exc.stdout or ""), f"TIMEOUT after {CLI_TIMEOUT_S}s"
                events = watch.events()
            result.write_text(json.dumps({"returncode": code, "stdout": stdout, "stderr": stderr,
                                          "bait_events": events}))
    r = json.loads((base / "result.json").read_text())
    return CaseRun(case, src, base / "out", r["returncode"], r["stdout"], r["stderr"], base / "log",
                   r["bait_events"])


def ledger_episodes(out: Path) -> tuple[list[int], list[dict]]:
    """(written episode indices, quarantine records) from an output's ledger.json."""
    ledger = json.loads((out / "ledger.json").read_text())
    written = sorted(e for s in ledger["shards"] for e, _ in s["episodes"])
    quarantined = sorted((q for s in ledger["shards"] for q in s["quarantined"]), key=lambda q: q["episode_index"])
    return written, quarantined
