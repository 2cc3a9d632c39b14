"""Ray Data's settings for robo-ray's own datasets (the Convert stage's units, Discover's file scan)."""
from __future__ import annotations

import logging
from typing import Any


def quiet_data_context() -> Any:
    """The current `DataContext`, without Ray Data's progress bars and INFO lines (robo-ray shows its own progress
    and status lines); returned for the caller's further settings."""
    from ray.data.context import DataContext

    # its progress lines, "progress bars disabled", and the traceback of every block whose task failed: robo-ray
    # runs those units again (ray_exec/executor.py: rounds) and reports what it could not convert
    logging.getLogger("ray.data").setLevel(logging.CRITICAL)
    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False
    return ctx


def warm_data_actors() -> None:
    """Create the actors Ray Data starts on a dataset's first execution (its stats actor, its autoscaling
    coordinator and an actor pool's location tracker: a process and Ray Data's imports each, ~5.5 CPU s on this
    machine) now, while the driver still discovers and plans, instead of beside the pool's first actor. Internal
    Ray Data functions (Ray is pinned in pyproject.toml): when a Ray upgrade moves them, nothing breaks, the actors
    just start later."""
    try:
        from ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator import \
            get_or_create_autoscaling_coordinator
        from ray.data._internal.execution.node_trackers import get_or_create_actor_location_tracker
        from ray.data._internal.stats import get_or_create_stats_actor
    except ImportError as exc:
        logging.getLogger("robo_ray.ray_exec").debug("Ray Data's actors not warmed: %s", exc)
        return
    get_or_create_stats_actor()
    get_or_create_autoscaling_coordinator()
    get_or_create_actor_location_tracker()
