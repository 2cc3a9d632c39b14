"""RLDS writer: one TFRecord shard per work unit, committed atomically; the dataset's dataset_info.json and
features.json are written last (the commit).

Where a shard's bytes go while it is written:
* local: a temp file beside the final name, fsync, `os.replace` (the name appears complete or not at all);
* S3 / GCS: straight to the final key (no rename on object stores): one PUT when the shard fits in one upload
  block, else a multipart (S3) / resumable (GCS) upload whose parts stream out as the shard grows, so memory stays
  bounded by one block; the object becomes visible only when the upload completes in `commit`. `abort` (or a
  crash) abandons the upload: no partial object is ever published (an S3 bucket lifecycle rule should expire
  incomplete multipart uploads left by killed workers);
* other filesystems (memory://): the shard is collected in memory and written with one `pipe_file`.
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from robo_ray.mapping import Mapping
from robo_ray.storage import (discard_upload, is_local, join, open_upload, storage_error, url_of, url_to_fs,
                              write_text_atomic)
from robo_ray.formats.rlds.example import FeatureValue, coalesced_chunks, example_segments, segments_size
from robo_ray.formats.rlds.schema import dataset_info_json, features_json, shard_filename
from robo_ray.spool import BytesSpool, spool_for
from robo_ray.formats.rlds.tfrecord import framed_chunks


@dataclass
class ShardResult:
    """The ~1 KB row a unit returns: what went into its shard and what was quarantined."""

    shard_index: int
    filename: str
    episodes: list[tuple[int, int]] = field(default_factory=list)  # (episode_index, steps)
    quarantined: list[dict[str, Any]] = field(default_factory=list)
    num_bytes: int = 0
    sha256: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ShardResult":
        d = dict(d)
        d["episodes"] = [tuple(e) for e in d.get("episodes", [])]
        return cls(**d)


def episode_features(steps: dict[str, FeatureValue], metadata: dict[str, Any]) -> dict[str, FeatureValue]:
    """Flat `steps/...` and `episode_metadata/...` keys, as tfds' ExampleSerializer lays them out."""
    flat: dict[str, FeatureValue] = {f"steps/{k}": v for k, v in steps.items()}
    for k, v in metadata.items():
        if isinstance(v, str):
            flat[f"episode_metadata/{k}"] = [v.encode("utf-8")]
        elif isinstance(v, bool):
            flat[f"episode_metadata/{k}"] = np.array([v], dtype=np.bool_)
        elif isinstance(v, (int, np.integer)):
            flat[f"episode_metadata/{k}"] = np.array([v], dtype=np.int64)
        else:
            flat[f"episode_metadata/{k}"] = np.array([v], dtype=np.float32)
    return flat


class ShardSink:
    """Accumulates one shard (see the module docstring for where the bytes go); `commit` publishes it under its
    final name, `abort` throws it away."""

    def __init__(self, writer: "RldsWriter", index: int, num_shards: int) -> None:
        self.writer = writer
        self.result = ShardResult(index, shard_filename(writer.mapping.dataset_name, "train", index, num_shards))
        self._hash = hashlib.sha256()
        self.final_path = join(writer.dataset_dir, self.result.filename)
        self._local = is_local(writer.fs)
        self._done = False
        self._upload: Any = None
        self._chunks: list[bytes] = []
        if self._local:
            os.makedirs(writer.dataset_dir, exist_ok=True)
            self._tmp_path = f"{self.final_path}.tmp-{uuid.uuid4().hex[:8]}"
            self._f: Any = open(self._tmp_path, "wb")
        else:
            self._upload = open_upload(writer.fs, self.final_path)

    @property
    def url(self) -> str:
        return url_of(self.writer.fs, self.final_path)

    def spool(self) -> BytesSpool:
        """A BytesList that spills to an anonymous scratch file in the destination (local) or the temp dir."""
        return spool_for(self.writer.fs, self.writer.dataset_dir)

    def add(self, episode_index: int, steps: dict[str, FeatureValue], metadata: dict[str, Any], n_steps: int) -> None:
        """Frame and write one episode; spooled features are streamed, so memory does not grow with its length."""
        segments = example_segments(episode_features(steps, metadata))
        for chunk in framed_chunks(segments_size(segments), coalesced_chunks(segments)):
            self._write(chunk)
        self.result.episodes.append((episode_index, n_steps))

    def _write(self, chunk: bytes) -> None:
        self._hash.update(chunk)
        self.result.num_bytes += len(chunk)
        if self._local:
            self._f.write(chunk)
        elif self._upload is not None:
            try:
                self._upload.write(chunk)  # uploads a part whenever a block is full
            except Exception as exc:  # noqa: BLE001 - the store failed after its retries
                self.abort()
                raise storage_error(exc, self.url, "uploading shard", self.writer.fs) from exc
        else:
            self._chunks.append(chunk)

    def quarantine(self, record: dict[str, Any]) -> None:
        self.result.quarantined.append(record)

    def commit(self) -> ShardResult:
        self.result.sha256 = self._hash.hexdigest()
        if self._local:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            os.replace(self._tmp_path, self.final_path)
        elif self._upload is not None:
            try:
                self._upload.close()  # one PUT, or completes the multipart/resumable upload: visible now
            except Exception as exc:  # noqa: BLE001
                self.abort()
                raise storage_error(exc, self.url, "uploading shard", self.writer.fs) from exc
            self._upload = None
        else:
            try:
                self.writer.fs.pipe_file(self.final_path, b"".join(self._chunks))
            except Exception as exc:  # noqa: BLE001
                raise storage_error(exc, self.url, "writing shard", self.writer.fs) from exc
            self._chunks = []
        self._done = True
        return self.result

    def abort(self) -> None:
        self._done = True
        if self._local:
            self._f.close()
            if os.path.exists(self._tmp_path):
                os.remove(self._tmp_path)
        elif self._upload is not None:
            discard_upload(self._upload)
            self._upload = None
        self._chunks = []

    def __del__(self) -> None:  # never let a forgotten sink publish a partial object through fsspec's __del__
        if not getattr(self, "_done", True) and getattr(self, "_upload", None) is not None:
            discard_upload(self._upload)


class RldsWriter:
    """Writes `<out>/rlds/<name>/<version>/`."""

    format_name = "rlds"

    def __init__(self, out_url: str, mapping: Mapping, storage_options: dict[str, Any] | None = None) -> None:
        self.out_url = out_url
        self.mapping = mapping
        self.fs, self.out_root = url_to_fs(out_url, storage_options)
        self.dataset_dir = join(self.out_root, "rlds", mapping.dataset_name, mapping.version)

    def open_shard(self, index: int, num_shards: int) -> ShardSink:
        return ShardSink(self, index, num_shards)

    def finalize(self, results: list[ShardResult], description: str) -> dict[str, Any]:
        """Write features.json then dataset_info.json (shard lengths exact, in shard order)."""
        results = sorted(results, key=lambda r: r.shard_index)
        lengths = [len(r.episodes) for r in results]
        info = dataset_info_json(self.mapping, lengths, sum(r.num_bytes for r in results), description)
        write_text_atomic(self.fs, join(self.dataset_dir, "features.json"),
                          json.dumps(features_json(self.mapping), indent=2, sort_keys=True))
        write_text_atomic(self.fs, join(self.dataset_dir, "dataset_info.json"),
                          json.dumps(info, indent=2, sort_keys=True))
        return info
