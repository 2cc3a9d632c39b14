"""What a row of a robo-ray Ray Dataset says about where it came from, as JSON (never pickle: a dataset may have
been saved and read back from anywhere): the source's description (`SourceSpec`: its features with roles and
canonical names, frame rate, metadata types), and each episode's `EpisodeRef`. `write` rebuilds the source's
inventory from them, so the target's default mapping and plan are the ones `robo-ray run` makes."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from robo_ray.episode import EpisodeRef, FeatureSpec, VideoRef
from robo_ray.errors import ConfigError
from robo_ray.readers.base import Inventory

# the columns every episode row carries besides its data (the data columns are named by the canonical names)
SOURCE = "source"  # the source dataset's URL (credentials redacted): the episode's source id with episode_index
EPISODE = "episode_index"  # the episode's index in its source
LENGTH = "length"
SPLIT = "split"
LANGUAGE = "language"  # the instruction of each step
TIMESTAMPS = "timestamps"
STEP_FIELDS = ("reward", "discount", "is_first", "is_last", "is_terminal")
METADATA = "metadata"  # JSON object: the episode's metadata, typed as the mapping says
QUARANTINE = "quarantine"  # JSON object (code, reason, file) when the episode could not be read, else None
REF = "episode_ref"  # JSON: the episode's EpisodeRef (what the plan groups by)
SPEC = "source_spec"  # JSON: the source's SourceSpec (the same string in every row of one source)
STEP = "step"  # step rows: the step's index in its episode
TIMESTAMP = "timestamp"  # step rows: the step's time
BOOKKEEPING = (SOURCE, EPISODE, LENGTH, SPLIT, METADATA, QUARANTINE, REF, SPEC)
MAX_SPEC_CHARS = 1 << 20  # a source description larger than this is not one robo-ray wrote


@dataclass(frozen=True)
class SourceSpec:
    """The inventory of a source without its episodes: enough to rebuild the mapping `robo-ray run` would make."""

    url: str
    dataset_name: str
    dataset_root: str
    source_format: str
    source_version: str
    fps: float
    features: dict[str, FeatureSpec]
    robot_type: str | None = None
    tasks: list[str] = field(default_factory=list)
    declared: dict[str, Any] = field(default_factory=dict)
    metadata_types: dict[str, str] = field(default_factory=dict)
    language_source: str = "task"
    step_storage: str = "data"

    @classmethod
    def of(cls, inv: Inventory, url: str) -> "SourceSpec":
        return cls(url, inv.dataset_name, inv.dataset_root, inv.source_format, inv.source_version, inv.fps,
                   dict(inv.features), inv.robot_type, list(inv.tasks), dict(inv.declared),
                   dict(inv.metadata_types), inv.language_source, inv.step_storage)

    def to_json(self) -> str:
        d = asdict(self)
        d["features"] = {k: asdict(f) for k, f in self.features.items()}
        return json.dumps(d, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str) -> "SourceSpec":
        if not isinstance(text, str) or len(text) > MAX_SPEC_CHARS:
            raise ConfigError(f"column {SPEC!r}: not a robo-ray source description")
        try:
            d = json.loads(text)
            if not isinstance(d, dict):
                raise ValueError("not a JSON object")
            feats = {k: _feature(v) for k, v in d.pop("features").items()}
            known = {f.name for f in fields(cls)}
            return cls(features=feats, **{k: v for k, v in d.items() if k in known})
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ConfigError(f"column {SPEC!r}: not a robo-ray source description ({exc})") from None

    def inventory(self, refs: list[EpisodeRef], fps: float | None = None) -> Inventory:
        """The source's inventory holding `refs` (the episodes the dataset still has)."""
        return Inventory(self.dataset_name, self.dataset_root, self.source_format, self.source_version, len(refs),
                         sum(r.length for r in refs), dict(self.features), refs, fps or self.fps, self.robot_type,
                         list(self.tasks), dict(self.declared), [], dict(self.metadata_types),  # type: ignore[arg-type]
                         self.language_source, self.step_storage)


def _feature(d: dict[str, Any]) -> FeatureSpec:
    for k in ("shape", "declared_shape"):
        if d.get(k) is not None:
            d[k] = tuple(int(x) for x in d[k])
    return FeatureSpec(**d)


def ref_to_json(ref: EpisodeRef) -> str:
    return json.dumps({"episode_index": ref.episode_index, "length": ref.length, "data_path": ref.data_path,
                       "videos": [[k, v.path, v.from_timestamp, v.to_timestamp] for k, v in ref.videos],
                       "tasks": list(ref.tasks), "global_from": ref.global_from, "global_to": ref.global_to,
                       "source_id": ref.source_id, "locator": list(ref.locator) if ref.locator else None,
                       "split": ref.split})


def ref_from_json(text: str) -> EpisodeRef:
    """An `EpisodeRef` from `ref_to_json`'s text; anything else is one ConfigError naming the column."""
    try:
        if not isinstance(text, str) or len(text) > MAX_SPEC_CHARS:
            raise ValueError("not a short JSON text")
        d = json.loads(text)
        if not isinstance(d, dict):
            raise ValueError("not a JSON object")
        loc = d.get("locator")
        return EpisodeRef(int(d["episode_index"]), int(d["length"]), str(d["data_path"]),
                          tuple((str(k), VideoRef(str(p), float(a), None if b is None else float(b)))
                                for k, p, a, b in d.get("videos") or ()),
                          tuple(str(t) for t in d.get("tasks") or ()), _opt_int(d.get("global_from")),
                          _opt_int(d.get("global_to")), d.get("source_id"),
                          (int(loc[0]), int(loc[1])) if loc else None, d.get("split"))
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"column {REF!r}: not a robo-ray episode reference ({exc})") from None


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)
