"""The LeRobot v3.0 half of Validate, in two halves (robo_ray/writers/base.py, the per-unit contract): re-read what
LeRobotWriter wrote and check it the way lerobot 0.6.1 uses it.

Per unit (`check_unit`, on the worker right after the commit, or in a validation pass over an existing output), with
the numbering the unit's ledger entry carries (`extra["numbering"]`: episode / row offsets and task ids):
* every file of the unit hashed (sha256 and size against the unit's result);
* the data parquet: schema, rows per episode as the result says, `index` = offset..offset+N-1, episode_index,
  frame_index 0..len-1, timestamp = float32(frame_index / fps), each episode's task ids those of its tasks, NaN/Inf,
  statistics of the written values (mergeable, `UnitCheck.stats`);
* its meta/episodes part: schema, one row per episode with its index, tasks, length, row range, file references
  and per-camera from/to timestamps back to back in the unit's MP4;
* every MP4 of the unit: one video stream, size / pixel format / codec as written, packets one per frame with pts
  exactly k/fps; the first / middle / last frame of every episode decoded at from_timestamp + k/fps within lerobot's
  tolerance (1e-4 s, strict);
* the sampled episodes (`ctx.sample_ids`) compared with the source (robo_ray.stages.sample_compare.compare_samples:
  low-dim exact, images by PSNR, language through the unit's task ids).

Per dataset (`run`): meta/info.json (the commit); every unit file present with the ledger's size and nothing else
under data/, meta/episodes/ or videos/ (one listing; lerobot loads every data parquet it finds); the units' digests
against the ledger; the units' numbering contiguous over the ledger (episode and row offsets) and equal to
info.json's totals; meta/tasks.parquet, and every unit's task ids naming its tasks there; meta/stats.json; the merged
unit checks; the paired reader (robo_ray.readers, "lerobot") discovers the output with no error and loads episode 0.
Unit files are not re-read here, except the two parquet files of a unit `finalize` renumbered after its worker's
re-read (`extra["renumbered_from"]`: {file: the digest finalize read}): hashed again, and their numbering checked.
`res.set_episodes` gets {source episode index: steps}: the output renumbers episodes, the ledger maps them back.
"""
from __future__ import annotations

import hashlib
import io
import json
import posixpath
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robo_ray.formats.lerobot.video_encode import ENCODERS, PIX_FMT
from robo_ray.formats.lerobot.paths import (BOOKKEEPING, CODEBASE_VERSION, DATA_PATH, EMPTY_EPISODES, INFO, STATS,
                                            TASKS, VIDEO_PATH)
from robo_ray.stages.check_records import UnitCheck, UnitChecks, ValidationResult
from robo_ray.stages.norm_stats import StatsAccumulator
from robo_ray.stages.sample_compare import WrittenSample, compare_samples
from robo_ray.stages.sampling import sample_indices
from robo_ray.storage import hash_file, is_local, join, open_sequential
from robo_ray.writers.base import UnitResult, VerifyContext
from robo_ray.writers.committed import uncommitted_units

if TYPE_CHECKING:
    from robo_ray.formats.lerobot.layout import Feature
    from robo_ray.formats.lerobot.writer import LeRobotWriter

TOLERANCE_S = 1e-4  # lerobot's tolerance_s: |decoded frame time - query| must be strictly below it
REQUIRED_INFO = ("codebase_version", "fps", "features", "total_episodes", "total_frames", "total_tasks",
                 "chunks_size", "data_path", "splits")
BOOKKEEPING_COLUMNS = list(BOOKKEEPING)
MAX_FILE_PROBLEMS = 5  # problems named per file (the rest counted): a unit's check stays small
AV1_DECODERS = ("av1", "libdav1d", "libaom-av1")


def _fail(c: UnitCheck, name: str, detail: str) -> None:
    """A failed check of the unit, also counted by kind (`failed:<kind>`: the failures list is capped)."""
    c.fail(name, detail)
    kind = "checksum" if name.startswith("checksum ") else name
    c.count(f"failed:{kind}")


def _detail(msgs: list[str]) -> str:
    more = len(msgs) - MAX_FILE_PROBLEMS
    return "; ".join(msgs[:MAX_FILE_PROBLEMS]) + (f"; and {more} more" if more > 0 else "")


@dataclass
class UnitView:
    """One unit as its ledger entry describes it: files, episodes and the numbering its files carry."""

    r: UnitResult
    chunk: int
    file: int
    meta_rel: str
    e0: int  # episode_index of its first episode
    i0: int  # global `index` of its first row
    lengths: list[int]
    sources: list[int]  # source episode index of each episode
    tasks: list[list[str]]  # each episode's tasks, in first-appearance order
    task_ids: dict[str, int]  # task -> the id its files use

    @classmethod
    def of(cls, r: UnitResult) -> "UnitView":
        ex = r.extra or {}
        num = ex.get("numbering") or {}
        names = list(ex.get("tasks") or [])
        ids = dict(zip(names, [int(i) for i in num.get("task_ids") or []]))
        eps = ex.get("episodes") or []
        chunk, file = _chunk_file(r.filename)
        meta_rel = next((f["name"] for f in r.files if f["name"].startswith("meta/episodes/")), "")
        return cls(r, chunk, file, meta_rel, int(num.get("episode_offset", 0)), int(num.get("index_offset", 0)),
                   [int(e["length"]) for e in eps], [int(e["source"]) for e in eps],
                   [[names[j] for j in e.get("tasks", [])] for e in eps], ids)

    def starts(self) -> list[int]:
        """Each episode's first row in the unit's files."""
        return [int(x) for x in np.cumsum([0, *self.lengths[:-1]])] if self.lengths else []

    def where(self, rel: str, k: int) -> str:
        return f"{rel}: episode {self.e0 + k} (source episode {self.sources[k]})"


def numbering_problems(u: UnitView, data: pa.Table, fps: int) -> list[str]:
    """The data parquet's bookkeeping columns against the unit's numbering: rows per episode, index, episode_index,
    frame_index, timestamps k/fps, each episode's task ids."""
    rel, n, total = u.r.filename, data.num_rows, sum(u.lengths)
    if n != total:
        return [f"{rel}: {n} rows, its {len(u.lengths)} episodes hold {total} (lengths {u.lengths[:10]})"]
    col = {c: data[c].to_numpy() for c in BOOKKEEPING_COLUMNS}
    out: list[str] = []
    if not np.array_equal(col["index"], np.arange(u.i0, u.i0 + n)):
        out.append(f"{rel}: index is not {u.i0}..{u.i0 + n - 1} (rows are looked up by position)")
    for k, (a, length) in enumerate(zip(u.starts(), u.lengths)):
        rows, steps = slice(a, a + length), np.arange(length)
        if not np.all(col["episode_index"][rows] == u.e0 + k):
            out.append(f"{u.where(rel, k)}: episode_index is not {u.e0 + k} on its rows {a}..{a + length - 1}")
        if not np.array_equal(col["frame_index"][rows], steps):
            out.append(f"{u.where(rel, k)}: frame_index is not 0..{length - 1}")
        if not np.array_equal(col["timestamp"][rows], (steps / fps).astype(np.float32)):
            out.append(f"{u.where(rel, k)}: timestamps are not frame_index / {fps}")
        want = [u.task_ids.get(t, -1) for t in u.tasks[k]]
        got = list(dict.fromkeys(col["task_index"][rows].tolist()))
        if got != want:
            out.append(f"{u.where(rel, k)}: task_index {got[:5]}, its tasks {u.tasks[k][:3]} have ids {want[:5]}")
    return out


def meta_problems(u: UnitView, meta: pa.Table, cameras: list["Feature"], fps: int) -> list[str]:
    """The unit's meta/episodes rows against its numbering and files (one row per episode, in order)."""
    rel = u.meta_rel
    rows = meta.select([c for c in meta.column_names if not c.startswith("stats/")]).to_pylist()
    if len(rows) != len(u.lengths):
        return [f"{rel}: {len(rows)} episodes, the unit holds {len(u.lengths)}"]
    out: list[str] = []
    for k, (row, a, n) in enumerate(zip(rows, u.starts(), u.lengths)):
        want: dict[str, Any] = {"episode_index": u.e0 + k, "tasks": u.tasks[k], "length": n,
                                "data/chunk_index": u.chunk, "data/file_index": u.file,
                                "dataset_from_index": u.i0 + a, "dataset_to_index": u.i0 + a + n,
                                "meta/episodes/chunk_index": u.chunk, "meta/episodes/file_index": u.file}
        for cam in cameras:
            want[f"videos/{cam.key}/chunk_index"], want[f"videos/{cam.key}/file_index"] = u.chunk, u.file
        wrong = [f"{key} {row.get(key)!r}, expected {v!r}" for key, v in want.items() if row.get(key) != v]
        for cam in cameras:
            t0, t1 = row.get(f"videos/{cam.key}/from_timestamp"), row.get(f"videos/{cam.key}/to_timestamp")
            if t0 is None or t1 is None or abs(t0 - a / fps) > 1e-9 or abs(t1 - (a + n) / fps) > 1e-9:
                wrong.append(f"{cam.key} window [{t0}, {t1}] is not [{a}/{fps}, {a + n}/{fps}]")
        if wrong:
            out.append(f"{u.where(rel, k)}: " + "; ".join(wrong[:3]))
    return out


def schema_problem(rel: str, got: pa.Schema, want: pa.Schema, what: str) -> str | None:
    """One line naming the columns whose name or type differ (None when they all match)."""
    if [(f.name, f.type) for f in got] == [(f.name, f.type) for f in want]:
        return None
    have = {f.name: str(f.type) for f in got}
    diff = [f"{f.name}: {have.get(f.name, 'missing')} (want {f.type})" for f in want if have.get(f.name) != str(f.type)]
    diff += [f"{name}: unexpected" for name in have if name not in want.names]
    return f"{rel}: schema differs from {what}: {'; '.join(diff[:4]) or 'column order'}"


class LeRobotVerifier:
    """Verification of a dataset written by LeRobotWriter: `check_unit` re-reads one unit's files (on the worker that
    wrote it, or in a validation pass), `run` does the dataset-level checks over the merged unit checks."""

    def __init__(self, writer: "LeRobotWriter", ctx: VerifyContext) -> None:
        self.writer, self.ctx = writer, ctx
        self.fs = writer.fs
        self.root = writer.dataset_dir
        self.layout = writer.layout
        self.mapping = writer.mapping
        self._fps: int | None = None

    def path(self, rel: str) -> str:
        return join(self.root, rel)

    def rel(self, p: str) -> str:
        return posixpath.relpath(p, self.root.rstrip("/") or "/")

    def fps(self) -> int:
        """The frame rate the unit was written at: the writer's (its options on a worker), else meta/info.json's,
        else the source inventory's."""
        if self._fps is None:
            fps: Any = self.writer.options.fps
            if not fps and self.fs.exists(self.path(INFO)):
                try:
                    fps = json.loads(self.fs.cat_file(self.path(INFO))).get("fps")
                except ValueError:
                    fps = None
            if not fps and self.ctx.inv is not None:
                fps = self.ctx.inv.fps
            if not isinstance(fps, (int, float)) or fps <= 0 or fps != int(fps):
                raise ValueError(f"no integer frame rate to check the unit's timestamps with ({fps!r})")
            self._fps = int(fps)
        return self._fps

    # ---- one unit ------------------------------------------------------------------------------------------------
    def check_unit(self, r: UnitResult) -> UnitCheck:
        """Re-read one unit's files (see the module docstring); `r` is the unit's result (its ledger entry)."""
        c = UnitCheck(r.shard_index)
        if not r.filename:  # every episode quarantined: the unit has no file
            return c
        u = UnitView.of(r)
        c.episode_steps = dict(r.episodes)
        parquet: dict[str, bytes] = {}
        missing: set[str] = set()
        for name, size, digest in r.all_files():
            raw = self._hash(name, size, digest, c, keep=name.endswith(".parquet"))
            if raw is None:
                missing.add(name)
            elif raw:
                parquet[name] = raw
        c.count("files", len(r.all_files()))
        c.count("missing_files", len(missing))  # named by the dataset-level listing
        fps = self.fps()
        keep = {k for k, src in enumerate(u.sources) if src in self.ctx.sample_ids}
        stats = StatsAccumulator(self.mapping)
        rows: dict[int, dict[str, Any]] = {}
        if r.filename in parquet:
            rows = self._check_data(u, parquet[r.filename], fps, keep, c, stats)
        if u.meta_rel in parquet:
            self._check_meta(u, parquet[u.meta_rel], fps, c)
        frames: dict[tuple[int, str], list[np.ndarray]] = {}
        for cam in self.layout.cameras:
            rel = VIDEO_PATH.format(video_key=cam.key, chunk_index=u.chunk, file_index=u.file)
            if rel not in missing:
                frames.update(self._check_unit_video(u, rel, cam, fps, keep, c))
        c.stats = stats.to_dict()
        samples = self._samples(u, rows, frames)
        c.sampled, c.mismatches = compare_samples(self.ctx, self.mapping, samples, c.psnr)
        return c

    def _hash(self, name: str, size: int, digest: str, c: UnitCheck, keep: bool) -> bytes | None:
        """Hash one file of the unit against its result (its bytes returned when `keep`, b"" otherwise); None when
        it is missing."""
        p = self.path(name)
        try:
            raw, got, n = hash_file(self.fs, p, keep)
        except FileNotFoundError:
            return None
        c.sha256[name] = got
        if got != digest or n != size:
            _fail(c, f"checksum {name}", f"{name} sha256 {got[:12]}… ({n} bytes) differs from the ledger's "
                   f"{digest[:12]}… ({size} bytes) (modified after conversion)")
        return raw

    def _check_data(self, u: UnitView, raw: bytes, fps: int, keep: set[int], c: UnitCheck,
                    stats: StatsAccumulator) -> dict[int, dict[str, Any]]:
        """The unit's data parquet; returns the sampled episodes' rows at sample_indices."""
        rel = u.r.filename
        try:
            table = pq.read_table(io.BytesIO(raw))
        except (pa.ArrowException, OSError, ValueError) as exc:
            _fail(c, "data", f"{rel}: unreadable parquet ({str(exc).splitlines()[0][:200]})")
            return {}
        bad_schema = schema_problem(rel, table.schema, self.writer.data_schema, "the features'")
        if bad_schema:
            _fail(c, "data", bad_schema)
            return {}
        problems = numbering_problems(u, table, fps)
        if problems:
            _fail(c, "data", _detail(problems))
        if table.num_rows != sum(u.lengths):
            return {}
        c.count("rows", table.num_rows)
        self._count_nonfinite(u, table, c)
        out: dict[int, dict[str, Any]] = {}
        for k, (a, n) in enumerate(zip(u.starts(), u.lengths)):
            part = table.slice(a, n)
            stats.add(self._values(part), n)
            if k in keep:
                out[k] = self._sample_rows(part)
        return out

    def _count_nonfinite(self, u: UnitView, table: pa.Table, c: UnitCheck) -> None:
        """NaN/Inf in the float columns, counted; the first one's file, episode and column noted."""
        for f in self.layout.data_features:
            if not f.dtype.startswith("float") or f.key == "timestamp":
                continue
            bad = ~np.isfinite(_flat(table[f.key]).reshape(table.num_rows, -1))
            if bad.any():
                c.count("nonfinite", int(bad.sum()))
                row = int(np.flatnonzero(bad.any(axis=1))[0])
                k = int(np.searchsorted(np.cumsum(u.lengths), row, side="right"))
                c.note(f"nan/inf: {u.where(u.r.filename, k)}: {f.key}")

    def _values(self, part: pa.Table) -> dict[str, np.ndarray]:
        """An episode's numeric values keyed by mapping target (the action split back into its targets), and
        "reward": what the statistics are made of."""
        n = part.num_rows
        out: dict[str, np.ndarray] = {}
        for f in self.layout.data_features:
            if f.kind == "action":
                flat = _flat(part[f.key]).reshape(n, -1)
                start = 0
                for target, size in zip(f.targets, f.sizes):
                    out[target] = flat[:, start:start + size]
                    start += size
            elif f.kind == "tensor" and f.targets:
                out[f.targets[0]] = _flat(part[f.key]).reshape(n, -1)
            elif f.kind == "reward":
                out["reward"] = _flat(part[f.key]).reshape(n, 1)
        return out

    def _check_meta(self, u: UnitView, raw: bytes, fps: int, c: UnitCheck) -> None:
        try:
            table = pq.read_table(io.BytesIO(raw))
        except (pa.ArrowException, OSError, ValueError) as exc:
            _fail(c, "episodes metadata", f"{u.meta_rel}: unreadable parquet ({str(exc).splitlines()[0][:200]})")
            return
        bad_schema = schema_problem(u.meta_rel, table.schema, self.writer.episodes_schema, "the episodes schema")
        problems = [bad_schema] if bad_schema else meta_problems(u, table, self.layout.cameras, fps)
        if problems:
            _fail(c, "episodes metadata", _detail(problems))

    # ---- one unit's videos ---------------------------------------------------------------------------------------
    def _check_unit_video(self, u: UnitView, rel: str, cam: "Feature", fps: int, keep: set[int],
                          c: UnitCheck) -> dict[tuple[int, str], list[np.ndarray]]:
        """One camera's MP4 of the unit; returns the sampled episodes' frames (first / middle / last)."""
        problems: list[str] = []
        c.count("videos")
        try:
            frames, n_dec = self._check_video(u, rel, cam, fps, keep, problems)
        except (av.error.FFmpegError, OSError, ValueError) as exc:
            problems.append(f"{rel}: not decodable ({str(exc).splitlines()[0][:200]})")
            frames, n_dec = {}, 0
        c.count("frames_decoded", n_dec)
        if problems:
            _fail(c, "videos", _detail(problems))
        return {(k, cam.key): got for k, got in frames.items()}

    def _check_video(self, u: UnitView, rel: str, cam: "Feature", fps: int, keep: set[int],
                     problems: list[str]) -> tuple[dict[int, list[np.ndarray]], int]:
        f = self._open(rel)
        try:
            with av.open(f) as c:
                if not c.streams.video or c.streams.audio:
                    problems.append(f"{rel}: expected one video stream and no audio")
                    return {}, 0
                s = c.streams.video[0]
                cc = s.codec_context
                h, w = cam.shape[:2]
                if (cc.width, cc.height) != (w, h) or cc.pix_fmt != PIX_FMT:
                    problems.append(f"{rel}: {cc.width}x{cc.height} {cc.pix_fmt}, the features say {w}x{h} {PIX_FMT}")
                codec = ENCODERS[self.writer.options.vcodec][1]
                if s.codec.name != codec and not (codec == "av1" and s.codec.name in AV1_DECODERS):
                    problems.append(f"{rel}: codec {s.codec.name}, written as {codec}")
                ticks = Fraction(1, fps) / s.time_base
                total = sum(u.lengths)
                pts = sorted(p.pts for p in c.demux(s) if p.dts is not None)
                if ticks.denominator != 1 or pts != [k * int(ticks) for k in range(total)]:
                    problems.append(f"{rel}: {len(pts)} packets for {total} frames, or pts not k/{fps} "
                                    f"(time base {s.time_base})")
                    return {}, 0
                return self._decode_episodes(u, rel, c, s, fps, keep, problems)
        finally:
            if hasattr(f, "close"):
                f.close()

    def _decode_episodes(self, u: UnitView, rel: str, c: Any, s: Any, fps: int, keep: set[int],
                         problems: list[str]) -> tuple[dict[int, list[np.ndarray]], int]:
        """First / middle / last frame of every episode at lerobot's query time (from_timestamp + k/fps)."""
        out: dict[int, list[np.ndarray]] = {}
        n_dec = 0
        for k, (a, n) in enumerate(zip(u.starts(), u.lengths)):
            idx = sample_indices(n)
            got = []
            for i in idx:
                q = (a + i) / fps
                arr = _decode_at(c, s, q)
                if arr is None:
                    problems.append(f"{u.where(rel, k)}: no frame within {TOLERANCE_S}s of t={q:.6f}s (frame {i})")
                    break
                got.append(arr)
                n_dec += 1
            if k in keep and len(got) == len(idx):
                out[k] = got
        return out, n_dec

    def _open(self, rel: str) -> Any:
        p = self.path(rel)
        return p if is_local(self.fs) else open_sequential(self.fs, p)

    # ---- one unit's samples ----------------------------------------------------------------------------------------
    def _sample_rows(self, part: pa.Table) -> dict[str, Any]:
        idx = sample_indices(part.num_rows)
        sub = part.take(pa.array(idx))
        return {"steps": part.num_rows, "idx": idx,
                "columns": {f.key: _numpy(sub[f.key], f) for f in self.layout.data_features}}

    def _samples(self, u: UnitView, rows: dict[int, dict], frames: dict[tuple[int, str], list[np.ndarray]]
                 ) -> dict[int, WrittenSample]:
        """The sampled episodes as written, keyed by source episode (language through the unit's task ids)."""
        out: dict[int, WrittenSample] = {}
        maps = {fm.target: fm for fm in self.mapping.steps}
        task_of = {i: t for t, i in u.task_ids.items()}
        for k, r in rows.items():
            ws = WrittenSample(r["steps"])
            for f in self.layout.data_features:
                col = r["columns"][f.key]
                if f.kind == "action":
                    flat = np.asarray(col).reshape(len(r["idx"]), -1)
                    start = 0
                    for target, size in zip(f.targets, f.sizes):
                        ws.tensors[target] = _as_mapped(flat[:, start:start + size], maps[target].dtype)
                        start += size
                elif f.kind == "tensor" and f.targets:
                    ws.tensors[f.targets[0]] = np.asarray(col).reshape(len(r["idx"]), -1)
            ws.language = [task_of.get(int(t), "") for t in np.asarray(r["columns"]["task_index"]).reshape(-1)]
            if any((k, cam.key) not in frames for cam in self.layout.cameras):
                continue  # a camera that did not decode is named by "videos": no comparison of this episode
            for cam in self.layout.cameras:
                fm = self.layout.camera_maps[cam.key]
                ws.images[fm.target] = (lambda j, g=frames[(k, cam.key)], ch=fm.shape[2]:
                                        g[j] if ch == 3 else g[j][:, :, :1])
            out[u.sources[k]] = ws
        return out

    # ---- the dataset ---------------------------------------------------------------------------------------------
    def run(self, res: ValidationResult) -> bool:
        """Verify; returns whether the dataset is committed (a readable meta/info.json)."""
        info = self._check_info(res)
        if info is None:
            self._check_unfinished(res)
            return False
        self._fps = int(info["fps"])
        results = sorted(self.ctx.results(), key=lambda r: r.shard_index)
        checks = self.ctx.unit_checks
        if checks is None:  # a caller that did not go through Validator: re-read every unit here
            checks = UnitChecks(self.mapping)
            for r in results:
                checks.add(self.check_unit(r))
        rehashed = self._check_files(res, results, checks)
        episodes = self._check_numbering(res, info, results)
        tasks = self._check_tasks(res, info)
        self._check_unit_tasks(res, results, tasks)
        checks.apply(res, self.ctx.min_psnr_db)
        res.shard_sha256.update(rehashed)
        self._check_stats(res, bool(episodes))
        self._unit_summary(res, checks, results)
        self._paired_reader(res, episodes)
        return True

    def _unit_summary(self, res: ValidationResult, checks: UnitChecks, results: list[UnitResult]) -> None:
        """The passed lines of what the units' re-reads checked (their failures are already in `res`), NaN/Inf."""
        n = checks.counts
        units = [r for r in results if r.filename]
        if not n.get("failed:data"):
            res.add("data", True, f"{len(units)} data files, {n.get('rows', 0)} rows, each re-read after its commit: "
                    "schema, index contiguous, episode_index, frame_index, timestamps k/fps, task ids")
        if not n.get("failed:episodes metadata"):
            res.add("episodes metadata", True, f"{len(units)} meta/episodes files: one row per episode with its "
                    "index, tasks, rows and video windows back to back")
        if self.layout.cameras and not n.get("failed:videos"):
            res.add("videos", True, f"{n.get('videos', 0)} MP4s: one packet per frame at exactly k/fps; "
                    f"{n.get('frames_decoded', 0)} frames (first/middle/last of every episode) decoded within 1e-4 s "
                    "of lerobot's query time")
        if not any(c.name.startswith("checksum ") for c in res.checks) and units:
            res.add("checksums", True, "every unit file's sha256 equals the ledger (re-read after its commit)")
        nonfinite = n.get("nonfinite", 0)
        first = next((x[len("nan/inf: "):] for x in checks.notes if x.startswith("nan/inf: ")), "")
        res.add("nan/inf", nonfinite == 0 or self.ctx.allow_nonfinite, f"NaN/Inf values: {nonfinite}"
                + (f" (first: {first})" if first else "")
                + (" (allowed by convert.nan_policy=allow)" if nonfinite and self.ctx.allow_nonfinite else ""))

    # ---- metadata ----------------------------------------------------------------------------------------------
    def _check_info(self, res: ValidationResult) -> dict[str, Any] | None:
        p = self.path(INFO)
        if not self.fs.exists(p):
            res.add("metadata", False, f"{INFO} missing in {self.writer.out_url}: the run did not finish")
            return None
        try:
            info = json.loads(self.fs.cat_file(p))
        except ValueError as exc:
            res.add("metadata", False, f"{INFO} is not valid JSON: {exc}")
            return None
        problems = [f"missing {k}" for k in REQUIRED_INFO if k not in info]
        fps = info.get("fps")
        if info.get("codebase_version") != CODEBASE_VERSION:
            problems.append(f"codebase_version {info.get('codebase_version')!r}")
        if not isinstance(fps, int) or isinstance(fps, bool) or fps <= 0:
            problems.append(f"fps {fps!r} is not a positive integer")
        if info.get("data_path") != DATA_PATH:
            problems.append(f"data_path {info.get('data_path')!r}")
        want_video = VIDEO_PATH if self.layout.cameras else None
        if info.get("video_path") != want_video:
            problems.append(f"video_path {info.get('video_path')!r}, expected {want_video!r}")
        feats = info.get("features") or {}
        expected = {f.key: (f.dtype, list(f.shape)) for f in self.layout.features}
        got = {k: (v.get("dtype"), list(v.get("shape") or [])) for k, v in feats.items() if isinstance(v, dict)}
        if got != expected:
            diff = sorted(k for k in set(got) | set(expected) if got.get(k) != expected.get(k))
            problems.append(f"features differ from the mapping's: {diff[:8]}")
        for key in self.layout.cameras:
            vinfo = (feats.get(key.key) or {}).get("info") or {}
            if vinfo.get("video.fps") != fps or vinfo.get("video.pix_fmt") != "yuv420p":
                problems.append(f"{key.key}: video info {vinfo}")
        splits = info.get("splits")
        ranges = sorted(tuple(int(x) for x in str(v).split(":")) for v in splits.values()) \
            if isinstance(splits, dict) and splits else []
        if not ranges or ranges[0][0] != 0 or ranges[-1][1] != info.get("total_episodes") or \
                any(a[1] != b[0] for a, b in zip(ranges, ranges[1:])):
            problems.append(f"splits {splits!r} do not cover 0:{info.get('total_episodes')} contiguously")
        res.add("metadata", not problems, "meta/info.json: v3.0, integer fps, features as mapped, path templates"
                if not problems else "meta/info.json: " + "; ".join(map(str, problems)))
        return info if isinstance(fps, int) and fps > 0 and isinstance(feats, dict) else None

    def _check_unfinished(self, res: ValidationResult) -> None:
        """No meta/info.json (the run did not finish): name the planned units not committed."""
        u = uncommitted_units(self.fs, self.root, self.ctx.ledger)
        res.add("units present", not u.units, f"run not finished: {u.line()}" if u.units
                else f"{u.committed} of {u.planned} units committed, meta/info.json not written yet")

    # ---- files vs the ledger -------------------------------------------------------------------------------------
    def _listing(self) -> dict[str, int]:
        """Every file under data/, meta/episodes/ and videos/ with its size (one listing per folder tree)."""
        out: dict[str, int] = {}
        for top in ("data", "meta/episodes", "videos"):
            base = self.path(top)
            try:
                found = self.fs.find(base, detail=True) if self.fs.exists(base) else {}
            except FileNotFoundError:
                continue
            for p, d in found.items():
                rel = self.rel(p)
                if ".tmp-" not in rel and d.get("type") != "directory":
                    out[rel] = int(d.get("size") or 0)
        return out

    def _check_files(self, res: ValidationResult, results: list[UnitResult], checks: UnitChecks) -> dict[str, str]:
        """Every unit file present with the ledger's size, nothing else; the units' re-read digests against the
        ledger. A unit finalize renumbered after its re-read is hashed again here; returns those digests."""
        listed = self._listing()
        known = {name for r in results for name, _, _ in r.all_files()}
        named = {name for name, _ in checks.failures}
        missing = sorted(name for name in known if name not in listed)
        res.add("files present", not missing, f"missing unit files: {', '.join(missing[:10])}" if missing
                else f"{len(known)} unit files present")
        rehashed: dict[str, str] = {}
        renumbered = 0
        for r in results:
            again = (r.extra or {}).get("renumbered_from") or {}
            redo = False
            for name, size, digest in r.all_files():
                got = checks.sha256.get(name)
                if name in missing or f"checksum {name}" in named:
                    continue
                if listed[name] != size:
                    res.add(f"checksum {name}", False, f"{name} is {listed[name]} bytes, the ledger says {size} "
                            "(modified after conversion)")
                elif got is not None and got != digest:
                    if again.get(name) == got:
                        redo = True
                    else:
                        res.add(f"checksum {name}", False, f"{name} was re-read after its commit with sha256 "
                                f"{got[:12]}…, the ledger says {digest[:12]}…")
            if redo:
                renumbered += 1
                rehashed.update(self._check_renumbered(res, r))
        if renumbered and not any(c.name == "renumbered units" for c in res.checks):
            res.add("renumbered units", True, f"{renumbered} units renumbered by finalize after their re-read: "
                    "hashed again, numbering checked")
        placeholder = EMPTY_EPISODES if not any(r.episodes for r in results) else None
        stray = sorted(rel for rel in listed if rel not in known and rel != placeholder)
        res.add("no stray files", not stray, "data/, meta/episodes/ and videos/ hold only the ledger's files"
                if not stray else f"files no unit wrote (lerobot would load them): {', '.join(stray[:10])}")
        return rehashed

    def _check_renumbered(self, res: ValidationResult, r: UnitResult) -> dict[str, str]:
        """The data parquet and meta/episodes part finalize rewrote: hashed against the ledger, their numbering
        (bookkeeping columns, episode rows) checked against the ledger's; returns {file: sha256}."""
        u = UnitView.of(r)
        digests = {name: digest for name, _, digest in r.all_files()}
        out: dict[str, str] = {}
        problems: list[str] = []
        for name in (r.filename, u.meta_rel):
            raw = self.fs.cat_file(self.path(name))
            out[name] = hashlib.sha256(raw).hexdigest()
            if out[name] != digests[name]:
                res.add(f"checksum {name}", False, f"{name} sha256 {out[name][:12]}… differs from the ledger's "
                        f"{digests[name][:12]}… (modified after conversion)")
                continue
            try:
                if name == r.filename:
                    problems += numbering_problems(u, pq.read_table(io.BytesIO(raw), columns=BOOKKEEPING_COLUMNS),
                                                   self.fps())
                else:
                    problems += meta_problems(u, pq.read_table(io.BytesIO(raw)), self.layout.cameras, self.fps())
            except (pa.ArrowException, OSError, ValueError) as exc:
                problems.append(f"{name}: unreadable parquet ({str(exc).splitlines()[0][:200]})")
        if problems:
            res.add("renumbered units", False, _detail(problems))
        return out

    # ---- numbering across units ----------------------------------------------------------------------------------
    def _check_numbering(self, res: ValidationResult, info: dict[str, Any], results: list[UnitResult]) -> int:
        """The units' numbering (their ledger entries, which their re-reads checked the files against) continues
        from one unit to the next and adds up to info.json's totals; returns the number of episodes."""
        problems: list[str] = []
        e = i = 0
        for r in results:
            if not r.filename:
                continue
            u = UnitView.of(r)
            if (u.e0, u.i0) != (e, i):
                problems.append(f"{r.filename}: numbered from episode {u.e0} / row {u.i0}, the units before it end "
                                f"at episode {e} / row {i}")
            if list(zip(u.sources, u.lengths)) != [tuple(x) for x in r.episodes]:
                problems.append(f"{r.filename}: the ledger's episodes {r.episodes[:5]} and its numbering disagree")
            e += len(u.lengths)
            i += sum(u.lengths)
        names = [r.filename for r in results if r.filename]
        if names != sorted(names):  # lerobot concatenates data and meta/episodes files in path order
            problems.append(f"the units' files are not in path order: {names[:5]}")
        if e != info.get("total_episodes"):
            problems.append(f"{e} episodes in the units, info.json total_episodes={info.get('total_episodes')}")
        if i != info.get("total_frames"):
            problems.append(f"the units hold {i} frames, info.json total_frames={info.get('total_frames')}")
        res.add("numbering", not problems, f"{e} episodes / {i} rows numbered 0..N-1 without gaps across the units"
                if not problems else "; ".join(problems[:8]))
        return e

    def _check_unit_tasks(self, res: ValidationResult, results: list[UnitResult], tasks: list[str]) -> None:
        """Every unit's task ids name its tasks in meta/tasks.parquet, and every task there is some unit's."""
        problems: list[str] = []
        used: set[str] = set()
        for r in results:
            if not r.filename:
                continue
            for t, k in UnitView.of(r).task_ids.items():
                used.add(t)
                if not 0 <= k < len(tasks) or tasks[k] != t:
                    problems.append(f"{r.filename}: task id {k} stands for {t!r}, {TASKS} says "
                                    f"{tasks[k] if 0 <= k < len(tasks) else 'nothing'!r}")
        unused = [t for t in tasks if t not in used]
        if unused:
            problems.append(f"{TASKS} lists tasks no episode has: {unused[:5]}")
        res.add("task ids", not problems, "every unit's task ids name its tasks in meta/tasks.parquet"
                if not problems else "; ".join(problems[:8]))

    # ---- meta/tasks.parquet and meta/stats.json ------------------------------------------------------------------
    def _check_tasks(self, res: ValidationResult, info: dict[str, Any]) -> list[str]:
        import pandas as pd

        p = self.path(TASKS)
        if not self.fs.exists(p):
            res.add("tasks", False, f"{TASKS} missing")
            return []
        df = pd.read_parquet(io.BytesIO(self.fs.cat_file(p)))
        tasks = [str(x) for x in df.index]
        ok = (df.index.name == "task" and list(df["task_index"]) == list(range(len(df)))
              and len(set(tasks)) == len(tasks) and len(tasks) == info.get("total_tasks"))
        res.add("tasks", ok, f"{len(tasks)} tasks, the task string is the index, task_index 0..K-1" if ok else
                f"{TASKS}: index {df.index.name!r}, task_index {list(df['task_index'])[:10]}, "
                f"total_tasks={info.get('total_tasks')}")
        return tasks

    def _check_stats(self, res: ValidationResult, any_frame: bool) -> None:
        p = self.path(STATS)
        if not self.fs.exists(p):
            res.add("stats", False, f"{STATS} missing (lerobot-train needs it)")
            return
        stats = json.loads(self.fs.cat_file(p))
        problems = []
        for f in self.layout.features:
            if not (f.numeric or f.kind == "video") or not any_frame:  # no frame written: no statistics
                continue
            st = stats.get(f.key)
            if not isinstance(st, dict) or any(k not in st for k in ("mean", "std", "min", "max", "count")):
                problems.append(f"{f.key}: missing or incomplete")
                continue
            if f.kind == "video" and np.asarray(st["mean"]).shape != (3, 1, 1):
                problems.append(f"{f.key}: image stats shape {np.asarray(st['mean']).shape}, expected (3, 1, 1)")
        res.add("stats", not problems, "meta/stats.json covers every numeric feature and camera" if not problems
                else "; ".join(problems[:8]))

    # ---- the paired reader -----------------------------------------------------------------------------------------
    def _paired_reader(self, res: ValidationResult, n: int) -> None:
        from robo_ray.readers import open_reader

        try:
            reader = open_reader(self.writer.out_url, "lerobot", self.writer.storage_options)
            inv = reader.discover()
            errors = [f"{f.code}: {f.message}" for f in inv.findings if f.level == "error"]
            ep = reader.load_episode(inv.refs[0]) if inv.refs else None
            ok = not errors and len(inv.refs) == n and (ep is None or ep.length == inv.refs[0].length)
            detail = (f"robo-ray's LeRobot reader discovers {len(inv.refs)} episodes ({inv.source_version}) with no "
                      "error finding" + (" and loads episode 0" if n else "")) if ok else \
                f"robo-ray's LeRobot reader: {len(inv.refs)} episodes of {n}; {'; '.join(errors[:5])}"
        except Exception as exc:  # noqa: BLE001 - any reader failure is a validation failure, in one line
            ok, detail = False, f"robo-ray's LeRobot reader failed: {type(exc).__name__}: {str(exc)[:300]}"
        res.add("paired reader", ok, detail)


def _chunk_file(rel: str) -> tuple[int, int]:
    parts = rel.split("/")
    try:
        return int(parts[-2].split("-")[1]), int(parts[-1].split("-")[1].split(".")[0])
    except (IndexError, ValueError):
        return -1, -1


def _flat(column: pa.ChunkedArray) -> np.ndarray:
    arr = column.combine_chunks()
    while pa.types.is_list(arr.type) or pa.types.is_fixed_size_list(arr.type) or pa.types.is_large_list(arr.type):
        arr = arr.flatten()
    return arr.to_numpy(zero_copy_only=False)


def _numpy(column: pa.ChunkedArray, f: Any) -> Any:
    if f.dtype == "string":
        return column.to_pylist()
    values = _flat(column)
    return values.reshape(len(column), -1)


def _as_mapped(values: np.ndarray, dtype: str) -> np.ndarray:
    """An action component read back from the float32 `action` as the mapping's dtype."""
    if dtype == "int64":
        return np.rint(values).astype(np.int64)
    if dtype == "bool":
        return values != 0
    return values.astype(np.float32)


def _decode_at(c: Any, s: Any, q: float) -> np.ndarray | None:
    """The frame whose time is within TOLERANCE_S (strictly) of q, RGB; None when there is none."""
    c.seek(int(q / s.time_base), stream=s, backward=True, any_frame=False)
    for frame in c.decode(s):
        t = float(frame.time)
        if abs(t - q) < TOLERANCE_S:
            return frame.to_ndarray(format="rgb24")
        if t > q + TOLERANCE_S:
            return None
    return None
