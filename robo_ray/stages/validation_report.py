"""The validation's report files: validation_report.md, diff_summary.json and dataset_statistics.json, and the
verdict marks the Markdown reports share."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import numpy as np

from robo_ray.stages.check_records import ValidationResult
from robo_ray.stages.norm_stats import loader_statistics
from robo_ray.stats import KLL_K, RANK_ERROR
from robo_ray.storage import join, write_text_atomic


STATUS_MARKS: dict[str, str] = {"passed": "✅", "failed": "❌", "skipped": "⏭️ skipped"}  # in the Markdown reports


def marked_verdict(res: ValidationResult) -> str:
    """The verdict with its mark, for the Markdown reports."""
    return f"{'✅' if res.passed else '❌'} {res.verdict()}"


def validation_markdown(res: ValidationResult, name: str, seconds: float) -> str:
    status = marked_verdict(res)
    lines = [f"# Validation Report: {name}", "", "## Summary", f"- **Status**: {status}",
             f"- **Validated at**: {datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}",
             f"- **Duration**: {seconds:.1f}s", f"- **Episodes written**: {res.episodes_written}",
             f"- **Steps written**: {res.steps_written}", "", "## Checks", "", "| Check | Result | Detail |",
             "|---|---|---|"]
    lines += [f"| {c.name} | {STATUS_MARKS[c.status]} | {c.detail} |" for c in res.checks]
    if res.problems:
        lines += ["", "## Problems", ""] + [f"- {p}" for p in res.problems[:200]]
    return "\n".join(lines) + "\n"


def diff_summary_fields(res: ValidationResult) -> dict[str, Any]:
    """diff_summary.json without its per-episode steps. `passed`: no check failed; per check `status` (passed /
    failed / skipped, `detail` saying why a check was skipped) and `passed` (false for a skipped check)."""
    return {"passed": res.passed, "counts": res.counts(), "episodes_written": res.episodes_written,
            "steps_written": res.steps_written,
            "checks": [{"name": c.name, "status": c.status, "passed": c.passed, "detail": c.detail}
                       for c in res.checks],
            "psnr_db": {"count": len(res.psnr), "mean": float(np.mean(res.psnr)) if res.psnr else None,
                        "min": float(min(res.psnr)) if res.psnr else None},
            "shard_sha256": res.shard_sha256, "problems": res.problems[:1000]}


def diff_summary(res: ValidationResult) -> dict[str, Any]:
    """diff_summary.json as a dict (episode_steps keyed by the episode index as a string)."""
    return {**diff_summary_fields(res), "episode_steps": {str(k): v for k, v in res.episode_steps.items()}}


def diff_summary_text(res: ValidationResult, chunk: int = 8192) -> str:
    """diff_summary.json's text (`diff_summary` indented), its per-episode steps written from the arrays in
    chunks: no {episode: steps} dict of the whole dataset."""
    text = json.dumps(diff_summary_fields(res), indent=2)
    ids, lengths = res.episode_ids.tolist(), res.episode_lengths.tolist()
    parts = [",\n".join(f'    "{e}": {n}' for e, n in zip(ids[i:i + chunk], lengths[i:i + chunk]))
             for i in range(0, len(ids), chunk)]
    steps = "{\n" + ",\n".join(parts) + "\n  }" if parts else "{}"
    return text[:-2] + f',\n  "episode_steps": {steps}\n}}'


def write_validation_outputs(fs, out_root: str, res: ValidationResult, name: str, seconds: float) -> None:
    """validation_report.md, diff_summary.json and dataset_statistics.json at the output root."""
    write_text_atomic(fs, join(out_root, "validation_report.md"), validation_markdown(res, name, seconds))
    write_text_atomic(fs, join(out_root, "diff_summary.json"), diff_summary_text(res))
    write_text_atomic(fs, join(out_root, "dataset_statistics.json"), json.dumps(dataset_statistics(res), indent=2))


def dataset_statistics(res: ValidationResult) -> dict[str, Any]:
    """dataset_statistics.json: the loaders' layout at the top level (`loader_statistics`, when the writer kept
    mergeable statistics), every feature's statistics under `features`, provenance under `robo_ray`."""
    out = loader_statistics(res.stats, res.episodes_written, res.steps_written) if res.stats is not None else \
        {"num_transitions": res.steps_written, "num_trajectories": res.episodes_written}
    out["features"] = res.statistics
    out["robo_ray"] = {
        "note": "normalization statistics over every written step of every split (float64 math on the stored "
                "values); count = steps. Top level: the layout Octo's and OpenVLA's loaders read as "
                "dataset_statistics (README 'Statistics and splits').",
        "action": res.stats.groups["action"] if res.stats is not None else [],
        "proprio": res.stats.groups["proprio"] if res.stats is not None else [],
        "quantiles": f"q01/q99 (= p01/p99) from Apache DataSketches KLL (k={KLL_K}): normalized rank error <= "
                     f"{RANK_ERROR:.5f} with 99% confidence, exact up to {KLL_K} steps",
        "quantile_rank_error": RANK_ERROR}
    return out
