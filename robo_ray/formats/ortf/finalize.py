"""The ORTF finalize: global task ids (chunks written with chunk-local per-step ids are rewritten), then meta/
with meta/manifest.json last (the commit)."""
from __future__ import annotations

import hashlib
import io
import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robo_ray.formats.ortf.layout import EPISODES, MANIFEST, STATS, TASKS, parquet_bytes
from robo_ray.formats.ortf.meta_files import build_meta, task_table
from robo_ray.readers.base import Inventory
from robo_ray.storage import join, write_bytes_atomic
from robo_ray.writers.base import UnitResult

if TYPE_CHECKING:
    from robo_ray.formats.ortf.writer import OrtfWriter


def finalize_dataset(w: "OrtfWriter", results: list[UnitResult], inv: Inventory) -> dict[str, Any]:
    """Renumber per-step task ids where needed, then episodes.parquet, tasks.jsonl, stats.json and
    manifest.json last (the commit)."""
    results = sorted(results, key=lambda r: r.shard_index)
    renumber_step_tasks(w, results, task_table(results, inv))
    meta = build_meta(w, results, inv)
    for name in (EPISODES, TASKS, STATS, MANIFEST):
        write_bytes_atomic(w.fs, join(w.dataset_dir, name), meta[name])
    return json.loads(meta[MANIFEST])


def renumber_step_tasks(w: "OrtfWriter", results: list[UnitResult], tasks: list[str]) -> None:
    """Rewrite the per-step task ids of chunks written with chunk-local ids; update their ledger entries."""
    ids = {t: i for i, t in enumerate(tasks)}
    for r in results:
        local = r.extra.get("step_tasks") or []
        if not local or not r.filename:
            continue
        remap = np.array([ids[t] for t in local], dtype=np.int64)
        if np.array_equal(remap, np.arange(len(local))):
            continue
        path = join(w.dataset_dir, r.filename)
        raw = w.fs.cat_file(path)
        table = pq.read_table(io.BytesIO(raw))
        i = table.schema.get_field_index("task_id")
        col = remap[table["task_id"].to_numpy()]
        data = parquet_bytes(table.set_column(i, table.schema.field(i), pa.array(col, type=pa.int64())))
        write_bytes_atomic(w.fs, path, data)
        r.num_bytes, r.sha256 = len(data), hashlib.sha256(data).hexdigest()
        r.extra["step_tasks"] = tasks[:int(remap.max()) + 1]
        # the digest of what was renumbered: Validate ties the worker's re-read (made before) to this file
        r.extra["renumbered_from"] = hashlib.sha256(raw).hexdigest()
