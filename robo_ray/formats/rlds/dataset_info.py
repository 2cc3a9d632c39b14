"""dataset_info.json of a TFDS-written RLDS dataset: the shards' file format and, per split, each shard's path
(from its `filepathTemplate`) with the episodes it declares; the input is untrusted (counts and paths bounded)."""
from __future__ import annotations

import re
from typing import Any

from robo_ray.errors import SourceFormatError, UnknownFormat, UnsafeInput
from robo_ray.safety import MAX_EPISODES, check_count, render_path_template

INFO = "dataset_info.json"
DEFAULT_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
MAX_SHARDS = 100_000  # per split


def file_format(info: dict[str, Any]) -> str:
    """The shards' file format: TFRecord, the only one read (UnknownFormat otherwise)."""
    fmt = info.get("fileFormat") or "tfrecord"
    alternatives = info.get("alternativeFileFormats") or []
    if fmt == "tfrecord" or (isinstance(alternatives, list) and "tfrecord" in alternatives):
        return "tfrecord"
    raise UnknownFormat(f"{INFO}: fileFormat {fmt!r:.40}: only TFRecord shards are supported (not "
                        "array_record, parquet or riegeli)")


def split_shards(info: dict[str, Any], dataset_name: str, file_format: str) -> dict[str, list[tuple[str, int]]]:
    """split -> [(shard path relative to the version folder, declared episodes)], in dataset_info order."""
    splits = info.get("splits")
    if not isinstance(splits, list) or not splits:
        raise SourceFormatError(f"{INFO}: `splits` is missing or empty")
    out: dict[str, list[tuple[str, int]]] = {}
    total = 0
    for i, s in enumerate(splits):
        name = s.get("name") if isinstance(s, dict) else None
        if not isinstance(name, str) or not re.match(r"^[\w.-]{1,100}$", name) or name in out:
            raise SourceFormatError(f"{INFO}: splits[{i}].name {name!r:.60} is not a unique split name")
        lengths = s.get("shardLengths", [])
        if not isinstance(lengths, list) or len(lengths) > MAX_SHARDS:
            raise UnsafeInput(f"{INFO}: splits[{i}].shardLengths is not a list of at most {MAX_SHARDS}")
        counts = []
        for n in lengths:
            try:
                n = int(n) if isinstance(n, (int, str)) and not isinstance(n, bool) and len(str(n)) < 20 \
                    else None
            except ValueError:
                n = None
            counts.append(check_count(f"{INFO}: split {name} shard length", n, MAX_EPISODES))
        total = check_count(f"{INFO}: total episodes", total + sum(counts), MAX_EPISODES)
        template = s.get("filepathTemplate") or DEFAULT_TEMPLATE
        out[name] = [(_shard_path(template, dataset_name, file_format, name, j, len(counts)), n)
                     for j, n in enumerate(counts)]
    return out


def _shard_path(template: Any, dataset_name: str, file_format: str, split: str, index: int, num: int) -> str:
    """The path of shard `index` of `num` in `split`: its tfds template filled in with only the known fields."""
    digits = max(5, len(str(num)))
    fields = {"DATASET": dataset_name, "SPLIT": split, "FILEFORMAT": file_format,
              "SHARD_INDEX": f"{index:0{digits}d}", "NUM_SHARDS": f"{num:0{digits}d}",
              "SHARD_X_OF_Y": f"{index:0{digits}d}-of-{num:0{digits}d}"}
    try:
        return render_path_template(template, fields)
    except UnsafeInput as exc:
        raise UnsafeInput(f"{INFO}: split {split}: filepathTemplate: {exc}") from exc
    except ValueError as exc:
        raise SourceFormatError(f"{INFO}: split {split}: filepathTemplate {template!r:.80} ({exc})") from exc
