"""Ray Data's settings for robo-ray's own datasets (the Convert stage's units, Discover's file scan)."""
from __future__ import annotations

import logging
from typing import Any


def quiet_data_context() -> Any:
    """The current `DataContext`, without Ray Data's progress bars and INFO lines (robo-ray shows its own progress
    and status lines); returned for the caller's further settings."""
    from ray.data.context import DataContext

    logging.getLogger("ray.data").setLevel(logging.ERROR)  # its progress lines and "progress bars disabled"
    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False
    return ctx
