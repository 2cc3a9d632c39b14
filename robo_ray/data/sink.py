"""`UnitDatasink`: the Ray Data `Datasink` of `write`. Its input dataset has one row a planned unit (the pickled
`Unit` and where its episodes' rows are in the materialized user dataset), one block each, so each write task is
one unit: it fetches the unit's rows, converts them with the Convert stage's `UnitConverter` (reader: the rows,
`RowsReader`) through the target's Writer contract (`open_unit` -> `add` / `quarantine` -> `commit`), re-reads the
unit it committed (`Writer.verify_unit`, as the run's workers do) and returns its `UnitResult`.
Each task also journals its unit (`journal/unit-<index>.json`), so an interrupted write resumes.
`on_write_complete` (on the driver) hands the results to the run's `Publisher`, whose `finish` is the CLI's:
`Writer.finalize`, the validation, dataset_statistics.json and the reports, the commit marker."""
from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from ray.data import Datasink
from ray.data.block import BlockAccessor

from robo_ray.data.rows_reader import RowsReader
from robo_ray.episode import FeatureSpec
from robo_ray.executors.base import JobSpec
from robo_ray.mapping import Mapping
from robo_ray.stages.convert import UnitConverter
from robo_ray.stages.journal import progress_lines, write_part
from robo_ray.stages.publisher import Publisher
from robo_ray.stages.run_log import RunOutcome, utc_now
from robo_ray.storage import url_to_fs

UNIT, WHERE = "unit", "where"  # the unit dataset's columns: the pickled Unit, the pickled [(block, row)] of it


def take_row(block: Any, row: int) -> dict[str, Any]:
    """One row of a materialized block as a dict (tensor columns as numpy arrays)."""
    acc = BlockAccessor.for_block(block)
    one = BlockAccessor.for_block(acc.slice(row, row + 1, copy=False))
    return dict(next(iter(one.iter_rows(public_row_format=True))))


@dataclass(frozen=True)
class RowSource:
    """Where the rows of the materialized dataset are (picklable: block refs travel with the task), and how a row
    becomes an episode (`RowsReader`'s features, rate, source mapping, several sources or one)."""

    blocks: Sequence[Any]  # ObjectRef of each block of the materialized dataset
    features: dict[str, FeatureSpec]
    fps: float
    mapping_json: str
    mixed: bool
    compared_with: str = ""  # the sources, for the validation report

    def reader(self, fetch: Callable[[int], dict[str, Any]]) -> RowsReader:
        return RowsReader(self.features, self.fps, Mapping.model_validate_json(self.mapping_json), fetch,
                          self.mixed, self.compared_with)


class DriverRows:
    """The driver's `RowsReader` rows: a row fetched from the object store when the validation's sampled
    comparison or the report asks for its episode (`where`: episode -> (block, row))."""

    def __init__(self, rows: RowSource, where: dict[int, tuple[int, int]]) -> None:
        self.rows, self.where = rows, where

    def __call__(self, episode: int) -> dict[str, Any]:
        import ray

        b, r = self.where[episode]
        return take_row(ray.get(self.rows.blocks[b]), r)


class UnitDatasink(Datasink):
    """See the module docstring. `outcome` is the run's outcome once `write_datasink` has returned."""

    def __init__(self, job: JobSpec, rows: RowSource, publisher: Publisher) -> None:
        self.job, self.rows = job, rows
        self._publisher = publisher  # driver-side only (not pickled to the write tasks)
        self.outcome: RunOutcome | None = None
        self.units_per_task: list[int] = []  # units each write task converted (one), known once complete

    def __getstate__(self) -> dict[str, Any]:
        return {"job": self.job, "rows": self.rows, "_publisher": None, "outcome": None, "units_per_task": []}

    @property
    def supports_distributed_writes(self) -> bool:
        return True

    def get_name(self) -> str:
        return f"RoboRay({self.job.target_format})"

    def write(self, blocks: Iterable[Any], ctx: Any) -> list[dict[str, Any]]:
        """Convert the units of this task's blocks (one unit a block); their results, each ~1 KB."""
        out: list[dict[str, Any]] = []
        for block in blocks:
            for item in BlockAccessor.for_block(block).iter_rows(public_row_format=True):
                out.append(self._unit(pickle.loads(item[UNIT]), pickle.loads(item[WHERE])).to_dict())
        return out

    def _unit(self, unit: Any, where: list[tuple[int, int]]) -> Any:
        import ray

        needed = sorted({b for b, _ in where})
        fetched = dict(zip(needed, ray.get([self.rows.blocks[b] for b in needed])))
        rows = {ref.episode_index: take_row(fetched[b], r) for ref, (b, r) in zip(unit.refs, where)}
        fetched.clear()
        writer = self.job.make_writer()
        conv = UnitConverter(self.job.source_url, None, writer.mapping, writer, self.job.options,
                             reader=self.rows.reader(rows.__getitem__), verify=self.job.verify)  # type: ignore[arg-type]
        try:
            res = conv.convert(unit)
        finally:
            conv.close()
        self._journal(res)
        return res

    def _journal(self, res: Any) -> None:
        """The committed unit's journal part on the destination, written by the task that committed it: a write
        cut short (a task failed, the driver killed) leaves every committed unit known to `resume=True`."""
        row = res.to_dict()
        row["check"] = None  # the re-read's record goes to the Publisher only, never to the ledger
        fs, root = url_to_fs(self.job.out_url, self.job.options.target_storage_options)
        write_part(fs, root, res.shard_index, row, progress_lines(res, None, utc_now()))

    def on_write_complete(self, write_result: Any) -> None:
        """The Publisher's end, as after `robo-ray run`: record every unit, finalize, validate, publish."""
        publisher = self._publisher
        self.units_per_task = [len(r) for r in write_result.write_returns]
        publisher.log.info(f"convert: {len(self.units_per_task)} write tasks, units per task "
                           f"{sorted(set(self.units_per_task))}")
        for task_results in write_result.write_returns:
            for res in task_results:
                publisher.record(res, part_written=True)  # `_journal` wrote it on the worker
        self.outcome, _ = publisher.finish()
