"""Publish: final_report.md with SHA256 of every output file, logs/, optional .tar.gz (stage E)."""
from __future__ import annotations

import io
import posixpath
import tarfile
from datetime import datetime, timezone
from typing import Any

from robo_ray.mapping import Mapping
from robo_ray.readers.base import Inventory
from robo_ray.stages.validate import ValidationResult
from robo_ray.storage import join, sha256_file, write_bytes_atomic, write_text_atomic


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


def dataset_checksums(fs, dataset_dir: str, known: dict[str, str] | None = None) -> dict[str, str]:
    """sha256 of every file in the RLDS version folder, by file name; `known` digests (Validate hashes every shard
    as it reads it, just before) are used instead of reading those files again."""
    known = known or {}
    names = [posixpath.basename(p) for p in sorted(fs.find(dataset_dir))]
    return {n: known.get(n) or sha256_file(fs, join(dataset_dir, n)) for n in names if ".tmp-" not in n}


def final_report(mapping: Mapping, inv: Inventory, res: ValidationResult, checksums: dict[str, str],
                 sizes: dict[str, int], seconds: float, mode: str, quarantined: list[dict[str, Any]],
                 out_url: str) -> str:
    shards = [n for n in checksums if ".tfrecord-" in n]
    rel = f"rlds/{mapping.dataset_name}/{mapping.version}"
    status = "✅ PASSED" if res.passed else "❌ FAILED"
    lines = [f"# Conversion Report: {mapping.dataset_name}", "", "## Dataset Information",
             f"- **Source**: {inv.dataset_root}", f"- **Source Version**: {inv.source_format} {inv.source_version}",
             "- **Target**: RLDS/TFDS format (TFRecord)", f"- **Output**: {out_url}/{rel}",
             f"- **Converted at**: {datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}", "",
             "## Conversion Statistics", "", "| Metric | Value |", "|--------|-------|",
             f"| Episodes (source) | {inv.episodes_count} |", f"| Episodes (written) | {res.episodes_written} |",
             f"| Episodes (quarantined) | {len(quarantined)} |", f"| Total Steps (written) | {res.steps_written:,} |",
             f"| Shards | {len(shards)} |", f"| Total Size | {_human(sum(sizes.values()))} |",
             f"| Conversion Time | {_duration(seconds)} |", f"| Mode | {mode} |", "",
             "## Validation", "", f"Status: {status}", ""]
    lines += [f"- {'✅' if c.passed else '❌'} {c.name}: {c.detail}" for c in res.checks]
    if quarantined:
        lines += ["", "## Quarantined Episodes", "", "| Episode | Code | File | Reason |", "|---|---|---|---|"]
        lines += [f"| {q['episode_index']} | {q['code']} | {q.get('file') or ''} | {q['reason']} |"
                  for q in quarantined]
    lines += ["", "## Output Structure", "```", f"{rel}/"]
    lines += [f"├── {n}" for n in checksums]
    lines += ["```", "", "## Usage", "```python", "import tensorflow_datasets as tfds", "",
              f"builder = tfds.builder_from_directory('{out_url}/{rel}')",
              "dataset = builder.as_dataset(split='train')", "for episode in dataset.take(1):",
              "    print(episode['episode_metadata']['episode_id'])",
              "    for step in episode['steps'].take(1):",
              "        print({k: v.shape for k, v in step['observation'].items()})", "```", "",
              f"Octo / OpenVLA style: `tfds.builder('{mapping.dataset_name}', data_dir='{out_url}/rlds')`.", "",
              "## Checksums", "", "| File | SHA256 |", "|------|--------|"]
    lines += [f"| {n} | {h} |" for n, h in checksums.items()]
    return "\n".join(lines) + "\n"


def write_archive(fs, out_root: str, dataset_dir: str, name: str) -> str:
    """A .tar.gz of the RLDS version folder, beside the output."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in sorted(fs.find(dataset_dir)):
            data = fs.cat_file(p)
            info = tarfile.TarInfo(posixpath.relpath(p, posixpath.dirname(posixpath.dirname(dataset_dir))))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = join(out_root, f"{name}.tar.gz")
    write_bytes_atomic(fs, path, buf.getvalue())
    return path


def write_logs(fs, out_root: str, log_lines: list[str], error_lines: list[str]) -> None:
    write_text_atomic(fs, join(out_root, "logs", "convert.log"), "\n".join(log_lines) + "\n")
    write_text_atomic(fs, join(out_root, "logs", "errors.log"), "\n".join(error_lines) + ("\n" if error_lines else ""))
