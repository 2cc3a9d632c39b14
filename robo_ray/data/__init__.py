"""robo-ray inside Ray Data (issue #29): `read` any source robo-ray reads into a Ray Dataset of episode or step
rows, and `write` a Ray Dataset of episode rows to any target robo-ray writes, with the run's guarantees (units
named by the plan, quarantine instead of loss, finalize, validation and the reports). Names no format: it talks
to the Reader / Writer contracts only.

    import robo_ray.data as rd
    ds = rd.read("s3://bucket/lerobot_dataset")                   # one row an episode
    ds = ds.filter(lambda r: r["length"] >= 50)
    outcome = rd.write(ds, "out/", to=..., name="mine")           # to: any `robo-ray run --to` choice
"""
from __future__ import annotations

from typing import Any, Sequence

__all__ = ["read", "write"]


def read(url: str, *, format: str | None = None, granularity: str = "episode", columns: Sequence[str] | None = None,
         decode_images: bool = False, splits: Sequence[str] | None = None,
         storage_options: dict[str, Any] | None = None, **reader_options: Any) -> Any:
    """A `ray.data.Dataset` of the source at `url` (local path or object store URL; format detected unless given).

    `granularity="episode"`: one row an episode (low-dim columns as (T, ...) arrays named by their canonical names,
    cameras as T encoded frames or, with `decode_images=True`, a (T, H, W, C) array; `language`, `metadata` (JSON),
    `source` + `episode_index` (the source id), `reward`, `discount`, the step flags). `"step"`: one row a step
    (`step` its index). `columns`: the features to keep (canonical names); `splits`: the source splits to read;
    `reader_options`: the reader's own keywords (config `source.options`, e.g. fps)."""
    import ray.data

    from robo_ray.data.datasource import SourceDatasource

    return ray.data.read_datasource(SourceDatasource(url, format, storage_options, reader_options, granularity,
                                                     columns, decode_images, splits))


def write(ds: Any, dst: str, **kwargs: Any) -> Any:
    """Write a Dataset of episode rows (`read`'s, after any map / filter / union) to `dst`; see
    `robo_ray.data.write_job.write_dataset` for the options. Returns the run's `RunOutcome`."""
    from robo_ray.data.write_job import write_dataset

    return write_dataset(ds, dst, **kwargs)
