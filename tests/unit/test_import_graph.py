"""Issue #30: no import circle inside robo_ray/. The graph is built from the AST: every `import` and
`from ... import` anywhere in a module counts (a lazy import inside a function still ties the two modules
together), except those under `if TYPE_CHECKING:`, which never run. (Counting those too still finds cycles made of
type hints only: a format's verifier, sink and finalize modules name their writer's class,
formats/lerobot/checks.py its reader's.)"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "robo_ray"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes under `if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
            if name == "TYPE_CHECKING":
                for child in node.body:
                    skip.update(id(n) for n in ast.walk(child))
    return skip


def imported_modules(source: str, name: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of `known` that the module `name` imports, anywhere but under TYPE_CHECKING. `from a import b`
    counts `a.b` when that is a module, else `a`."""
    tree = ast.parse(source)
    skip = _type_checking_nodes(tree)
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.add(sub if sub in known else module)
    # `import a.b.c` imports a, a.b and a.b.c; keep the deepest module we know.
    resolved = set()
    for mod in found:
        while mod and mod not in known:
            mod = mod.rpartition(".")[0]
        if mod and mod != name:
            resolved.add(mod)
    return resolved


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    paths = sorted((root / package).rglob("*.py"))
    names = {module_name(p, root): p for p in paths}
    known = set(names)
    return {name: imported_modules(p.read_text(), name, p.name == "__init__.py", known)
            for name, p in names.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle path ([a, b, ..., a]) through every strongly connected component of more than one module (or a
    self-import)."""
    return [_cycle_through(comp, graph) for comp in strong_components(graph)]


def strong_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module, or a self-import (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return components


def _cycle_through(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest cycle from the component's first module back to itself, inside the component."""
    start, members = component[0], set(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    path = [start]
                    while v != start:
                        path.append(v)
                        v = previous[v]
                    return [start, *reversed(path[1:]), start]
                if w not in previous:
                    previous[w] = v
                    nxt.append(w)
        frontier = nxt
    return component


def test_no_import_cycle_in_robo_ray() -> None:
    graph = import_graph()
    report = []
    for comp in strong_components(graph):
        edges = [f"{a} -> {b}" for a in comp for b in sorted(graph[a] & set(comp))]
        report.append(f"cycle {' -> '.join(_cycle_through(comp, graph))}; all edges among them: {', '.join(edges)}")
    assert not report, "import cycles in robo_ray/:\n" + "\n".join(report)


def test_the_graph_sees_lazy_and_relative_imports_but_not_type_checking() -> None:
    known = {"p", "p.a", "p.b", "p.c", "p.sub", "p.sub.d"}
    src = ("from typing import TYPE_CHECKING\nfrom . import a\nfrom .sub import d\n"
           "def f():\n    import p.b\n"
           "if TYPE_CHECKING:\n    from p import c\n")
    assert imported_modules(src, "p.x", False, known) == {"p.a", "p.sub.d", "p.b"}
    assert imported_modules("from .. import a\n", "p.sub.d", False, known) == {"p.a"}


def test_cycles_are_found_with_their_edges() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"], ["e", "e"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def _imports_ray(path: Path) -> bool:
    """Whether the module imports Ray anywhere (lazy imports too)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        if any(n == "ray" or n.startswith("ray.") for n in names):
            return True
    return False


def test_ray_stays_in_ray_exec_and_the_ray_data_glue() -> None:
    """Issue #29: robo_ray/data/ (the Ray Data glue) may import Ray like robo_ray/ray_exec/; the core never does,
    and nothing in the core imports the glue (it is a leaf: it uses the stages, not the other way round) but the
    CLI, lazily, for `run --source` (as it imports ray_exec for its Ray executor)."""
    allowed = (ROOT / PACKAGE / "ray_exec", ROOT / PACKAGE / "data")
    paths = sorted((ROOT / PACKAGE).rglob("*.py"))
    outside = [str(p.relative_to(ROOT)) for p in paths if not any(a in p.parents for a in allowed) and _imports_ray(p)]
    assert not outside, f"modules outside ray_exec/ and data/ import Ray: {outside}"
    assert any(_imports_ray(p) for p in (ROOT / PACKAGE / "data").rglob("*.py"))  # the check sees the glue's imports
    graph = import_graph()
    users = sorted(m for m, deps in graph.items() if not m.startswith(f"{PACKAGE}.data") and m != f"{PACKAGE}.cli"
                   and any(d == f"{PACKAGE}.data" or d.startswith(f"{PACKAGE}.data.") for d in deps))
    assert not users, f"core modules import robo_ray.data: {users}"
