"""Resume (`--resume`): is the output the same job (job.json's config, the ledger's plan fingerprint), which of
its units are already committed, and reopening it for this run (stale temps removed, the commit withdrawn).

The output's job.json and the ledger's plan fingerprint must equal this run's (else `OutputConflict` RR401, or a
fresh start with `--overwrite`); a shard counts as done when its ledger entry matches the plan and the file's size
(and sha256 with `verify_resume`) equals the entry. Only the other units run. Shard names come from the plan, so a
redone unit rewrites the same bytes under the same name."""
from __future__ import annotations

import hashlib
import json
from typing import Any

from robo_ray.config import JobConfig
from robo_ray.errors import OutputConflict
from robo_ray.mapping import Mapping
from robo_ray.stages.destination import prepare_destination, remove_commit_marker
from robo_ray.stages.journal import keep_progress_of, read_ledger
from robo_ray.stages.plan import Unit
from robo_ray.stages.unit_failures import UNIT_FAILURE_CODES
from robo_ray.storage import join, read_json_or_none
from robo_ray.writers import UnitResult, Writer

# config keys that change how a run is supervised, not what it writes: a --resume may change them
EXECUTION_KEYS = (("convert", "unit_timeout_s"), ("convert", "read_timeout_s"), ("convert", "decode_ahead"),
                  ("convert", "decode_thread"), ("target", "shared"))


def _config_view(cfg_dump: dict[str, Any]) -> dict[str, Any]:
    """The part of job.json that decides "same job": everything but where the output is (we are reading it) and
    the watchdog's timeouts (EXECUTION_KEYS)."""
    view = json.loads(json.dumps(cfg_dump))
    view.get("target", {}).pop("url", None)
    for section, key in EXECUTION_KEYS:
        view.get(section, {}).pop(key, None)
    return view


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else k))
    return out


def config_differences(previous: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Dotted keys whose values differ between two job.json dumps (ignoring target.url)."""
    a, b = _flat(_config_view(previous)), _flat(_config_view(current))
    return sorted(k for k in set(a) | set(b) if a.get(k, "<unset>") != b.get(k, "<unset>"))


def plan_fingerprint(mapping: Mapping, units: list[Unit]) -> dict[str, str]:
    """Hashes of what the shards' bytes depend on besides the config: the mapping and the unit plan."""
    plan = hashlib.sha256(b"[")  # = sha256(json.dumps([[index, num_shards, [episode rows]] per unit])), streamed
    for k, u in enumerate(units):
        rows = [[r.episode_index, r.length, list(r.source_files())] + ([r.split] if r.split else []) for r in u.refs]
        plan.update(((", " if k else "") + json.dumps([u.index, u.num_shards, rows])).encode())
    plan.update(b"]")
    return {"mapping": hashlib.sha256(mapping.model_dump_json().encode()).hexdigest(), "plan": plan.hexdigest()}


def committed_units(writer: Writer, units: list[Unit], ledger: dict[str, Any] | None,
                    verify: bool = True) -> list[UnitResult]:
    """The ledger's units that are really done: entry matches the plan, every file's size (and sha256) match.

    Units quarantined as a whole (worker crashes, repeated failures) are not done: a resume retries them."""
    done: list[UnitResult] = []
    by_index = {u.index: u for u in units}
    for entry in (ledger or {}).get("shards", []):
        try:
            res = UnitResult.from_dict(entry)
        except TypeError:
            continue
        unit = by_index.get(res.shard_index)
        if unit is None or res.filename not in ("", *writer.unit_filenames(unit)):
            continue
        if any(q.get("code") in UNIT_FAILURE_CODES for q in res.quarantined):
            continue
        covered = _covered(res)
        if sorted(covered) != sorted(unit.episode_indices):
            continue
        if writer.is_committed(res, verify):
            done.append(res)
    return done


def check_resume(fs, out_root: str, cfg: JobConfig, cfg_dump: dict[str, Any],
                 overwrite: bool) -> tuple[bool, dict[str, Any] | None]:
    """Decide, before the lock, whether the destination holds the same job (by its config). Returns (resuming,
    previous ledger); when not resuming the destination is prepared for a fresh run (our files only)."""
    prev_job = read_json_or_none(fs, join(out_root, "job.json")) if fs.exists(out_root) else None
    if prev_job is None:  # nothing committed yet (or a fresh destination): start clean, our files only
        prepare_destination(fs, out_root, True, cfg.target.url, cfg.target.format)
        return False, None
    diffs = config_differences(prev_job, cfg_dump)
    if diffs:
        if not overwrite:
            raise OutputConflict(f"cannot resume into {cfg.target.url}: the config differs from the first run's "
                                 f"({', '.join(diffs[:6])}); use --overwrite to start over", code="RR401")
        prepare_destination(fs, out_root, True, cfg.target.url, cfg.target.format)
        return False, None
    return True, read_ledger(fs, out_root)


def reopen_for_resume(fs, out_root: str, cfg: JobConfig, writer: Writer, units: list[Unit],
                      fingerprint: dict[str, str], previous_ledger: dict[str, Any] | None, overwrite: bool,
                      verify: bool) -> tuple[bool, list[UnitResult]]:
    """Once the plan is known: the same plan (fingerprint) as the first run's? Returns (still resuming, the units
    already committed). A different plan is RR401, or with `overwrite` a fresh start. Resuming removes the stale
    temps and, when units are left to convert, withdraws the commit (the writer's commit files and commit.json)."""
    old = (previous_ledger or {}).get("fingerprint")
    if old is not None and old != fingerprint:
        what = " and ".join(k for k in ("mapping", "plan") if old.get(k) != fingerprint[k])
        if not overwrite:
            raise OutputConflict(f"cannot resume into {cfg.target.url}: the {what} differ from the first run's "
                                 "(source or mapping changed); use --overwrite to start over", code="RR401")
        prepare_destination(fs, out_root, True, cfg.target.url, cfg.target.format)
        return False, []
    writer.remove_stale_temps()
    previous = committed_units(writer, units, previous_ledger, verify)
    keep_progress_of(fs, out_root, {e for r in previous for e in _covered(r)})  # units redone journal again
    if len(previous) < len(units):  # un-commit: units are about to change until the new commit
        for name in writer.commit_files():
            path = join(writer.dataset_dir, name)
            if fs.exists(path):
                fs.rm(path)
    remove_commit_marker(fs, out_root)  # this run publishes again
    return True, previous


def _covered(res: UnitResult) -> list[int]:
    """The episodes a committed unit accounts for: written or quarantined."""
    return [e for e, _ in res.episodes] + [int(q["episode_index"]) for q in res.quarantined]
