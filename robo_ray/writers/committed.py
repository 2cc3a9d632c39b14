"""Which planned units a dataset holds as committed, from the run's ledger and one listing per folder: what every
writer's `verify` names when the run did not finish (the dataset's commit files are missing). A unit is committed
when the ledger has its entry and every file of that entry is present with the ledger's size."""
from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from robo_ray.storage import join
from robo_ray.writers.base import UnitResult

LISTED = 20  # units named in a line, the rest counted


def listed_sizes(fs: Any, root: str, rels: Iterable[str]) -> dict[str, int]:
    """Which of the `root`-relative files `rels` exist, with their sizes: one listing per folder (not one existence
    call per file); a missing folder means its files are missing."""
    by_folder: dict[str, set[str]] = {}
    for rel in rels:
        by_folder.setdefault(posixpath.dirname(rel), set()).add(posixpath.basename(rel))
    out: dict[str, int] = {}
    for folder, names in by_folder.items():
        try:
            entries = fs.ls(join(root, folder) if folder else root, detail=True)
        except FileNotFoundError:
            continue
        for e in entries:
            base = e["name"].rstrip("/").rsplit("/", 1)[-1]
            if base in names and e.get("type") != "directory":
                out[posixpath.join(folder, base)] = int(e.get("size") or 0)
    return out


@dataclass(frozen=True)
class Uncommitted:
    """The plan's units against what the dataset folder holds."""

    planned: int  # units in the plan (the ledger's num_shards)
    committed: int  # planned units whose ledger entry has every file present with its size
    units: list[str] = field(default_factory=list)  # main file of each planned unit not committed, in unit order
    changed: list[str] = field(default_factory=list)  # files of ledger entries missing or of another size

    def line(self) -> str:
        """One line naming the units not committed (the first `LISTED`), or "" when every one is."""
        if not self.units:
            return ""
        more = f" (and {len(self.units) - LISTED} more)" if len(self.units) > LISTED else ""
        gone = f"; missing or changed since their commit: {', '.join(self.changed[:LISTED])}" if self.changed else ""
        return f"units not committed: {', '.join(self.units[:LISTED])}{more}{gone}"


def uncommitted_units(fs: Any, root: str, ledger: dict[str, Any],
                      unit_file: Callable[[int, int], str] | None = None) -> Uncommitted:
    """The planned units of `ledger` not committed under `root` (the writer's dataset folder). A unit is named by
    its main file: the ledger's `unit_files`, else `unit_file(index, num_units)`, else "unit <index>"."""
    n = int(ledger.get("num_shards") or 0)
    names = list(ledger.get("unit_files") or [])
    if len(names) != n:
        names = [unit_file(i, n) if unit_file is not None else f"unit {i}" for i in range(n)]
    results = [UnitResult.from_dict(s) for s in ledger.get("shards", [])]
    listed = listed_sizes(fs, root, {name for r in results for name, _, _ in r.all_files()})
    changed = [name for r in results for name, size, _ in r.all_files() if listed.get(name) != size]
    bad = set(changed)
    done = {r.shard_index for r in results if not any(name in bad for name, _, _ in r.all_files())}
    return Uncommitted(n, len(done & set(range(n))), [names[i] for i in range(n) if i not in done], changed)
