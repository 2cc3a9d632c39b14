"""The stdout protocol of the standalone compat scripts that import nothing but their venv's packages
(openpi_norm_stats.py, gr00t_modality.py): one line of JSON, {"ok": true, ...} or {"ok": false, "error": ...}, exit
0 / 1, the traceback on stderr. Standard library only: the scripts find it beside them (sys.path[0])."""
from __future__ import annotations

import json
import sys
import traceback
from typing import Any, Callable


def report(build: Callable[[], dict[str, Any]]) -> int:
    """Print build()'s result as the JSON line (or the error it raised); the exit code."""
    try:
        out = {"ok": True, **build()}
    except Exception as exc:  # noqa: BLE001 - one line of JSON whatever failed
        traceback.print_exc(file=sys.stderr)
        out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out))
    return 0 if out["ok"] else 1
