"""The grader's layers: ``import labs`` loads no lesson, and the package root, the grader, the CLI and the
``grade`` lab import each other without a cycle (no function-level import of a labs module hides one);
the grader's parent side reaches no rank-side module through any chain of imports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_env

LABS = Path(__file__).resolve().parents[1] / "labs"
# 순환이 없어야 하는 모듈: 패키지 뿌리(labs/__init__.py), CLI, grade 실습, 채점기 패키지 전체
CHECKED = ("labs", "labs.cli", "labs.lessons.grade")
CHECKED_PACKAGES = ("labs.grading",)
# 채점기의 랭크 쪽(읽는 사람의 코드와 같은 프로세스에서 재는 모듈)과 부모 쪽(판정·보고서·실행)
RANK_SIDE = {"labs.grading.rank", "labs.grading.probes", "labs.grading.zero_probes", "labs.grading.fsdp_probes",
             "labs.grading.reach"}
PARENT_SIDE = ("labs.grading", "labs.grading.source", "labs.grading.config", "labs.grading.verdicts",
               "labs.grading.judge", "labs.grading.zero_judge", "labs.grading.fsdp_judge", "labs.grading.summary",
               "labs.grading.hints", "labs.grading.report", "labs.grading.runner")


def module_name(path: Path) -> str:
    parts = path.relative_to(LABS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in LABS.rglob("*.py")}


def in_checked(name: str) -> bool:
    return name in CHECKED or any(name == p or name.startswith(p + ".") for p in CHECKED_PACKAGES)


def _target(importer: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from … import`` names (before its imported names)."""
    if not node.level:
        return node.module or ""
    package = importer if MODULES[importer].name == "__init__.py" else importer.rpartition(".")[0]
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


def imports(name: str, top_level_only: bool = False) -> list[tuple[str, int]]:
    """The labs modules ``name`` imports, with the line: ``from pkg import mod`` counts as ``pkg.mod``."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _target(name, node)
            found += [(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base, node.lineno)
                      for a in node.names]
    return [(target, line) for target, line in found if target in MODULES]


def cycles() -> list[list[str]]:
    """Every import cycle (any import, at any depth of the file) that passes through a checked module."""
    graph = {name: sorted({t for t, _ in imports(name)}) for name in MODULES}
    found = []
    for start in sorted(n for n in MODULES if in_checked(n)):
        stack = [(start, [start])]
        seen = set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    found.append(path + [start])
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    return found


def reached(start: str) -> dict[str, str]:
    """Every labs module ``start`` imports, directly or through others (any import, at any depth of a file),
    with the module that imports it."""
    found: dict[str, str] = {}
    stack = [start]
    while stack:
        node = stack.pop()
        for nxt, _ in imports(node):
            if nxt not in found and nxt != start:
                found[nxt] = node
                stack.append(nxt)
    return found


def test_every_grader_module_is_on_one_side():
    assert {n for n in MODULES if n.startswith("labs.grading")} == RANK_SIDE | set(PARENT_SIDE)


@pytest.mark.parametrize("name", PARENT_SIDE)
def test_the_parent_side_imports_no_rank_side_module(name):
    """The judges, the report and the runner never import what measures inside a rank, not even through
    another module: the parent's verdicts cannot depend on code that runs next to the reader's."""
    found = reached(name)
    assert sorted(RANK_SIDE & set(found)) == [], {m: found[m] for m in RANK_SIDE & set(found)}


def test_the_side_check_sees_a_rank_side_import(monkeypatch, tmp_path):
    """The check can fail: a judge that imports the probes, even inside a function, is reported."""
    fake = tmp_path / "verdicts.py"
    fake.write_text(MODULES["labs.grading.verdicts"].read_text(encoding="utf-8")
                    + "\n\ndef _late():\n    from . import probes\n", encoding="utf-8")
    monkeypatch.setitem(MODULES, "labs.grading.verdicts", fake)
    assert "labs.grading.probes" in reached("labs.grading.summary")


def test_importing_labs_loads_no_lesson():
    """``import labs`` (``labs.run``, ``labs.grade``) must not load a chapter's lesson module."""
    code = "import labs, sys; print([m for m in sys.modules if m.startswith('labs.lessons')])"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=clean_env(PYTHONPATH=str(LABS.parent)), cwd=LABS.parent)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", proc.stdout


def test_no_import_cycle_through_the_root_the_grader_or_the_cli():
    assert in_checked("labs") and in_checked("labs.grading.rank") and not in_checked("labs.launch")
    assert "labs.lessons.grade" in MODULES
    assert cycles() == []


@pytest.mark.parametrize("name", sorted(n for n in MODULES if in_checked(n)))
def test_the_grader_imports_labs_modules_at_the_top(name):
    """A labs import inside a function is how a cycle hides: the grader and the lab import at the top."""
    top = {t for t, _ in imports(name, top_level_only=True)}
    late = [f"{MODULES[name].name}:{line} {t}" for t, line in imports(name) if t not in top]
    assert late == [], late


def test_the_cycle_finder_sees_a_cycle(monkeypatch, tmp_path):
    """The check can fail: a function-level import back into the CLI is reported as a cycle."""
    fake = tmp_path / "summary.py"
    fake.write_text(MODULES["labs.grading.summary"].read_text(encoding="utf-8")
                    + "\n\ndef _late():\n    from .. import cli\n", encoding="utf-8")
    monkeypatch.setitem(MODULES, "labs.grading.summary", fake)
    assert any("labs.cli" in cycle for cycle in cycles())
