"""Issue #13: the stages and the executors talk to the Reader / Writer contracts and name no format. Code
(identifiers and string constants, not docstrings or comments) in these modules must not contain a format name;
format knowledge lives in robo_ray/formats/ and the registries (robo_ray/readers/__init__.py,
robo_ray/writers/__init__.py)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORMAT_NAMES = re.compile(r"rlds|ortf|lerobot|minari", re.I)
NEUTRAL = sorted([*(ROOT / "robo_ray" / "stages").glob("*.py"), *(ROOT / "robo_ray" / "ray_exec").glob("*.py"),
                  *(ROOT / "robo_ray" / "executors").glob("*.py"), ROOT / "robo_ray" / "watchdog.py", ROOT / "robo_ray" / "writers" / "base.py",
                  ROOT / "ray_jobs" / "convert.py"])


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


def test_the_check_sees_code_but_not_docstrings() -> None:
    src = '"""RLDS docs are fine."""\nfrom robo_ray.formats.rlds import x\ny = "ortf"\n# lerobot comment\n'
    assert sorted(t for _, t in format_names_in_code(src)) == ["ortf", "robo_ray.formats.rlds"]


def test_registry_outputs_match_the_writer_classes() -> None:
    """prepare_destination reads the registry's `outputs` without importing writers: they must agree."""
    from robo_ray.writers import REGISTRY, writer_class

    for name, entry in REGISTRY.items():
        assert tuple(writer_class(name).OUTPUTS) == entry.outputs, name
