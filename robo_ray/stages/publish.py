"""Publish: final_report.md with SHA256 of every output file, logs/, optional .tar.gz (stage E)."""
from __future__ import annotations

import io
import posixpath
import tarfile
from datetime import datetime, timezone
from typing import Any

from robo_ray.readers.base import Inventory
from robo_ray.stages.timings import StageClock, write_timings
from robo_ray.stages.check_records import ValidationResult
from robo_ray.stages.validation_report import STATUS_MARKS, marked_verdict
from robo_ray.storage import join, sha256_file, write_bytes_atomic, write_text_atomic
from robo_ray.writers import Writer


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


def _duration(s: float) -> str:
    m, s = divmod(int(round(s)), 60)
    h, m = divmod(m, 60)
    return f"{h}h {m}m {s}s" if h else f"{m}m {s}s" if m else f"{s}s"


def dataset_checksums(writer: Writer, known: dict[str, str] | None = None) -> dict[str, str]:
    """sha256 of every file of the written dataset, by name relative to its folder; `known` digests (Validate
    hashes the files it reads, just before) are used instead of reading those files again."""
    known = known or {}
    return {n: known.get(n) or sha256_file(writer.fs, join(writer.dataset_dir, n)) for n in writer.files()}


def visual_report_line(report_error: str | None) -> str:
    """The final report's link to report.html, or why there is none."""
    if report_error:
        return f"- **Visual report**: not written ({report_error}); the conversion is unaffected"
    return "- **Visual report**: [report.html](report.html) (frames next to the source with PSNR, plots, statistics)"


def final_report(writer: Writer, inv: Inventory, res: ValidationResult, checksums: dict[str, str],
                 sizes: dict[str, int], seconds: float, mode: str, quarantined: list[dict[str, Any]],
                 report_error: str | None = None, warnings: list[str] | None = None) -> str:
    """final_report.md; `report_error` says why report.html (linked from here) could not be written; `warnings`
    (e.g. episodes without an instruction) get their own section."""
    mapping = writer.mapping
    rel = writer.dataset_rel
    where = f"{writer.out_url}/{rel}" if rel else writer.out_url
    status = marked_verdict(res)
    lines = [f"# Conversion Report: {mapping.dataset_name}", "", "## Dataset Information",
             f"- **Source**: {inv.dataset_root}", f"- **Source Version**: {inv.source_format} {inv.source_version}",
             f"- **Target**: {writer.title}", f"- **Output**: {where}",
             f"- **Converted at**: {datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}",
             visual_report_line(report_error), "",
             "## Conversion Statistics", "", "| Metric | Value |", "|--------|-------|",
             f"| Episodes (source) | {inv.episodes_count} |", f"| Episodes (written) | {res.episodes_written} |",
             f"| Episodes (quarantined) | {len(quarantined)} |", f"| Total Steps (written) | {res.steps_written:,} |",
             f"| Files | {len(checksums)} |", f"| Total Size | {_human(sum(sizes.values()))} |",
             f"| Conversion Time | {_duration(seconds)} |", f"| Mode | {mode} |", "",
             "## Validation", "", f"Status: {status}", ""]
    lines += [f"- {STATUS_MARKS[c.status]} {c.name}: {c.detail}" for c in res.checks]
    if warnings:
        lines += ["", "## Warnings", "", *(f"- ⚠️ {w}" for w in warnings)]
    if inv.findings:
        lines += ["", "## Discover Findings", "", *finding_lines(inv)]
    if quarantined:
        lines += ["", "## Quarantined Episodes", "", "| Episode | Code | File | Reason |", "|---|---|---|---|"]
        lines += [f"| {q['episode_index']} | {q['code']} | {q.get('file') or ''} | {q['reason']} |"
                  for q in quarantined]
    lines += ["", "## Output Structure", "```", f"{rel or '.'}/"]
    lines += [f"├── {n}" for n in checksums]
    lines += ["```", "", "## Usage", *writer.usage(), "", "## Checksums", "", "| File | SHA256 |", "|------|--------|"]
    lines += [f"| {n} | {h} |" for n, h in checksums.items()]
    return "\n".join(lines) + "\n"


def finding_lines(inv: Inventory, per_code: int = 5) -> list[str]:
    """Discover's findings for the final report, at most `per_code` of each code (inventory.json has them all)."""
    shown: dict[str, int] = {}
    lines: list[str] = []
    for f in inv.findings:
        n = shown[f.code] = shown.get(f.code, 0) + 1
        if n <= per_code:
            lines.append(f"- {f.line()}")
    lines += [f"- ... and {n - per_code} more {code} (inventory.json)" for code, n in shown.items() if n > per_code]
    return lines


def write_archive(writer: Writer, checksums: dict[str, str]) -> str:
    """A .tar.gz of the written dataset, beside the output (member names start at the dataset's top folder)."""
    buf = io.BytesIO()
    fs = writer.fs
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in checksums:
            data = fs.cat_file(join(writer.dataset_dir, name))
            member = posixpath.join(*writer.dataset_rel.split("/")[1:], name) if writer.dataset_rel else name
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = join(writer.out_root, f"{writer.mapping.dataset_name}.tar.gz")
    write_bytes_atomic(fs, path, buf.getvalue())
    return path


def write_logs(fs, out_root: str, log_lines: list[str], error_lines: list[str],
               clock: StageClock | None = None) -> None:
    """logs/convert.log, logs/errors.log and, with a clock, logs/timings.json (robo_ray/stages/timings.py)."""
    write_text_atomic(fs, join(out_root, "logs", "convert.log"), "\n".join(log_lines) + "\n")
    write_text_atomic(fs, join(out_root, "logs", "errors.log"), "\n".join(error_lines) + ("\n" if error_lines else ""))
    write_timings(fs, out_root, clock)
