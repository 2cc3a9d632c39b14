"""The run's journal on the destination: progress.jsonl (one line per episode) and the unit results behind
ledger.json, written in O(total) bytes on every filesystem (issue #14).

* Local disks: progress.jsonl is appended (fsync'd) as units are recorded, and ledger.json rewritten at most once
  a second (what `tail -f` and an operator see live).
* Object stores have no append, and rewriting a growing file per unit is quadratic: each recorded unit is one small
  object `journal/unit-<index>.json` (its result row and its progress lines); ledger.json is written when the run
  starts and when it ends. At the end the parts are merged into progress.jsonl (one streamed upload to a temporary
  name, the previous run's lines copied first in 4 MB pieces, then moved over it) and deleted. A resume reads ledger.json plus the parts left by a killed run (`read_ledger`).

`UnitLedger` is the Publisher's bookkeeping on top of it: the unit results recorded so far (a resumed run's
first), their progress lines, and ledger.json rewritten at most every `FLUSH_S` (and `FLUSH_SHARE` of the run).
"""
from __future__ import annotations

import contextlib
import json
import os
import posixpath
import shutil
import time
import uuid
from typing import Any, Callable

from robo_ray.writers.base import UnitResult, jsonable
from robo_ray.storage import (is_local, join, ls_or_empty, read_json_or_none, storage_error, url_of,
                              write_text_atomic)

JOURNAL_DIR = "journal"
PROGRESS_NAME = "progress.jsonl"
LEDGER_NAME = "ledger.json"
COPY_CHUNK = 4 << 20  # the merge streams the previous progress.jsonl in pieces of this size


def ledger_text(ledger: dict[str, Any]) -> str:
    """ledger.json's text: one line per key and one compact line per shard, so that its size is about the bytes of
    its values (an indented dump spends four lines on every episode's [index, steps])."""
    lines = []
    for key, value in ledger.items():
        if key == "shards":
            rows = ",\n".join("    " + json.dumps(row, separators=(",", ":"), default=jsonable) for row in value)
            lines.append(f'  "shards": [\n{rows}\n  ]' if rows else '  "shards": []')
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def part_name(unit_index: int) -> str:
    return f"unit-{unit_index:07d}.json"


def write_part(fs: Any, root: str, unit_index: int, result: dict[str, Any], lines: list[str]) -> None:
    """One recorded unit as its own journal part (`read_ledger` counts it as committed until the merge)."""
    write_text_atomic(fs, join(root, JOURNAL_DIR, part_name(unit_index)),
                      json.dumps({"result": result, "progress": lines}, default=jsonable))


def progress_lines(res: UnitResult, started: str | None, completed: str) -> list[str]:
    """progress.jsonl's lines of a committed unit: one per episode written or quarantined."""
    lines: list[str] = []
    for ep, steps in res.episodes:
        rec = {"episode_id": ep, "status": "completed", "started_at": started, "completed_at": completed,
               "steps": steps, "shard": res.shard_index}
        lines.append(json.dumps(rec))
    for q in res.quarantined:
        lines.append(json.dumps({"episode_id": q["episode_index"], "status": "failed", "started_at": started,
                                 "completed_at": completed, "error": q["reason"], "code": q["code"],
                                 "file": q.get("file"), "shard": None}))
    return lines


class Journal:
    """Writes progress lines and unit results for one run (see the module docstring)."""

    def __init__(self, fs: Any, root: str, resumed: bool, parts: bool = False) -> None:
        """`parts`: journal in parts on a local disk too (units recorded where the driver cannot see them)."""
        self.fs, self.root = fs, root
        self.local = is_local(fs) and not parts
        self.progress_path = join(root, PROGRESS_NAME)
        self.parts_dir = join(root, JOURNAL_DIR)
        if not resumed:
            write_text_atomic(fs, self.progress_path, "")

    @property
    def appends(self) -> bool:
        """Whether ledger.json may be rewritten during the run (cheap locally; never per unit on object stores)."""
        return self.local

    def record(self, unit_index: int, result: dict[str, Any], lines: list[str], part_written: bool = False) -> None:
        """A recorded unit: its progress lines (and, on object stores, its result row as one part, unless the task
        that committed the unit wrote it: `part_written`)."""
        if self.local:
            if lines:
                with open(self.progress_path, "a", encoding="utf-8") as f:
                    f.write("".join(f"{x}\n" for x in lines))
                    f.flush()
                    os.fsync(f.fileno())
            return
        if not part_written:
            write_part(self.fs, self.root, unit_index, result, lines)

    def merge(self) -> None:
        """At the end, after the complete ledger.json: the parts' lines appended to progress.jsonl in one streamed
        upload, then the parts deleted."""
        if self.local:
            return
        parts = journal_parts(self.fs, self.root)
        if not parts:
            return
        url = url_of(self.fs, self.progress_path)
        merged = f"{self.progress_path}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            for stale in self.fs.glob(f"{self.progress_path}.tmp-*"):  # a merge cut by a kill
                self.fs.rm(stale)
            with self.fs.open(merged, "wb") as out:
                if self.fs.exists(self.progress_path):  # a resumed run's earlier lines, streamed (never whole)
                    with self.fs.open(self.progress_path, "rb") as old:
                        shutil.copyfileobj(old, out, COPY_CHUNK)
                for path in parts:
                    lines = _read_part(self.fs, path).get("progress") or []
                    out.write("".join(f"{x}\n" for x in lines).encode("utf-8"))
            self.fs.mv(merged, self.progress_path)
            self.fs.rm(parts)
            if is_local(self.fs):  # parts on a local disk (`parts=True`): no empty folder left behind
                with contextlib.suppress(OSError):
                    os.rmdir(self.parts_dir)
        except Exception as exc:  # noqa: BLE001 - one line naming the URL
            raise storage_error(exc, url, "writing", self.fs) from exc


class UnitLedger:
    """The units recorded so far and their journal: progress lines per recorded unit, ledger.json (which shards
    are committed, their sizes and sha256, the plan's fingerprint and unit files, the attempts per unit)."""

    FLUSH_S = 1.0  # rewrite ledger.json at most this often (always at the end)
    FLUSH_SHARE = 0.05  # ... and at most this fraction of the run's time (its size grows with the run)
    FLUSH_MAX_S = 5.0  # ... but at least this often: a killed run's resume redoes at most ~5 s of units (one slow
    # fsync under load measured a rewrite at 0.5 s: the share alone then held the ledger back for 10 s)

    def __init__(self, fs: Any, root: str, fingerprint: dict[str, str], unit_files: list[str],
                 previous: list[dict[str, Any]], attempts: Callable[[], dict[int, int]], parts: bool = False) -> None:
        """`unit_files`: each planned unit's first file name, in unit order; `previous`: the committed results of
        a resumed run; `attempts`: the attempts per unit so far (written into ledger.json); `parts`: `Journal`'s."""
        self.fs, self.root = fs, root
        self.fingerprint, self.unit_files, self._attempts = fingerprint, unit_files, attempts
        self.results: dict[int, UnitResult] = {}
        for d in previous:
            r = UnitResult.from_dict(d)
            self.results[r.shard_index] = r
        self.resumed = set(self.results)
        self._last_flush = 0.0
        self._flush_cost = 0.0  # seconds the last ledger.json rewrite took
        self._path = join(root, LEDGER_NAME)
        self.journal = Journal(fs, root, resumed=bool(self.resumed), parts=parts)
        self.flush(force=True)

    def is_new(self, res: UnitResult) -> bool:
        """False for a retried unit that had already been recorded with the same bytes (nothing new)."""
        old = self.results.get(res.shard_index)
        return not (old is not None and old.sha256 == res.sha256 and old.episodes == res.episodes)

    def record(self, res: UnitResult, started: str | None, completed: str, part_written: bool = False) -> None:
        """A committed unit: its result kept, its progress lines (one per episode) journaled (`part_written`: its
        journal part is on the destination already), ledger.json rewritten when due."""
        self.results[res.shard_index] = res
        self.journal.record(res.shard_index, res.to_dict(), progress_lines(res, started, completed), part_written)
        self.flush()

    def ledger(self, complete: bool = False) -> dict[str, Any]:
        return {"shards": [r.packed() for r in sorted(self.results.values(), key=lambda r: r.shard_index)],
                "num_shards": len(self.unit_files), "fingerprint": self.fingerprint,
                "unit_files": self.unit_files,
                "attempts": {str(k): v for k, v in sorted(self._attempts().items())},
                "resumed_shards": sorted(self.resumed), "complete": complete}

    def flush(self, force: bool = False, complete: bool = False) -> None:
        now = time.monotonic()
        wait = min(max(self.FLUSH_S, self._flush_cost / self.FLUSH_SHARE), self.FLUSH_MAX_S)
        if not force and (not self.journal.appends or now - self._last_flush < wait):
            return  # object stores: the journal's parts hold the units recorded since (Journal)
        write_text_atomic(self.fs, self._path, ledger_text(self.ledger(complete)))
        self._last_flush = time.monotonic()
        self._flush_cost = self._last_flush - now

    def finish(self) -> dict[str, Any]:
        """The complete ledger.json written, the journal's parts merged; returns the ledger."""
        ledger = self.ledger(complete=True)
        self.flush(force=True, complete=True)
        self.journal.merge()
        return ledger


def keep_progress_of(fs: Any, root: str, episodes: set[int]) -> int:
    """On resume: progress.jsonl keeps only the lines of `episodes` (those of the units already committed). A run
    killed between a unit's progress lines and the next ledger.json rewrite left lines of a unit the resume converts
    again; without this they would be journaled twice. Streams the file; rewrites it (atomically) only when a line
    goes. Returns the lines dropped."""
    path = join(root, PROGRESS_NAME)
    if not fs.exists(path):
        return 0
    kept: list[str] = []
    dropped = 0
    with fs.open(path, "rb") as f:
        for raw in f:
            line = raw.decode("utf-8").rstrip("\n")
            try:
                episode = int(json.loads(line)["episode_id"]) if line.strip() else None
            except (ValueError, KeyError, TypeError):
                episode = None  # not ours to judge: kept as it is
            if episode is not None and episode not in episodes:
                dropped += 1
            else:
                kept.append(line)
    if dropped:
        write_text_atomic(fs, path, "".join(f"{x}\n" for x in kept if x.strip()))
    return dropped


def journal_parts(fs: Any, root: str) -> list[str]:
    """The parts a run left under `root` (one listing), in unit order. Parts are written by other processes (the
    write tasks of a Ray Data write): the listing is never an earlier one from this process's cache (s3fs keeps
    listings: a merge that read the one cached at resume left the resumed units' parts, and their progress lines,
    behind)."""
    parts_dir = join(root, JOURNAL_DIR)
    fs.invalidate_cache(parts_dir)
    names = ls_or_empty(fs, parts_dir)
    return sorted(p for p in names if posixpath.basename(p.rstrip("/")).startswith("unit-"))


def _read_part(fs: Any, path: str) -> dict[str, Any]:
    data = read_json_or_none(fs, path)  # None: a part cut by a kill, its unit not recorded (converted on resume)
    return data if isinstance(data, dict) else {}


def read_ledger(fs: Any, root: str) -> dict[str, Any] | None:
    """ledger.json with the units recorded in journal parts after it was written (a run killed on an object store),
    or None when neither exists."""
    ledger = read_json_or_none(fs, join(root, LEDGER_NAME))
    parts = journal_parts(fs, root)
    if not parts:
        return ledger
    ledger = dict(ledger or {"shards": [], "complete": False})
    shards = {int(s["shard_index"]): s for s in ledger.get("shards", [])}
    for path in parts:
        result = _read_part(fs, path).get("result")
        if isinstance(result, dict) and "shard_index" in result:
            shards[int(result["shard_index"])] = result
    ledger["shards"] = [shards[k] for k in sorted(shards)]
    return ledger
