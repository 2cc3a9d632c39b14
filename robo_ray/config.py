"""JobConfig: YAML (configs/*.yaml) + `--set a.b=c` overrides + CLI flags, validated by pydantic."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from robo_ray.errors import ConfigError
from robo_ray.mapping import ImageOptions


class SourceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = ""
    format: str | None = None
    storage_options: dict[str, Any] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)  # the reader's own keywords (e.g. splits, name, fps)
    instruction: str | None = None  # the language instruction of steps without task text (--instruction)


class TargetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = ""
    format: str = "rlds"  # a name in robo_ray.writers.REGISTRY (checked when the writer is built)
    name: str | None = None  # dataset name (default: from the source folder)
    options: dict[str, Any] = Field(default_factory=dict)  # the writer's own settings (its Options model)
    version: str = "1.0.0"
    storage_options: dict[str, Any] = Field(default_factory=dict)
    shared: bool = False  # a local destination every node of a multi-node cluster sees (NFS...): --shared-destination


class PlanConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    target_shard_mb: float = Field(256.0, gt=0)
    min_shards: int = Field(4, ge=1)
    max_unit_episodes: int = Field(1000, ge=1)  # a unit (= shard / data file) holds at most this many episodes


class SplitsConfig(BaseModel):
    """`val_fraction` (--val-fraction): move this fraction of the source's train (or unsplit) episodes to a `val`
    split, chosen by a hash of the dataset name and episode index (robo_ray.stages.plan.assign_val_split); 0 keeps
    the source's splits as they are."""

    model_config = ConfigDict(extra="forbid")
    val_fraction: float = Field(0.0, ge=0.0, lt=1.0)


class ConvertConfig(BaseModel):
    """How episodes are converted.

    Timeouts (robo_ray/watchdog.py; `null` turns one off, both `null` turn the watchdog off):

    * `unit_timeout_s` (default 3600): wall time one attempt at a unit (one output shard) may take. A unit over
      it is stopped (its worker replaced) and its episodes are quarantined as EP902 (on Ray after
      ROBO_RAY_MAX_ATTEMPTS attempts).
    * `read_timeout_s` (default 300): longest time a worker may go without progress (a video frame decoded, a
      file opened, an episode started or finished), e.g. a read that never returns. The episode being read is
      quarantined as EP902 naming the file, the worker is replaced and the rest of the unit converted without it.
      Remote reads retry on their own first (s3 5 attempts of 15 s), so keep it above a minute for buckets.

    In-process runs convert in a worker thread that is abandoned when stuck (PyAV/FFmpeg and Python file reads
    wait with the GIL released) and replaced by a fresh one; on Ray the driver kills the stuck actor (Ray restarts
    it). Neither timeout changes the bytes of a converted shard, and neither is part of what `--resume` compares
    (a resume may raise them)."""

    model_config = ConfigDict(extra="forbid")
    video_tolerance_s: float = Field(1e-4, gt=0, le=1.0)
    nan_policy: Literal["quarantine", "fail", "allow"] = "quarantine"
    decoder_threads: int = Field(1, ge=0, le=64)
    decode_ahead: int = Field(8, ge=0, le=256)  # a decoding thread per camera, this many frames ahead (0: none)
    decode_thread: Literal["auto"] | bool = "auto"  # auto: only where the converter has a CPU to spare
    max_quarantine_fraction: float = Field(0.0, ge=0.0, le=1.0)
    unit_timeout_s: float | None = Field(3600.0, ge=1.0, le=7 * 24 * 3600.0)
    read_timeout_s: float | None = Field(300.0, ge=1.0, le=24 * 3600.0)


class ValidateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sample_episodes: int = Field(50, ge=0)
    min_psnr_db: float = 30.0
    tfds_readback: bool = True
    readback_shards: int = Field(2, ge=0)  # files the loader's read-back reads (a sample, spread; 0 = every file)


class JobConfig(BaseModel):
    """Everything a run needs; serialised into the output so a resume can check it is the same job."""

    model_config = ConfigDict(extra="forbid")
    source: SourceConfig = Field(default_factory=SourceConfig)
    target: TargetConfig = Field(default_factory=TargetConfig)
    images: ImageOptions = Field(default_factory=ImageOptions)
    plan: PlanConfig = Field(default_factory=PlanConfig)
    splits: SplitsConfig = Field(default_factory=SplitsConfig)
    convert: ConvertConfig = Field(default_factory=ConvertConfig)
    validate_: ValidateConfig = Field(default_factory=ValidateConfig, alias="validate")
    mapping_file: str | None = None
    max_episodes: int | None = Field(None, ge=1)

    def safe_dump(self) -> dict[str, Any]:
        """`model_dump(mode="json", by_alias=True)` with credentials masked (storage option values such as
        `secret`, `key`, `token`; passwords and signatures in URLs): what job.json, reports and logs may hold.

        Two dumps of the same job with different credentials are equal, so a resume with rotated keys is still
        "the same job"."""
        from robo_ray.secrets import redact_options, redact_url

        data = self.model_dump(mode="json", by_alias=True)
        for section in ("source", "target"):
            sec = data.get(section) or {}
            if sec.get("url"):
                sec["url"] = redact_url(sec["url"])
            sec["storage_options"] = redact_options(sec.get("storage_options") or {})
        return data


def _set_path(d: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
        if not isinstance(d, dict):
            raise ConfigError(f"--set {dotted}: {p} is not a section")
    d[parts[-1]] = value


def load_config(path: str | None = None, overrides: list[str] | None = None, **fields: Any) -> JobConfig:
    """Merge a YAML file, `key.path=value` overrides (values parsed as YAML) and explicit fields."""
    data: dict[str, Any] = {}
    if path:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path} must hold a mapping")
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects key.path=value, got {item!r}")
        _set_path(data, key.strip(), yaml.safe_load(raw))
    for dotted, value in fields.items():
        if value is not None:
            _set_path(data, dotted.replace("__", "."), value)
    try:
        return JobConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise ConfigError(f"invalid config at {loc}: {first['msg']}") from exc
