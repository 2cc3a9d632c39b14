"""Discover-stage consistency checks for LeRobot sources, reported as findings (never raised)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from robo_ray.readers.base import Finding, Inventory

if TYPE_CHECKING:
    from robo_ray.formats.lerobot.reader import LeRobotReader

MAX_LISTED = 20


def check_inventory(reader: "LeRobotReader", inv: Inventory) -> list[Finding]:
    """The spec's checks: counts vs info.json, monotonic contiguous indices, referenced files exist."""
    findings: list[Finding] = []
    declared_eps = inv.declared.get("total_episodes")
    if isinstance(declared_eps, int) and declared_eps != inv.episodes_count:
        findings.append(Finding("error", "D101", f"info.json total_episodes={declared_eps} but the episode index "
                                f"lists {inv.episodes_count} episodes", declared_eps, inv.episodes_count))
    declared_frames = inv.declared.get("total_frames")
    if isinstance(declared_frames, int) and declared_frames != inv.total_steps:
        findings.append(Finding("error", "D102", f"info.json total_frames={declared_frames} but the episode "
                                f"lengths sum to {inv.total_steps}", declared_frames, inv.total_steps))
    findings += _check_splits(inv)
    indices = [r.episode_index for r in inv.refs]
    if indices != list(range(len(indices))):
        findings.append(Finding("warning", "D103", "episode indices are not contiguous 0..N-1",
                                f"0..{len(indices) - 1}", _short(indices)))
    findings += _check_global_ranges(inv)
    present = reader.existing({p for r in inv.refs for p in r.source_files()})  # one listing per folder
    findings += _check_files(inv, present)
    findings += _misplaced_videos(reader, inv, present)
    findings += _check_data_rows(reader, inv, present)
    return findings


def _misplaced_videos(reader: "LeRobotReader", inv: Inventory, present: set[str]) -> list[Finding]:
    """D111 when not one video file of a camera is where the video_path template puts them but the dataset holds
    MP4s elsewhere (a tool that wrote `video/...` while info.json says `videos/...`): they are named with the
    option that reads them, never guessed into the conversion. One recursive listing, only in that case."""
    cams: dict[str, list[str]] = {}
    for r in inv.refs:
        for key, v in r.videos:
            cams.setdefault(key, []).append(v.path)
    lost = [key for key, paths in cams.items() if paths and not any(p in present for p in paths)]
    if not lost:
        return []
    try:  # the lost cameras' own paths are absent by definition; `present` holds the other cameras' MP4s
        found = sorted(p for p in reader.find_files(".mp4") if p not in present)
    except Exception:  # noqa: BLE001 - a hint only: the D106 findings already name every missing file
        return []
    if not found:
        return []
    return [Finding("warning", "D111", f"no video file of {', '.join(lost)} is where video_path "
                    f"{reader.info.get('video_path')!r} puts them, but the dataset holds {len(found)} other .mp4 "
                    f"files (e.g. {', '.join(found[:3])}): if they are these cameras' videos, give their template "
                    f"as --set source.options.video_path=...", reader.info.get("video_path"), found[:3])]


def _check_splits(inv: Inventory) -> list[Finding]:
    splits = inv.declared.get("splits")
    if not isinstance(splits, dict):
        return []
    declared = 0
    for name, rng in splits.items():
        try:
            a, b = (int(x) for x in str(rng).split(":"))
        except ValueError:
            return [Finding("warning", "D108", f"info.json splits[{name!r}] = {rng!r} is not a 'from:to' range")]
        declared += b - a
    if declared != inv.episodes_count:
        return [Finding("error", "D108", f"info.json splits cover {declared} episodes but the episode index lists "
                        f"{inv.episodes_count}", declared, inv.episodes_count)]
    return []


def _check_data_rows(reader: "LeRobotReader", inv: Inventory, present: set[str]) -> list[Finding]:
    """Rows per data file (parquet footer only) against the episode lengths the index assigns to it."""
    import pyarrow.parquet as pq

    expected: dict[str, int] = {}
    for r in inv.refs:
        expected[r.data_path] = expected.get(r.data_path, 0) + r.length
    out: list[Finding] = []
    for path, n in expected.items():
        if path not in present:  # D106 (_check_files)
            continue
        try:
            with reader.open_binary(path) as f:
                rows = pq.ParquetFile(f).metadata.num_rows
        except Exception as exc:  # pyarrow raises several types for a bad footer
            out.append(Finding("error", "D109", f"data file {path} is unreadable: {exc}", path, None))
            continue
        if rows != n:
            out.append(Finding("error", "D107", f"data file {path} has {rows} rows but its episodes' lengths sum "
                               f"to {n}", n, rows))
        if len(out) >= MAX_LISTED:
            break
    return out


def _check_global_ranges(inv: Inventory) -> list[Finding]:
    out: list[Finding] = []
    prev_end = None
    for r in inv.refs:
        if r.global_from is None or r.global_to is None:
            continue
        if r.global_to - r.global_from != r.length:
            out.append(Finding("error", "D104", f"episode {r.episode_index}: dataset_to_index - dataset_from_index "
                               f"= {r.global_to - r.global_from} but length = {r.length}",
                               r.length, r.global_to - r.global_from))
        if prev_end is not None and r.global_from != prev_end:
            kind = "gap" if r.global_from > prev_end else "overlap"
            out.append(Finding("error", "D105", f"episode {r.episode_index}: start index {r.global_from} leaves a "
                               f"{kind} after the previous episode's end {prev_end}", prev_end, r.global_from))
        prev_end = r.global_to
    return out


def _check_files(inv: Inventory, present: set[str]) -> list[Finding]:
    """D106 for every source file of an episode that is not among the `present` ones."""
    out: list[Finding] = []
    missing_eps: dict[str, list[int]] = {}
    for r in inv.refs:
        for path in r.source_files():
            if path not in present:
                missing_eps.setdefault(path, []).append(r.episode_index)
    for path, eps in missing_eps.items():
        if len(out) >= MAX_LISTED:
            out.append(Finding("error", "D106", f"... and {len(missing_eps) - MAX_LISTED} more missing files"))
            break
        out.append(Finding("error", "D106", f"missing file {path} (episodes {_short(eps)})", path, None))
    return out


def _short(values: list[int], n: int = 10) -> str:
    s = ", ".join(str(v) for v in values[:n])
    return s + (f", ... ({len(values)} in all)" if len(values) > n else "")
