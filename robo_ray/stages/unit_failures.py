"""Whole units that never produced a shard: their stable codes (EP900/EP901/EP902), committing such a unit with
every episode quarantined, and the quarantine lines a unit result prints. A resume retries these units."""
from __future__ import annotations

from robo_ray.episode import QuarantineRecord
from robo_ray.errors import EpisodeTimedOut
from robo_ray.stages.plan import Unit
from robo_ray.writers import UnitResult, Writer

UNIT_CRASHED = "EP900"  # the worker process died on every attempt (segfault, abort, OOM kill)
UNIT_FAILED = "EP901"  # the unit raised on every attempt, or the executor lost it
UNIT_TIMED_OUT = EpisodeTimedOut.code  # a read made no progress / the unit ran over its time (robo_ray/watchdog.py)
UNIT_FAILURE_CODES = (UNIT_CRASHED, UNIT_FAILED, UNIT_TIMED_OUT)


def quarantine_unit(writer: Writer, unit: Unit, code: str, reason: str) -> UnitResult:
    """Commit a unit none of whose episodes could be converted, every episode quarantined with `reason` (the
    writer decides what an empty unit leaves, e.g. an empty shard where the format names files by their count)."""
    eps = unit.episode_indices
    span = f"{eps[0]}..{eps[-1]}" if len(eps) > 3 else ", ".join(map(str, eps))
    return writer.quarantine_unit(unit, [
        QuarantineRecord(ref.episode_index, code, f"{reason} (unit {unit.index}, episodes {span})",
                         ref.data_path).to_dict() for ref in unit.refs])


def quarantine_lines(res: UnitResult) -> list[str]:
    """The one-line messages of a unit result's quarantined episodes."""
    return [QuarantineRecord(**q).line() for q in res.quarantined]
