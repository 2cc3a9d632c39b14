"""The run's journal on the destination: progress.jsonl (one line per episode) and the unit results behind
ledger.json, written in O(total) bytes on every filesystem (issue #14).

* Local disks: progress.jsonl is appended (fsync'd) as units are recorded, and ledger.json rewritten at most once
  a second (what `tail -f` and an operator see live).
* Object stores have no append, and rewriting a growing file per unit is quadratic: each recorded unit is one small
  object `journal/unit-<index>.json` (its result row and its progress lines); ledger.json is written when the run
  starts and when it ends. At the end the parts are merged into progress.jsonl (one streamed upload to a temporary
  name, the previous run's lines copied first in 4 MB pieces, then moved over it) and deleted. A resume reads ledger.json plus the parts left by a killed run (`read_ledger`).
"""
from __future__ import annotations

import json
import os
import posixpath
import shutil
import uuid
from typing import Any

from robo_ray.writers.base import jsonable
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


class Journal:
    """Writes progress lines and unit results for one run (see the module docstring)."""

    def __init__(self, fs: Any, root: str, resumed: bool) -> None:
        self.fs, self.root = fs, root
        self.local = is_local(fs)
        self.progress_path = join(root, PROGRESS_NAME)
        self.parts_dir = join(root, JOURNAL_DIR)
        if not resumed:
            write_text_atomic(fs, self.progress_path, "")

    @property
    def appends(self) -> bool:
        """Whether ledger.json may be rewritten during the run (cheap locally; never per unit on object stores)."""
        return self.local

    def record(self, unit_index: int, result: dict[str, Any], lines: list[str]) -> None:
        """A recorded unit: its progress lines (and, on object stores, its result row as one part)."""
        if self.local:
            if lines:
                with open(self.progress_path, "a", encoding="utf-8") as f:
                    f.write("".join(f"{x}\n" for x in lines))
                    f.flush()
                    os.fsync(f.fileno())
            return
        part = {"result": result, "progress": lines}
        write_text_atomic(self.fs, join(self.parts_dir, part_name(unit_index)), json.dumps(part))

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
        except Exception as exc:  # noqa: BLE001 - one line naming the URL
            raise storage_error(exc, url, "writing", self.fs) from exc


def journal_parts(fs: Any, root: str) -> list[str]:
    """The parts a run left under `root` (one listing), in unit order."""
    names = ls_or_empty(fs, join(root, JOURNAL_DIR))
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
