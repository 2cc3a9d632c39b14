"""The floor of a 1-unit Ray run on this machine: what Ray and Ray Data cost before any robo-ray code runs.

    python -m bench.ray_floor data    # ray.init as robo-ray starts its own instance, then a Ray Data actor pool
                                      # (ActorPoolStrategy, 1 actor) mapping one row with a no-op, then shutdown
    python -m bench.ray_floor actor   # the same ray.init, then one plain actor and one call

bench.throughput --startup times both beside `robo-ray run --actors 2` (wall and CPU of the whole process tree),
so robo-ray's own share of a Ray run's start-up is measured against Ray's in the same run. Imports nothing of
robo-ray's: the same `ray.init` arguments as robo_ray/ray_exec/executor.py `connect` (checked by
tests/unit/test_bench_ray_floor.py)."""
from __future__ import annotations

import logging
import sys

# robo-ray's own instance (robo_ray/ray_exec/executor.py RayExecutor.connect, default object_store_mb)
INIT_KWARGS = {"include_dashboard": False, "logging_level": logging.WARNING, "object_store_memory": 256 << 20,
               "_system_config": {"worker_niceness": 0}}


class _Noop:
    def __call__(self, batch: dict) -> dict:
        return batch


def main(argv: list[str] | None = None) -> int:
    mode = (argv if argv is not None else sys.argv[1:] or ["data"])[0]
    import ray

    ray.init(address="local", **INIT_KWARGS)
    try:
        if mode == "data":
            import ray.data
            from ray.data import ActorPoolStrategy

            logging.getLogger("ray.data").setLevel(logging.CRITICAL)
            ray.data.DataContext.get_current().enable_progress_bars = False
            rows = ray.data.from_items([{"unit": 0}]).map_batches(
                _Noop, batch_size=1, compute=ActorPoolStrategy(min_size=1, max_size=1)).take_all()
            assert rows == [{"unit": 0}], rows
        elif mode == "actor":
            @ray.remote(num_cpus=1)
            class _Actor:
                def ping(self) -> int:
                    return 1

            assert ray.get(_Actor.remote().ping.remote()) == 1
        else:
            print(f"unknown mode {mode!r}: data or actor", file=sys.stderr)
            return 2
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
