"""bench/ray_floor.py, the floor the start-up bench holds a Ray run to, starts Ray exactly as robo-ray does."""
from __future__ import annotations

import inspect

from bench.ray_floor import INIT_KWARGS
from robo_ray.ray_exec.executor import RayExecutor, own_instance_kwargs


def test_floor_starts_ray_as_robo_ray_starts_its_own_instance() -> None:
    default_mb = inspect.signature(RayExecutor).parameters["object_store_mb"].default
    assert INIT_KWARGS == own_instance_kwargs(default_mb)
