"""What the configured target makes of the source (Spec and Plan's choices): the mapping (an edited mapping file
or the writer's default schema), the writer (target.format through the registry) and the val split."""
from __future__ import annotations

from robo_ray.config import JobConfig
from robo_ray.episode import EpisodeRef
from robo_ray.errors import ConfigError
from robo_ray.mapping import Mapping
from robo_ray.readers.base import Inventory
from robo_ray.stages.plan import assign_val_split
from robo_ray.stages.run_log import RunLog
from robo_ray.stages.spec import load_mapping
from robo_ray.writers import Writer, writer_class


def make_writer(cfg: JobConfig, mapping: Mapping) -> Writer:
    """The configured target's writer (target.format through the registry, target.options to its model)."""
    return writer_class(cfg.target.format)(cfg.target.url, mapping, cfg.target.storage_options, cfg.target.options)


def resolve_mapping(cfg: JobConfig, inv: Inventory) -> Mapping:
    """The mapping file when given, else the target's default schema; checked against the source's features."""
    if cfg.mapping_file:
        with open(cfg.mapping_file, encoding="utf-8") as f:
            mapping = load_mapping(f.read(), cfg.mapping_file)
    else:
        mapping = writer_class(cfg.target.format).default_schema(inv, cfg.images, cfg.target.name)
        mapping.version = cfg.target.version
    if cfg.source.instruction is not None:  # the config / --instruction wins over an edited mapping's
        mapping.defaults.instruction = cfg.source.instruction
    mapping.check_against(inv.features)
    return mapping


def apply_val_split(cfg: JobConfig, writer: Writer, refs: list[EpisodeRef], log: RunLog) -> list[EpisodeRef]:
    """`splits.val_fraction` (--val-fraction): the episodes moved to `val` (stages.plan.assign_val_split), logged."""
    if cfg.splits.val_fraction <= 0:
        return refs
    if not writer.keeps_splits:
        raise ConfigError(f"--val-fraction / splits.val_fraction: the {writer.title} target has no splits; "
                          "drop it or choose another target")
    refs = assign_val_split(refs, cfg.splits.val_fraction, writer.mapping.dataset_name)
    val = [r.episode_index for r in refs if r.split == "val"]
    log.info(f"splits: val_fraction {cfg.splits.val_fraction} -> {len(val)} of {len(refs)} episodes in val "
             f"(source episode indices {val[:50]}{' ...' if len(val) > 50 else ''})")
    return refs
