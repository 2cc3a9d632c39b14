"""`robo-ray run SRC DST --source SRC2 ...`: several sources written as one dataset through `read` and `write`,
on the Ray instance this process has, else on a new local one (or `address`) shut down afterwards."""
from __future__ import annotations

from typing import Any, Sequence

import ray

from robo_ray.config import JobConfig
from robo_ray.errors import UsageError
from robo_ray.ray_exec.local_instance import init_local
from robo_ray.stages.run_log import RunOutcome

CONFIG_SECTIONS = ("source", "images", "plan", "splits", "convert", "validate")  # what `write` takes of the job


def write_sources(cfg: JobConfig, more_sources: Sequence[str], *, address: str | None = None,
                  num_cpus: int | None = None, overwrite: bool = False, resume: bool = False) -> RunOutcome:
    """The union of `cfg.source` and `more_sources` (read alike: format, storage and reader options) written to
    `cfg.target` with the job's other settings; `resume`: continue such a run cut short (`write`'s)."""
    from robo_ray.data import read, write

    if cfg.max_episodes or cfg.mapping_file:
        raise UsageError("--max-episodes and --mapping do not apply to several sources (--source) yet")
    own = not ray.is_initialized()
    if own:
        kwargs = {"num_cpus": num_cpus, "include_dashboard": False, "logging_level": "WARNING", "log_to_driver": False}
        if address and address != "local":
            ray.init(address=address, **kwargs)
        else:
            init_local(**kwargs)
    try:
        src = cfg.source
        ds: Any = None
        for url in [src.url, *more_sources]:
            part = read(url, format=src.format, storage_options=src.storage_options, **src.options)
            ds = part if ds is None else ds.union(part)
        dump = cfg.model_dump(mode="json", by_alias=True)
        return write(ds, cfg.target.url, to=cfg.target.format, name=cfg.target.name, fps=src.options.get("fps"),
                     storage_options=cfg.target.storage_options, overwrite=overwrite, resume=resume,
                     config={k: v for k, v in dump.items() if k in CONFIG_SECTIONS}, **cfg.target.options)
    finally:
        if own:
            ray.shutdown()
