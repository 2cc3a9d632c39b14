"""The sources of a Dataset of episode rows, read from its bookkeeping columns: which sources, their
descriptions, every episode's ref (renumbered when several sources share the output) and where its row is, and
the one inventory the target is planned from. Features are matched by canonical name and role: a feature one
source lacks is one error naming it."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from robo_ray.data.rows_reader import MIXED_METADATA
from robo_ray.data.spec import (EPISODE, LANGUAGE, LENGTH, METADATA, REF, SOURCE, SPEC, STEP, STEP_FIELDS,
                                SourceSpec, ref_from_json)
from robo_ray.episode import EpisodeRef, FeatureSpec
from robo_ray.errors import DatasetColumns
from robo_ray.mapping import SOURCE_ROLES, Mapping, default_mapping
from robo_ray.readers.base import Inventory

REQUIRED = (SOURCE, EPISODE, LENGTH, REF, SPEC, METADATA, LANGUAGE, *STEP_FIELDS)


@dataclass(frozen=True)
class RowKey:
    """What the driver keeps of one row: its source, ref (JSON), steps, and place (block, row)."""

    source: str
    ref_json: str
    length: int
    block: int
    row: int


def check_columns(names: Sequence[str]) -> None:
    """Episode rows carry the bookkeeping `write` plans from; anything else is one error naming the column."""
    missing = [c for c in REQUIRED if c not in names]
    if not missing:
        return
    hint = " (step rows: read the source with granularity='episode' to write it)" if STEP in names else ""
    raise DatasetColumns(f"write: the dataset has no column {missing[0]!r}{hint}; write needs the episode rows of "
                         "robo_ray.data.read (a map may change their values, not drop these columns)")


@dataclass
class Sources:
    """The sources of the rows, in order of appearance, and the inventory of all their episodes."""

    specs: dict[str, SourceSpec]  # source -> its description
    inv: Inventory  # features / mapping of the first source; refs of every row, in output order
    where: dict[int, tuple[int, int]]  # output episode index -> (block, row)
    mapping: Mapping  # the first source's default mapping: row columns <-> source keys

    @property
    def mixed(self) -> bool:
        return len(self.specs) > 1


def gather_sources(keys: list[RowKey], specs: dict[str, str], names: Sequence[str],
                   fps: float | None) -> Sources:
    """The `Sources` of the rows `keys` (in dataset order) whose sources are described by `specs` (source ->
    SourceSpec JSON). Episodes are ordered source by source (order of first appearance), by index within one;
    with several sources they are numbered 0.. in that order."""
    order: list[str] = []
    for k in keys:
        if k.source not in order:
            order.append(k.source)
    parsed = {s: SourceSpec.from_json(specs[s]) for s in order}
    base = parsed[order[0]] if order else None
    mapping = default_mapping(base.inventory([])) if base else None
    if base is not None and mapping is not None:
        _check_same_features(mapping, parsed, order, names)
        rates = {s: p.fps for s, p in parsed.items()}
        if fps is None and len(set(rates.values())) > 1:
            raise DatasetColumns(f"write: the sources have different frame rates ({rates}); give fps=")
    rank = {s: i for i, s in enumerate(order)}
    refs: list[tuple[EpisodeRef, RowKey]] = []
    for k in keys:
        ref = ref_from_json(k.ref_json)
        refs.append((replace(ref, length=k.length) if ref.length != k.length else ref, k))
    refs.sort(key=lambda rk: (rank[rk[1].source], rk[0].episode_index))
    mixed = len(order) > 1
    if mixed:
        refs = [(replace(ref, episode_index=i), k) for i, (ref, k) in enumerate(refs)]
    _no_duplicates(refs)
    where = {ref.episode_index: (k.block, k.row) for ref, k in refs}
    if base is None:
        raise DatasetColumns("write: the dataset has no rows")
    inv = base.inventory([r for r, _ in refs], fps)
    if mixed:
        inv.metadata_types.update(MIXED_METADATA)  # type: ignore[arg-type]
        inv.dataset_root = " + ".join(order)
        inv.features.update(_step_fields(parsed, mapping))
        mapping = default_mapping(inv)
    assert mapping is not None
    return Sources(parsed, inv, where, mapping)


def _step_fields(parsed: dict[str, SourceSpec], base: Mapping) -> dict[str, FeatureSpec]:
    """Step fields (reward, discount, the flags) some source holds per step but the first one does not: features
    of the mixture, so every episode's own values are written (the first source's episodes hold its constants)."""
    out: dict[str, FeatureSpec] = {}
    for role, field in SOURCE_ROLES.items():
        if getattr(base.defaults, field) is not None:
            continue
        if any(getattr(default_mapping(p.inventory([])).defaults, field) for p in parsed.values()):
            flag = role not in ("reward", "discount")
            out[f"_mixture/{role}"] = FeatureSpec(f"_mixture/{role}", "tensor", "bool" if flag else "float32", (),
                                                  role=role, scalar=True)  # type: ignore[arg-type]
    return out


def _check_same_features(mapping: Mapping, parsed: dict[str, SourceSpec], order: list[str],
                         names: Sequence[str]) -> None:
    """Every source has the first one's features (canonical name, role, per-step shape), and every feature is a
    column of the dataset."""
    want = {fm.target: (fm.role, fm.kind, list(fm.shape)) for fm in mapping.steps}
    for target in want:
        if target not in names:
            raise DatasetColumns(f"write: the dataset has no column {target!r} (feature {target!r} of "
                                 f"{order[0]}); a map may change its values, not drop it")
    for s in order[1:]:
        other = default_mapping(parsed[s].inventory([]))
        have = {fm.target: (fm.role, fm.kind, list(fm.shape)) for fm in other.steps}
        for target, (role, kind, shape) in want.items():
            if target not in have:
                raise DatasetColumns(f"write: feature {target!r} ({role}) of {order[0]} is missing from {s}")
            if have[target] != (role, kind, shape):
                raise DatasetColumns(f"write: feature {target!r} is {role} {kind} {shape} in {order[0]} but "
                                     f"{have[target][0]} {have[target][1]} {have[target][2]} in {s}")
        extra = sorted(set(have) - set(want))
        if extra:
            raise DatasetColumns(f"write: feature {extra[0]!r} of {s} is missing from {order[0]}")


def _no_duplicates(refs: list[tuple[EpisodeRef, Any]]) -> None:
    seen: set[int] = set()
    for ref, k in refs:
        if ref.episode_index in seen:
            raise DatasetColumns(f"write: episode {ref.episode_index} of {k.source} is in the dataset twice")
        seen.add(ref.episode_index)
