"""What a reader produces and the stages use: the `Inventory` of a source (features, episode refs, findings),
`Finding`, the episode metadata types (`MetaType`, `BUILTIN_METADATA`), `ScanTask` (one piece of a split Discover
scan), `spread` (sampled positions) and the `Reader` protocol."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Sequence

from robo_ray.episode import Episode, EpisodeRef, FeatureSpec, RefTable

# Episode metadata: the type of each key a reader puts in `Episode.metadata` (targets store int / float / text /
# bool). `episode_id` (the episode index) and `file_path` (its data file, relative to the source root) every reader
# gives.
MetaType = Literal["int", "float", "text", "bool"]
BUILTIN_METADATA: dict[str, MetaType] = {"episode_id": "int", "file_path": "text"}


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

    def line(self) -> str:
        """`level[code]: message`, as reports and logs show it."""
        return f"{self.level}[{self.code}]: {self.message}"


@dataclass
class Inventory:
    """What a source holds, before any conversion."""

    dataset_name: str
    dataset_root: str
    source_format: str
    source_version: str
    episodes_count: int
    total_steps: int
    features: dict[str, FeatureSpec]  # each with the reader's role / canonical name (FeatureSpec)
    refs: RefTable  # a list of refs is converted
    fps: float
    robot_type: str | None = None
    tasks: list[str] = field(default_factory=list)
    declared: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    # the keys of every episode's `Episode.metadata`, in order, with their types
    metadata_types: dict[str, MetaType] = field(default_factory=lambda: dict(BUILTIN_METADATA))
    # where each step's language comes from: "task" = `Episode.step_tasks` (the source's task text), "" = none
    language_source: str = "task"
    # what holds the features other than videos, as inventory.json's `source` says (e.g. the file format)
    step_storage: str = "data"

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "refs" and not isinstance(value, RefTable):  # held as columns (~40 bytes per episode)
            value = RefTable(value)
        object.__setattr__(self, name, value)


@dataclass(frozen=True)
class ScanTask:
    """One piece of a reader's Discover scan, small and picklable: `index` is its place in file order, `files` the
    dataset-relative file(s) it reads, `params` what else the reader needs to scan them (e.g. a declared count)."""

    index: int
    files: tuple[str, ...]
    params: tuple[Any, ...] = ()


def spread(n: int, k: int) -> list[int]:
    """Up to k positions spread over range(n): first, middle(s), last."""
    if n <= k:
        return list(range(n))
    if k == 1:
        return [0]
    return sorted({round(j * (n - 1) / (k - 1)) for j in range(k)})


class Reader(Protocol):
    """What the stages use of a reader (`BaseReader` implements it)."""

    format_name: str
    features: dict[str, FeatureSpec]

    def discover(self) -> Inventory: ...

    def discover_spread(self, k: int) -> tuple[Inventory, list[int]]: ...

    def scan_tasks(self) -> list[ScanTask]: ...

    def scan_all(self, tasks: Sequence[ScanTask]) -> list[Any]: ...

    def merge_scans(self, rows: Sequence[Any]) -> Inventory: ...

    def prepare(self, refs: Sequence[EpisodeRef]) -> None: ...

    def load_episode(self, ref: EpisodeRef) -> Episode: ...

    def open_binary(self, rel: str, sequential: bool = True): ...

    def exists(self, rel: str) -> bool: ...

    def close(self) -> None: ...
