"""The Writer contract: what every target format implements (after Ray Data's Datasink and TFDS's file adapters).

The stages and the executors talk only to this contract; they never name a format.

    writer = writer_for(name)(out_url, mapping, storage_options, options)
    units = writer.plan(refs, features, plan_cfg)         # driver: how episodes group into files is the target's
    sink = writer.open_unit(unit)                          # worker: one unit -> its own files, atomic
    sink.add(episode) / sink.quarantine(record)            #   canonical episodes with lazily decoded frames
    result = sink.commit()  (or sink.abort())              #   a ~1 KB UnitResult row goes to the Publisher
    check = writer.verify_unit(result, ctx)                # worker: re-read the unit it just wrote (UnitCheck)
    writer.finalize(results, inv)                          # Publisher: metadata last = the commit
    writer.verify(ctx, res)                                # dataset-level checks, merging the units' checks

A unit's files are named by the plan only (never by a run id or the cluster size), so any executor and any actor
count write the same bytes, and a retried unit rewrites the same names.
"""
from __future__ import annotations

import copy
import os
import posixpath
from abc import ABC, abstractmethod
from array import array
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Iterator, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from robo_ray.errors import ConfigError

from robo_ray.storage import is_local, join, sha256_file, url_to_fs

if TYPE_CHECKING:
    import numpy as np

    from robo_ray.episode import CanonicalEpisode, EpisodeRef, FeatureSpec
    from robo_ray.mapping import ImageOptions, Mapping
    from robo_ray.readers.base import Inventory, Reader
    from robo_ray.stages.plan import Unit
    from robo_ray.stages.check_records import UnitCheck, UnitChecks, ValidationResult


class EpisodeSteps(Sequence[tuple[int, int]]):
    """A unit's (episode_index, steps) pairs packed in one int64 array: 16 bytes per episode instead of a tuple
    and two ints (~100 bytes), for the Publisher that holds every unit's result. Behaves as a list of tuples
    (append, iterate, index, len, compare with a list); `jsonable()` is the ledger's [[episode, steps], ...]."""

    __slots__ = ("_a",)

    def __init__(self, pairs: Iterable[Sequence[int]] = ()) -> None:
        self._a = array("q", pairs._a) if isinstance(pairs, EpisodeSteps) else array("q")
        if not isinstance(pairs, EpisodeSteps):
            for ep, steps in pairs:
                self._a.extend((int(ep), int(steps)))

    def append(self, pair: Sequence[int]) -> None:
        ep, steps = pair
        self._a.extend((int(ep), int(steps)))

    def __len__(self) -> int:
        return len(self._a) // 2

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        k = range(len(self))[i]
        return self._a[2 * k], self._a[2 * k + 1]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        it = iter(self._a)
        return zip(it, it)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EpisodeSteps):
            return self._a == other._a
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(tuple(o) == p for o, p in zip(other, self))
        return NotImplemented

    def __repr__(self) -> str:
        return f"EpisodeSteps({list(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return _episode_steps_from_bytes, (self._a.tobytes(),)

    def jsonable(self) -> list[list[int]]:
        return [[e, s] for e, s in self]


def _episode_steps_from_bytes(raw: bytes) -> EpisodeSteps:
    out = EpisodeSteps()
    out._a.frombytes(raw)
    return out


def jsonable(value: Any) -> Any:
    """`json.dumps(..., default=jsonable)`: what ledger rows hold besides JSON types (EpisodeSteps)."""
    if isinstance(value, EpisodeSteps):
        return value.jsonable()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


@dataclass
class UnitResult:
    """What one committed unit holds: its episodes, its quarantined episodes and its files (the ledger's entry).

    `filename` / `num_bytes` / `sha256` describe the unit's main file (an RLDS shard, a data parquet); `files` lists
    every further file (name relative to the writer's dataset folder, bytes, sha256); `extra` carries small
    per-unit facts the writer's `finalize` needs (per-episode rows, task strings)."""

    shard_index: int
    filename: str
    episodes: EpisodeSteps = field(default_factory=EpisodeSteps)  # (episode_index, steps); a list is converted
    quarantined: list[dict[str, Any]] = field(default_factory=list)
    num_bytes: int = 0
    sha256: str = ""
    files: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    unlabeled: int = 0  # written episodes with no instruction on any step (counted by Convert)
    check: dict[str, Any] | None = None  # UnitCheck.to_dict() made by the worker; the Publisher takes it off

    @property
    def unit_index(self) -> int:
        return self.shard_index

    def all_files(self) -> list[tuple[str, int, str]]:
        """(name, bytes, sha256) of every file of the unit, main file first."""
        main = [(self.filename, self.num_bytes, self.sha256)] if self.filename else []
        return main + [(f["name"], int(f["num_bytes"]), f["sha256"]) for f in self.files]

    def total_bytes(self) -> int:
        return sum(n for _, n, _ in self.all_files())

    def __post_init__(self) -> None:
        if not isinstance(self.episodes, EpisodeSteps):
            self.episodes = EpisodeSteps(self.episodes)

    def to_dict(self) -> dict[str, Any]:
        """The ledger's row, JSON types only (episodes as [[episode, steps], ...])."""
        return {f.name: self.episodes.jsonable() if f.name == "episodes" else copy.deepcopy(getattr(self, f.name))
                for f in fields(self)}

    def packed(self) -> dict[str, Any]:
        """The ledger's row without copying the episodes (an EpisodeSteps: `json.dumps(default=jsonable)`)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "UnitResult":
        d = dict(d)
        eps = d.get("episodes", ())
        d["episodes"] = eps if isinstance(eps, EpisodeSteps) else EpisodeSteps(eps)
        return cls(**d)


class UnitSink(ABC):
    """One unit being written. `add` takes a whole episode or nothing: if it raises, the unit is as if the episode
    had never been offered (the caller quarantines it). `commit` makes every file of the unit visible under its
    final name; `abort` (or a crash) leaves nothing under a final name."""

    @abstractmethod
    def add(self, episode: "CanonicalEpisode") -> None: ...

    @abstractmethod
    def quarantine(self, record: dict[str, Any]) -> None: ...

    @abstractmethod
    def commit(self) -> UnitResult: ...

    @abstractmethod
    def abort(self) -> None: ...


@dataclass
class VerifyContext:
    """What a writer's `verify` / `verify_unit` may use: the run's ledger, the source (for the sampled comparison),
    the validate options, and the units' checks already made (on the workers, or by a parallel pass).

    On a worker (`verify_unit` right after a commit) there is no inventory: `refs` holds the unit's episodes."""

    ledger: dict[str, Any]
    inv: "Inventory | None" = None
    reader: "Reader | None" = None
    sample_ids: set[int] = field(default_factory=set)
    min_psnr_db: float = 30.0
    loader_readback: bool = True
    allow_nonfinite: bool = False
    refs: "dict[int, EpisodeRef] | None" = None  # episode -> ref, when there is no inventory (a worker)
    unit_checks: "UnitChecks | None" = None  # merged UnitChecks of every committed unit (Validator fills it)
    readback_shards: int = 2  # how many files the loader's read-back reads (0 = all)
    # False on the worker that has just written the unit: a writer whose files carry their own checksums (TFRecord
    # CRCs) may then check those instead of hashing the files again, and keep the digests taken while writing
    rehash: bool = True

    def results(self) -> list[UnitResult]:
        return [UnitResult.from_dict(s) for s in self.ledger.get("shards", [])]

    def ref_map(self) -> "dict[int, EpisodeRef]":
        """episode -> ref of the sampled episodes (`sample_ids`: what is compared with the source), or the refs
        given (a worker's unit)."""
        if self.refs is None:
            ids = self.sample_ids
            self.refs = {r.episode_index: r for r in self.inv.refs if r.episode_index in ids} \
                if self.inv is not None and ids else {}
        return self.refs


class WriterOptions(BaseModel):
    """A writer's own settings (`target.options` in the config); each writer subclasses this."""

    model_config = ConfigDict(extra="forbid")


class Writer(ABC):
    """A target format. Subclasses set the class attributes and implement the abstract methods."""

    format_name: ClassVar[str]
    title: ClassVar[str]  # e.g. "RLDS (TFDS TFRecord)", for reports
    paired_reader: ClassVar[str | None] = None  # the reader format that reads this output back (round trips)
    Options: ClassVar[type[WriterOptions]] = WriterOptions
    OUTPUTS: ClassVar[tuple[str, ...]] = ()  # top-level entries of the output root this target writes
    keeps_splits: ClassVar[bool] = True  # writes each episode's split (Unit.split / EpisodeRef.split)
    # whether `Frames.encoded` (the source's encoded stream) may be used instead of the decoded frames: the
    # convert stage then offers it and starts decoding a camera only when the writer asks for its first frame
    takes_encoded_video: bool = False

    def __init__(self, out_url: str, mapping: "Mapping", storage_options: dict[str, Any] | None = None,
                 options: dict[str, Any] | None = None) -> None:
        self.out_url = out_url
        self.mapping = mapping
        self.storage_options = storage_options or {}
        try:
            self.options = self.Options.model_validate(options or {})
        except ValidationError as exc:  # one line naming the option, not a pydantic dump
            first = exc.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            raise ConfigError(f"invalid target.options.{loc} for the {self.format_name} target: {first['msg']} "
                              f"(input {first.get('input')!r})") from None
        self.fs, self.out_root = url_to_fs(out_url, storage_options)

    # ---- where things go ---------------------------------------------------------------------------------------
    @property
    @abstractmethod
    def dataset_rel(self) -> str:
        """The dataset's folder relative to the output root (e.g. rlds/<name>/<version>, or "" for the root)."""

    @property
    def dataset_dir(self) -> str:
        return join(self.out_root, self.dataset_rel) if self.dataset_rel else self.out_root

    def outputs(self) -> list[str]:
        """Top-level entries of the output root this writer owns (for --overwrite and path checks)."""
        return list(self.OUTPUTS)

    def files(self) -> list[str]:
        """Every file of the written dataset, relative to dataset_dir (checksums, the report, an archive)."""
        out: list[str] = []
        for top in self.outputs():
            base = join(self.out_root, top)
            if not self.fs.exists(base):
                continue
            for p in sorted(self.fs.find(base)):
                rel = posixpath.relpath(p, self.dataset_dir.rstrip("/") or "/")
                if ".tmp-" not in rel:
                    out.append(rel)
        return out

    @abstractmethod
    def commit_files(self) -> list[str]:
        """Files (relative to dataset_dir) whose presence means "the dataset is committed": written last by
        `finalize`, removed by a resume before units change."""

    # ---- schema and plan -----------------------------------------------------------------------------------------
    @classmethod
    def default_schema(cls, inv: "Inventory", images: "ImageOptions", name: str | None = None) -> "Mapping":
        """The target's default mapping of the inventory's features (names, shapes, encodings)."""
        from robo_ray.mapping import default_mapping

        return default_mapping(inv, images, name)

    def unit_options(self, inv: "Inventory") -> dict[str, Any]:
        """The options every worker's writer is built with (JobSpec.target_options): `target.options`, which a
        writer may complete from the inventory (e.g. a frame rate the source declares) or refuse (UsageError)
        before anything is converted."""
        return self.options.model_dump(exclude_unset=True)

    @abstractmethod
    def plan(self, refs: "list[EpisodeRef]", features: "dict[str, FeatureSpec]", target_unit_mb: float,
             min_units: int, max_unit_episodes: int = 1000) -> "list[Unit]":
        """Group episodes into units (deterministic: the inventory and config only): about `target_unit_mb`
        each, at least `min_units` when there are enough episodes, at most `max_unit_episodes` episodes each."""

    @abstractmethod
    def unit_filenames(self, unit: "Unit") -> list[str]:
        """The main file name(s) a unit writes (relative to dataset_dir), known before it runs."""

    # ---- units -------------------------------------------------------------------------------------------------
    @abstractmethod
    def open_unit(self, unit: "Unit") -> UnitSink: ...

    def quarantine_unit(self, unit: "Unit", records: Iterable[dict[str, Any]]) -> UnitResult:
        """Commit a unit none of whose episodes could be converted (every episode quarantined)."""
        sink = self.open_unit(unit)
        for rec in records:
            sink.quarantine(rec)
        return sink.commit()

    def is_committed(self, res: UnitResult, verify_sha256: bool = True) -> bool:
        """Every file of a ledger entry exists with its size (and sha256)."""
        for name, size, digest in res.all_files():
            path = join(self.dataset_dir, name)
            try:
                if self.fs.size(path) != size:
                    return False
            except (FileNotFoundError, OSError):
                return False
            if verify_sha256 and sha256_file(self.fs, path) != digest:
                return False
        return True

    def remove_stale_temps(self) -> int:
        """Delete `*.tmp-xxxx` files left by killed workers (local filesystems; object stores have none)."""
        if not is_local(self.fs) or not os.path.isdir(self.dataset_dir):
            return 0
        n = 0
        for base, _dirs, names in os.walk(self.dataset_dir):
            for name in names:
                if ".tmp-" in name:
                    try:
                        os.remove(os.path.join(base, name))
                        n += 1
                    except FileNotFoundError:
                        pass
        return n

    # ---- the end -----------------------------------------------------------------------------------------------
    @abstractmethod
    def finalize(self, results: list[UnitResult], inv: "Inventory") -> dict[str, Any]:
        """Write the dataset's metadata from the unit results (last: the commit). Returns a small summary."""

    def prepare_verify(self, loader_readback: bool) -> None:
        """Called when the run starts, in the process that will verify: begin what `verify` will need that takes
        long to start (e.g. importing a loader), so it overlaps the conversion. Nothing by default."""

    def verify_unit(self, result: UnitResult, ctx: VerifyContext) -> "UnitCheck | None":
        """Re-read one committed unit's files (framing / CRCs, schema, episode and step counts against `result`,
        NaN/Inf, sampled images decodable, sha256 against `result`, the sampled episodes (`ctx.sample_ids`)
        compared with the source, statistics) and return a small `UnitCheck`. Runs on the worker right after the
        commit, or in a parallel pass over an existing output. None: this writer verifies only whole datasets."""
        return None

    @abstractmethod
    def verify(self, ctx: VerifyContext, res: "ValidationResult") -> bool:
        """The format-specific half of Validate: the dataset-level checks (metadata, every file present, counts
        across units, the loader's read-back), merging `ctx.unit_checks` (every committed unit's `verify_unit`,
        when the writer has one) into `res`, or re-reading the files itself when it has none; fills
        res.episode_steps / steps / shard_sha256 / psnr / statistics (robo_ray.stages.validate does the rest).
        Returns whether the dataset is committed (its commit files exist): only then do the dataset-level checks
        (discovered = written + quarantined, steps) apply."""

    def read_back_names(self) -> dict[str, str]:
        """{mapping target: the canonical name the paired reader gives that feature back}, for round trips through
        formats whose naming differs (flat dotted keys, cameras named by role). Identity by default."""
        return {fm.target: fm.target for fm in self.mapping.steps}

    def depth_bound(self, target: str) -> Callable[[np.ndarray], np.ndarray] | None:
        """For a 16-bit (depth) camera target the writer stores lossy: source frame -> the largest error allowed per
        pixel when read back (its documented quantization); None: read back exactly (the default)."""
        return None

    def usage(self) -> list[str]:
        """Markdown lines for final_report.md: how to load the output."""
        return []
