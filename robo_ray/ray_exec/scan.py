"""Discover's scan as a Ray Data map over the source's files (issue #26 part 4).

A reader that splits its scan (`Reader.scan_tasks()` non-empty) gives small picklable `ScanTask`s; here they become
a Ray Dataset (`ray.data.from_items`), `map_batches` runs them on a pool of actors that each open the reader once
(`ReaderFactory`) and scan their batch with the reader's own threads (`Reader.scan_all`), and the small per-task
rows come back to the driver in task order for `Reader.merge_scans`:

    tasks = reader.scan_tasks()
    if len(tasks) > K:
        inv = reader.merge_scans(scan_with_ray_data(ReaderFactory.of(reader, url, storage_options, options),
                                                    tasks, concurrency))
    else:
        inv = reader.discover()

Tasks and rows cross Ray Data pickled (a bytes column), so any picklable row survives unchanged (findings included)
whatever Arrow would make of it. Ray must already be initialised (the executor's `ray.init`).
"""
from __future__ import annotations

import math
import os
import pickle
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from robo_ray.ray_exec.data_context import quiet_data_context
from robo_ray.readers.base import BaseReader, ScanTask

BATCHES_PER_ACTOR = 4  # tasks are cut into about this many batches per actor: the pool stays busy to the end


@dataclass(frozen=True)
class ReaderFactory:
    """Opens the reader on a worker: its class, the URL and storage options it was opened with, and the reader
    options (config `source.options`) given to its constructor. Picklable (the class travels by reference)."""

    cls: type[BaseReader]
    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, reader: BaseReader, url: str, storage_options: dict[str, Any] | None = None,
           options: dict[str, Any] | None = None) -> "ReaderFactory":
        """The factory of an open reader, given the URL (as `resolve_source` gave it to the reader) and the options
        it was opened with (`open_reader`'s); a relative local path is made absolute (workers have their own cwd)."""
        if "://" not in url:
            url = os.path.abspath(url)
        return cls(type(reader), url, dict(storage_options or {}), dict(options or {}))

    def __call__(self) -> BaseReader:
        return self.cls(self.url, storage_options=self.storage_options, **self.options)


@dataclass(frozen=True)
class SourceOpener:
    """Opens the source on a worker exactly as the driver did: `open_reader` with the run's source URL, format,
    storage options and reader options (resolution, detection and the one fps rule included). Picklable."""

    url: str
    fmt: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, source: Any, fmt: str | None = None) -> "SourceOpener":
        """From the config's `source` section (url, format, storage_options, options); `fmt`: the detected format
        (workers then skip detection)."""
        url = source.url if "://" in source.url else os.path.abspath(source.url)
        return cls(url, fmt or source.format, dict(source.storage_options or {}), dict(source.options or {}))

    def __call__(self) -> BaseReader:
        from robo_ray.readers import open_reader

        return open_reader(self.url, self.fmt, self.storage_options, self.options)


class _ScanActor:
    """A Ray Data actor: opens the reader once, then scans batches of pickled tasks into pickled rows."""

    def __init__(self, factory: Callable[[], BaseReader]) -> None:
        self.reader = factory()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        tasks = [pickle.loads(b) for b in batch["task"]]
        rows = self.reader.scan_all(tasks)
        return {"index": np.asarray(batch["index"]),
                "row": np.array([pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in rows], dtype=object)}


def scan_with_ray_data(reader_factory: Callable[[], BaseReader], tasks: Sequence[ScanTask], concurrency: int,
                       num_cpus: float = 1.0) -> list[Any]:
    """The row of every task (`Reader.scan`), in the order of `tasks`, scanned by `concurrency` Ray Data actors of
    `num_cpus` each."""
    import ray

    if not tasks:
        return []
    concurrency = max(1, min(concurrency, len(tasks)))
    batch = max(1, math.ceil(len(tasks) / (concurrency * BATCHES_PER_ACTOR)))
    quiet_data_context()
    items = [{"index": i, "task": pickle.dumps(t, protocol=pickle.HIGHEST_PROTOCOL)} for i, t in enumerate(tasks)]
    ds = ray.data.from_items(items).map_batches(
        _ScanActor, fn_constructor_args=(reader_factory,), batch_size=batch, batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=concurrency), num_cpus=num_cpus)
    rows: list[Any] = [None] * len(tasks)
    seen = 0
    for out in ds.iter_batches(batch_format="numpy", batch_size=None):
        for i, row in zip(out["index"], out["row"]):
            rows[int(i)] = pickle.loads(row)
            seen += 1
    if seen != len(tasks):
        raise RuntimeError(f"the Ray Data scan returned {seen} rows for {len(tasks)} tasks")
    return rows
