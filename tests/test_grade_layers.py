"""The grader's layers: ``import labs`` loads no lesson, and the package root, the grader, the CLI and the
``grade`` lab import each other without a cycle (no function-level import of a labs module hides one);
the grader's parent side reaches no rank-side module through any chain of imports."""

from __future__ import annotations

import subprocess
import sys

import import_graph
import pytest
from conftest import clean_env
from import_graph import LABS, cycle_edges, labs_modules, reached

# 순환이 없어야 하는 모듈: 패키지 뿌리(labs/__init__.py), CLI, grade 실습, 채점기 패키지 전체
CHECKED = ("labs", "labs.cli", "labs.lessons.grade")
CHECKED_PACKAGES = ("labs.grading",)
# 채점기의 랭크 쪽(읽는 사람의 코드와 같은 프로세스에서 재는 모듈)과 부모 쪽(판정·보고서·실행)
RANK_SIDE = {"labs.grading.rank", "labs.grading.probes", "labs.grading.zero_probes", "labs.grading.fsdp_probes",
             "labs.grading.reach"}
PARENT_SIDE = ("labs.grading", "labs.grading.source", "labs.grading.config", "labs.grading.verdicts",
               "labs.grading.judge", "labs.grading.zero_judge", "labs.grading.fsdp_judge", "labs.grading.summary",
               "labs.grading.hints", "labs.grading.report", "labs.grading.runner")


MODULES = labs_modules()


def in_checked(name: str) -> bool:
    return name in CHECKED or any(name == p or name.startswith(p + ".") for p in CHECKED_PACKAGES)


def imports(name: str, top_level_only: bool = False) -> list[tuple[str, int]]:
    return import_graph.imports(name, MODULES, top_level_only)


def cycles() -> set[tuple[str, str]]:
    """Every import edge on a cycle (any import, at any depth of the file) that touches a checked module."""
    return {edge for edge in cycle_edges(import_graph.import_graph(MODULES)) if in_checked(edge[0]) or in_checked(edge[1])}


def test_every_grader_module_is_on_one_side():
    assert {n for n in MODULES if n.startswith("labs.grading")} == RANK_SIDE | set(PARENT_SIDE)


@pytest.mark.parametrize("name", PARENT_SIDE)
def test_the_parent_side_imports_no_rank_side_module(name):
    """The judges, the report and the runner never import what measures inside a rank, not even through
    another module: the parent's verdicts cannot depend on code that runs next to the reader's."""
    found = reached(import_graph.import_graph(MODULES), name)
    assert sorted(RANK_SIDE & set(found)) == [], {m: found[m] for m in RANK_SIDE & set(found)}


def test_the_side_check_sees_a_rank_side_import(monkeypatch, tmp_path):
    """The check can fail: a judge that imports the probes, even inside a function, is reported."""
    fake = tmp_path / "verdicts.py"
    fake.write_text(MODULES["labs.grading.verdicts"].read_text(encoding="utf-8")
                    + "\n\ndef _late():\n    from . import probes\n", encoding="utf-8")
    monkeypatch.setitem(MODULES, "labs.grading.verdicts", fake)
    assert "labs.grading.probes" in reached(import_graph.import_graph(MODULES), "labs.grading.summary")


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
    assert cycles() == set()


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
    assert any("labs.cli" in edge for edge in cycles())
