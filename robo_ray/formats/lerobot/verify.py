"""The LeRobot v3.0 half of Validate at the dataset level (robo_ray/writers/base.py's `verify`), over the units'
checks (robo_ray/formats/lerobot/unit_check.py: each unit re-read on the worker right after its commit).

Per dataset (`run`): meta/info.json (the commit); every unit file present with the ledger's size and nothing else
under data/, meta/episodes/ or videos/ (one listing; lerobot loads every data parquet it finds); the units' digests
against the ledger; the units' numbering contiguous over the ledger (episode and row offsets) and equal to
info.json's totals; meta/tasks.parquet, and every unit's task ids naming its tasks there; meta/stats.json; the merged
unit checks; the paired reader (robo_ray.readers, "lerobot") discovers the output with no error and loads episode 0.
Unit files are not re-read here, except the two parquet files of a unit `finalize` renumbered after its worker's
re-read (`extra["renumbered_from"]`: {file: the digest finalize read}): hashed again, and their numbering checked.
`res.set_episodes` gets {source episode index: steps}: the output renumbers episodes, the ledger maps them back."""
from __future__ import annotations

import hashlib
import io
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robo_ray.formats.lerobot.depth import PIX_FMT as DEPTH_PIX_FMT, is_depth_info
from robo_ray.formats.lerobot.paths import CODEBASE_VERSION, DATA_PATH, EMPTY_EPISODES, INFO, STATS, TASKS, VIDEO_PATH
from robo_ray.formats.lerobot.tasks_file import read_tasks
from robo_ray.formats.lerobot.trainer_meta import MODALITY, NORM_STATS, modality_json, openpi_norm_stats, slice_problems
from robo_ray.formats.lerobot.unit_check import LeRobotUnitVerifier
from robo_ray.formats.lerobot.unit_copies import copy_summary
from robo_ray.formats.lerobot.unit_view import (BOOKKEEPING_COLUMNS, UnitView, meta_problems, numbering_problems,
                                                problem_detail)
from robo_ray.stages.check_records import UnitChecks, ValidationResult
from robo_ray.storage import write_bytes_atomic
from robo_ray.writers.base import UnitResult
from robo_ray.writers.committed import uncommitted_units

REQUIRED_INFO = ("codebase_version", "fps", "features", "total_episodes", "total_frames", "total_tasks",
                 "chunks_size", "data_path", "splits")


class LeRobotVerifier(LeRobotUnitVerifier):
    """Verification of a dataset written by LeRobotWriter: `check_unit` (LeRobotUnitVerifier) re-reads one unit's
    files, `run` does the dataset-level checks over the merged unit checks."""

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
        self._trainer_files(res)
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
        if self.layout.cameras and units:
            res.add("video copy", True, "; ".join(copy_summary(cam.key, units) for cam in self.layout.cameras))
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
            pix_fmt = DEPTH_PIX_FMT if key.depth else "yuv420p"
            if vinfo.get("video.fps") != fps or vinfo.get("video.pix_fmt") != pix_fmt or \
                    is_depth_info(vinfo) != key.depth:
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
                pf = pq.ParquetFile(io.BytesIO(raw))
                if name == r.filename:
                    problems += numbering_problems(u, pf.read(columns=BOOKKEEPING_COLUMNS), self.fps())
                else:
                    problems += meta_problems(u, pf.read(), self.layout.cameras, self.fps())
            except (pa.ArrowException, OSError, ValueError) as exc:
                problems.append(f"{name}: unreadable parquet ({str(exc).splitlines()[0][:200]})")
        if problems:
            res.add("renumbered units", False, problem_detail(problems))
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
        p = self.path(TASKS)
        if not self.fs.exists(p):
            res.add("tasks", False, f"{TASKS} missing")
            return []
        # what pd.read_parquet makes of it: the pandas metadata's index column holds the task strings
        tf = read_tasks(self.fs.cat_file(p))
        tasks = tf.tasks
        ok = (tf.index_name == "task" and tf.task_index == list(range(len(tasks)))
              and len(set(tasks)) == len(tasks) and len(tasks) == info.get("total_tasks"))
        res.add("tasks", ok, f"{len(tasks)} tasks, the task string is the index, task_index 0..K-1" if ok else
                f"{TASKS}: index {tf.index_name!r}, task_index {tf.task_index[:10]}, "
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
            want = (1 if f.depth else 3, 1, 1)
            if f.kind == "video" and np.asarray(st["mean"]).shape != want:
                problems.append(f"{f.key}: image stats shape {np.asarray(st['mean']).shape}, expected {want}")
        res.add("stats", not problems, "meta/stats.json covers every numeric feature and camera" if not problems
                else "; ".join(problems[:8]))

    def _trainer_files(self, res: ValidationResult) -> None:
        """GR00T's meta/modality.json: as the mapping gives it, its slices tiling state and action; then openpi's
        norm_stats.json written from the merged statistics of every written step (formats/lerobot/trainer_meta.py)."""
        p = self.path(MODALITY)
        try:
            got = json.loads(self.fs.cat_file(p)) if self.fs.exists(p) else None
        except ValueError as exc:
            got, problems = None, [f"not valid JSON: {exc}"]
        else:
            expected = modality_json(self.layout, self.mapping)
            problems = ["missing"] if got is None else ["differs from the mapping's"] if got != expected else []
        if isinstance(got, dict) and not problems:
            problems = slice_problems(got, self.layout)
        res.add("GR00T modality", not problems, f"{MODALITY}: state / action slices tile their columns, "
                f"{len(got.get('video') or {}) if isinstance(got, dict) else 0} cameras" if not problems
                else f"{MODALITY}: " + "; ".join(problems[:5]))
        norm = openpi_norm_stats(self.layout, res.stats) if res.stats is not None else None
        if norm is not None:
            write_bytes_atomic(self.fs, self.path(NORM_STATS), json.dumps(norm, indent=2).encode())
        elif self.fs.exists(self.path(NORM_STATS)):
            self.fs.rm_file(self.path(NORM_STATS))  # an earlier run's, for features this dataset no longer has

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
