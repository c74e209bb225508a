"""The import graph of labs/, read from the AST of every module (function-level imports included): the one
builder the layer tests share (tests/test_engine_layers.py, tests/test_grade_layers.py).

An import statement loads the labs modules it names: ``import labs.x`` loads ``labs.x``; ``from P import n``
loads ``P`` (when it names a module) and ``P.n`` when that is a module; ``from . import n`` loads ``P.n`` when
that is a module, else the package ``P`` itself.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LABS = REPO / "labs"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def labs_modules() -> dict[str, Path]:
    """Every module of labs/ by its dotted name."""
    return {module_name(p): p for p in sorted(LABS.rglob("*.py"))}


def _target(importer: str, modules: Mapping[str, Path], node: ast.ImportFrom) -> str:
    """The absolute module a ``from … import`` names (before its imported names)."""
    if not node.level:
        return node.module or ""
    package = importer if modules[importer].name == "__init__.py" else importer.rpartition(".")[0]
    base = package.split(".")
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports(name: str, modules: Mapping[str, Path], top_level_only: bool = False) -> list[tuple[str, int]]:
    """The labs modules ``name`` imports, each with the line of its import statement."""
    tree = ast.parse(modules[name].read_text(encoding="utf-8"))
    nodes: Iterable[ast.AST] = tree.body if top_level_only else ast.walk(tree)
    found: list[tuple[str, int]] = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _target(name, modules, node)
            if node.module:
                found.append((base, node.lineno))
            found += [(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base, node.lineno)
                      for a in node.names]
    return [(target, line) for target, line in found if target in modules and target != name]


def import_graph(modules: Mapping[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the labs modules it imports (anywhere in the file)."""
    modules = labs_modules() if modules is None else modules
    return {name: {target for target, _ in imports(name, modules)} for name in modules}


def reached(graph: Mapping[str, Iterable[str]], start: str) -> dict[str, str]:
    """Every module ``start`` imports, directly or through others, with the module that imports it."""
    found: dict[str, str] = {}
    stack = [start]
    while stack:
        node = stack.pop()
        for nxt in graph.get(node, ()):
            if nxt not in found and nxt != start:
                found[nxt] = node
                stack.append(nxt)
    return found


def cycle_edges(graph: Mapping[str, Iterable[str]]) -> set[tuple[str, str]]:
    """Every import edge a → b that lies on a cycle, as the (a, b) pair sorted by name."""
    return {(min(a, b), max(a, b)) for a, edges in graph.items() for b in edges if a in reached(graph, b)}
