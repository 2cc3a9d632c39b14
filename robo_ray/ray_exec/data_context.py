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
