"""The RLDS half of Validate: re-read every shard (CRC-checked framing, our Example parser), check
dataset_info.json / features.json, per-record schema, NaN/Inf, sampled images, sha256 against the ledger, hand the
sampled episodes to the neutral comparison with the source, and read the dataset back through the real tfds."""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from robo_ray.errors import EpisodeError
from robo_ray.formats.rlds.example import decode_example, decode_example_stream
from robo_ray.formats.rlds.readback import ReadbackUnavailable, readback_process
from robo_ray.formats.rlds.schema import shard_filename
from robo_ray.formats.rlds.tfrecord import iter_records
from robo_ray.images import decode_image
from robo_ray.stages.validate import (StatsAccumulator, ValidationResult, WrittenSample, sample_checks,
                                      sample_indices)
from robo_ray.storage import HashingReader, is_local, join, open_sequential
from robo_ray.writers.base import VerifyContext

if TYPE_CHECKING:
    from robo_ray.formats.rlds.writer import RldsWriter

DATASET_INFO_KEYS = {"citation", "description", "fileFormat", "moduleName", "name", "releaseNotes", "splits",
                     "version", "location", "redistributionInfo", "downloadSize", "configName", "configDescription",
                     "supervisedKeys", "schema", "sizeInBytes", "alternativeFileFormats"}
# Records (episodes) larger than this are parsed as a stream: memory stays bounded whatever the episode length.
STREAM_RECORDS_OVER = int(os.environ.get("ROBO_RAY_STREAM_RECORDS_OVER", 64 << 20))


def _leaf_shapes(mapping: Any) -> dict[str, tuple[str, list[int]]]:
    out = {f"steps/{fm.target}": (fm.kind, fm.shape) for fm in mapping.steps}
    for k in ("reward", "discount", "is_first", "is_last", "is_terminal"):
        out[f"steps/{k}"] = ("tensor", [])
    out["steps/language_instruction"] = ("text", [])
    return out


class RldsVerifier:
    """One verification pass over an RLDS dataset written by RldsWriter."""

    def __init__(self, writer: "RldsWriter", ctx: VerifyContext) -> None:
        self.writer, self.ctx = writer, ctx
        self.fs, self.mapping = writer.fs, writer.mapping
        self.dataset_dir = writer.dataset_dir
        self._stats = StatsAccumulator(self.mapping)

    def run(self, res: ValidationResult) -> bool:
        """Verify; returns whether the dataset is committed (dataset_info.json and features.json exist)."""
        info = self._check_metadata(res)
        if info is None:
            self._check_unfinished(res)
            return False
        shards = [(shard_filename(self.mapping.dataset_name, str(sp["name"]), i, len(sp["shardLengths"])), int(n))
                  for sp in info["splits"] for i, n in enumerate(sp["shardLengths"])]
        self._splits = [str(sp["name"]) for sp in info["splits"]]
        samples = self._check_shards(res, shards)
        res.set_statistics(self._stats)
        sample_checks(self.ctx, self.mapping, samples, res)
        if self.ctx.loader_readback:
            self._tfds_readback(res)
        return True

    # ---- metadata --------------------------------------------------------------------------------------------
    def _check_metadata(self, res: ValidationResult) -> dict[str, Any] | None:
        p = join(self.dataset_dir, "dataset_info.json")
        if not self.fs.exists(p) or not self.fs.exists(join(self.dataset_dir, "features.json")):
            res.add("metadata", False, f"dataset_info.json or features.json missing in {self.dataset_dir}")
            return None
        info = json.loads(self.fs.cat_file(p))
        unknown = sorted(set(info) - DATASET_INFO_KEYS)
        ok = not unknown and info.get("name") == self.mapping.dataset_name and not info.get("disableShuffling")
        res.add("metadata", ok, "dataset_info.json has only keys tfds parses, name matches, shuffling allowed"
                if ok else f"dataset_info.json: unknown keys {unknown} or wrong name / disableShuffling")
        return info

    def _check_unfinished(self, res: ValidationResult) -> None:
        """No dataset_info.json (the run did not finish): name the planned shards (ledger) that are missing."""
        n = int(self.ctx.ledger.get("num_shards") or 0)
        names = list(self.ctx.ledger.get("unit_files") or
                     [shard_filename(self.mapping.dataset_name, "train", i, n) for i in range(n)])
        missing = [x for x in names if not self.fs.exists(join(self.dataset_dir, x))]
        res.add("shards present", not missing, f"run not finished: missing shard files: {', '.join(missing)}"
                if missing else f"{n} shard files present, dataset_info.json not written yet")

    # ---- shards ----------------------------------------------------------------------------------------------
    def _check_shards(self, res: ValidationResult, shards: list[tuple[str, int]]) -> dict[int, WrittenSample]:
        """Read every record of every shard (CRC-checked); returns the sampled episodes' written values."""
        shapes = _leaf_shapes(self.mapping)
        expected_sha = {s["filename"]: s["sha256"] for s in self.ctx.ledger.get("shards", [])}
        steps_of: dict[int, int] = {}
        samples: dict[int, WrittenSample] = {}
        n_nonfinite = n_bad_images = n_schema = 0
        missing: list[str] = []
        for name, n in shards:
            path = join(self.dataset_dir, name)
            if not self.fs.exists(path):
                missing.append(name)
                continue
            count = 0
            corrupt: ValueError | None = None
            with open_sequential(self.fs, path) as raw:
                f = HashingReader(raw)  # one pass: records parsed and the file hashed
                try:
                    for rec in iter_records(f):
                        count += 1
                        # a long episode is parsed as it streams by (its frames are never all in memory)
                        ex = decode_example(rec.read_all()) if rec.length <= STREAM_RECORDS_OVER \
                            else decode_example_stream(rec, big=STREAM_RECORDS_OVER // 4)
                        rec.finish()
                        ep_id = int(np.asarray(ex.get("episode_metadata/episode_id", [-1]))[0])
                        T = len(ex.get("steps/is_first", []))
                        if ep_id in steps_of:
                            res.add("unique episodes", False, f"episode {ep_id} appears twice (shard {name})")
                        steps_of[ep_id] = T
                        if ep_id in self.ctx.sample_ids:
                            samples[ep_id] = self._sample(ex, T)
                        self._stats.add({k[len("steps/"):]: v for k, v in ex.items() if k.startswith("steps/")}, T)
                        n_schema += self._check_schema(ex, T, shapes, ep_id, res)
                        n_nonfinite += self._count_nonfinite(ex)
                        n_bad_images += self._check_images(ex, T)
                except ValueError as exc:
                    corrupt = exc
                sha = f.hexdigest()
            res.shard_sha256[name] = sha
            if name in expected_sha and expected_sha[name] != sha:
                res.add(f"checksum {name}", False, f"shard {name} sha256 {sha[:12]}… differs from the ledger's "
                        f"{expected_sha[name][:12]}… (modified after conversion)")
            if corrupt is not None:
                res.add(f"shard {name}", False, f"shard {name} is corrupt: {corrupt}")
                continue
            if count != n:
                res.add(f"shard length {name}", False, f"shard {name} holds {count} episodes, dataset_info.json "
                        f"says {n}")
        res.add("shards present", not missing, f"missing shard files: {', '.join(missing)}" if missing
                else f"{len(shards)} shard files, all readable")
        res.add("schema", n_schema == 0, f"{n_schema} features with wrong size" if n_schema
                else "every feature has its declared per-step size")
        res.add("nan/inf", n_nonfinite == 0 or self.ctx.allow_nonfinite, f"NaN/Inf values: {n_nonfinite}"
                + (" (allowed by convert.nan_policy=allow)" if n_nonfinite and self.ctx.allow_nonfinite else ""))
        res.add("images", n_bad_images == 0, f"undecodable or mis-sized sampled images: {n_bad_images}")
        if not any(c.name.startswith("checksum ") for c in res.checks) and expected_sha:
            res.add("checksums", True, "every shard's sha256 equals the ledger")
        res.set_episodes(steps_of)
        return samples

    def _sample(self, ex: dict[str, Any], T: int) -> WrittenSample:
        idx = sample_indices(T)
        out = WrittenSample(T)
        for fm in self.mapping.steps:
            key = f"steps/{fm.target}"
            if fm.kind == "tensor":
                per = int(np.prod(fm.shape)) if fm.shape else 1
                out.tensors[fm.target] = np.asarray(ex[key]).reshape(T, per)[idx]
            elif fm.kind == "image":
                imgs, channels = ex[key], fm.shape[2]
                out.images[fm.target] = lambda k, imgs=imgs, c=channels: decode_image(imgs[idx[k]], c)
        lang = ex.get("steps/language_instruction", [])
        out.language = [lang[i].decode("utf-8") for i in idx if i < len(lang)]
        return out

    def _check_schema(self, ex: dict[str, Any], T: int, shapes: dict[str, tuple[str, list[int]]], ep_id: int,
                      res: ValidationResult) -> int:
        bad = 0
        for key, (kind, shape) in shapes.items():
            v = ex.get(key)
            per = int(np.prod(shape)) if (shape and kind == "tensor") else 1
            if v is None or len(v) != T * per:
                bad += 1
                if bad == 1:
                    res.problems.append(f"episode {ep_id}: {key} has {0 if v is None else len(v)} values, "
                                        f"expected {T * per}")
        return bad

    @staticmethod
    def _count_nonfinite(ex: dict[str, Any]) -> int:
        return sum(int((~np.isfinite(v)).sum()) for v in ex.values()
                   if isinstance(v, np.ndarray) and v.dtype.kind == "f")

    def _check_images(self, ex: dict[str, Any], T: int) -> int:
        bad = 0
        for fm in self.mapping.image_maps():
            imgs = ex.get(f"steps/{fm.target}") or []
            for i in sample_indices(T):
                try:
                    arr = decode_image(imgs[i], fm.shape[2])
                except (EpisodeError, IndexError):
                    bad += 1
                    continue
                if list(arr.shape) != list(fm.shape):
                    bad += 1
        return bad

    # ---- tfds ------------------------------------------------------------------------------------------------
    def _count_with_tfds(self) -> tuple[int, int]:
        """(episodes, steps) through tfds.builder_from_directory, in the read-back child process (readback.py)."""
        child = readback_process()
        if is_local(self.fs):
            return child.count(os.path.abspath(self.dataset_dir), list(self._splits))
        import tempfile  # tfds cannot open s3:// or an emulator's gs://: read a local copy (disk = the dataset's size)

        with tempfile.TemporaryDirectory(prefix="robo-ray-readback-") as tmp:
            self.fs.get(self.dataset_dir.rstrip("/") + "/", tmp + "/", recursive=True)
            return child.count(tmp, list(self._splits))

    def _tfds_readback(self, res: ValidationResult) -> None:
        if res.episodes_written == 0:  # every episode quarantined: a valid, empty dataset
            res.add("tfds read-back", True, "skipped: the dataset holds no episode (tfds refuses to build an empty "
                    "split: 'Instruction [] corresponds to no data')")
            return
        try:
            n_eps, n_steps = self._count_with_tfds()
        except ReadbackUnavailable:  # the default install converts and validates; the loader read-back needs the extra
            res.add("tfds read-back", True, "skipped: tensorflow-datasets is not installed (pip install "
                    "'robo-ray[tf]' to read the output back through tfds); every other check ran")
            return
        except Exception as exc:  # any tfds/TF failure is a validation failure, reported in one line
            res.add("tfds read-back", False, f"tfds could not read the dataset: {type(exc).__name__}: "
                    f"{str(exc).splitlines()[0][:300] if str(exc) else ''}")
            return
        ok = n_eps == res.episodes_written and n_steps == res.steps_written
        res.add("tfds read-back", ok, f"tfds.builder_from_directory read {n_eps} episodes / {n_steps} steps "
                f"(splits {', '.join(self._splits)})")
