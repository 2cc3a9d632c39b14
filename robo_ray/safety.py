"""Guards for untrusted dataset metadata: path templates, shapes, sizes."""
from __future__ import annotations

import posixpath
import re
import string
from typing import Any

from robo_ray.errors import UnsafeInput

MAX_JSON_BYTES = 64 << 20
MAX_DIM = 1 << 16
MAX_ELEMENTS_PER_STEP = 1 << 26
MAX_EPISODES = 10_000_000
MAX_EPISODE_LENGTH = 10_000_000

_FORMAT_SPEC = re.compile(r"^(0?\d{1,2}d)?$")
_URL_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def render_path_template(template: str, allowed: dict[str, Any]) -> str:
    """Render an info.json path template with only known fields and `:0Nd` formats, staying under the root."""
    if not isinstance(template, str) or len(template) > 1024:
        raise UnsafeInput(f"path template is not a short string: {template!r:.80}")
    out: list[str] = []
    for literal, field, spec, conv in string.Formatter().parse(template):
        out.append(literal)
        if field is None:
            continue
        if field not in allowed:
            raise UnsafeInput(f"path template {template!r} uses unknown field {{{field}}}")
        if conv is not None or not _FORMAT_SPEC.match(spec or ""):
            raise UnsafeInput(f"path template {template!r} uses a disallowed format {{{field}:{spec}}}")
        value = allowed[field]
        out.append(format(value, spec) if spec else str(value))
    return check_relative_path("".join(out))


def check_relative_path(path: str) -> str:
    """A dataset-relative path must not be absolute, carry a scheme, or climb out with `..`."""
    if _URL_SCHEME.match(path) or path.startswith(("/", "\\")) or re.match(r"^[a-zA-Z]:", path):
        raise UnsafeInput(f"path {path!r} is not relative to the dataset root")
    norm = posixpath.normpath(path.replace("\\", "/"))
    if norm == ".." or norm.startswith("../") or "/../" in f"/{norm}/":
        raise UnsafeInput(f"path {path!r} escapes the dataset root")
    return norm


def check_shape(key: str, shape: Any, where: str = "") -> tuple[int, ...]:
    """Shapes come from JSON: a list of small positive ints. `where` (the metadata file) prefixes the message."""
    at = f"{where}: " if where else ""
    if not isinstance(shape, (list, tuple)) or len(shape) > 5:
        raise UnsafeInput(f"{at}feature {key!r}: shape {shape!r:.80} is not a list of at most 5 dims")
    dims: list[int] = []
    total = 1
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int) or d < 1 or d > MAX_DIM:
            raise UnsafeInput(f"{at}feature {key!r}: shape {shape!r} has a dim outside 1..{MAX_DIM}")
        dims.append(d)
        total *= d
    if total > MAX_ELEMENTS_PER_STEP:
        raise UnsafeInput(f"{at}feature {key!r}: shape {shape!r} is too large ({total} elements per step)")
    return tuple(dims)


def check_count(name: str, value: Any, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > limit:
        raise UnsafeInput(f"{name} = {value!r:.40} is not an integer in 0..{limit}")
    return value


def check_declared_counts(where: str, declared: dict[str, Any], limits: dict[str, int]) -> None:
    """Declared totals (info.json `total_episodes`, ...) are only compared with what the files hold, but one that is
    not a plausible count (`1e12`, `-1`, `"many"`) means the metadata cannot be trusted: refuse it. Absent or null
    keys are fine."""
    for key, limit in limits.items():
        value = declared.get(key)
        if value is not None:
            check_count(f"{where}: {key}", value, limit)
