"""One LeRobot unit as its ledger entry describes it (`UnitView`: files, episodes, the numbering its files carry),
and the problems of its parquet files against it: what the per-unit and the dataset-level checks both read."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from robo_ray.formats.lerobot.paths import BOOKKEEPING
from robo_ray.writers.base import UnitResult

if TYPE_CHECKING:
    from robo_ray.formats.lerobot.layout import Feature

BOOKKEEPING_COLUMNS = list(BOOKKEEPING)
MAX_FILE_PROBLEMS = 5  # problems named per file (the rest counted): a unit's check stays small


def problem_detail(msgs: list[str]) -> str:
    """A file's problems in one line: the first MAX_FILE_PROBLEMS, the rest counted."""
    more = len(msgs) - MAX_FILE_PROBLEMS
    return "; ".join(msgs[:MAX_FILE_PROBLEMS]) + (f"; and {more} more" if more > 0 else "")


@dataclass
class UnitView:
    """One unit as its ledger entry describes it: files, episodes and the numbering its files carry."""

    r: UnitResult
    chunk: int
    file: int
    meta_rel: str
    e0: int  # episode_index of its first episode
    i0: int  # global `index` of its first row
    lengths: list[int]
    sources: list[int]  # source episode index of each episode
    tasks: list[list[str]]  # each episode's tasks, in first-appearance order
    task_ids: dict[str, int]  # task -> the id its files use

    @classmethod
    def of(cls, r: UnitResult) -> "UnitView":
        ex = r.extra or {}
        num = ex.get("numbering") or {}
        names = list(ex.get("tasks") or [])
        ids = dict(zip(names, [int(i) for i in num.get("task_ids") or []]))
        eps = ex.get("episodes") or []
        chunk, file = _chunk_file(r.filename)
        meta_rel = next((f["name"] for f in r.files if f["name"].startswith("meta/episodes/")), "")
        return cls(r, chunk, file, meta_rel, int(num.get("episode_offset", 0)), int(num.get("index_offset", 0)),
                   [int(e["length"]) for e in eps], [int(e["source"]) for e in eps],
                   [[names[j] for j in e.get("tasks", [])] for e in eps], ids)

    def starts(self) -> list[int]:
        """Each episode's first row in the unit's files."""
        return [int(x) for x in np.cumsum([0, *self.lengths[:-1]])] if self.lengths else []

    def where(self, rel: str, k: int) -> str:
        return f"{rel}: episode {self.e0 + k} (source episode {self.sources[k]})"


def numbering_problems(u: UnitView, data: pa.Table, fps: int) -> list[str]:
    """The data parquet's bookkeeping columns against the unit's numbering: rows per episode, index, episode_index,
    frame_index, timestamps k/fps, each episode's task ids."""
    rel, n, total = u.r.filename, data.num_rows, sum(u.lengths)
    if n != total:
        return [f"{rel}: {n} rows, its {len(u.lengths)} episodes hold {total} (lengths {u.lengths[:10]})"]
    col = {c: data[c].to_numpy() for c in BOOKKEEPING_COLUMNS}
    out: list[str] = []
    if not np.array_equal(col["index"], np.arange(u.i0, u.i0 + n)):
        out.append(f"{rel}: index is not {u.i0}..{u.i0 + n - 1} (rows are looked up by position)")
    for k, (a, length) in enumerate(zip(u.starts(), u.lengths)):
        rows, steps = slice(a, a + length), np.arange(length)
        if not np.all(col["episode_index"][rows] == u.e0 + k):
            out.append(f"{u.where(rel, k)}: episode_index is not {u.e0 + k} on its rows {a}..{a + length - 1}")
        if not np.array_equal(col["frame_index"][rows], steps):
            out.append(f"{u.where(rel, k)}: frame_index is not 0..{length - 1}")
        if not np.array_equal(col["timestamp"][rows], (steps / fps).astype(np.float32)):
            out.append(f"{u.where(rel, k)}: timestamps are not frame_index / {fps}")
        want = [u.task_ids.get(t, -1) for t in u.tasks[k]]
        got = list(dict.fromkeys(col["task_index"][rows].tolist()))
        if got != want:
            out.append(f"{u.where(rel, k)}: task_index {got[:5]}, its tasks {u.tasks[k][:3]} have ids {want[:5]}")
    return out


def meta_problems(u: UnitView, meta: pa.Table, cameras: list["Feature"], fps: int) -> list[str]:
    """The unit's meta/episodes rows against its numbering and files (one row per episode, in order)."""
    rel = u.meta_rel
    rows = meta.select([c for c in meta.column_names if not c.startswith("stats/")]).to_pylist()
    if len(rows) != len(u.lengths):
        return [f"{rel}: {len(rows)} episodes, the unit holds {len(u.lengths)}"]
    out: list[str] = []
    for k, (row, a, n) in enumerate(zip(rows, u.starts(), u.lengths)):
        want: dict[str, Any] = {"episode_index": u.e0 + k, "tasks": u.tasks[k], "length": n,
                                "data/chunk_index": u.chunk, "data/file_index": u.file,
                                "dataset_from_index": u.i0 + a, "dataset_to_index": u.i0 + a + n,
                                "meta/episodes/chunk_index": u.chunk, "meta/episodes/file_index": u.file}
        for cam in cameras:
            want[f"videos/{cam.key}/chunk_index"], want[f"videos/{cam.key}/file_index"] = u.chunk, u.file
        wrong = [f"{key} {row.get(key)!r}, expected {v!r}" for key, v in want.items() if row.get(key) != v]
        for cam in cameras:
            t0, t1 = row.get(f"videos/{cam.key}/from_timestamp"), row.get(f"videos/{cam.key}/to_timestamp")
            if t0 is None or t1 is None or abs(t0 - a / fps) > 1e-9 or abs(t1 - (a + n) / fps) > 1e-9:
                wrong.append(f"{cam.key} window [{t0}, {t1}] is not [{a}/{fps}, {a + n}/{fps}]")
        if wrong:
            out.append(f"{u.where(rel, k)}: " + "; ".join(wrong[:3]))
    return out


def schema_problem(rel: str, got: pa.Schema, want: pa.Schema, what: str) -> str | None:
    """One line naming the columns whose name or type differ (None when they all match)."""
    if [(f.name, f.type) for f in got] == [(f.name, f.type) for f in want]:
        return None
    have = {f.name: str(f.type) for f in got}
    diff = [f"{f.name}: {have.get(f.name, 'missing')} (want {f.type})" for f in want if have.get(f.name) != str(f.type)]
    diff += [f"{name}: unexpected" for name in have if name not in want.names]
    return f"{rel}: schema differs from {what}: {'; '.join(diff[:4]) or 'column order'}"


def _chunk_file(rel: str) -> tuple[int, int]:
    parts = rel.split("/")
    try:
        return int(parts[-2].split("-")[1]), int(parts[-1].split("-")[1].split(".")[0])
    except (IndexError, ValueError):
        return -1, -1
