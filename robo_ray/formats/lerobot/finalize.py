"""The LeRobot finalize: the real numbering over the written episodes, then meta/ (the commit).

Numbering. Episode indices and the global `index` must be contiguous over the WRITTEN episodes, and task ids must
be a table of the written tasks; quarantine is only known after conversion. The plan gives each unit the numbering
it would have if nothing were quarantined (episode / row offsets from the source's lengths, task ids from the
source's per-episode task lists in episode order) and each unit writes its data and meta/episodes parquet with it.
`finalize` walks the units in order, computes the real numbering, and rewrites the data parquet and the
meta/episodes part of the units whose numbering differs (and only those: with no quarantine nothing is rewritten;
a quarantined episode in unit u rewrites the two small parquet files of every unit after u, never a video). The
rewritten files' ledger entries (bytes, sha256, numbering) are updated in place, so validate and resume see them,
with `extra["renumbered_from"]` = {file: the sha256 of the bytes finalize rewrote}: each unit is verified by the worker
that wrote it, before finalize (`verify_unit`), and the dataset-level verify hashes again only those files.
Task ids of a source whose episode index lists no tasks (RLDS) are provisional until finalize (rewrites likely).
"""
from __future__ import annotations

import hashlib
import io
import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robo_ray.formats.lerobot.meta_files import build_meta
from robo_ray.formats.lerobot.parquet import parquet_bytes
from robo_ray.formats.lerobot.paths import EMPTY_EPISODES, INFO, STATS, TASKS
from robo_ray.formats.lerobot.stats import Agg, STAT_KEYS, array_stats, merge_aggs, to_list
from robo_ray.formats.lerobot.trainer_meta import MODALITY
from robo_ray.readers.base import Inventory
from robo_ray.storage import join, write_bytes_atomic
from robo_ray.writers.base import UnitResult

if TYPE_CHECKING:
    from robo_ray.formats.lerobot.writer import LeRobotWriter


def finalize_dataset(w: "LeRobotWriter", results: list[UnitResult], inv: Inventory) -> dict[str, Any]:
    """Renumber the units whose planned numbering is off (module docstring), then tasks.parquet, stats.json and
    info.json last (the commit). `w.options.fps` is resolved (LeRobotWriter.finalize)."""
    results = sorted(results, key=lambda r: r.shard_index)
    tasks: dict[str, int] = {}
    episodes = frames = 0
    for r in results:
        ex = r.extra or {}
        eps = ex.get("episodes") or []
        if not eps or not r.filename:
            continue
        new_ids = [tasks.setdefault(t, len(tasks)) for t in ex["tasks"]]
        num = ex["numbering"]
        if (num["episode_offset"], num["index_offset"], list(num["task_ids"])) != (episodes, frames, new_ids):
            renumber(w, r, episodes, frames, new_ids)
        episodes += len(eps)
        frames += sum(int(x["length"]) for x in eps)
    meta = build_meta(w, results, inv, tasks, episodes, frames)
    empty = join(w.dataset_dir, EMPTY_EPISODES)
    if not episodes:
        write_bytes_atomic(w.fs, empty, parquet_bytes(w.episodes_schema.empty_table(), []))
    elif w.fs.exists(empty) and EMPTY_EPISODES not in {n for r in results for n, _, _ in r.all_files()}:
        w.fs.rm_file(empty)  # a placeholder left by an earlier finalize of this output
    for name in (TASKS, STATS, MODALITY, INFO):
        write_bytes_atomic(w.fs, join(w.dataset_dir, name), meta[name])
    return json.loads(meta[INFO])


def read_parquet(w: "LeRobotWriter", rel: str, digests: dict[str, str]) -> pa.Table:
    """A unit's parquet file; the sha256 of the bytes read goes into `digests` under its name."""
    raw = w.fs.cat_file(join(w.dataset_dir, rel))
    digests[rel] = hashlib.sha256(raw).hexdigest()
    return pq.ParquetFile(io.BytesIO(raw)).read()


def renumber(w: "LeRobotWriter", r: UnitResult, e0: int, i0: int, new_ids: list[int]) -> None:
    """Rewrite a unit's data parquet and meta/episodes part with episodes from `e0`, rows from `i0` and the
    global task ids; update its ledger entry (bytes, sha256, numbering, stats aggregates) in place."""
    ex = r.extra
    eps = ex["episodes"]
    lengths = [int(x["length"]) for x in eps]
    total = sum(lengths)
    remap = dict(zip(ex["numbering"]["task_ids"], new_ids))
    before: dict[str, str] = {}  # the digests of what is renumbered: Validate ties the units' re-reads to it
    data = read_parquet(w, r.filename, before)
    old_tasks = data["task_index"].to_numpy()
    ep_col = np.repeat(np.arange(e0, e0 + len(eps), dtype=np.int64), lengths)
    idx_col = np.arange(i0, i0 + total, dtype=np.int64)
    lut = np.zeros(max(remap) + 1, dtype=np.int64)
    lut[list(remap)] = list(remap.values())
    task_col = lut[old_tasks]
    cols = {"episode_index": ep_col, "index": idx_col, "task_index": task_col}
    for name, col in cols.items():
        i = data.schema.get_field_index(name)
        data = data.set_column(i, data.schema.field(i), pa.array(col, type=pa.int64()))
    data_bytes = parquet_bytes(data, lengths)
    meta_rel = next(f["name"] for f in r.files if f["name"].startswith("meta/episodes/"))
    meta = read_parquet(w, meta_rel, before)
    rows = meta.to_pylist()
    aggs: dict[str, list[Agg]] = {k: [] for k in cols}
    start = 0
    for k, (row, n) in enumerate(zip(rows, lengths)):
        row["episode_index"] = e0 + k
        row["dataset_from_index"] = i0 + start
        row["dataset_to_index"] = i0 + start + n
        for name, col in cols.items():
            st = array_stats(col[start:start + n], True)
            aggs[name].append(Agg.of_episode(st))
            for s in STAT_KEYS:
                row[f"stats/{name}/{s}"] = to_list(st[s])
        start += n
    meta_bytes = parquet_bytes(pa.Table.from_pylist(rows, schema=w.episodes_schema))
    write_bytes_atomic(w.fs, join(w.dataset_dir, r.filename), data_bytes)
    write_bytes_atomic(w.fs, join(w.dataset_dir, meta_rel), meta_bytes)
    r.num_bytes, r.sha256 = len(data_bytes), hashlib.sha256(data_bytes).hexdigest()
    for f in r.files:
        if f["name"] == meta_rel:
            f["num_bytes"], f["sha256"] = len(meta_bytes), hashlib.sha256(meta_bytes).hexdigest()
    ex["numbering"] = {"episode_offset": e0, "index_offset": i0, "task_ids": list(new_ids)}
    ex["renumbered_from"] = before
    for name, parts in aggs.items():
        ex["stats"][name] = merge_aggs(parts).to_json()  # type: ignore[union-attr]
