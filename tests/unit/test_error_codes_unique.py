"""Each stable error code (RRxxx refusals, EPxxx quarantines) is defined in one place: engineers adding readers in
parallel once gave two different meanings to EP208 and EP209 (a bag's gap and LeRobot's empty episode; a bag's
backward times and a Ray Data row a map broke)."""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "robo_ray"
# `code = "EP208"` on an error class, or a module constant `NAME = "EP208"`
DEFINITION = re.compile(r'^\s*(?:code|[A-Z][A-Z0-9_]*)\s*(?::\s*str\s*)?=\s*"((?:EP|RR)\d{3})"', re.M)


def test_every_code_has_one_definition() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        for m in DEFINITION.finditer(path.read_text()):
            where[m.group(1)].append(str(path.relative_to(ROOT.parent)))
    assert len(where) > 20, "the pattern found too few definitions: it no longer matches how codes are written"
    twice = {code: files for code, files in where.items() if len(files) > 1}
    assert not twice, f"codes defined more than once: {twice}"
