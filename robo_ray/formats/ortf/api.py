"""The ORTF Python API: `write_ortf(source_url, out_url, ...) -> OrtfWriteResult`, the whole pipeline in-process."""
from __future__ import annotations

import io
import json
import posixpath
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from robo_ray.errors import ConfigError
from robo_ray.formats.ortf.layout import MANIFEST
from robo_ray.formats.ortf.writer import OrtfWriter
from robo_ray.storage import join, url_to_fs


@dataclass
class OrtfWriteResult:
    out_url: str
    episodes: int
    steps: int
    cameras: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    quarantined: list[dict[str, Any]] = field(default_factory=list)


def write_ortf(source_url: str, out_url: str, *, source_format: str | None = None,
               storage_options: dict[str, Any] | None = None, out_storage_options: dict[str, Any] | None = None,
               max_episodes: int | None = None, fps: float | None = None, lossless: bool = False, crf: int = 18,
               chunk_size: int = 1000, name: str | None = None, overwrite: bool = False,
               created_at: str | None = None) -> OrtfWriteResult:
    """Convert a source dataset to ORTF v0.2 at `out_url` (the whole pipeline, in-process: discover, plan, convert,
    finalize, validate, reports beside the dataset). Quarantined episodes are returned, not raised; a dataset that
    fails validation raises ValidationFailed."""
    from robo_ray.config import JobConfig
    from robo_ray.errors import ValidationFailed
    from robo_ray.stages.pipeline import run_pipeline

    options: dict[str, Any] = {"lossless": lossless, "crf": crf, "chunk_size": chunk_size}
    for k, v in (("fps", fps), ("name", name), ("created_at", created_at)):
        if v is not None:
            options[k] = v
    try:
        cfg = JobConfig.model_validate({
            "source": {"url": source_url, "format": source_format, "storage_options": storage_options or {}},
            "target": {"url": out_url, "format": "ortf", "options": options,
                       "storage_options": out_storage_options or {}},
            "images": {"encoding": "png"}, "max_episodes": max_episodes,
            "convert": {"max_quarantine_fraction": 1.0}})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"invalid argument {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    outcome = run_pipeline(cfg, overwrite=overwrite, stderr=io.StringIO())
    if not outcome.validation_passed:
        raise ValidationFailed(outcome.message)
    fs, root = url_to_fs(out_url, out_storage_options)
    manifest = json.loads(fs.cat_file(join(root, MANIFEST)))
    files = sorted(posixpath.relpath(p, root.rstrip("/") or "/") for top in OrtfWriter.OUTPUTS
                   if fs.exists(join(root, top)) for p in fs.find(join(root, top)))
    return OrtfWriteResult(out_url, int(manifest["statistics"]["total_episodes"]),
                           int(manifest["statistics"]["total_steps"]), list(manifest["observation_space"]["images"]),
                           files, outcome.quarantined)
