"""The executor contract: `Executor` (runs units, yields their results) and `JobSpec` (the picklable job a
worker builds its converter and writer from)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol

from robo_ray.mapping import Mapping
from robo_ray.stages.convert import ConvertHooks, ConvertOptions, CpuShare, UnitConverter
from robo_ray.stages.plan import Unit
from robo_ray.stages.validate import UnitVerifySpec
from robo_ray.watchdog import Limits
from robo_ray.writers import DEFAULT_TARGET, UnitResult, Writer, writer_class


class Executor(Protocol):
    """Runs units and yields their results (in any order).

    An executor may also offer `run_job(units, job, spec, progress=..., stderr=...) -> RunOutcome`, taking over
    conversion *and* publishing (the Ray executor runs the Publisher as an actor); `run_pipeline` uses it when
    present and falls back to `run` + an in-process Publisher otherwise. An executor whose workers may run on
    several machines offers `node_count() -> int`: a local destination is then refused on more than one node unless
    declared shared (`robo_ray.stages.destination.check_shared_destination`).
    """

    name: str

    def start(self) -> None:
        """Begin bringing workers up; called before Discover so their start-up overlaps it."""

    def run(self, units: list[Unit], job: "JobSpec") -> Iterator[UnitResult]: ...


@dataclass(frozen=True)
class JobSpec:
    """What a worker needs to build its UnitConverter and writer (picklable)."""

    source_url: str
    source_format: str | None
    mapping_json: str
    out_url: str
    options: ConvertOptions
    limits: Limits = field(default_factory=Limits)  # the watchdog's timeouts (none: no watchdog)
    target_format: str = DEFAULT_TARGET
    target_options: dict[str, Any] = field(default_factory=dict)
    verify: UnitVerifySpec | None = None  # re-read each unit right after its commit (Writer.verify_unit)

    def make_writer(self) -> Writer:
        mapping = Mapping.model_validate_json(self.mapping_json)
        return writer_class(self.target_format)(self.out_url, mapping, self.options.target_storage_options,
                                                self.target_options)

    def make_converter(self, hooks: ConvertHooks | None = None, cpus: CpuShare = None) -> UnitConverter:
        """The worker's converter; `cpus`: its share of the CPUs (robo_ray.stages.convert.CpuShare)."""
        writer = self.make_writer()
        return UnitConverter(self.source_url, self.source_format, writer.mapping, writer, self.options,
                             hooks=hooks, verify=self.verify, cpus=cpus)
