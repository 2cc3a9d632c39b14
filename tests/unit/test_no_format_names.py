"""Issues #13 and #30: outside robo_ray/formats/ the code talks to the Reader / Writer contracts and names no
format. Code (identifiers and string constants, not docstrings or comments) in every module of robo_ray/ and
ray_jobs/ must not contain a format name, except in robo_ray/formats/, the registries (robo_ray/readers/__init__.py,
robo_ray/writers/__init__.py) and the entry points that list the formats (robo_ray/cli.py, robo_ray/config.py)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORMAT_NAMES = re.compile(r"rlds|ortf|lerobot|minari", re.I)
EXEMPT = {ROOT / "robo_ray" / "readers" / "__init__.py", ROOT / "robo_ray" / "writers" / "__init__.py",
          ROOT / "robo_ray" / "cli.py", ROOT / "robo_ray" / "config.py"}
NEUTRAL = sorted(p for p in [*(ROOT / "robo_ray").rglob("*.py"), *(ROOT / "ray_jobs").rglob("*.py")]
                 if p not in EXEMPT and (ROOT / "robo_ray" / "formats") not in p.parents)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def format_names_in_code(source: str) -> list[tuple[int, str]]:
    """(line, text) of every identifier or non-docstring string constant naming a format."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
        elif isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.Attribute):
            text = node.attr
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            text = node.name
        elif isinstance(node, ast.alias):
            text = node.name
        elif isinstance(node, ast.ImportFrom):
            text = node.module or ""
        elif isinstance(node, ast.arg):
            text = node.arg
        if text and FORMAT_NAMES.search(text):
            hits.append((getattr(node, "lineno", 0), text))
    return hits


@pytest.mark.parametrize("path", NEUTRAL, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_names_no_format(path: Path) -> None:
    hits = format_names_in_code(path.read_text())
    assert not hits, f"{path.relative_to(ROOT)} names a format outside docstrings: {hits}"


def test_the_neutral_list_covers_the_core() -> None:
    rel = {str(p.relative_to(ROOT)) for p in NEUTRAL}
    assert {"robo_ray/spool.py", "robo_ray/stages/discover.py", "robo_ray/writers/base.py", "robo_ray/watchdog.py",
            "ray_jobs/convert.py", "robo_ray/data/__init__.py", "robo_ray/data/datasource.py", "robo_ray/data/sink.py",
            "robo_ray/data/sources.py", "robo_ray/data/write_job.py"} <= rel  # the Ray Data glue (#29) included
    assert not {r for r in rel if r.startswith("robo_ray/formats/")} and "robo_ray/cli.py" not in rel


def test_the_check_sees_code_but_not_docstrings() -> None:
    src = '"""RLDS docs are fine."""\nfrom robo_ray.formats.rlds import x\ny = "ortf"\n# lerobot comment\n'
    assert sorted(t for _, t in format_names_in_code(src)) == ["ortf", "robo_ray.formats.rlds"]


def test_registry_outputs_match_the_writer_classes() -> None:
    """prepare_destination reads the registry's `outputs` without importing writers: they must agree."""
    from robo_ray.writers import REGISTRY, writer_class

    for name, entry in REGISTRY.items():
        assert tuple(writer_class(name).OUTPUTS) == entry.outputs, name
