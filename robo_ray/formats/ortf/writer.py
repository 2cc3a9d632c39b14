"""ORTF v0.2 writer on the Writer contract (robo_ray/writers/base.py; spec: ../specs/ortf_v0.2.txt).

The ORTF dataset is the output root itself (`dataset_rel` ""), beside robo-ray's reports. One work unit = one chunk
(`data/chunk-NNN/steps.parquet`, unit index = chunk id): `plan_units` balances the units by size, then each is cut to
at most `chunk_size` episodes.

A unit's sink (`ChunkSink`) receives canonical episodes. `add` encodes each camera's decoded frames once with PyAV
into `videos/<camera>/chunk-NNN/episode_NNNNNN.mp4` (H.264 yuv420p straight from the decoder's frames, crf
`crf`; `lossless`: libx264rgb crf 0 from the RGB frames, so they decode to the very pixels an RLDS conversion
stores; 16-bit depth: FFV1 gray16le) and buffers the episode's step rows (observation tensors as
`observation.state.<component>`, `action`, boundary flags, `reward`/`discount` when the source has them, one
`observation.images.<camera>.frame_index` per camera, `task_id` per step only in a chunk where an episode changes
task). Where the videos go until `commit` (`robo_ray.writers.unit_files.UnitFiles`):
* local: temp names beside the final ones (`....mp4.tmp-xxxxxxxx`), renamed by `commit` (a failing camera or a frame
  count that differs from the steps removes the episode's temps: nothing under a final name);
* other filesystems: a local scratch folder, uploaded by `commit` (one PUT each: visible whole or not at all).
`commit` writes the chunk's steps.parquet last (atomic; a unit whose every episode was quarantined writes one with
no rows, so that readers always find the schema), removes final-named files of earlier attempts that this commit
does not hold, and returns the ledger row: every file with bytes and sha256, and in `extra` the per-episode rows and
the per-column sums (count, sum, sum of squares, min, max) that `finalize` needs.

`finalize` numbers globally: meta/tasks.jsonl (the reader's tasks first, then tasks first seen at write time, in
episode order; a chunk whose per-step `task_id`s were written with chunk-local ids is rewritten with the global ids
and its ledger entry updated, `extra["renumbered_from"]` = the digest of the bytes it rewrote), meta/episodes.parquet
(start_step / end_step contiguous over the written episodes), meta/stats.json (merged sums) and meta/manifest.json
last (the commit).

Validate: `verify_unit` re-reads one committed chunk on the worker that wrote it (right after its commit, before
finalize: the chunk's own task list `extra["step_tasks"]` stands in for meta/tasks.jsonl), `verify` checks meta/ and
the dataset as a whole over the merged unit checks (robo_ray/formats/ortf/verify.py).

Python API: robo_ray/formats/ortf/api.py (`write_ortf`).
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from pydantic import Field, field_validator

from robo_ray.episode import EpisodeRef, FeatureSpec
from robo_ray.errors import ConfigError
from robo_ray.formats.ortf.chunk_sink import ChunkSink
from robo_ray.formats.ortf.finalize import finalize_dataset
from robo_ray.formats.ortf.layout import MANIFEST, chunk_name, episode_id, plan_layout
from robo_ray.mapping import Mapping
from robo_ray.readers.base import Inventory
from robo_ray.stages.plan import MAX_UNIT_EPISODES, Unit, plan_units
from robo_ray.writers.base import UnitResult, VerifyContext, Writer, WriterOptions


class OrtfOptions(WriterOptions):
    """`target.options` of an ORTF run (`--set target.options.KEY=VALUE`)."""

    lossless: bool = False  # libx264rgb crf 0: frames decode to the very source pixels
    crf: int = Field(18, ge=0, le=51)  # H.264 quality when not lossless
    chunk_size: int = Field(1000, ge=1)  # episodes per chunk at most
    fps: float | None = Field(None, gt=0, le=10_000)  # default: the source's rate
    created_at: str | None = None  # manifest created_at (default: now); fixed for deterministic manifests
    name: str | None = None  # manifest name (default: the source's dataset name)
    reencode: bool = False  # True: never copy a source's H.264 packets, decode and encode every camera

    @field_validator("created_at", mode="before")
    @classmethod
    def _iso(cls, v: Any) -> Any:
        """`--set target.options.created_at=2025-01-01T00:00:00Z` arrives as a datetime (YAML): back to text."""
        if isinstance(v, datetime):
            v = v.astimezone(timezone.utc) if v.tzinfo else v
            return v.strftime("%Y-%m-%dT%H:%M:%SZ")
        return v


class OrtfWriter(Writer):
    """Writes an ORTF v0.2 dataset at the output root: data/, meta/, videos/."""

    format_name = "ortf"
    title = "ORTF v0.2 (Parquet + MP4)"
    paired_reader = "ortf"
    Options = OrtfOptions
    OUTPUTS = ("data", "meta", "videos")
    keeps_splits = False  # ORTF v0.2 has no splits: --val-fraction is refused; source splits are not written
    options: OrtfOptions

    def __init__(self, out_url: str, mapping: Mapping, storage_options: dict[str, Any] | None = None,
                 options: dict[str, Any] | None = None) -> None:
        super().__init__(out_url, mapping, storage_options, options)
        self.layout = plan_layout(mapping)

    @property
    def dataset_rel(self) -> str:
        return ""

    def commit_files(self) -> list[str]:
        return [MANIFEST]

    # ---- options ------------------------------------------------------------------------------------------------
    @property
    def takes_encoded_video(self) -> bool:  # type: ignore[override]
        """Copies a source's H.264 video that fits (formats/lerobot/video_copy.py) unless told to re-encode."""
        return not (self.options.reencode or self.options.lossless)

    def fps(self, inv: Inventory | None = None) -> float:
        """The output's frame rate: target.options.fps, else the inventory's; refused when neither is known."""
        source_fps = (inv.fps or 0.0) if inv is not None else 0.0
        fps = self.options.fps or (source_fps if source_fps > 0 else None)
        if not fps:
            where = f"the source ({inv.source_format}) records" if inv is not None else "the source records"
            raise ConfigError(f"ORTF needs a frame rate and {where} none: pass one with "
                              "--set target.options.fps=<frames per second>")
        return float(fps)

    def unit_options(self, inv: Inventory) -> dict[str, Any]:
        opts = self.options.model_dump(exclude_unset=True)
        opts["fps"] = self.fps(inv)
        return opts

    # ---- plan ---------------------------------------------------------------------------------------------------
    def plan(self, refs: list[EpisodeRef], features: dict[str, FeatureSpec], target_unit_mb: float,
             min_units: int, max_unit_episodes: int = MAX_UNIT_EPISODES) -> list[Unit]:
        """Size-balanced units (`plan_units`), each cut to at most `chunk_size` episodes; unit index = chunk id."""
        size = self.options.chunk_size
        pieces = [u.refs[k:k + size] for u in plan_units(refs, features, target_unit_mb, min_units, max_unit_episodes)
                  for k in range(0, len(u.refs), size)]
        return [Unit(i, len(pieces), p) for i, p in enumerate(pieces)]

    def unit_filenames(self, unit: Unit) -> list[str]:
        return [f"data/{chunk_name(unit.index, unit.num_shards)}/steps.parquet"]

    def video_rel(self, cam: str, chunk: str, index: int) -> str:
        return f"videos/{cam}/{chunk}/episode_{episode_id(index)}.mp4"

    def open_unit(self, unit: Unit) -> ChunkSink:
        return ChunkSink(self, unit)

    # ---- finalize -----------------------------------------------------------------------------------------------
    def finalize(self, results: list[UnitResult], inv: Inventory) -> dict[str, Any]:
        """Renumber per-step task ids where needed, then episodes.parquet, tasks.jsonl, stats.json and
        manifest.json last (the commit): robo_ray/formats/ortf/finalize.py."""
        return finalize_dataset(self, results, inv)

    # ---- validate -----------------------------------------------------------------------------------------------
    def verify_unit(self, result: UnitResult, ctx: VerifyContext) -> Any:
        """Re-read one committed chunk (its steps.parquet and videos; robo_ray/formats/ortf/verify.py)."""
        from robo_ray.formats.ortf.verify import OrtfVerifier

        return OrtfVerifier(self, ctx).check_unit(result)

    def verify(self, ctx: VerifyContext, res: Any) -> bool:
        """The dataset-level checks (meta/, every file present, counts across chunks, the merged chunk checks, the
        reader's read-back of a sample of chunks)."""
        from robo_ray.formats.ortf.verify import OrtfVerifier

        return OrtfVerifier(self, ctx).run(res)

    def usage(self) -> list[str]:
        return ["```python", "from robo_ray.readers import open_reader", "",
                f"reader = open_reader('{self.out_url}', 'ortf')", "inventory = reader.discover()",
                "episode = reader.load_episode(inventory.refs[0])  # columns as numpy, videos referenced",
                "", "import pyarrow.parquet as pq",
                f"steps = pq.read_table('{self.out_url}/data/chunk-000/steps.parquet')", "```"]
