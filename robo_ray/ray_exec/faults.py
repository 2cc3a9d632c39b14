"""TEST-ONLY fault injection for the Ray executor. Never set these variables in a real run.

They exist so the test suite can exercise the failure paths on a real Ray cluster (no mocks):

* ``ROBO_RAY_FAULT_ABORT_EPISODE=3`` (comma-separated episode indices): the worker calls ``os.abort()`` when it
  is about to decode one of these episodes, i.e. the process dies mid-unit with a partial shard on disk, the way a
  decoder segfault would. It happens on every attempt, so the unit ends quarantined (EP900).
* ``ROBO_RAY_FAULT_RAISE_UNIT=2`` (comma-separated unit indices): the unit raises ``OSError`` before converting
  (a storage failure that survives retries); the unit ends quarantined (EP901, with the error).
* ``ROBO_RAY_FAULT_DELAY_S=1.5``: every unit sleeps this long before converting (widens the window in which a test
  kills an actor or the driver "mid-run").

The driver reads them from *its* environment (`FaultPlan.from_env`) and hands them to the actors explicitly, so
they work the same whether the workers were started by an in-process ``ray.init()``, ``ray start`` or a
``ray job submit``. The executor logs a warning whenever one is set.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

ABORT_ENV = "ROBO_RAY_FAULT_ABORT_EPISODE"
DELAY_ENV = "ROBO_RAY_FAULT_DELAY_S"
RAISE_ENV = "ROBO_RAY_FAULT_RAISE_UNIT"


def _ints(raw: str | None) -> frozenset[int]:
    raw = (raw or "").strip()
    return frozenset(int(x) for x in raw.split(",") if x.strip()) if raw else frozenset()


@dataclass(frozen=True)
class FaultPlan:
    abort_episodes: frozenset[int] = field(default_factory=frozenset)
    delay_s: float = 0.0
    raise_units: frozenset[int] = field(default_factory=frozenset)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "FaultPlan":
        env = os.environ if env is None else env
        return cls(_ints(env.get(ABORT_ENV)), float(env.get(DELAY_ENV, "0") or 0), _ints(env.get(RAISE_ENV)))

    @property
    def active(self) -> bool:
        return bool(self.abort_episodes or self.raise_units) or self.delay_s > 0

    def describe(self) -> str:
        parts = []
        if self.abort_episodes:
            parts.append(f"{ABORT_ENV}={','.join(map(str, sorted(self.abort_episodes)))}")
        if self.raise_units:
            parts.append(f"{RAISE_ENV}={','.join(map(str, sorted(self.raise_units)))}")
        if self.delay_s:
            parts.append(f"{DELAY_ENV}={self.delay_s}")
        return " ".join(parts)

    def hooks(self) -> "AbortHooks":
        """Convert hooks that abort the process when a doomed episode starts: inside the unit, after the unit's
        temp files were opened (as a real decoder crash would)."""
        return AbortHooks(self.abort_episodes)

    def before_unit(self, unit_index: int) -> None:
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        if unit_index in self.raise_units:
            raise OSError(f"injected storage failure for unit {unit_index} ({RAISE_ENV})")


class AbortHooks:
    """ConvertHooks (robo_ray.stages.convert) of a FaultPlan: `os.abort()` before a doomed episode."""

    def __init__(self, doomed: frozenset[int]) -> None:
        self.doomed = doomed

    def before_episode(self, ref: Any) -> None:
        if ref.episode_index in self.doomed:
            os.abort()

    def after_episode(self, ref: Any) -> None:
        pass
