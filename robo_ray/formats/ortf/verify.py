"""The ORTF v0.2 half of Validate at the dataset level (robo_ray/writers/base.py's `verify`), over the units'
checks (robo_ray/formats/ortf/unit_check.py: each chunk re-read on the worker right after its commit).

Per dataset (`run`): meta/manifest.json (the commit), every file of the ledger's units present with its size (one
listing per folder), the units' digests against the ledger (a chunk finalize renumbered is re-hashed), the meta/
files (episodes.parquet, tasks.jsonl, stats.json and manifest.json consistent with the units' checks and equal to
what the ledger's units give), the merged unit checks, then the paired reader's read-back of a sample of chunks.

Problems are collected per file: a damaged file is one failed check (`file <name>: ...`) naming it, whether a unit's
re-read or a dataset-level check found it, and checks that could only repeat it (the read-back) are skipped."""
from __future__ import annotations

import copy
import hashlib
import io
import json
import posixpath
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from robo_ray.formats.ortf.layout import EPISODES, MANIFEST, STATS, TASKS, chunk_name, episodes_schema
from robo_ray.formats.ortf.meta_files import build_meta
from robo_ray.formats.ortf.unit_check import OrtfUnitVerifier, file_detail
from robo_ray.stages.check_records import UnitChecks, ValidationResult
from robo_ray.stages.sampling import spread_sample
from robo_ray.storage import sha256_file
from robo_ray.writers.base import UnitResult
from robo_ray.writers.committed import listed_sizes, uncommitted_units


class OrtfVerifier(OrtfUnitVerifier):
    """Verification of an ORTF dataset written by OrtfWriter: `check_unit` (OrtfUnitVerifier) re-reads one unit's
    files, `run` does the dataset-level checks over the merged unit checks."""

    # ---- the dataset ---------------------------------------------------------------------------------------------
    def run(self, res: ValidationResult) -> bool:
        """Verify; returns whether the dataset is committed (a valid meta/manifest.json)."""
        manifest = self._check_manifest(res)
        if manifest is None:
            return False
        for name in (EPISODES, TASKS, STATS):
            p = self.path(name)
            self.meta[name] = self.fs.cat_file(p) if self.fs.exists(p) else None
            if self.meta[name] is None:
                self.problem(name, "missing")
            else:
                res.shard_sha256[name] = hashlib.sha256(self.meta[name]).hexdigest()
        res.shard_sha256[MANIFEST] = hashlib.sha256(self.meta[MANIFEST] or b"").hexdigest()
        results = sorted(self.ctx.results(), key=lambda r: r.shard_index)
        checks = self.ctx.unit_checks
        if checks is None:  # a caller that did not go through Validator: re-read every unit here
            checks = UnitChecks(self.mapping)
            for r in results:
                checks.add(self.check_unit(r))
        # the units' own failures per file, merged below with what the dataset-level checks find in the same file
        unit_bad: dict[str, list[str]] = {}
        others: list[tuple[str, str]] = []
        for check_name, detail in checks.failures:
            if check_name.startswith("file "):
                unit_bad.setdefault(check_name[len("file "):], []).append(detail)
            else:
                others.append((check_name, detail))
        tasks = self._read_tasks()
        self._check_present(results)
        rehashed = self._check_digests(results, checks, set(unit_bad))
        self._check_step_tasks(results, tasks)
        steps_of = checks.episode_steps
        self._check_episodes(results, steps_of, tasks)
        self._check_rebuild(results, manifest)
        self._check_manifest_counts(manifest, steps_of)

        merged = copy.copy(checks)  # the neutral merge, without the file failures named here
        merged.failures = others
        merged.apply(res, self.ctx.min_psnr_db)
        res.shard_sha256.update(rehashed)
        res.problems += checks.notes
        for name, msgs in unit_bad.items():
            self.bad[name] = msgs + self.bad.get(name, [])
        for name in sorted(self.bad):
            res.add(f"file {name}", False, file_detail(self.bad[name]))
        n = checks.counts
        named = sum(1 for name in unit_bad)
        if n.get("damaged_files", 0) > named:  # beyond what the units' capped failures name
            res.add("damaged files", False, f"{n['damaged_files']} damaged unit files, {named} named above")
        n_files = sum(len(r.all_files()) for r in results)
        unit_files = {name for r in results for name, _, _ in r.all_files()}
        if results and not unit_files & set(self.bad):
            res.add("checksums", True, f"{n_files} unit files, each with the ledger's size and sha256 (re-read "
                    "after its commit)")
        if n.get("videos") and not any(name.endswith(".mp4") for name in self.bad):
            res.add("videos", True, f"{n['videos']} MP4s: frame counts and sizes as the steps, first frames decode")
        if n.get("videos"):
            res.add("video copy", True, _copy_line(results, list(self.writer.layout.cameras)))
        nonfinite = n.get("nonfinite", 0)
        res.add("nan/inf", nonfinite == 0 or self.ctx.allow_nonfinite, f"NaN/Inf values: {nonfinite}"
                + (" (allowed by convert.nan_policy=allow)" if nonfinite and self.ctx.allow_nonfinite else ""))
        if self.bad or others:
            res.skip("ortf read-back", "damaged files are named above (reading them back would repeat it)")
        else:
            self._readback(res, results)
        return True

    # ---- manifest (the commit) ---------------------------------------------------------------------------------
    def _check_manifest(self, res: ValidationResult) -> dict[str, Any] | None:
        from robo_ray.formats.ortf.manifest_check import validate_manifest

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
        """The planned units not committed (the ledger's, their files by listing)."""
        u = uncommitted_units(self.fs, self.root, self.ctx.ledger,
                              lambda i, n: f"data/{chunk_name(i, n)}/steps.parquet")
        return f"; {u.line()}" if u.units else ""

    # ---- files present, digests --------------------------------------------------------------------------------
    def _check_present(self, results: list[UnitResult]) -> None:
        """Every file of every unit in the ledger exists with the ledger's size."""
        want = {name: size for r in results for name, size, _ in r.all_files()}
        listed = listed_sizes(self.fs, self.root, want)
        for name, size in want.items():
            got = listed.get(name)
            if got is None:
                self.problem(name, "missing")
            elif got != size:
                self.problem(name, f"{got} bytes, the ledger says {size} (modified after conversion)")

    def _check_digests(self, results: list[UnitResult], checks: UnitChecks, named: set[str]) -> dict[str, str]:
        """Each unit's re-read digests against the ledger. A chunk whose per-step task ids finalize rewrote after
        the worker's re-read (`extra["renumbered_from"]`: the digest finalize read) is hashed again here; returns
        those digests."""
        out: dict[str, str] = {}
        for r in results:
            for name, _size, digest in r.all_files():
                got = checks.sha256.get(name)
                if got is None or got == digest or name in self.bad:
                    continue  # not re-read (missing: named by the listing), or as the ledger says
                if name == r.filename and r.extra.get("renumbered_from") == got:
                    now = sha256_file(self.fs, self.path(name))
                    out[name] = now
                    if now != digest:
                        self.problem(name, f"sha256 {now[:12]}… differs from the ledger's {digest[:12]}… (modified "
                                     "after conversion)")
                elif name not in named:
                    self.problem(name, f"re-read after its commit with sha256 {got[:12]}…, the ledger says "
                                 f"{digest[:12]}…")
        return out

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

    def _check_step_tasks(self, results: list[UnitResult], tasks: list[str]) -> None:
        """A chunk's per-step task ids were checked against its own task list (`extra["step_tasks"]`); that list
        must be how meta/tasks.jsonl numbers the same tasks."""
        if self.meta.get(TASKS) is None or TASKS in self.bad:
            return
        for r in results:
            local = list(r.extra.get("step_tasks") or [])
            if local and tasks[:len(local)] != local:
                self.problem(TASKS, f"the per-step task ids of {r.filename} name {local[:5]}, which {TASKS} "
                             "numbers differently")

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
            want = build_meta(self.writer, results, self.ctx.inv)
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
    def _readback_sample(self, results: list[UnitResult]) -> list[UnitResult]:
        """The chunks the reader loads from: `ctx.readback_shards` non-empty ones spread over the dataset (first and
        last included; 0 = all)."""
        return spread_sample([r for r in results if r.episodes], self.ctx.readback_shards)

    def _readback(self, res: ValidationResult, results: list[UnitResult]) -> None:
        """The ORTF reader discovers the dataset (manifest, episode index, every file present) and loads the first
        and last episode of a sample of chunks."""
        from robo_ray.readers import open_reader

        try:
            reader = open_reader(self.writer.out_url, self.writer.paired_reader, self.writer.storage_options)
            try:
                inv = reader.discover()
                errors = [f"{f.code}: {f.message}" for f in inv.findings if f.level == "error"]
                loaded = ""
                if self.ctx.loader_readback and inv.refs and not errors:
                    refs = {r.episode_index: r for r in inv.refs}
                    sample = self._readback_sample(results)
                    for u in sample:
                        ids = [e for e, _ in u.episodes]
                        for e in dict.fromkeys([ids[0], ids[-1]]):
                            ref = refs.get(e)
                            if ref is None:
                                errors.append(f"episode {e} of {u.filename} is not in the reader's index")
                                continue
                            ep = reader.load_episode(ref)
                            if ep.length != ref.length:
                                errors.append(f"episode {e} loads {ep.length} steps, indexed {ref.length}")
                    full = len([r for r in results if r.episodes])
                    which = "every chunk" if len(sample) == full else f"{len(sample)} of {full} chunks"
                    loaded = (f"; first and last episode of {which} loaded ("
                              + ", ".join(posixpath.dirname(u.filename) for u in sample) + ")")
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


def _copy_line(results: list[UnitResult], cams: list[str]) -> str:
    """Per camera: episodes whose source packets were copied, episodes encoded and why (the units' ledger rows)."""
    parts = []
    for cam in cams:
        copied = sum(cam in (e.get("copied") or ()) for r in results for e in r.extra.get("episodes", []))
        why: dict[str, int] = {}
        for r in results:
            for reason, k in (r.extra.get("reencoded") or {}).get(cam, {}).items():
                why[reason] = why.get(reason, 0) + int(k)
        reasons = "; ".join(f"{r} ({k})" for r, k in list(why.items())[:3])
        parts.append(f"{cam}: {copied} episodes copied (packets as the source encoded them), "
                     f"{sum(why.values())} encoded" + (f" ({reasons})" if reasons else ""))
    return "; ".join(parts)
