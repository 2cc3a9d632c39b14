"""The ORTF half of Validate: re-read every file of every unit in the ledger (sha256 against the ledger, steps.parquet
schema and rows per episode, NaN/Inf, each camera MP4's frame count and size from its index plus its first frame
decoded; first/middle/last frames of the sampled episodes, handed with their rows to the neutral comparison with the
source), the meta/ files (episodes.parquet, tasks.jsonl, stats.json and manifest.json consistent with the steps and
equal to what the ledger's units give), then the paired reader's read-back.

Problems are collected per file: a damaged file is one failed check (`file <name>: ...`) naming it, and checks that
could only repeat it (the read-back) are skipped."""
from __future__ import annotations

import hashlib
import io
import json
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Callable

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robo_ray.episode import png_bytes
from robo_ray.images import decode_image
from robo_ray.stages.validate import (StatsAccumulator, ValidationResult, WrittenSample, sample_checks,
                                      sample_indices)
from robo_ray.storage import join, open_sequential, sha256_file
from robo_ray.writers.base import UnitResult, VerifyContext

from robo_ray.formats.ortf.writer import (EPISODES, MANIFEST, STATS, TASKS, chunk_name, episode_id, episodes_schema,
                                          steps_schema)

if TYPE_CHECKING:
    from robo_ray.formats.ortf.writer import OrtfWriter


class OrtfVerifier:
    """One verification pass over an ORTF dataset written by OrtfWriter."""

    def __init__(self, writer: "OrtfWriter", ctx: VerifyContext) -> None:
        self.writer, self.ctx = writer, ctx
        self.fs, self.mapping, self.layout = writer.fs, writer.mapping, writer.layout
        self.root = writer.dataset_dir
        self.bad: dict[str, list[str]] = {}  # file -> its problems (one failed check each)
        self._stats = StatsAccumulator(self.mapping)
        self.n_nonfinite = 0
        self.meta: dict[str, bytes | None] = {}  # meta/ files as read (once)
        self.rate = Fraction(1)
        self.n_videos = 0

    def problem(self, name: str, msg: str) -> None:
        self.bad.setdefault(name, []).append(msg)

    def path(self, rel: str) -> str:
        return join(self.root, rel)

    # ---- the pass ----------------------------------------------------------------------------------------------
    def run(self, res: ValidationResult) -> bool:
        """Verify; returns whether the dataset is committed (a valid meta/manifest.json)."""
        manifest = self._check_manifest(res)
        if manifest is None:
            return False
        hz = manifest["action_space"].get("control_frequency_hz")
        self.rate = Fraction(hz if isinstance(hz, (int, float)) and hz > 0 else 1).limit_denominator(1001)
        for name in (EPISODES, TASKS, STATS):
            p = self.path(name)
            self.meta[name] = self.fs.cat_file(p) if self.fs.exists(p) else None
            if self.meta[name] is None:
                self.problem(name, "missing")
            else:
                res.shard_sha256[name] = hashlib.sha256(self.meta[name]).hexdigest()
        res.shard_sha256[MANIFEST] = hashlib.sha256(self.meta[MANIFEST] or b"").hexdigest()
        results = sorted(self.ctx.results(), key=lambda r: r.shard_index)
        samples: dict[int, WrittenSample] = {}
        steps_of: dict[int, int] = {}
        tasks = self._read_tasks()
        n_files = 0
        for r in results:
            n_files += len(r.all_files())
            steps_of.update(self._check_unit(r, tasks, samples, res))
        self._check_episodes(results, steps_of, tasks)
        self._check_rebuild(results, manifest)
        self._check_manifest_counts(manifest, steps_of)
        for name in sorted(self.bad):
            res.add(f"file {name}", False, "; ".join(self.bad[name]))
        if not any(n in self.bad for r in results for n, _, _ in r.all_files()) and results:
            res.add("checksums", True, f"{n_files} unit files, each with the ledger's size and sha256")
        if self.n_videos and not any(n.endswith(".mp4") for n in self.bad):
            res.add("videos", True, f"{self.n_videos} MP4s: frame counts and sizes as the steps, first frames decode")
        res.add("nan/inf", self.n_nonfinite == 0 or self.ctx.allow_nonfinite, f"NaN/Inf values: {self.n_nonfinite}"
                + (" (allowed by convert.nan_policy=allow)" if self.n_nonfinite and self.ctx.allow_nonfinite else ""))
        res.set_episodes(steps_of)
        res.set_statistics(self._stats)
        sample_checks(self.ctx, self.mapping, samples, res)
        if self.bad:
            res.add("ortf read-back", True, "skipped: damaged files are named above")
        else:
            self._readback(res)
        return True

    # ---- manifest (the commit) ---------------------------------------------------------------------------------
    def _check_manifest(self, res: ValidationResult) -> dict[str, Any] | None:
        from robo_ray.formats.ortf.reader import validate_manifest

        p = self.path(MANIFEST)
        if not self.fs.exists(p):
            res.add("metadata", False, f"{MANIFEST} missing in {self.writer.out_url} (the run did not finish)"
                    + self._unfinished())
            return None
        try:
            self.meta[MANIFEST] = self.fs.cat_file(p)
            manifest = validate_manifest(json.loads(self.meta[MANIFEST]))
        except Exception as exc:  # noqa: BLE001 - not JSON, or not the spec's manifest: one line
            res.add("metadata", False, f"{MANIFEST}: {str(exc).splitlines()[0][:300]}")
            return None
        res.add("metadata", True, f"{MANIFEST} is ORTF {manifest['ortf_version']}")
        return manifest

    def _unfinished(self) -> str:
        """The planned units the ledger does not hold as committed (their files)."""
        n = int(self.ctx.ledger.get("num_shards") or 0)
        done = {r.shard_index for r in self.ctx.results() if self.writer.is_committed(r, verify_sha256=False)}
        missing = [f"data/{chunk_name(i, n)}/steps.parquet" for i in range(n) if i not in done]
        return f"; units not committed: {', '.join(missing[:20])}" if missing else ""

    # ---- one unit ------------------------------------------------------------------------------------------------
    def _sha_ok(self, name: str, size: int, digest: str, res: ValidationResult) -> bool:
        p = self.path(name)
        if not self.fs.exists(p):
            self.problem(name, "missing")
            return False
        got = sha256_file(self.fs, p)
        res.shard_sha256[name] = got
        if got != digest or self.fs.size(p) != size:
            self.problem(name, f"sha256 {got[:12]}… differs from the ledger's {digest[:12]}… (modified after "
                         "conversion)")
            return False
        return True

    def _check_unit(self, r: UnitResult, tasks: list[str], samples: dict[int, WrittenSample],
                    res: ValidationResult) -> dict[int, int]:
        """The unit's files; returns {episode index: steps} as read (the ledger's counts where a file is bad)."""
        ledger_steps = dict(r.episodes)
        rows = {int(e["index"]): e for e in r.extra.get("episodes", [])}
        for name, size, digest in r.all_files():
            self._sha_ok(name, size, digest, res)
        if not r.filename:
            return {}
        table = self._read_steps(r)
        if table is None:
            return ledger_steps
        ids = table["episode_id"].to_numpy(zero_copy_only=False)
        out: dict[int, int] = {}
        bounds: dict[str, tuple[int, int]] = {}
        start = 0
        for k in range(1, len(ids) + 1):  # rows are grouped by episode, in the ledger's order
            if k == len(ids) or ids[k] != ids[start]:
                bounds[str(ids[start])] = (start, k)
                start = k
        if len(bounds) != len(set(ids.tolist())):
            self.problem(r.filename, "an episode's rows are not contiguous")
            return ledger_steps
        for ep, n in r.episodes:
            key = episode_id(ep)
            lo, hi = bounds.pop(key, (0, 0))
            if hi - lo != n:
                self.problem(r.filename, f"episode {key} has {hi - lo} rows, the ledger says {n}")
                continue
            part = table.slice(lo, n)
            if not np.array_equal(part["step_index"].to_numpy(), np.arange(n)):
                self.problem(r.filename, f"episode {key}: step_index is not 0..{n - 1}")
            values = self._values(part)
            self._stats.add(values, n)
            self._check_videos(r, ep, n, rows.get(ep, {}), samples, part, values, tasks)
            out[ep] = n
        if bounds:
            self.problem(r.filename, f"rows of episodes the ledger does not list: {sorted(bounds)[:5]}")
        return out if not self.bad.get(r.filename) else ledger_steps

    def _read_steps(self, r: UnitResult) -> pa.Table | None:
        try:
            table = pq.read_table(io.BytesIO(self.fs.cat_file(self.path(r.filename))))
        except FileNotFoundError:
            return None
        except (pa.ArrowException, OSError, ValueError) as exc:
            self.problem(r.filename, f"unreadable parquet ({str(exc).splitlines()[0][:200]})")
            return None
        want = steps_schema(self.mapping, self.layout, "task_id" in table.column_names)
        if not table.schema.equals(want):
            got = {f.name: str(f.type) for f in table.schema}
            diff = [f"{f.name}: {got.get(f.name, 'missing')} (want {f.type})" for f in want
                    if got.get(f.name) != str(f.type)] + [f"{n}: unexpected" for n in got if n not in want.names]
            self.problem(r.filename, f"schema differs: {'; '.join(diff[:5])}")
            return None
        n_bad = 0
        for col in table.columns:
            t = col.type.value_type if pa.types.is_fixed_size_list(col.type) else col.type
            if pa.types.is_floating(t):
                flat = col.combine_chunks()
                arr = (flat.flatten() if pa.types.is_fixed_size_list(col.type) else flat).to_numpy(zero_copy_only=False)
                n_bad += int((~np.isfinite(arr)).sum())
        self.n_nonfinite += n_bad
        return table

    def _values(self, part: pa.Table) -> dict[str, np.ndarray]:
        """The episode's numeric columns keyed by mapping target (and "reward"), (T, per step)."""
        n = part.num_rows
        out: dict[str, np.ndarray] = {}
        for target, col in self.layout.columns.items():
            c = part[col].combine_chunks()
            arr = (c.flatten() if pa.types.is_fixed_size_list(c.type) else c).to_numpy(zero_copy_only=False)
            out[target] = np.asarray(arr).reshape(n, -1)
        if self.layout.reward:
            out["reward"] = part["reward"].to_numpy().reshape(n, 1)
        return out

    # ---- videos --------------------------------------------------------------------------------------------------
    def _check_videos(self, r: UnitResult, ep: int, n: int, row: dict[str, Any], samples: dict[int, WrittenSample],
                      part: pa.Table, values: dict[str, np.ndarray], tasks: list[str]) -> None:
        sampled = ep in self.ctx.sample_ids
        idx = sample_indices(n)
        written = WrittenSample(n) if sampled else None
        files = row.get("videos", {})
        for cam, fm in self.layout.cameras.items():
            rel = files.get(cam) or self.writer.video_rel(cam, r.extra.get("chunk", ""), ep)
            if rel in self.bad:
                written = None  # damaged (named): no comparison of this episode
                continue
            try:
                frames = self._video_frames(rel, n, fm.shape[:2], idx if sampled else [0])
            except (av.error.FFmpegError, OSError, ValueError) as exc:
                self.problem(rel, str(exc).splitlines()[0][:300])
                written = None
                continue
            if written is not None:
                depth = fm.dtype == "uint16"
                written.images[fm.target] = _image_fn(frames, depth, fm.shape[2])
        if written is not None:
            for target in self.layout.columns:
                written.tensors[target] = values[target][idx]
            written.language = self._language(part, row, tasks, idx)
            samples[ep] = written

    def _video_frames(self, rel: str, n: int, hw: list[int], want: list[int]) -> dict[int, av.VideoFrame]:
        """Open the MP4, check its frame count and size from its index, decode the frames at `want` (frame k at
        k/fps: a seek to the keyframe before it, then a short forward decode)."""
        self.n_videos += 1
        with open_sequential(self.fs, self.path(rel)) as f, av.open(f, "r") as c:
            if not c.streams.video:
                raise ValueError("no video stream")
            s = c.streams.video[0]
            if s.frames != n:
                raise ValueError(f"holds {s.frames} frames, the episode has {n} steps")
            if (s.codec_context.height, s.codec_context.width) != tuple(hw):
                raise ValueError(f"is {s.codec_context.width}x{s.codec_context.height}, the mapping says "
                                 f"{hw[1]}x{hw[0]}")
            out: dict[int, av.VideoFrame] = {}
            todo = sorted(set(want))
            for k in todo:
                if k:
                    c.seek(int(k / self.rate / s.time_base), stream=s, backward=True, any_frame=False)
                for frame in c.decode(s):
                    j = -1 if frame.time is None else round(frame.time * self.rate)
                    if j >= k:
                        if j == k:
                            out[k] = frame
                        break
            missing = [i for i in todo if i not in out]
            if missing:
                raise ValueError(f"frames {missing} do not decode")
            return out

    def _language(self, part: pa.Table, row: dict[str, Any], tasks: list[str], idx: list[int]) -> list[str] | None:
        if "task_id" in part.column_names:
            ids = part["task_id"].to_numpy()
            return [tasks[int(ids[i])] if 0 <= int(ids[i]) < len(tasks) else "" for i in idx]
        first = (row.get("tasks") or [""])[0]
        return [first] * len(idx)

    # ---- meta/ ---------------------------------------------------------------------------------------------------
    def _read_tasks(self) -> list[str]:
        data = self.meta.get(TASKS)
        if data is None:
            return []
        tasks: list[str] = []
        for k, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            try:
                obj = json.loads(line)
            except ValueError:
                self.problem(TASKS, f"line {k} is not JSON")
                return tasks
            if obj.get("task_id") != len(tasks) or not isinstance(obj.get("instruction"), str):
                self.problem(TASKS, f"line {k}: task_id {obj.get('task_id')!r}, expected {len(tasks)} with a "
                             "string instruction")
                return tasks
            tasks.append(obj["instruction"])
        return tasks

    def _check_episodes(self, results: list[UnitResult], steps_of: dict[int, int], tasks: list[str]) -> None:
        data = self.meta.get(EPISODES)
        if data is None:
            return
        try:
            table = pq.read_table(io.BytesIO(data))
        except (pa.ArrowException, OSError, ValueError) as exc:
            self.problem(EPISODES, f"unreadable parquet ({str(exc).splitlines()[0][:200]})")
            return
        want = episodes_schema(list(self.layout.cameras))
        if not table.schema.equals(want):
            self.problem(EPISODES, "schema differs from the ORTF episode index")
            return
        units = {e: r for r in results for e, _ in r.episodes}
        expected = [(e, n) for r in results for e, n in r.episodes]
        rows = table.to_pylist()
        got = [(int(x["episode_id"]) if str(x["episode_id"]).isdigit() else -1, x["length"]) for x in rows]
        if got != expected:
            self.problem(EPISODES, f"lists {len(rows)} episodes, the ledger's units hold {len(expected)}"
                         if len(got) != len(expected) else "episode ids or lengths differ from the ledger's units")
            return
        start = 0
        for x in rows:
            e, n = int(x["episode_id"]), int(x["length"])
            where = f"episode {x['episode_id']}"
            if (x["start_step"], x["end_step"]) != (start, start + n):
                self.problem(EPISODES, f"{where}: start_step/end_step {x['start_step']}/{x['end_step']}, expected "
                             f"{start}/{start + n} (contiguous)")
                return
            start += n
            if x["chunk_id"] != units[e].shard_index:
                self.problem(EPISODES, f"{where}: chunk_id {x['chunk_id']}, the episode is in unit "
                             f"{units[e].shard_index}")
            if x["task_id"] is not None and not 0 <= x["task_id"] < len(tasks):
                self.problem(EPISODES, f"{where}: task_id {x['task_id']} is not in {TASKS}")
            names = {f["name"] for f in units[e].files}
            for cam, rel in (x.get("video_files") or {}).items():
                if rel not in names:
                    self.problem(EPISODES, f"{where}: video_files.{cam} = {rel} is not a file of its unit")
            if e in steps_of and steps_of[e] != n:
                self.problem(EPISODES, f"{where}: length {n}, steps.parquet holds {steps_of[e]} rows")

    def _check_rebuild(self, results: list[UnitResult], manifest: dict[str, Any]) -> None:
        """meta/ must be what finalize makes of the ledger's units (an edit shows even when it is consistent)."""
        if self.ctx.inv is None:
            return
        try:
            want = self.writer.build_meta(results, self.ctx.inv)
        except Exception as exc:  # noqa: BLE001 - a ledger that cannot be rebuilt is itself a finding
            self.problem(MANIFEST, f"cannot rebuild meta/ from the ledger ({type(exc).__name__}: {exc})")
            return
        for name in (EPISODES, TASKS, STATS):
            if name in self.bad or self.meta.get(name) is None:
                continue
            if self.meta[name] != want[name]:
                self.problem(name, "differs from what the ledger's units give (modified after conversion)")
        expect = json.loads(want[MANIFEST])
        if not self.writer.options.created_at:
            expect["created_at"] = manifest.get("created_at")
        if manifest != expect:
            keys = sorted(k for k in set(expect) | set(manifest) if expect.get(k) != manifest.get(k))
            self.problem(MANIFEST, f"differs from what the ledger's units give in {', '.join(keys[:6])}")

    def _check_manifest_counts(self, manifest: dict[str, Any], steps_of: dict[int, int]) -> None:
        stats = manifest.get("statistics") or {}
        if stats.get("total_episodes") != len(steps_of) or stats.get("total_steps") != sum(steps_of.values()):
            self.problem(MANIFEST, f"statistics say {stats.get('total_episodes')} episodes / "
                         f"{stats.get('total_steps')} steps, the files hold {len(steps_of)} / "
                         f"{sum(steps_of.values())}")
        if list((manifest.get("observation_space") or {}).get("images", {})) != list(self.layout.cameras):
            self.problem(MANIFEST, "observation_space.images does not name the written cameras")

    # ---- the paired reader -----------------------------------------------------------------------------------
    def _readback(self, res: ValidationResult) -> None:
        from robo_ray.readers import open_reader

        try:
            reader = open_reader(self.writer.out_url, self.writer.paired_reader, self.writer.storage_options)
            try:
                inv = reader.discover()
                errors = [f"{f.code}: {f.message}" for f in inv.findings if f.level == "error"]
                loaded = ""
                if self.ctx.loader_readback and inv.refs and not errors:
                    for ref in {inv.refs[0].episode_index: inv.refs[0], inv.refs[-1].episode_index: inv.refs[-1]}\
                            .values():
                        ep = reader.load_episode(ref)
                        if ep.length != ref.length:
                            errors.append(f"episode {ref.episode_index} loads {ep.length} steps, indexed {ref.length}")
                    loaded = ", first and last episode loaded"
            finally:
                close = getattr(reader, "close", None)
                if close is not None:
                    close()
        except Exception as exc:  # any reader failure is a validation failure, reported in one line
            res.add("ortf read-back", False, f"the ORTF reader refuses the dataset: {type(exc).__name__}: "
                    f"{str(exc).splitlines()[0][:300]}")
            return
        counts = (inv.episodes_count, inv.total_steps) == (res.episodes_written, res.steps_written)
        res.add("ortf read-back", counts and not errors,
                f"the ORTF reader finds {inv.episodes_count} episodes / {inv.total_steps} steps{loaded}"
                + (f"; errors: {'; '.join(errors[:5])}" if errors else ""))


def _image_fn(frames: dict[int, av.VideoFrame], depth: bool, channels: int) -> Callable[[int], np.ndarray]:
    """k -> the decoded frame at the k-th sampled step, as the source side of the comparison gets its frames."""
    keys = sorted(frames)

    def get(k: int) -> np.ndarray:
        frame = frames[keys[k]]
        if depth:  # as 16-bit PNG, decoded as the source's embedded depth images are
            return decode_image(png_bytes(frame.to_ndarray(format="gray16le")), 1)
        arr = frame.to_ndarray(format="gray" if channels == 1 else "rgb24")
        return arr[:, :, None] if arr.ndim == 2 else arr
    return get
