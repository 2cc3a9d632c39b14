"""Target writers: REGISTRY maps a target format name to a dotted class path."""
from __future__ import annotations

import importlib

from robo_ray.errors import UsageError

REGISTRY: dict[str, str] = {
    "rlds": "robo_ray.formats.rlds.writer:RldsWriter",
}


def writer_class(fmt: str) -> type:
    if fmt not in REGISTRY:
        raise UsageError(f"unknown target format {fmt!r}; known: {', '.join(sorted(REGISTRY))}")
    module, _, name = REGISTRY[fmt].partition(":")
    return getattr(importlib.import_module(module), name)
