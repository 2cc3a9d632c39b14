"""What a run says and how it ends: `RunLog` (convert.log / errors.log lines, problems echoed to stderr) and
`RunOutcome` (exit code, where the dataset is, counts, the one-line message)."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TextIO


def utc_now() -> str:
    """The journal's and the logs' timestamp: UTC, to the second."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class RunLog:
    """Collects convert.log / errors.log lines and echoes problems to stderr, one line each."""

    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def info(self, msg: str) -> None:
        self.lines.append(f"{utc_now()} INFO {msg}")

    def warning(self, msg: str) -> None:
        self.lines.append(f"{utc_now()} WARNING {msg}")
        print(f"warning: {msg}", file=self.stderr, flush=True)

    def problem(self, msg: str) -> None:
        self.lines.append(f"{utc_now()} ERROR {msg}")
        self.errors.append(f"{utc_now()} {msg}")
        print(msg, file=self.stderr, flush=True)


@dataclass
class RunOutcome:
    """A finished run: its exit code (0, or 3 when validation failed or too much was quarantined) and summary."""

    exit_code: int
    out_url: str
    dataset_dir: str
    episodes_written: int
    quarantined: list[dict[str, Any]]
    validation_passed: bool
    message: str
    report_html: str | None = None  # URL of report.html, None when it could not be written
