"""The RLDS half of Validate. Per unit (`check_unit`, on the worker right after the commit): re-read the shard
(CRC-checked framing, our Example parser), per-record schema, NaN/Inf, sampled images, sha256 and episodes against
the ledger entry, statistics, the sampled episodes compared with the source. Per dataset (`run`): dataset_info.json
/ features.json, every shard present (one listing) with the lengths dataset_info.json says, the merged unit checks,
and a read-back of a sample of shards through the real tfds."""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from robo_ray.errors import EpisodeError
from robo_ray.formats.rlds.example import decode_example, decode_example_stream
from robo_ray.formats.rlds.readback import ReadbackUnavailable, readback_process
from robo_ray.formats.rlds.schema import shard_filename
from robo_ray.formats.rlds.tfrecord import STREAM_RECORDS_OVER, iter_records
from robo_ray.images import decode_frame
from robo_ray.stages.check_records import UnitCheck, UnitChecks, ValidationResult
from robo_ray.stages.norm_stats import StatsAccumulator
from robo_ray.stages.sample_compare import WrittenSample, compare_samples
from robo_ray.stages.sampling import sample_indices, spread_sample
from robo_ray.storage import HashingReader, is_local, join, open_sequential
from robo_ray.writers.base import UnitResult, VerifyContext
from robo_ray.writers.committed import uncommitted_units

if TYPE_CHECKING:
    from robo_ray.formats.rlds.writer import RldsWriter

DATASET_INFO_KEYS = {"citation", "description", "fileFormat", "moduleName", "name", "releaseNotes", "splits",
                     "version", "location", "redistributionInfo", "downloadSize", "configName", "configDescription",
                     "supervisedKeys", "schema", "sizeInBytes", "alternativeFileFormats"}


def _leaf_shapes(mapping: Any) -> dict[str, tuple[str, list[int]]]:
    out = {f"steps/{fm.target}": (fm.kind, fm.shape) for fm in mapping.steps}
    for k in ("reward", "discount", "is_first", "is_last", "is_terminal"):
        out[f"steps/{k}"] = ("tensor", [])
    out["steps/language_instruction"] = ("text", [])
    return out


class RldsVerifier:
    """Verification of an RLDS dataset written by RldsWriter: `check_unit` re-reads one shard (on the worker that
    wrote it, or in a validation pass), `run` does the dataset-level checks over the merged unit checks."""

    def __init__(self, writer: "RldsWriter", ctx: VerifyContext) -> None:
        self.writer, self.ctx = writer, ctx
        self.fs, self.mapping = writer.fs, writer.mapping
        self.dataset_dir = writer.dataset_dir

    def run(self, res: ValidationResult) -> bool:
        """Verify; returns whether the dataset is committed (dataset_info.json and features.json exist)."""
        info = self._check_metadata(res)
        if info is None:
            self._check_unfinished(res)
            return False
        shards = [(str(sp["name"]), shard_filename(self.mapping.dataset_name, str(sp["name"]), i,
                                                   len(sp["shardLengths"])), int(n))
                  for sp in info["splits"] for i, n in enumerate(sp["shardLengths"])]
        self._splits = [str(sp["name"]) for sp in info["splits"]]
        results = {r.filename: r for r in self.ctx.results()}
        checks = self.ctx.unit_checks
        if checks is None:  # a caller that did not go through Validator: re-read every unit here
            checks = UnitChecks(self.mapping)
            for r in results.values():
                checks.add(self.check_unit(r))
        self._check_shard_list(res, shards, results)
        checks.apply(res, self.ctx.min_psnr_db)
        n = checks.counts
        res.problems += checks.notes
        res.add("schema", not n.get("schema"), f"{n.get('schema')} features with wrong size" if n.get("schema")
                else "every feature has its declared per-step size")
        nonfinite = n.get("nonfinite", 0)
        res.add("nan/inf", nonfinite == 0 or self.ctx.allow_nonfinite, f"NaN/Inf values: {nonfinite}"
                + (" (allowed by convert.nan_policy=allow)" if nonfinite and self.ctx.allow_nonfinite else ""))
        res.add("images", not n.get("bad_images"), f"undecodable or mis-sized sampled images: "
                f"{n.get('bad_images', 0)}")
        if not any(c.name.startswith("checksum ") for c in res.checks) and any(r.sha256 for r in results.values()):
            res.add("checksums", True, "every shard's sha256 (re-read after its commit) equals the ledger")
        if self.ctx.loader_readback:
            self._tfds_readback(res, shards, results)
        else:
            res.skip("tfds read-back", "turned off (validate.tfds_readback: false, or --no-tfds)")
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
        """No dataset_info.json (the run did not finish): name the planned shards not committed."""
        u = uncommitted_units(self.fs, self.dataset_dir, self.ctx.ledger,
                              lambda i, n: shard_filename(self.mapping.dataset_name, "train", i, n))
        res.add("shards present", not u.units, f"run not finished: {u.line()}" if u.units
                else f"{u.planned} shards committed, dataset_info.json not written yet")

    def _listing(self) -> dict[str, int]:
        """The dataset folder's files -> size, in one listing."""
        try:
            entries = self.fs.ls(self.dataset_dir, detail=True)
        except FileNotFoundError:
            return {}
        return {e["name"].rstrip("/").rsplit("/", 1)[-1]: int(e.get("size") or 0) for e in entries
                if e.get("type") != "directory"}

    def _check_shard_list(self, res: ValidationResult, shards: list[tuple[str, str, int]],
                          results: dict[str, UnitResult]) -> None:
        """Every shard dataset_info.json names exists (one listing), is in the ledger, and holds the number of
        episodes dataset_info.json says (the unit's re-read compared the file with its ledger entry)."""
        present = self._listing()
        missing = [name for _, name, _ in shards if name not in present]
        res.add("shards present", not missing, f"missing shard files: {', '.join(missing)}" if missing
                else f"{len(shards)} shard files, all present")
        for _, name, n in shards:
            r = results.get(name)
            if name in missing:
                continue
            if r is None:
                res.add(f"shard {name}", False, f"shard {name} is not in the run's ledger")
            elif len(r.episodes) != n:
                res.add(f"shard length {name}", False, f"shard {name}: dataset_info.json says {n} episodes, the "
                        f"ledger {len(r.episodes)}")

    # ---- one unit ---------------------------------------------------------------------------------------------
    def check_unit(self, r: UnitResult) -> UnitCheck:
        """Re-read one shard (CRC-checked framing, our Example parser, hashed in the same pass): its episodes and
        steps against the ledger entry `r`, schema, NaN/Inf, sampled images, statistics, the sampled episodes
        against the source. On the worker that has just written it (`ctx.rehash` False) the shard is not hashed
        again: every record's CRC, taken from the bytes that were hashed while writing, and the file's size
        matching stand for the digest, which stays the ledger's (about 30 us a 60 KB frame saved)."""
        c = UnitCheck(r.shard_index)
        name = r.filename
        if not name:
            return c
        shapes = _leaf_shapes(self.mapping)
        stats = StatsAccumulator(self.mapping)
        samples: dict[int, WrittenSample] = {}
        count = 0
        ledger_ids = [int(e) for e, _ in r.episodes]
        corrupt: ValueError | None = None
        try:
            raw_file = open_sequential(self.fs, join(self.dataset_dir, name))
        except FileNotFoundError:
            c.count("missing_files")  # named by the dataset-level listing
            return c
        rehash = self.ctx.rehash or not r.sha256
        with raw_file as raw:
            f = HashingReader(raw, hashing=rehash)  # one pass: records parsed and the file hashed
            try:
                for rec in iter_records(f):
                    count += 1
                    # a long episode is parsed as it streams by (its frames are never all in memory)
                    ex = decode_example(rec.read_all()) if rec.length <= STREAM_RECORDS_OVER \
                        else decode_example_stream(rec, big=STREAM_RECORDS_OVER // 4)
                    rec.finish()
                    # the k-th record is the k-th episode the ledger lists (the writer keeps that order): its
                    # episode_metadata/episode_id may be the source's own id (an OXE dataset's), not our index
                    ep_id = ledger_ids[count - 1] if count <= len(ledger_ids) else -count
                    T = len(ex.get("steps/is_first", []))
                    c.episode_steps[ep_id] = T
                    if ep_id in self.ctx.sample_ids:
                        samples[ep_id] = self._sample(ex, T)
                    stats.add({k[len("steps/"):]: v for k, v in ex.items() if k.startswith("steps/")}, T)
                    c.count("schema", self._check_schema(ex, T, shapes, ep_id, c))
                    c.count("nonfinite", self._count_nonfinite(ex))
                    c.count("bad_images", self._check_images(ex, T))
            except ValueError as exc:
                corrupt = exc
            sha = f.hexdigest() or r.sha256
        c.sha256[name] = sha
        if r.sha256 and r.sha256 != sha:
            c.fail(f"checksum {name}", f"shard {name} sha256 {sha[:12]}… differs from the ledger's {r.sha256[:12]}… "
                   "(modified after conversion)")
        if r.num_bytes and f.n != r.num_bytes and corrupt is None:
            c.fail(f"shard size {name}", f"shard {name} is {f.n} bytes, the ledger says {r.num_bytes}")
        if corrupt is not None:
            c.fail(f"shard {name}", f"shard {name} is corrupt: {corrupt}")
        elif count != len(r.episodes):
            c.fail(f"shard length {name}", f"shard {name} holds {count} episodes, the ledger says {len(r.episodes)}")
        elif c.episode_steps != {int(e): int(t) for e, t in r.episodes}:
            c.fail(f"shard episodes {name}", f"shard {name}: episodes or step counts differ from the ledger's")
        c.stats = stats.to_dict()
        c.sampled, c.mismatches = compare_samples(self.ctx, self.mapping, samples, c.psnr)
        return c

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
                out.images[fm.target] = lambda k, imgs=imgs, c=channels, d=fm.dtype: decode_frame(imgs[idx[k]], c, d)
        lang = ex.get("steps/language_instruction", [])
        out.language = [lang[i].decode("utf-8") for i in idx if i < len(lang)]
        return out

    def _check_schema(self, ex: dict[str, Any], T: int, shapes: dict[str, tuple[str, list[int]]], ep_id: int,
                      c: UnitCheck) -> int:
        bad = 0
        for key, (kind, shape) in shapes.items():
            v = ex.get(key)
            per = int(np.prod(shape)) if (shape and kind == "tensor") else 1
            if v is None or len(v) != T * per:
                bad += 1
                if bad == 1:
                    c.note(f"episode {ep_id}: {key} has {0 if v is None else len(v)} values, expected {T * per}")
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
                    arr = decode_frame(imgs[i], fm.shape[2], fm.dtype)
                except (EpisodeError, IndexError):
                    bad += 1
                    continue
                if list(arr.shape) != list(fm.shape):
                    bad += 1
        return bad

    # ---- tfds ------------------------------------------------------------------------------------------------
    def _readback_sample(self, shards: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
        """The shards the loader reads back: `ctx.readback_shards` non-empty ones spread over the dataset (first
        and last included; 0 = all)."""
        return spread_sample([s for s in shards if s[2] > 0], self.ctx.readback_shards)

    def _count_with_tfds(self, sample: list[tuple[str, str, int]], every: bool) -> tuple[int, int]:
        """(episodes, steps) through tfds.builder_from_directory, in the read-back child process (readback.py).
        A local dataset is read in place (a sample: as split slices, so tfds opens only the sampled shards). A
        remote one (tfds cannot open s3:// or an emulator's gs://): a local folder holding only the sampled shards,
        copied one by one (disk = the sample's size), renumbered, with dataset_info.json cut down to them."""
        child = readback_process()
        splits = sorted({split for split, _, _ in sample}, key=self._splits.index)
        if is_local(self.fs):  # the dataset itself; a sample as slices of its splits (tfds opens only their shards)
            return child.count(os.path.abspath(self.dataset_dir), splits if every else self._slices(sample))
        import tempfile

        with tempfile.TemporaryDirectory(prefix="robo-ray-readback-") as tmp:
            info = json.loads(self.fs.cat_file(join(self.dataset_dir, "dataset_info.json")))
            self.fs.get(join(self.dataset_dir, "features.json"), os.path.join(tmp, "features.json"))
            by_split: dict[str, list[tuple[str, int]]] = {}
            for split, name, n in sample:
                by_split.setdefault(split, []).append((name, n))
            kept = []
            for sp in info["splits"]:
                picked = by_split.get(str(sp["name"]))
                if not picked:
                    continue
                for i, (name, _) in enumerate(picked):
                    local = os.path.join(tmp, shard_filename(self.mapping.dataset_name, str(sp["name"]), i,
                                                             len(picked)))
                    self.fs.get(join(self.dataset_dir, name), local)
                sp = dict(sp, shardLengths=[str(n) for _, n in picked])
                sp.pop("numBytes", None)
                kept.append(sp)
            info["splits"] = kept
            with open(os.path.join(tmp, "dataset_info.json"), "w", encoding="utf-8") as f:
                json.dump(info, f)
            return child.count(tmp, splits)

    def _slices(self, sample: list[tuple[str, str, int]]) -> list[str]:
        """tfds split slices ("train[a:b]") covering exactly the sampled shards' episodes."""
        info = json.loads(self.fs.cat_file(join(self.dataset_dir, "dataset_info.json")))
        first: dict[str, int] = {}
        for sp in info["splits"]:
            at = 0
            for i, n in enumerate(sp["shardLengths"]):
                name = shard_filename(self.mapping.dataset_name, str(sp["name"]), i, len(sp["shardLengths"]))
                first[name] = at
                at += int(n)
        return [f"{split}[{first[name]}:{first[name] + n}]" for split, name, n in sample]

    def _tfds_readback(self, res: ValidationResult, shards: list[tuple[str, str, int]],
                       results: dict[str, UnitResult]) -> None:
        if res.episodes_written == 0:  # every episode quarantined: a valid, empty dataset
            res.skip("tfds read-back", "the dataset holds no episode (tfds refuses to build an empty split: "
                     "'Instruction [] corresponds to no data')")
            return
        sample = self._readback_sample(shards)
        every = len(sample) == len([s for s in shards if s[2] > 0])
        want_eps = sum(n for _, _, n in sample)
        want_steps = sum(t for _, name, _ in sample for _, t in (results[name].episodes if name in results else []))
        try:
            n_eps, n_steps = self._count_with_tfds(sample, every)
        except ReadbackUnavailable:  # the default install converts and validates; the loader read-back needs the extra
            res.skip("tfds read-back", "tensorflow-datasets is not installed (pip install 'robo-ray[tf]' to read "
                     "the output back through tfds); every other check ran")
            return
        except Exception as exc:  # any tfds/TF failure is a validation failure, reported in one line
            res.add("tfds read-back", False, f"tfds could not read the dataset: {type(exc).__name__}: "
                    f"{str(exc).splitlines()[0][:300] if str(exc) else ''}")
            return
        ok = n_eps == want_eps and n_steps == want_steps
        which = "every shard" if every else f"{len(sample)} of {len(shards)} shards (" + ", ".join(
            name for _, name, _ in sample) + ")"
        res.add("tfds read-back", ok, f"tfds.builder_from_directory read {n_eps} episodes / {n_steps} steps from "
                f"{which}, expected {want_eps} / {want_steps} (splits {', '.join(sorted({s for s, _, _ in sample}))})")
