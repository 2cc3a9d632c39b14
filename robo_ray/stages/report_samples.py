"""What report.html shows of the data: a few written episodes read back through the writer's paired reader, next to
their source episodes read through the run's reader (frames at first / middle / last step with PSNR, the state and
action series of both sides). Only the sampled episodes are loaded; the paired reader's discover is metadata only."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from robo_ray.episode import Episode, EpisodeRef, FeatureSpec
from robo_ray.readers import open_reader
from robo_ray.readers.base import Inventory, Reader
from robo_ray.stages.source_frames import source_frames
from robo_ray.stages.sample_compare import psnr, resize_like
from robo_ray.stages.sampling import sample_indices
from robo_ray.storage import join
from robo_ray.writers import Writer

SAMPLED_EPISODES = 3
POSITIONS = ("first", "middle", "last")
SERIES_ROLES = ("state", "action")
IMAGE_KINDS = ("image", "video")


@dataclass
class FramePair:
    """One camera at one step of a sampled episode: the source frame, the written frame, their PSNR."""

    position: str  # first / middle / last
    step: int
    source: np.ndarray | None = None
    written: np.ndarray | None = None
    psnr: float | None = None


@dataclass
class Camera:
    """A camera as the mapping names it, its key in the source and in the written dataset read back."""

    label: str  # the mapping's target name
    source_key: str | None
    written_key: str


@dataclass
class EpisodeSample:
    """One sampled episode: its source and written indices, frames per camera label, series per feature label."""

    source_index: int | None
    written_index: int
    length: int
    frames: dict[str, list[FramePair]] = field(default_factory=dict)
    series: dict[str, np.ndarray] = field(default_factory=dict)  # "role: name" -> (T, D), as written
    source_series: dict[str, np.ndarray] = field(default_factory=dict)  # the same labels, from the source episode
    errors: list[str] = field(default_factory=list)


@dataclass
class Samples:
    cameras: list[Camera] = field(default_factory=list)
    episodes: list[EpisodeSample] = field(default_factory=list)
    note: str = ""  # why the source could not be paired, if it could not


def _by_name(features: dict[str, FeatureSpec], name: str) -> str | None:
    hits = [k for k, f in features.items() if f.kind in IMAGE_KINDS and (f.name or k) == name]
    return hits[0] if hits else None


def cameras(writer: Writer, written: dict[str, FeatureSpec]) -> list[Camera]:
    """Every image target of the mapping with its written key (by the paired reader's canonical name; a lone
    camera on both sides pairs whatever its name, as readers call it by role)."""
    names = writer.read_back_names()
    steps = [fm for fm in writer.mapping.steps if fm.kind == "image"]
    written_cams = [k for k, f in written.items() if f.kind in IMAGE_KINDS]
    out: list[Camera] = []
    for fm in steps:
        key = _by_name(written, names.get(fm.target, fm.target))
        if key is None and len(steps) == 1 and len(written_cams) == 1:
            key = written_cams[0]
        if key is not None:
            out.append(Camera(fm.target, fm.source, key))
    return out


def series_keys(written: dict[str, FeatureSpec]) -> list[tuple[str, str]]:
    """(label, key) of the written state and action features, state first."""
    return [(f"{role}: {f.name or k}", k) for role in SERIES_ROLES for k, f in written.items()
            if f.role == role and f.kind == "tensor"]


@dataclass(frozen=True)
class Series:
    """A written state / action feature as the report plots it: its label, its key read back, and the source
    column it was written from with the mapping's dtype (None when the mapping does not name one)."""

    label: str  # "role: name"
    written_key: str
    source_key: str | None = None
    dtype: str = "float32"


def series(writer: Writer, written: dict[str, FeatureSpec]) -> list[Series]:
    """The written state and action features (state first), each paired with its mapping's source column by the
    name the paired reader gives the mapping's target."""
    names = writer.read_back_names()
    by_name = {names.get(fm.target, fm.target): fm for fm in writer.mapping.steps if fm.kind == "tensor"}
    out: list[Series] = []
    for label, key in series_keys(written):
        fm = by_name.get(written[key].name or key)
        out.append(Series(label, key, fm.source if fm else None, fm.dtype if fm else "float32"))
    return out


def source_values(ep: Episode, s: Series, length: int) -> np.ndarray:
    """The source column of `s` as (T, D) float64, cast to the mapping's dtype first (the values the writer
    wrote, as Validate compares them)."""
    assert s.source_key is not None
    values = np.asarray(ep.columns[s.source_key]).astype(s.dtype).astype(np.float64)
    return values.reshape(length, -1)


def _frames(reader: Reader, ep: Episode, key: str, steps: list[int]) -> list[np.ndarray] | None:
    try:
        return source_frames(reader, ep, key, steps)
    except Exception:  # noqa: BLE001 - a missing frame shows as a gap in the report, never fails it
        return None


def frame_pairs(written: list[np.ndarray] | None, source: list[np.ndarray] | None,
                steps: list[int]) -> list[FramePair]:
    """First / middle / last pairs with PSNR (the source resized to the written size, as Validate does)."""
    labels = {3: POSITIONS, 2: ("first", "last"), 1: ("first",)}.get(len(steps), ())
    out = []
    for k, (pos, step) in enumerate(zip(labels, steps)):
        w = written[k] if written else None
        s = source[k] if source else None
        if s is not None and w is not None and s.shape != w.shape:
            s = resize_like(s, w.shape)
        out.append(FramePair(pos, step, s, w, psnr(s, w) if s is not None and w is not None else None))
    return out


def sample_episode(cams: list[Camera], plotted: list[Series], written_reader: Reader, wref: EpisodeRef,
                   source_reader: Reader | None, sref: EpisodeRef | None) -> EpisodeSample:
    """Load one written episode (and its source) and keep what the report shows."""
    wep = written_reader.load_episode(wref)
    out = EpisodeSample(sref.episode_index if sref else None, wref.episode_index, wep.length)
    sep = None
    if source_reader is not None and sref is not None:
        try:
            sep = source_reader.load_episode(sref)
        except Exception as exc:  # noqa: BLE001 - shown in the report
            out.errors.append(f"source episode {sref.episode_index} unreadable: {exc}")
    steps = sample_indices(wep.length)
    for cam in cams:
        src = _frames(source_reader, sep, cam.source_key, steps) if sep is not None and cam.source_key else None
        out.frames[cam.label] = frame_pairs(_frames(written_reader, wep, cam.written_key, steps), src, steps)
    for s in plotted:
        if s.written_key in wep.columns:
            out.series[s.label] = np.asarray(wep.columns[s.written_key], dtype=np.float64).reshape(wep.length, -1)
        if sep is None or s.source_key is None:
            continue
        try:
            out.source_series[s.label] = source_values(sep, s, wep.length)
        except Exception as exc:  # noqa: BLE001 - shown in the report: the plot then has the written side only
            out.errors.append(f"{s.label}: source column {s.source_key} not plotted: {type(exc).__name__}: {exc}")
    return out


def pair_refs(inv: Inventory, written: list[EpisodeRef], positions: list[int], total: int,
              quarantined: list[dict[str, Any]]) -> tuple[list[EpisodeRef | None], str]:
    """The source ref of each sampled written episode (at `positions` among the `total` written ones): writers may
    renumber, so written episodes pair with the source's non-quarantined episodes in order; counts and the sampled
    lengths must agree, else no pairing (and why)."""
    q = {int(r["episode_index"]) for r in quarantined}
    wanted = set(positions)
    picked: dict[int, EpisodeRef] = {}
    kept = 0  # the source's non-quarantined episodes, counted in one pass (no list of them)
    for r in inv.refs:
        if r.episode_index in q:
            continue
        if kept in wanted:
            picked[kept] = r
        kept += 1
    pairs: list[EpisodeRef | None] = [picked.get(j) if kept == total else None for j in positions]
    if kept != total or any(a is None or a.length != b.length for a, b in zip(pairs, written)):
        return [None] * len(written), (f"the written episodes ({total}) do not pair with the source's "
                                       f"{kept} non-quarantined episodes by order and length")
    return pairs, ""


def release_arrow_memory() -> None:
    """Hand the memory Arrow's pool keeps for reuse back to the system (between reads of unrelated files)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def collect(writer: Writer, inv: Inventory, reader: Reader | None, quarantined: list[dict[str, Any]],
            k: int = SAMPLED_EPISODES) -> Samples:
    """Read up to k spread written episodes back (paired reader) with their source episodes."""
    url = join(writer.out_url, writer.dataset_rel) if writer.dataset_rel else writer.out_url  # any fsspec URL
    back = open_reader(url, writer.paired_reader, writer.storage_options)
    try:
        written, positions = back.discover_spread(k)  # only the sampled episodes' files are read
        cams, plotted = cameras(writer, written.features), series(writer, written.features)
        srefs, note = pair_refs(inv, written.refs, positions, written.episodes_count, quarantined)
        if reader is None:
            note = note or "the source is not available"
        out = Samples(cams, note=note)
        for wref, sref in zip(written.refs, srefs):
            try:
                out.episodes.append(sample_episode(cams, plotted, back, wref, reader, sref))
            except Exception as exc:  # noqa: BLE001 - one unreadable episode is shown as such, the page goes on
                out.episodes.append(EpisodeSample(sref.episode_index if sref else None, wref.episode_index,
                                                  wref.length, errors=[f"not readable back: {exc}"]))
            finally:  # samples are spread over the dataset: never keep one's file (or row groups) for the next
                for r in (back, reader):
                    if r is not None:
                        r.close()
                release_arrow_memory()
        return out
    finally:
        back.close()
