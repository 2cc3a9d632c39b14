"""The LeRobot v3.0 half of Validate: re-read what LeRobotWriter wrote and check it the way lerobot 0.6.1 uses it.

* meta/info.json: v3.0, integer fps, the features the mapping gives (dtype / shape), path templates, totals;
* every unit file against the ledger (size, sha256), no stray file under data/, meta/episodes/ or videos/ (lerobot
  loads every data parquet it finds);
* meta/episodes (all parts, in path order, as lerobot concatenates them): episode_index 0..N-1, lengths,
  dataset_from/to_index contiguous, file references, per-camera from/to timestamps back to back in each MP4;
* data parquet (sorted, as lerobot loads them): schema, `index` = row position 0..N-1 with no gap, episode rows
  inside [from, to), frame_index 0..len-1, timestamp = float32(frame_index / fps), task ids in the table, NaN/Inf;
* meta/tasks.parquet (task string as the pandas index, task_index 0..K-1) and meta/stats.json (every numeric
  feature and every camera, images per channel (3,1,1));
* every MP4: packets demuxed, one per frame, pts exactly k/fps in the file; the first / middle / last frame of every
  episode decoded at from_timestamp + k/fps within lerobot's tolerance (1e-4 s, strict);
* the sampled episodes compared with the source (robo_ray.stages.validate.sample_checks: low-dim exact, images by
  PSNR, language), and the paired reader (robo_ray.readers, "lerobot") must discover the output with no error.
`res.set_episodes` gets {source episode index: steps}: the output renumbers episodes, the ledger maps them back.
"""
from __future__ import annotations

import io
import json
import posixpath
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robo_ray.formats.lerobot.stats import STAT_KEYS
from robo_ray.formats.lerobot.writer import (CODEBASE_VERSION, DATA_PATH, EMPTY_EPISODES, INFO, STATS, TASKS,
                                             VIDEO_PATH)
from robo_ray.stages.validate import ValidationResult, WrittenSample, sample_checks, sample_indices
from robo_ray.storage import HashingReader, is_local, join, open_sequential
from robo_ray.writers.base import VerifyContext

if TYPE_CHECKING:
    from robo_ray.formats.lerobot.writer import LeRobotWriter

TOLERANCE_S = 1e-4  # lerobot's tolerance_s: |decoded frame time - query| must be strictly below it
REQUIRED_INFO = ("codebase_version", "fps", "features", "total_episodes", "total_frames", "total_tasks",
                 "chunks_size", "data_path", "splits")


class LeRobotVerifier:
    """One verification pass over a dataset written by LeRobotWriter."""

    def __init__(self, writer: "LeRobotWriter", ctx: VerifyContext) -> None:
        self.writer, self.ctx = writer, ctx
        self.fs = writer.fs
        self.root = writer.dataset_dir
        self.layout = writer.layout
        self.results = sorted(ctx.results(), key=lambda r: r.shard_index)
        self.results_eps = sum(len((r.extra or {}).get("episodes", [])) for r in self.results)

    def path(self, rel: str) -> str:
        return join(self.root, rel)

    # ---- the pass ----------------------------------------------------------------------------------------------
    def run(self, res: ValidationResult) -> bool:
        """Verify; returns whether the dataset is committed (a readable meta/info.json)."""
        info = self._check_info(res)
        if info is None:
            self._check_unfinished(res)
            return False
        fps = int(info["fps"])
        self._check_files(res)
        episodes = self._check_episodes(res, info, fps)
        tasks = self._check_tasks(res, info)
        source_of = self._source_map(len(episodes))
        wanted = {k for k, src in enumerate(source_of) if src in self.ctx.sample_ids}
        rows = self._check_data(res, info, episodes, tasks, fps, wanted)
        self._check_stats(res, bool(episodes))
        frames = self._check_videos(res, info, episodes, fps, wanted)
        samples = self._samples(rows, frames, source_of, tasks)
        sample_checks(self.ctx, self.writer.mapping, samples, res)
        self._paired_reader(res, len(episodes))
        res.set_episodes({source_of[k]: int(ep["length"]) for k, ep in enumerate(episodes)})
        return True

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
        missing = [name for r in self.results for name, _, _ in r.all_files() if not self.fs.exists(self.path(name))]
        n = int(self.ctx.ledger.get("num_shards") or 0)
        res.add("units present", not missing, f"run not finished: missing unit files: {', '.join(missing[:10])}"
                if missing else f"{len(self.results)} of {n} units committed, meta/info.json not written yet")

    # ---- files vs the ledger -------------------------------------------------------------------------------------
    def _check_files(self, res: ValidationResult) -> None:
        """sha256 of every unit file against the ledger; nothing else under data/, meta/episodes/, videos/."""
        missing: list[str] = []
        bad: list[str] = []
        known: set[str] = set()
        for r in self.results:
            for name, size, digest in r.all_files():
                known.add(name)
                p = self.path(name)
                if not self.fs.exists(p):
                    missing.append(name)
                    continue
                with open_sequential(self.fs, p) as f:
                    sha = HashingReader(f).hexdigest()
                res.shard_sha256[name] = sha
                if sha != digest:
                    bad.append(name)
                    res.add(f"checksum {name}", False, f"{name} sha256 {sha[:12]}… differs from the ledger's "
                            f"{digest[:12]}… (modified after conversion)")
        res.add("files present", not missing, f"missing unit files: {', '.join(missing[:10])}" if missing
                else f"{len(known)} unit files present")
        if not bad and known:
            res.add("checksums", True, "every unit file's sha256 equals the ledger")
        stray = []
        for top in ("data", "meta/episodes", "videos"):
            base = self.path(top)
            if not self.fs.exists(base):
                continue
            for p in self.fs.find(base):
                rel = posixpath.relpath(p, self.root.rstrip("/") or "/")
                placeholder = rel == EMPTY_EPISODES and not self.results_eps
                if ".tmp-" not in rel and rel not in known and not placeholder:
                    stray.append(rel)
        res.add("no stray files", not stray, "data/, meta/episodes/ and videos/ hold only the ledger's files"
                if not stray else f"files no unit wrote (lerobot would load them): {', '.join(sorted(stray)[:10])}")

    def _source_map(self, n: int) -> list[int]:
        """Source episode index of each output episode (the ledger's units in order)."""
        out = [int(e["source"]) for r in self.results for e in (r.extra or {}).get("episodes", [])]
        return out if len(out) == n else list(range(n))

    # ---- meta/episodes -------------------------------------------------------------------------------------------
    def _check_episodes(self, res: ValidationResult, info: dict[str, Any], fps: int) -> list[dict[str, Any]]:
        files = sorted(self.fs.glob(self.path("meta/episodes/*/*.parquet")))
        rows: list[dict[str, Any]] = []
        problems: list[str] = []
        want_stats = {fld.name for f in self.layout.features if f.numeric or f.kind == "video"
                      for fld in _stats_names(f.key)}
        for p in files:
            rel = posixpath.relpath(p, self.root.rstrip("/") or "/")
            table = pq.read_table(io.BytesIO(self.fs.cat_file(p)))
            missing = sorted(want_stats - set(table.column_names))
            if missing:
                problems.append(f"{rel}: no stats columns {missing[:4]}")
            cols = [c for c in table.column_names if not c.startswith("stats/")]
            chunk, file = _chunk_file(rel)
            for row in table.select(cols).to_pylist():
                if (row.get("meta/episodes/chunk_index"), row.get("meta/episodes/file_index")) != (chunk, file):
                    problems.append(f"{rel}: episode {row.get('episode_index')} names another meta/episodes file")
                rows.append(row)
        n = len(rows)
        if [r.get("episode_index") for r in rows] != list(range(n)):
            problems.append("episode_index is not 0..N-1 in file order")
        if n != info.get("total_episodes"):
            problems.append(f"{n} episodes, info.json total_episodes={info.get('total_episodes')}")
        pos = 0
        video_pos: dict[tuple[str, int, int], int] = {}
        for r in rows:
            length, a, b = r.get("length"), r.get("dataset_from_index"), r.get("dataset_to_index")
            if a != pos or not isinstance(length, int) or b != a + length or length < 1:
                problems.append(f"episode {r.get('episode_index')}: rows [{a}, {b}) length {length}, expected from {pos}")
            pos = b if isinstance(b, int) else pos
            if not r.get("tasks"):
                problems.append(f"episode {r.get('episode_index')}: no tasks")
            for cam in self.layout.cameras:
                c, f = r.get(f"videos/{cam.key}/chunk_index"), r.get(f"videos/{cam.key}/file_index")
                t0, t1 = r.get(f"videos/{cam.key}/from_timestamp"), r.get(f"videos/{cam.key}/to_timestamp")
                start = video_pos.get((cam.key, c, f), 0)
                if t0 is None or t1 is None or abs(t0 - start / fps) > 1e-9 or \
                        abs(t1 - (start + (length or 0)) / fps) > 1e-9:
                    problems.append(f"episode {r.get('episode_index')}: {cam.key} window [{t0}, {t1}] is not "
                                    f"[{start}/{fps}, {start + (length or 0)}/{fps}]")
                video_pos[(cam.key, c, f)] = start + (length or 0)
        if pos != info.get("total_frames"):
            problems.append(f"episodes hold {pos} frames, info.json total_frames={info.get('total_frames')}")
        res.add("episodes metadata", not problems, f"{n} episodes in {len(files)} meta/episodes files: indices "
                "0..N-1, rows contiguous, video windows back to back" if not problems else "; ".join(problems[:8]))
        return rows

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

    # ---- data ----------------------------------------------------------------------------------------------------
    def _check_data(self, res: ValidationResult, info: dict[str, Any], episodes: list[dict[str, Any]],
                    tasks: list[str], fps: int, wanted: set[int]) -> dict[int, dict]:
        """Every data parquet in lerobot's order; returns the rows of the sampled episodes at sample_indices."""
        files = sorted(self.fs.glob(self.path("data/*/*.parquet")))
        schema = self.writer.data_schema
        problems: list[str] = []
        nonfinite = 0
        pos = 0
        per_ep: dict[int, int] = {}
        samples: dict[int, dict[str, Any]] = {}
        float_cols = [f.key for f in self.layout.data_features if f.dtype.startswith("float")]
        for p in files:
            rel = posixpath.relpath(p, self.root.rstrip("/") or "/")
            table = pq.read_table(io.BytesIO(self.fs.cat_file(p)))
            if [(f.name, f.type) for f in table.schema] != [(f.name, f.type) for f in schema]:
                problems.append(f"{rel}: schema {table.schema.names} differs from the features'")
                continue
            n = table.num_rows
            index = table["index"].to_numpy()
            ep = table["episode_index"].to_numpy()
            fi = table["frame_index"].to_numpy()
            ts = table["timestamp"].to_numpy()
            ti = table["task_index"].to_numpy()
            if not np.array_equal(index, np.arange(pos, pos + n)):
                problems.append(f"{rel}: index is not {pos}..{pos + n - 1} (rows are looked up by position)")
            chunk, file = _chunk_file(rel)
            for e in np.unique(ep):
                e = int(e)
                rows = np.flatnonzero(ep == e)
                meta = episodes[e] if 0 <= e < len(episodes) else None
                if meta is None:
                    problems.append(f"{rel}: episode_index {e} is not in meta/episodes")
                    continue
                a = pos + int(rows[0])
                if a != meta["dataset_from_index"] or rows[-1] - rows[0] + 1 != len(rows) or \
                        (meta.get("data/chunk_index"), meta.get("data/file_index")) != (chunk, file):
                    problems.append(f"{rel}: episode {e} rows are not its meta/episodes range")
                per_ep[e] = per_ep.get(e, 0) + len(rows)
                k = np.arange(len(rows))
                if not np.array_equal(fi[rows], k):
                    problems.append(f"{rel}: episode {e} frame_index is not 0..{len(rows) - 1}")
                if not np.array_equal(ts[rows], (k / fps).astype(np.float32)):
                    problems.append(f"{rel}: episode {e} timestamps are not frame_index / {fps}")
                if e in wanted:
                    samples[e] = self._sample_rows(table, rows)
            if len(ti) and (ti.min() < 0 or ti.max() >= len(tasks)):
                problems.append(f"{rel}: task_index outside 0..{len(tasks) - 1}")
            for c in float_cols:
                values = _flat(table[c])
                nonfinite += int((~np.isfinite(values)).sum())
            pos += n
        bad_len = [e for e, m in enumerate(episodes) if per_ep.get(e) != m.get("length")]
        if bad_len:
            problems.append(f"episodes whose rows differ from their length: {bad_len[:10]}")
        if pos != info.get("total_frames"):
            problems.append(f"{pos} rows, info.json total_frames={info.get('total_frames')}")
        res.add("data", not problems, f"{len(files)} data files, {pos} rows: schema, index 0..N-1 without gaps, "
                "frame_index, timestamps k/fps, task ids" if not problems else "; ".join(problems[:8]))
        res.add("nan/inf", nonfinite == 0 or self.ctx.allow_nonfinite, f"NaN/Inf values: {nonfinite}"
                + (" (allowed by convert.nan_policy=allow)" if nonfinite and self.ctx.allow_nonfinite else ""))
        return samples

    def _sample_rows(self, table: pa.Table, rows: np.ndarray) -> dict[str, Any]:
        idx = sample_indices(len(rows))
        take = pa.array(rows[idx])
        sub = table.take(take)
        return {"steps": len(rows), "idx": idx,
                "columns": {f.key: _numpy(sub[f.key], f) for f in self.layout.data_features}}

    # ---- stats -----------------------------------------------------------------------------------------------------
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
        res.statistics = stats
        res.add("stats", not problems, "meta/stats.json covers every numeric feature and camera" if not problems
                else "; ".join(problems[:8]))

    # ---- videos ----------------------------------------------------------------------------------------------------
    def _check_videos(self, res: ValidationResult, info: dict[str, Any], episodes: list[dict[str, Any]], fps: int,
                      wanted: set[int]) -> dict[tuple[int, str], list[np.ndarray]]:
        """Demux every MP4 (pts exactly k/fps, one packet per frame), decode first/middle/last frame of every
        episode at lerobot's query time; returns the sampled episodes' frames."""
        if not self.layout.cameras:
            return {}
        problems: list[str] = []
        out: dict[tuple[int, str], list[np.ndarray]] = {}
        checked = decoded = 0
        for cam in self.layout.cameras:
            by_file: dict[tuple[int, int], list[int]] = {}
            for e, ep in enumerate(episodes):
                by_file.setdefault((ep[f"videos/{cam.key}/chunk_index"], ep[f"videos/{cam.key}/file_index"]),
                                   []).append(e)
            vinfo = info["features"][cam.key].get("info") or {}
            for (c, f), eps in sorted(by_file.items()):
                rel = VIDEO_PATH.format(video_key=cam.key, chunk_index=c, file_index=f)
                try:
                    frames, n_dec = self._check_video(rel, cam, vinfo, [episodes[e] for e in eps], fps,
                                                      [e in wanted for e in eps], problems)
                except (av.error.FFmpegError, OSError, ValueError) as exc:
                    problems.append(f"{rel}: not decodable ({exc})")
                    continue
                checked += 1
                decoded += n_dec
                for e, fr in zip(eps, frames):
                    if fr is not None:
                        out[(e, cam.key)] = fr
        res.add("videos", not problems, f"{checked} MP4s: one packet per frame at exactly k/fps; {decoded} frames "
                "(first/middle/last of every episode) decoded within 1e-4 s of lerobot's query time"
                if not problems else "; ".join(problems[:8]))
        return out

    def _check_video(self, rel: str, cam: Any, vinfo: dict[str, Any], eps: list[dict[str, Any]], fps: int,
                     keep: list[bool], problems: list[str]) -> tuple[list[list[np.ndarray] | None], int]:
        f = self._open(rel)
        try:
            with av.open(f) as c:
                if not c.streams.video or c.streams.audio:
                    problems.append(f"{rel}: expected one video stream and no audio")
                    return [None] * len(eps), 0
                s = c.streams.video[0]
                cc = s.codec_context
                h, w = cam.shape[:2]
                if (cc.width, cc.height) != (w, h) or cc.pix_fmt != vinfo.get("video.pix_fmt"):
                    problems.append(f"{rel}: {cc.width}x{cc.height} {cc.pix_fmt}, info.json says {w}x{h} "
                                    f"{vinfo.get('video.pix_fmt')}")
                if s.codec.name != vinfo.get("video.codec") and not (vinfo.get("video.codec") == "av1" and
                                                                     s.codec.name in ("libdav1d", "av1", "libaom-av1")):
                    problems.append(f"{rel}: codec {s.codec.name}, info.json says {vinfo.get('video.codec')}")
                ticks = Fraction(1, fps) / s.time_base
                total = sum(int(e["length"]) for e in eps)
                pts = sorted(p.pts for p in c.demux(s) if p.dts is not None)
                if ticks.denominator != 1 or pts != [k * int(ticks) for k in range(total)]:
                    problems.append(f"{rel}: {len(pts)} packets for {total} frames, or pts not k/{fps} "
                                    f"(time base {s.time_base})")
                    return [None] * len(eps), 0
                frames: list[list[np.ndarray] | None] = []
                n_dec = 0
                for ep, want in zip(eps, keep):
                    t0 = float(ep[f"videos/{cam.key}/from_timestamp"])
                    idx = sample_indices(int(ep["length"]))
                    got = []
                    for i in idx:
                        q = t0 + i / fps
                        arr = _decode_at(c, s, q)
                        if arr is None:
                            problems.append(f"{rel}: no frame within {TOLERANCE_S}s of t={q:.6f}s (episode "
                                            f"{ep['episode_index']} frame {i})")
                            break
                        got.append(arr)
                        n_dec += 1
                    frames.append(got if want and len(got) == len(idx) else None)
                return frames, n_dec
        finally:
            if hasattr(f, "close"):
                f.close()

    def _open(self, rel: str) -> Any:
        p = self.path(rel)
        return p if is_local(self.fs) else open_sequential(self.fs, p)

    # ---- samples and the paired reader ---------------------------------------------------------------------------
    def _samples(self, rows: dict[int, dict], frames: dict[tuple[int, str], list[np.ndarray]], source_of: list[int],
                 tasks: list[str]) -> dict[int, WrittenSample]:
        out: dict[int, WrittenSample] = {}
        maps = {fm.target: fm for fm in self.writer.mapping.steps}
        for e, r in rows.items():
            ws = WrittenSample(r["steps"])
            for f in self.layout.data_features:
                col = r["columns"][f.key]
                if f.kind == "action":
                    flat = np.asarray(col).reshape(len(r["idx"]), -1)
                    start = 0
                    for target, size in zip(f.targets, f.sizes):
                        part = flat[:, start:start + size]
                        start += size
                        ws.tensors[target] = _as_mapped(part, maps[target].dtype)
                elif f.kind == "tensor" and f.targets:
                    ws.tensors[f.targets[0]] = np.asarray(col).reshape(len(r["idx"]), -1)
            ws.language = [tasks[int(t)] for t in np.asarray(r["columns"]["task_index"]).reshape(-1)]
            for cam in self.layout.cameras:
                got = frames.get((e, cam.key))
                if got is None:
                    continue
                fm = self.layout.camera_maps[cam.key]
                ws.images[fm.target] = (lambda k, g=got, ch=fm.shape[2]: g[k] if ch == 3 else g[k][:, :, :1])
            out[source_of[e]] = ws
        return out

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


def _stats_names(key: str) -> list[pa.Field]:
    return [pa.field(f"stats/{key}/{k}", pa.null()) for k in STAT_KEYS]


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
