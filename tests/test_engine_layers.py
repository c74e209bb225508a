"""The import layers of labs/, read from the AST of every module (function-level imports included).

- labs/ddp/ (the code the book teaches) imports only torch, the standard library, labs/tools/ and
  labs.context / labs.errors: never the engine, a lesson, the grader or a figure.
- labs/tools/ (what rank functions share to measure) imports no lesson, DDP code, grader or figure.
- The engine (labs/*.py) imports no lesson.
- No lesson imports another lesson.
- labs/doctor/ (``python -m labs doctor``) imports no lesson, DDP code, grader or figure; its rank side
  (labs/doctor/rank/, loaded inside the reader's own process) imports nothing of labs outside itself.
- No import cycle anywhere.

There are no exceptions: a lab with a command of its own (``python -m labs bench``) hands the CLI its report
module through its ``Lab``, so the engine never imports a lesson.
"""

from __future__ import annotations

from import_graph import cycle_edges, import_graph

# What labs/ddp may import from labs/: the rank helpers, never the engine or a lesson.
UPPER_LAYERS = ("labs.lessons", "labs.ddp", "labs.grading", "labs.viz", "labs.widgets")  # labs/tools/ imports none
DDP_MAY_IMPORT = {"labs.context", "labs.errors"}  # and any of labs/tools/ (what rank functions share to measure)
DOCTOR_RANK = "labs.doctor.rank"  # runs in the reader's process, loaded without labs/__init__ (rank/bootstrap.py)


def _is_lesson(module: str) -> bool:
    return module.startswith("labs.lessons.")


def _is_engine(module: str) -> bool:
    return module.count(".") == 1 or module == "labs"


def _lesson_of(module: str) -> str:
    """The lab a lesson module belongs to: ``labs.lessons.bench.measure`` -> ``labs.lessons.bench``."""
    return ".".join(module.split(".")[:3])


def violations(graph: dict[str, set[str]]) -> set[tuple[str, str, str]]:
    found = set()
    for module, edges in graph.items():
        for target in edges:
            if module.startswith("labs.ddp") and not (target.startswith(("labs.ddp", "labs.tools"))
                                                      or target in DDP_MAY_IMPORT):
                found.add(("ddp imports engine", module, target))
            if module.startswith("labs.tools.") and target.startswith(UPPER_LAYERS):
                found.add(("tool imports an upper layer", module, target))
            if _is_engine(module) and _is_lesson(target):
                found.add(("engine imports lesson", module, target))
            if _is_lesson(module) and _is_lesson(target) and _lesson_of(module) != _lesson_of(target):
                found.add(("lesson imports lesson", module, target))
            if module.startswith("labs.doctor") and target.startswith(UPPER_LAYERS):
                found.add(("doctor imports an upper layer", module, target))
            if module.startswith(DOCTOR_RANK) and not target.startswith(DOCTOR_RANK):
                found.add(("doctor rank imports labs", module, target))
    found |= {("cycle", a, b) for a, b in cycle_edges(graph)}
    return found


def test_no_layer_violation():
    graph = import_graph()
    assert len(graph) > 50, "labs/의 모듈을 찾지 못했습니다"  # 빈 그래프로 통과하지 않게
    found = violations(graph)
    assert not found, "층을 넘는 import: " + "; ".join(" ".join(v) for v in sorted(found))


def test_the_rules_catch_a_broken_layout():
    graph = {
        "labs.ddp.ring": {"labs.launch"},
        "labs.tools.comms": {"labs.ddp.ring"},
        "labs.launch": {"labs.lessons.x"},
        "labs.lessons.x": {"labs.lessons.y"},
        "labs.lessons.y": {"labs.lessons.x"},
        "labs.doctor.checks": {"labs.grading.judge"},
        "labs.doctor.rank.steps": {"labs.errors", "labs.doctor.rank.record"},
    }
    assert violations(graph) == {
        ("doctor imports an upper layer", "labs.doctor.checks", "labs.grading.judge"),
        ("doctor rank imports labs", "labs.doctor.rank.steps", "labs.errors"),
        ("ddp imports engine", "labs.ddp.ring", "labs.launch"),
        ("tool imports an upper layer", "labs.tools.comms", "labs.ddp.ring"),
        ("engine imports lesson", "labs.launch", "labs.lessons.x"),
        ("lesson imports lesson", "labs.lessons.x", "labs.lessons.y"),
        ("lesson imports lesson", "labs.lessons.y", "labs.lessons.x"),
        ("cycle", "labs.lessons.x", "labs.lessons.y"),
    }


def test_a_lesson_package_may_import_its_own_modules_only():
    graph = {"labs.lessons.bench": {"labs.lessons.bench.measure"},
             "labs.lessons.bench.summary": {"labs.lessons.bench.measure", "labs.lessons.zero"}}
    assert violations(graph) == {("lesson imports lesson", "labs.lessons.bench.summary", "labs.lessons.zero")}


def test_relative_imports_resolve_to_modules():
    graph = import_graph()
    assert "labs.launch" in graph["labs.cli"]
    assert "labs.doctor.rank.record" in graph["labs.doctor.rank.main"]
    assert "labs.grading.rank" in graph["labs.lessons.grade"]
