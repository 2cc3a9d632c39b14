"""Validate: recompute everything from the written files (pipeline_stages.md, stage D).

Counts and per-episode steps against the source inventory, `discovered = written + quarantined`, schema (shapes,
dtypes), NaN/Inf, image decodability and range, shard checksums against the ledger, a sample comparison against the
source (low-dim exact, images by PSNR against the decoded source frame), and a read-back through the real tfds loader.
"""
from __future__ import annotations

import json
import os
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from robo_ray.episode import EpisodeRef
from robo_ray.errors import EpisodeError
from robo_ray.images import decode_image
from robo_ray.mapping import Mapping
from robo_ray.readers.base import Inventory, Reader
from robo_ray.storage import HashingReader, is_local, join, open_sequential, write_text_atomic
from robo_ray.formats.rlds.example import decode_example, decode_example_stream
from robo_ray.formats.rlds.schema import shard_filename
from robo_ray.formats.rlds.tfrecord import iter_records

DATASET_INFO_KEYS = {"citation", "description", "fileFormat", "moduleName", "name", "releaseNotes", "splits",
                     "version", "location", "redistributionInfo", "downloadSize", "configName", "configDescription",
                     "supervisedKeys", "schema", "sizeInBytes", "alternativeFileFormats"}
# Records (episodes) larger than this are parsed as a stream: memory stays bounded whatever the episode length.
STREAM_RECORDS_OVER = int(os.environ.get("ROBO_RAY_STREAM_RECORDS_OVER", 64 << 20))


@dataclass
class Check:
    name: str
    passed: bool
    detail: str = ""


@dataclass
class ValidationResult:
    checks: list[Check] = field(default_factory=list)
    episodes_written: int = 0
    steps_written: int = 0
    episode_steps: dict[int, int] = field(default_factory=dict)
    shard_sha256: dict[str, str] = field(default_factory=dict)
    psnr: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    statistics: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def add(self, name: str, passed: bool, detail: str = "") -> None:
        self.checks.append(Check(name, passed, detail))
        if not passed:
            self.problems.append(f"{name}: {detail}")


class StatsAccumulator:
    """Normalization statistics of every numeric step feature, over all written steps (exact quantiles)."""

    def __init__(self, mapping: Mapping) -> None:
        self.keys = {f"steps/{fm.target}": fm for fm in mapping.steps if fm.kind == "tensor"}
        self.keys["steps/reward"] = None  # type: ignore[assignment]
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in self.keys}

    def add(self, ex: dict[str, Any], T: int) -> None:
        if T == 0:
            return
        for key in self.keys:
            v = ex.get(key)
            if isinstance(v, np.ndarray) and v.size and v.size % T == 0:
                self.parts[key].append(v.reshape(T, -1))

    def finish(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, parts in self.parts.items():
            if not parts:
                continue
            a = np.concatenate(parts).astype(np.float64)
            fm = self.keys[key]
            shape = list(fm.shape) if fm is not None else []
            def vec(x: np.ndarray) -> Any:
                return x.reshape(shape).tolist() if shape else float(x.reshape(-1)[0])
            out[key[len("steps/"):]] = {
                "mean": vec(a.mean(0)), "std": vec(a.std(0)), "min": vec(a.min(0)), "max": vec(a.max(0)),
                "q01": vec(np.quantile(a, 0.01, axis=0)), "q99": vec(np.quantile(a, 0.99, axis=0)),
                "count": int(a.shape[0])}
        return out


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def _leaf_shapes(mapping: Mapping) -> dict[str, tuple[str, list[int]]]:
    out = {f"steps/{fm.target}": (fm.kind, fm.shape) for fm in mapping.steps}
    for k in ("reward", "discount", "is_first", "is_last", "is_terminal"):
        out[f"steps/{k}"] = ("tensor", [])
    out["steps/language_instruction"] = ("text", [])
    return out


class Validator:
    """Validates one written RLDS dataset against its source inventory and the run's ledger."""

    def __init__(self, fs, out_root: str, mapping: Mapping, inv: Inventory | None, reader: Reader | None,
                 ledger: dict[str, Any] | None, sample_episodes: int = 50, min_psnr_db: float = 30.0,
                 tfds_readback: bool = True, allow_nonfinite: bool = False) -> None:
        self.fs, self.out_root, self.mapping = fs, out_root, mapping
        self.inv, self.reader, self.ledger = inv, reader, ledger or {}
        self.sample_episodes, self.min_psnr_db, self.tfds_readback = sample_episodes, min_psnr_db, tfds_readback
        self.allow_nonfinite = allow_nonfinite
        self._stats = StatsAccumulator(mapping)
        self._keep: set[int] = set()
        self.dataset_dir = join(out_root, "rlds", mapping.dataset_name, mapping.version)

    def run(self) -> ValidationResult:
        res = ValidationResult()
        info = self._check_metadata(res)
        if info is None:
            self._check_unfinished(res)
            return res
        lengths = [int(x) for x in info["splits"][0]["shardLengths"]]
        self._keep = self._sample_ids()
        episodes = self._check_shards(res, lengths)
        self._check_counts(res, episodes)
        res.statistics = self._stats.finish()
        if self.reader is not None and self.inv is not None:
            self._sample_comparison(res, episodes)
        if self.tfds_readback:
            self._tfds_readback(res)
        return res

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
        n = int(self.ledger.get("num_shards") or 0)
        names = [shard_filename(self.mapping.dataset_name, "train", i, n) for i in range(n)]
        missing = [x for x in names if not self.fs.exists(join(self.dataset_dir, x))]
        res.add("shards present", not missing, f"run not finished: missing shard files: {', '.join(missing)}"
                if missing else f"{n} shard files present, dataset_info.json not written yet")

    # ---- shards ----------------------------------------------------------------------------------------------
    def _check_shards(self, res: ValidationResult, lengths: list[int]) -> dict[int, dict[str, Any]]:
        """Read every record of every shard (CRC-checked); returns episode_index -> decoded example."""
        shapes = _leaf_shapes(self.mapping)
        expected_sha = {s["filename"]: s["sha256"] for s in self.ledger.get("shards", [])}
        episodes: dict[int, dict[str, Any]] = {}
        n_nonfinite = n_bad_images = n_schema = 0
        missing: list[str] = []
        for i, n in enumerate(lengths):
            name = shard_filename(self.mapping.dataset_name, "train", i, len(lengths))
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
                        if ep_id in episodes:
                            res.add("unique episodes", False, f"episode {ep_id} appears twice (shard {name})")
                        episodes[ep_id] = {"shard": name, "steps": T,
                                           "example": ex if ep_id in self._keep else None}
                        self._stats.add(ex, T)
                        n_schema += self._check_schema(ex, T, shapes, ep_id, res)
                        n_nonfinite += self._count_nonfinite(ex)
                        n_bad_images += self._check_images(ex, T, res)
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
                else f"{len(lengths)} shard files, all readable")
        res.add("schema", n_schema == 0, f"{n_schema} features with wrong size" if n_schema
                else "every feature has its declared per-step size")
        res.add("nan/inf", n_nonfinite == 0 or self.allow_nonfinite, f"NaN/Inf values: {n_nonfinite}"
                + (" (allowed by convert.nan_policy=allow)" if n_nonfinite and self.allow_nonfinite else ""))
        res.add("images", n_bad_images == 0, f"undecodable or mis-sized sampled images: {n_bad_images}")
        if not any(c.name.startswith("checksum ") for c in res.checks) and expected_sha:
            res.add("checksums", True, "every shard's sha256 equals the ledger")
        res.episodes_written = len(episodes)
        res.steps_written = sum(e["steps"] for e in episodes.values())
        res.episode_steps = {k: v["steps"] for k, v in sorted(episodes.items())}
        return episodes

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

    def _check_images(self, ex: dict[str, Any], T: int, res: ValidationResult) -> int:
        bad = 0
        for fm in self.mapping.image_maps():
            imgs = ex.get(f"steps/{fm.target}") or []
            for i in sorted({0, T // 2, T - 1}) if T else []:
                try:
                    arr = decode_image(imgs[i], fm.shape[2])
                except (EpisodeError, IndexError):
                    bad += 1
                    continue
                if list(arr.shape) != list(fm.shape):
                    bad += 1
        return bad

    # ---- counts ----------------------------------------------------------------------------------------------
    def _check_counts(self, res: ValidationResult, episodes: dict[int, dict[str, Any]]) -> None:
        if self.inv is None:
            return
        quarantined = {q["episode_index"] for s in self.ledger.get("shards", []) for q in s.get("quarantined", [])}
        quarantined |= {q["episode_index"] for q in self.ledger.get("unit_failures", [])}
        discovered = {r.episode_index: r.length for r in self.inv.refs}
        written = set(episodes)
        lost = sorted(set(discovered) - written - quarantined)
        extra = sorted(written - set(discovered))
        both = sorted(written & quarantined)
        ok = not lost and not extra and not both
        res.add("discovered = written + quarantined", ok,
                f"{len(discovered)} = {len(written)} + {len(quarantined)}" if ok else
                f"missing from output and not quarantined: {lost[:20]}; unexpected: {extra[:20]}; "
                f"written and quarantined: {both[:20]}")
        wrong = [(i, discovered[i], episodes[i]["steps"]) for i in sorted(written & set(discovered))
                 if discovered[i] != episodes[i]["steps"]]
        res.add("per-episode steps", not wrong, "every written episode has its source length" if not wrong else
                "; ".join(f"episode {i}: source {a} steps, output {b}" for i, a, b in wrong[:10]))
        exp_steps = sum(discovered[i] for i in written & set(discovered))
        res.add("total steps", res.steps_written == exp_steps,
                f"output {res.steps_written} steps, source {exp_steps} for the written episodes")

    # ---- sample comparison -------------------------------------------------------------------------------------
    def _sample_ids(self) -> set[int]:
        """Episodes compared to the source: `sample_episodes` spread evenly over the discovered ones."""
        if self.inv is None or self.reader is None or not self.sample_episodes:
            return set()  # 0 = no comparison with the source (`robo-ray convert`, benchmarks)
        ids = [r.episode_index for r in self.inv.refs]
        if len(ids) > self.sample_episodes:
            step = len(ids) / self.sample_episodes
            ids = [ids[int(k * step)] for k in range(self.sample_episodes)]
        return set(ids)

    def _sample_comparison(self, res: ValidationResult, episodes: dict[int, dict[str, Any]]) -> None:
        assert self.reader is not None and self.inv is not None
        refs = {r.episode_index: r for r in self.inv.refs}
        ids = sorted(i for i in episodes if i in refs and episodes[i]["example"] is not None)
        mismatches: list[str] = []
        for ep_id in ids:
            mismatches += self._compare_episode(refs[ep_id], episodes[ep_id]["example"], res)
        ok_psnr = not res.psnr or min(res.psnr) >= self.min_psnr_db
        res.add("sample low-dim", not mismatches, f"{len(ids)} episodes x first/middle/last step equal the source"
                if not mismatches else "; ".join(mismatches[:10]))
        if res.psnr:
            res.add("sample images", ok_psnr, f"{len(res.psnr)} images, PSNR mean {np.mean(res.psnr):.1f} dB, "
                    f"min {min(res.psnr):.1f} dB (threshold {self.min_psnr_db} dB)")

    def _compare_episode(self, ref: EpisodeRef, ex: dict[str, Any], res: ValidationResult) -> list[str]:
        from robo_ray.stages.source_frames import source_frames

        try:
            ep = self.reader.load_episode(ref)  # type: ignore[union-attr]
        except EpisodeError as exc:
            return [f"episode {ref.episode_index}: source unreadable ({exc})"]
        T = ep.length
        idx = sorted({0, T // 2, T - 1}) if T else []
        out: list[str] = []
        for fm in self.mapping.steps:
            key = f"steps/{fm.target}"
            if fm.kind == "tensor":
                per = int(np.prod(fm.shape)) if fm.shape else 1
                got = np.asarray(ex[key]).reshape(T, per)
                src = ep.columns[fm.source].reshape(T, per)
                want = src.astype(np.float32) if fm.dtype == "float32" else src.astype(np.int64)
                for i in idx:
                    if not np.array_equal(got[i].astype(want.dtype), want[i], equal_nan=want.dtype.kind == "f"):
                        out.append(f"episode {ref.episode_index} step {i}: {fm.target} differs from {fm.source}")
            elif fm.kind == "image":
                frames = source_frames(self.reader, ep, fm.source, idx)
                for i, src in zip(idx, frames):
                    got = decode_image(ex[key][i], fm.shape[2])
                    if src.shape != got.shape:
                        src = _resize_like(src, got.shape)
                    res.psnr.append(_psnr(src, got))
        lang = ex.get("steps/language_instruction", [])
        for i in idx:
            if i < len(lang) and lang[i].decode("utf-8") != ep.step_tasks[i]:
                out.append(f"episode {ref.episode_index} step {i}: language_instruction differs from the task")
        return out

    # ---- tfds ------------------------------------------------------------------------------------------------
    def _tfds_readback(self, res: ValidationResult) -> None:
        try:
            import tensorflow_datasets as tfds
        except ImportError:
            res.add("tfds read-back", False, "tensorflow-datasets is not installed (pip install robo-ray[tf]); "
                    "disable with validate.tfds_readback=false")
            return
        def count(directory: str) -> tuple[int, int]:
            builder = tfds.builder_from_directory(directory)
            ds = builder.as_dataset(split="train", decoders={"steps": tfds.decode.SkipDecoding()})
            eps = steps = 0
            for ep in ds:
                eps += 1
                steps += int(ep["steps"]["is_first"].shape[0])
            return eps, steps

        try:
            if is_local(self.fs):
                n_eps, n_steps = count(self.dataset_dir)
            else:  # tfds cannot open s3:// or an emulator's gs://: read a local copy (disk = the dataset's size)
                import tempfile

                with tempfile.TemporaryDirectory(prefix="robo-ray-readback-") as tmp:
                    self.fs.get(self.dataset_dir.rstrip("/") + "/", tmp + "/", recursive=True)
                    n_eps, n_steps = count(tmp)
        except Exception as exc:  # any tfds/TF failure is a validation failure, reported in one line
            res.add("tfds read-back", False, f"tfds could not read the dataset: {type(exc).__name__}: "
                    f"{str(exc).splitlines()[0][:300]}")
            return
        ok = n_eps == res.episodes_written and n_steps == res.steps_written
        res.add("tfds read-back", ok, f"tfds.builder_from_directory read {n_eps} episodes / {n_steps} steps")


def _resize_like(src: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    from PIL import Image

    img = Image.fromarray(src if src.shape[2] == 3 else src[:, :, 0])
    arr = np.asarray(img.resize((shape[1], shape[0]), Image.Resampling.BILINEAR))
    return arr if arr.ndim == 3 else arr[:, :, None]


def validation_markdown(res: ValidationResult, name: str, seconds: float) -> str:
    status = "✅ PASSED" if res.passed else "❌ FAILED"
    lines = [f"# Validation Report: {name}", "", "## Summary", f"- **Status**: {status}",
             f"- **Validated at**: {datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}",
             f"- **Duration**: {seconds:.1f}s", f"- **Episodes written**: {res.episodes_written}",
             f"- **Steps written**: {res.steps_written}", "", "## Checks", "", "| Check | Result | Detail |",
             "|---|---|---|"]
    lines += [f"| {c.name} | {'✅' if c.passed else '❌'} | {c.detail} |" for c in res.checks]
    if res.problems:
        lines += ["", "## Problems", ""] + [f"- {p}" for p in res.problems[:200]]
    return "\n".join(lines) + "\n"


def diff_summary(res: ValidationResult) -> dict[str, Any]:
    return {"passed": res.passed, "episodes_written": res.episodes_written, "steps_written": res.steps_written,
            "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in res.checks],
            "psnr_db": {"count": len(res.psnr), "mean": float(np.mean(res.psnr)) if res.psnr else None,
                        "min": float(min(res.psnr)) if res.psnr else None},
            "episode_steps": {str(k): v for k, v in res.episode_steps.items()},
            "shard_sha256": res.shard_sha256, "problems": res.problems[:1000]}


def write_validation_outputs(fs, out_root: str, res: ValidationResult, name: str, seconds: float) -> None:
    write_text_atomic(fs, join(out_root, "validation_report.md"), validation_markdown(res, name, seconds))
    write_text_atomic(fs, join(out_root, "diff_summary.json"), json.dumps(diff_summary(res), indent=2))
    stats = {"note": "normalization statistics over every written step (float64 math on the stored float32 "
                     "values); count = steps", "features": res.statistics}
    write_text_atomic(fs, join(out_root, "dataset_statistics.json"), json.dumps(stats, indent=2))
