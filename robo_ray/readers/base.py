"""Reader plug-in interface and the inventory it produces (Discover's result)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol

from robo_ray.episode import Episode, EpisodeRef, FeatureSpec
from robo_ray.errors import SourceFormatError
from robo_ray.storage import join


@dataclass
class Finding:
    """A Discover check result: `level` is "error" or "warning"; `expected`/`actual` name the disagreeing numbers."""

    level: str
    code: str
    message: str
    expected: Any = None
    actual: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "code": self.code, "message": self.message,
                "expected": self.expected, "actual": self.actual}


@dataclass
class Inventory:
    """What a source holds, before any conversion."""

    dataset_name: str
    dataset_root: str
    source_format: str
    source_version: str
    episodes_count: int
    total_steps: int
    features: dict[str, FeatureSpec]
    refs: list[EpisodeRef]
    fps: float
    robot_type: str | None = None
    tasks: list[str] = field(default_factory=list)
    declared: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)


class Reader(Protocol):
    """A source format: discover the episodes, then load one planned episode at a time."""

    format_name: str

    def discover(self) -> Inventory: ...

    def load_episode(self, ref: EpisodeRef) -> Episode: ...

    def open_binary(self, relpath: str): ...


class DatasetFiles:
    """Dataset-relative file access shared by the readers (needs `self.fs` and `self.root`)."""

    fs: Any
    root: str

    def path(self, rel: str) -> str:
        return join(self.root, rel)

    def exists(self, rel: str) -> bool:
        return self.fs.exists(self.path(rel))

    def open_binary(self, rel: str):
        return self.fs.open(self.path(rel), "rb")

    def _read_jsonl(self, rel: str) -> Iterator[tuple[int, dict[str, Any]]]:
        """(line number, object) of each non-blank line of a JSON-lines file read with the reader's `_read_bytes`
        (size-limited); a line that is not a JSON object is one SourceFormatError naming file and line."""
        text = self._read_bytes(rel).decode("utf-8")  # type: ignore[attr-defined]
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SourceFormatError(f"{rel}:{lineno}: not valid JSON ({exc.msg})") from exc
            if not isinstance(obj, dict):
                raise SourceFormatError(f"{rel}:{lineno}: expected a JSON object")
            yield lineno, obj

    _last_table: tuple[str, Any] | None = None

    def last_table(self, rel: str) -> Any:
        """`rel` read with the reader's `_read_parquet`, keeping only the last file read: units are file-ordered,
        so a file holding many episodes (LeRobot v3.0, ORTF chunks) is read once per unit, not once per episode."""
        if self._last_table is None or self._last_table[0] != rel:
            self._last_table = (rel, self._read_parquet(rel))  # type: ignore[attr-defined]
        return self._last_table[1]
