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
from typing import Any, Callable

import numpy as np

from robo_ray.episode import CanonicalEpisode, EpisodeRef, FeatureSpec
from robo_ray.images import ImageEncoder
from robo_ray.mapping import Mapping
from robo_ray.readers.base import Inventory
from robo_ray.formats.rlds.spool import BytesSpool
from robo_ray.spool import spool_for
from robo_ray.stages.plan import MAX_UNIT_EPISODES, Unit, plan_split_units
from robo_ray.storage import discard_upload, is_local, join, open_upload, storage_error, url_of, write_text_atomic
from robo_ray.formats.rlds.example import FeatureValue, coalesced_chunks, example_segments, segments_size
from robo_ray.formats.rlds.schema import dataset_info_json, features_json, parse_shard_filename, shard_filename
from robo_ray.formats.rlds.tfrecord import framed_chunks
from robo_ray.writers.base import UnitResult, UnitSink, VerifyContext, Writer


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


class ShardSink(UnitSink):
    """Accumulates one shard (see the module docstring for where the bytes go); `commit` publishes it under its
    final name, `abort` throws it away."""

    def __init__(self, writer: "RldsWriter", unit: Unit) -> None:
        index = unit.index
        self.writer = writer
        self.result = UnitResult(index, writer.shard_name(unit))
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
        return spool_for(self.writer.fs, self.writer.dataset_dir, BytesSpool)

    def add(self, episode: CanonicalEpisode) -> None:
        """Encode the episode's frames into spools, then frame and write its record (nothing is written before
        every camera is complete, so a camera that fails leaves the shard untouched)."""
        steps: dict[str, FeatureValue] = {}
        try:
            self.writer.episode_steps(episode, steps, self.spool)
            self.add_steps(episode.episode_index, steps, episode.metadata, episode.length)
        finally:
            for v in steps.values():
                if isinstance(v, BytesSpool):
                    v.close()

    def add_steps(self, episode_index: int, steps: dict[str, FeatureValue], metadata: dict[str, Any],
                  n_steps: int) -> None:
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

    def commit(self) -> UnitResult:
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


class RldsWriter(Writer):
    """Writes `<out>/rlds/<name>/<version>/`: one TFRecord shard per unit, one tf.train.Example per episode."""

    format_name = "rlds"
    title = "RLDS (TFDS TFRecord)"
    paired_reader = "rlds"
    OUTPUTS = ("rlds",)

    def __init__(self, out_url: str, mapping: Mapping, storage_options: dict[str, Any] | None = None,
                 options: dict[str, Any] | None = None) -> None:
        super().__init__(out_url, mapping, storage_options, options)
        img = mapping.images
        self.encoders = {
            fm.target: ImageEncoder(fmt=mapping.encoding_of(fm), quality=img.jpeg_quality,
                                    resize=tuple(img.resize) if img.resize else None)  # type: ignore[arg-type]
            for fm in mapping.image_maps()}

    @property
    def dataset_rel(self) -> str:
        return f"rlds/{self.mapping.dataset_name}/{self.mapping.version}"

    def commit_files(self) -> list[str]:
        return ["dataset_info.json"]

    def plan(self, refs: list[EpisodeRef], features: dict[str, FeatureSpec], target_unit_mb: float,
             min_units: int, max_unit_episodes: int = MAX_UNIT_EPISODES) -> list[Unit]:
        """Shards per source split (tfds names shards by split): each split is planned on its own, units are
        numbered across splits in the order the splits first appear; a source without splits is all `train`."""
        return plan_split_units(refs, features, target_unit_mb, min_units, max_unit_episodes)

    def shard_name(self, unit: Unit) -> str:
        pos, count = unit.split_shard or (unit.index, unit.num_shards)
        return shard_filename(self.mapping.dataset_name, unit.split or "train", pos, count)

    def unit_filenames(self, unit: Unit) -> list[str]:
        return [self.shard_name(unit)]

    def open_unit(self, unit: Unit) -> ShardSink:
        return ShardSink(self, unit)

    def episode_steps(self, ep: CanonicalEpisode, steps: dict[str, FeatureValue],
                      new_spool: Callable[[], BytesSpool]) -> None:
        """The episode as RLDS step features (flat `/` keys); camera frames are encoded into spools."""
        for fm in self.mapping.steps:
            if fm.kind == "tensor":
                steps[fm.target] = ep.tensors[fm.target]
            elif fm.kind == "text":
                steps[fm.target] = [t.encode("utf-8") for t in ep.texts[fm.target]]
        for fm in self.mapping.image_maps():
            frames = ep.cameras[fm.target]
            enc = self.encoders[fm.target]
            out = new_spool()
            steps[fm.target] = out
            for item in frames:
                out.append(enc.encode_item(item, frames.channels))
        steps["reward"] = ep.reward
        steps["discount"] = ep.discount
        steps["is_first"] = ep.is_first
        steps["is_last"] = ep.is_last
        steps["is_terminal"] = ep.is_terminal
        steps["language_instruction"] = [t.encode("utf-8") for t in ep.language]

    def finalize(self, results: list[UnitResult], inv: Inventory) -> dict[str, Any]:
        """Write features.json then dataset_info.json (shard lengths exact, in shard order)."""
        results = sorted(results, key=lambda r: r.shard_index)
        splits: dict[str, tuple[list[int], list[int]]] = {}  # split -> (shard lengths, bytes), in shard order
        for r in results:
            parsed = parse_shard_filename(self.mapping.dataset_name, r.filename)
            split = parsed[0] if parsed else "train"
            lengths, sizes = splits.setdefault(split, ([], []))
            lengths.append(len(r.episodes))
            sizes.append(r.num_bytes)
        description = f"{inv.dataset_name} ({inv.source_format} {inv.source_version}) converted by robo-ray"
        info = dataset_info_json(self.mapping, [(s, lengths, sum(sizes)) for s, (lengths, sizes) in splits.items()],
                                 description)
        write_text_atomic(self.fs, join(self.dataset_dir, "features.json"),
                          json.dumps(features_json(self.mapping), indent=2, sort_keys=True))
        write_text_atomic(self.fs, join(self.dataset_dir, "dataset_info.json"),
                          json.dumps(info, indent=2, sort_keys=True))
        return info

    def prepare_verify(self, loader_readback: bool) -> None:
        """Start the tfds read-back's child process now: TensorFlow's import overlaps the conversion."""
        if loader_readback:
            from robo_ray.formats.rlds.readback import prewarm

            prewarm()

    def verify_unit(self, result: UnitResult, ctx: VerifyContext) -> Any:
        from robo_ray.formats.rlds.verify import RldsVerifier

        return RldsVerifier(self, ctx).check_unit(result)

    def verify(self, ctx: VerifyContext, res: Any) -> bool:
        from robo_ray.formats.rlds.verify import RldsVerifier

        return RldsVerifier(self, ctx).run(res)

    def usage(self) -> list[str]:
        rel = self.dataset_rel
        return ["```python", "import tensorflow_datasets as tfds", "",
                f"builder = tfds.builder_from_directory('{self.out_url}/{rel}')",
                "dataset = builder.as_dataset(split='train')", "for episode in dataset.take(1):",
                "    print(episode['episode_metadata']['episode_id'])",
                "    for step in episode['steps'].take(1):",
                "        print({k: v.shape for k, v in step['observation'].items()})", "```", "",
                f"Octo / OpenVLA style: `tfds.builder('{self.mapping.dataset_name}', data_dir='{self.out_url}/rlds')`."]
