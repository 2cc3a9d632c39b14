"""Who owns the destination: the names robo-ray may replace there (`our_outputs`), preparing it for a fresh run
(`prepare_destination`), the rule for a local destination on a multi-node cluster (`check_shared_destination`),
and the commit marker commit.json, the run's last write (`publish_commit_marker`)."""
from __future__ import annotations

import json
from typing import Any

from robo_ray.config import JobConfig
from robo_ray.errors import DestinationNotEmpty, LocalDestinationOnCluster, OutputConflict
from robo_ray.executors.base import Executor
from robo_ray.stages.journal import JOURNAL_DIR
from robo_ray.stages.run_lock import LOCK_NAME, check_not_locked
from robo_ray.storage import create_exclusive, is_local, join, read_json_or_none
from robo_ray.writers import DEFAULT_TARGET, REGISTRY as WRITERS

# the run's own files at the output root; each writer adds its dataset's entries (Writer.outputs())
RUN_OUTPUTS = ("inventory.json", "episode_index.csv", "mapping.md", "mapping.yaml", "progress.jsonl",
               "ledger.json", "validation_report.md", "diff_summary.json", "final_report.md", "logs", "job.json",
               "dataset_statistics.json", "commit.json", "report.html", JOURNAL_DIR, LOCK_NAME,
               "norm_stats.json")  # norm_stats.json: openpi's normalization statistics (a target's Validate may write)

# the commit marker: the run's last write, a conditional create (two runs racing on one destination: one publishes)
COMMIT_MARKER = "commit.json"


def our_outputs(fs, out_root: str, target_format: str) -> set[str]:
    """The top-level names robo-ray may replace at an output root: the run's files, this target's dataset entries
    and those of the target an earlier run there wrote (its job.json says which). Another target's names are not
    ours here: a user's own `data/` beside an RLDS output is never deleted."""
    names = set(RUN_OUTPUTS)
    formats = {target_format}
    previous = read_json_or_none(fs, join(out_root, "job.json"))
    if isinstance(previous, dict):
        formats.add(str((previous.get("target") or {}).get("format") or DEFAULT_TARGET))
    for fmt in formats:
        entry = WRITERS.get(fmt)
        if entry is not None:
            names |= set(entry.outputs)
    return names


def prepare_destination(fs, out_root: str, overwrite: bool, out_url: str,
                        target_format: str = DEFAULT_TARGET) -> None:
    """Refuse a non-empty destination unless --overwrite; with it, remove only robo-ray's own outputs."""
    if not fs.exists(out_root):
        fs.makedirs(out_root, exist_ok=True)
        return
    if not fs.isdir(out_root):
        raise DestinationNotEmpty(f"destination {out_url} exists and is not a directory")
    entries = [e.rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(out_root, detail=False)]
    if LOCK_NAME in entries and not overwrite:  # another run got the lock since check_not_locked
        check_not_locked(fs, out_root, out_url, take_over=False)
    if entries and not overwrite:
        raise DestinationNotEmpty(f"destination {out_url} is not empty (use --overwrite to replace its outputs)")
    # a temp left by a killed write of one of our own outputs (ledger.json.tmp-xxxx) is ours too
    ours = our_outputs(fs, out_root, target_format)
    foreign = [e for e in entries if e.split(".tmp-", 1)[0] not in ours and not e.endswith(".tar.gz")]
    if overwrite and foreign:
        raise DestinationNotEmpty(f"destination {out_url} holds files robo-ray did not write "
                                  f"({', '.join(sorted(foreign)[:5])}); refusing to overwrite")
    for e in entries:
        if e != LOCK_NAME:  # the lock is this run's (taken over) or handled by RunLock
            fs.rm(join(out_root, e), recursive=True)


def check_shared_destination(cfg: JobConfig, out_fs, executor: Executor) -> None:
    """Refuse a local destination (a path, file://) when the executor's workers run on more than one node: each
    node would write its shards to its own disk. `target.shared` (--shared-destination) declares it shared."""
    node_count = getattr(executor, "node_count", None)
    if cfg.target.shared or node_count is None or not is_local(out_fs):
        return
    nodes = node_count()
    if nodes > 1:
        raise LocalDestinationOnCluster(
            f"the destination {cfg.target.url} is a local path and the Ray cluster has {nodes} nodes: each node "
            "would write its shards to its own disk; use an object store (s3://, gs://), or, if every node sees "
            "this path (NFS, a shared volume), pass --shared-destination (config: target.shared: true)")


def publish_commit_marker(fs, out_root: str, out_url: str, marker: dict[str, Any]) -> None:
    """Create commit.json only if it does not exist yet (S3 If-None-Match, GCS ifGenerationMatch=0, local hard
    link): of two runs that raced on one destination, only the first to get here publishes (else RR402)."""
    path = join(out_root, COMMIT_MARKER)
    try:
        create_exclusive(fs, path, json.dumps(marker, indent=2, sort_keys=True).encode())
    except FileExistsError:
        other = (read_json_or_none(fs, path) or {}).get("run_id", "unknown")
        raise OutputConflict(f"{out_url} was published by another run ({other}) while this one "
                             "ran; this run's result is not committed (check the output, then rerun with "
                             "--resume or --overwrite)", code="RR402") from None


def remove_commit_marker(fs, out_root: str) -> None:
    """A resumed run publishes again: the earlier run's commit.json goes first."""
    path = join(out_root, COMMIT_MARKER)
    if fs.exists(path):
        fs.rm(path)
