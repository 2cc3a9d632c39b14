"""`UnitMapper`: the Ray Data UDF of the Convert stage. Ray Data's actor pool makes one per actor; each keeps a
`UnitActor` (one `UnitConverter` per job: reader, PyAV containers, JPEG encoders, filesystems) across the units it
is given. A batch is one row: the pickled `Unit` (episode refs only, never frames); the row it returns is the
unit's ~1 KB result, pickled, plus the actor and node that converted it (the job's peak count in the report)."""
from __future__ import annotations

import logging
import pickle
import time
from typing import Any

import numpy as np
import ray

from robo_ray.ray_exec.worker import UnitActor, WorkerContext

log = logging.getLogger("robo_ray.ray_exec")


class UnitMapper:
    """Converts the units of the batches it is given (see the module docstring).

    A Python exception converting a unit is reported to the coordinator and the unit is tried again here at once;
    the coordinator's attempt count (`begin`) turns the attempt after `max_attempts` into a quarantined unit, so
    the loop is bounded. A crash or a kill (watchdog, lost node) fails the Ray task instead: the executor runs the
    units that did not come back in another round, and `begin` counts those attempts the same way."""

    def __init__(self, ctx: Any) -> None:
        self.ctx: WorkerContext = ray.get(ctx) if isinstance(ctx, ray.ObjectRef) else ctx
        self.worker = UnitActor()
        self.node = ray.get_runtime_context().get_node_id()
        self.ready = time.time()  # the start-up marks of logs/timings.json (first_actor_ready)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        results = [pickle.dumps(self.convert(bytes(blob))) for blob in batch["unit"]]
        n = len(results)
        return {"index": np.asarray(batch["index"]), "result": _objects(results),
                "worker": _objects([self.worker.who] * n), "node": _objects([self.node] * n),
                "ready": np.full(n, self.ready)}

    def convert(self, blob: bytes) -> dict[str, Any]:
        last: Exception | None = None
        for _ in range(self.ctx.max_attempts + 2):
            try:
                return self.worker.run_unit(self.ctx, blob)
            except Exception as exc:  # noqa: BLE001 - counted by the coordinator; the next attempt decides
                last = exc
                log.info("unit attempt failed on %s: %s", self.worker.who, f"{type(exc).__name__}: {exc}"[:300])
        assert last is not None
        raise last


def _objects(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out
