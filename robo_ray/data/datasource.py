"""`read(url, ...) -> ray.data.Dataset`: any source robo-ray reads as a Ray Dataset of episode rows or step rows.

`SourceDatasource` is a Ray Data `Datasource` whose read tasks are planned units (`stages.plan.plan_units`: the
episodes that share source files together, in order), so a task opens each file once and reads it forward. A task
opens the source with `SourceOpener` (as the Convert stage's workers do), turns each episode into a
`CanonicalEpisode` with the Convert stage's own code (`UnitConverter.canonical_episode`: the mapping's names and
types, lazily decoded cameras) and yields one block per episode (or per `STEP_CHUNK` steps of step rows), so a
task's memory holds one episode (one chunk of decoded frames for step rows). An episode the source cannot give is
one warning line naming its file and episode; as an episode row it is kept with the reason in `quarantine` (so
`write` quarantines it), step rows leave it out.
"""
from __future__ import annotations

import copy
import logging
import os
from typing import Any, Iterable, Iterator, Sequence

from ray.data import Datasource, ReadTask
from ray.data.block import BlockAccessor, BlockMetadata

from robo_ray.data.rows import RowLayout, episode_row, quarantine_row, step_rows
from robo_ray.data.spec import SourceSpec, ref_to_json
from robo_ray.episode import QuarantineRecord, RefTable
from robo_ray.errors import ConfigError, EpisodeError
from robo_ray.mapping import Mapping, default_mapping
from robo_ray.ray_exec.scan import SourceOpener
from robo_ray.readers import open_reader
from robo_ray.readers.base import Inventory
from robo_ray.secrets import redact_url
from robo_ray.stages.convert import ConvertOptions, UnitConverter
from robo_ray.stages.plan import Unit, estimate_episode_bytes, plan_units

log = logging.getLogger("robo_ray.data")

GRANULARITIES = ("episode", "step")
STEP_CHUNK = 64  # step rows per block: a block of decoded 640x480 frames stays ~60 MB
READ_UNIT_MB = 64.0  # a read task's planned size (output bytes, as the plan estimates them)


class SourceDatasource(Datasource):
    """The Ray Data `Datasource` of one source, discovered on the driver when it is made (see the module
    docstring)."""

    def __init__(self, url: str, fmt: str | None, storage_options: dict[str, Any] | None,
                 reader_options: dict[str, Any], granularity: str = "episode", columns: Sequence[str] | None = None,
                 decode_images: bool = False, splits: Sequence[str] | None = None) -> None:
        if granularity not in GRANULARITIES:
            raise ConfigError(f"read: granularity {granularity!r} is not one of {', '.join(GRANULARITIES)}")
        url = url if "://" in url else os.path.abspath(url)
        reader = open_reader(url, fmt, storage_options, reader_options)
        try:
            inv = reader.discover()
        finally:
            reader.close()
        self.features = inv.features
        self.refs = RefTable(r for r in inv.refs if splits is None or (r.split or "train") in set(splits))
        mapping = default_mapping(inv)
        if columns is not None:
            inv, mapping = _only(inv, mapping, columns, url)
        layout = RowLayout(mapping, decode_images)
        source = redact_url(url)
        self.job = _ReadJob(SourceOpener(url, inv.source_format, dict(storage_options or {}), dict(reader_options)),
                            mapping.model_dump_json(), layout, source, SourceSpec.of(inv, source).to_json(),
                            granularity)
        self.source_format = inv.source_format

    def estimate_inmemory_data_size(self) -> int | None:
        return sum(estimate_episode_bytes(r, self.features) for r in self.refs)

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        units = plan_units(self.refs, self.features, READ_UNIT_MB, max(1, parallelism))
        return [self._task(u, per_task_row_limit) for u in units]

    def _task(self, unit: Unit, per_task_row_limit: int | None) -> ReadTask:
        rows = len(unit.refs) if self.job.granularity == "episode" else sum(unit.refs.lengths())
        meta = BlockMetadata(num_rows=rows, size_bytes=sum(estimate_episode_bytes(r, self.features)
                                                           for r in unit.refs),
                             exec_stats=None, input_files=tuple(sorted({p for r in unit.refs
                                                                        for p in r.source_files()})))
        job = self.job
        return ReadTask(lambda: (BlockAccessor.batch_to_block(b) for b in job.run(unit)), meta,
                        per_task_row_limit=per_task_row_limit)

    def get_name(self) -> str:
        return f"RoboRay({self.source_format})"


def _only(inv: Inventory, mapping: Mapping, columns: Sequence[str], url: str) -> tuple[Inventory, Mapping]:
    """The source as if it held only the features `columns` names (canonical names): rows, the source's
    description and so `write`'s mapping leave the others out (e.g. to union sources that share only those)."""
    known = {fm.target: fm.source for fm in mapping.steps}
    unknown = sorted(set(columns) - set(known))
    if unknown:
        raise ConfigError(f"read: {url} has no feature {', '.join(map(repr, unknown))} (it has "
                          f"{', '.join(sorted(known))})")
    drop = {src for target, src in known.items() if target not in set(columns)}
    kept = copy.copy(inv)
    kept.features = {k: f for k, f in inv.features.items() if k not in drop}
    narrowed = default_mapping(kept)
    if {fm.target for fm in narrowed.steps} != set(columns):  # camera names depend on the cameras present
        raise ConfigError(f"read: keeping only {sorted(columns)} of {url} renames its features to "
                          f"{sorted(fm.target for fm in narrowed.steps)}; keep all its cameras or none")
    return kept, narrowed


class _ReadJob:
    """What a read task needs (picklable): the source opener, the mapping, the row layout and the row header."""

    def __init__(self, opener: SourceOpener, mapping_json: str, layout: RowLayout, source: str, spec_json: str,
                 granularity: str) -> None:
        self.opener, self.mapping_json, self.layout = opener, mapping_json, layout
        self.source, self.spec_json, self.granularity = source, spec_json, granularity

    def run(self, unit: Unit) -> Iterator[dict[str, Any]]:
        """The unit's rows, as batches (column -> values), in the unit's order."""
        reader = self.opener()
        mapping = Mapping.model_validate_json(self.mapping_json)
        options = ConvertOptions(source_storage_options=self.opener.storage_options,
                                 source_options=dict(self.opener.options), decode_ahead=0)
        conv = UnitConverter(self.opener.url, self.opener.fmt, mapping, None, options, reader=reader)  # type: ignore[arg-type]
        try:
            reader.prepare(unit.refs)
            for ref in unit.refs:
                yield from self._episode(conv, ref)
        finally:
            conv.close()
            reader.close()

    def _episode(self, conv: UnitConverter, ref: Any) -> Iterable[dict[str, Any]]:
        ref_json = ref_to_json(ref)
        try:
            ep = conv.canonical_episode(ref)
            try:
                if self.granularity == "episode":
                    yield _batch(episode_row(ep, self.layout, self.source, ref_json, self.spec_json))
                else:  # each chunk handed out as it is decoded
                    yield from step_rows(ep, self.layout, self.source, STEP_CHUNK)
            finally:
                ep.close()
        except EpisodeError as exc:
            yield from self._unreadable(ref, ref_json, QuarantineRecord(ref.episode_index, exc.code, str(exc),
                                                                        ref.data_path))
        except Exception as exc:  # noqa: BLE001 - as the Convert stage does: quarantined, loudly
            log.exception("episode %s: unexpected error", ref.episode_index)
            yield from self._unreadable(ref, ref_json, QuarantineRecord(
                ref.episode_index, "EP999", f"unexpected {type(exc).__name__}: {exc}", ref.data_path))

    def _unreadable(self, ref: Any, ref_json: str, rec: QuarantineRecord) -> Iterable[dict[str, Any]]:
        """One warning line naming the file and episode; an episode row keeps the reason (step rows: the steps
        already handed out stay, the rest of the episode is left out)."""
        log.warning("robo_ray.data.read: %s (source %s)", rec.line(), self.source)
        if self.granularity == "episode":
            yield _batch(quarantine_row(ref, rec, self.layout, self.source, ref_json, self.spec_json))


def _batch(row: dict[str, Any]) -> dict[str, Any]:
    """One row as a one-row batch (arrays gain a leading axis; lists and strings become object columns)."""
    import numpy as np

    out: dict[str, Any] = {}
    for k, v in row.items():
        if isinstance(v, np.ndarray):
            out[k] = v[None]
        else:
            col = np.empty(1, dtype=object)
            col[0] = v
            out[k] = col
    return out
