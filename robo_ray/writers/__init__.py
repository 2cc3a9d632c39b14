"""Target writers: REGISTRY maps a target format name to a dotted class path and an install hint.

`--to NAME` and `target.format` in the config both resolve here; nothing else names a target format."""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from robo_ray.errors import UsageError
from robo_ray.writers.base import EpisodeSteps, UnitResult, UnitSink, VerifyContext, Writer, WriterOptions, jsonable


@dataclass(frozen=True)
class WriterEntry:
    path: str  # "module:Class"
    outputs: tuple[str, ...]  # top-level names it writes at an output root (= the class's OUTPUTS; no import needed)
    install_hint: str = ""  # what to pip install when the module's dependencies are missing


REGISTRY: dict[str, WriterEntry] = {
    "rlds": WriterEntry("robo_ray.formats.rlds.writer:RldsWriter", ("rlds",)),
    "ortf": WriterEntry("robo_ray.formats.ortf.writer:OrtfWriter", ("data", "meta", "videos")),
    "lerobot": WriterEntry("robo_ray.formats.lerobot.writer:LeRobotWriter", ("data", "meta", "videos")),
}
DEFAULT_TARGET = "rlds"


def writer_names() -> list[str]:
    return sorted(REGISTRY)


def writer_class(name: str) -> type[Writer]:
    """The Writer class registered as `name` (UsageError naming the known ones, or the install hint)."""
    entry = REGISTRY.get(name)
    if entry is None:
        raise UsageError(f"unknown target format {name!r}; known: {', '.join(writer_names())}")
    module, _, cls = entry.path.partition(":")
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        hint = f" ({entry.install_hint})" if entry.install_hint else ""
        raise UsageError(f"target format {name!r} needs a package that is not installed: {exc.name}{hint}") from exc
    return getattr(mod, cls)


__all__ = ["REGISTRY", "DEFAULT_TARGET", "EpisodeSteps", "jsonable", "UnitResult", "UnitSink", "VerifyContext", "Writer", "WriterOptions",
           "writer_class", "writer_names"]
