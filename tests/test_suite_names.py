"""Test files are named one way: ``tests/test_<area>_<topic>.py`` (CONTRIBUTING.md lists the areas)."""

from __future__ import annotations

import re
from pathlib import Path

AREAS = ("book", "site", "engine", "lab", "grade", "doctor", "suite")
NAME = re.compile(rf"test_({'|'.join(AREAS)})_[a-z0-9_]+\.py")


def test_every_test_file_is_named_by_its_area():
    files = sorted(p.name for p in Path(__file__).resolve().parent.glob("test_*.py"))
    assert len(files) > 50, files  # 빈 목록으로 통과하지 않게
    assert [name for name in files if not NAME.fullmatch(name)] == []


def test_the_rule_refuses_other_names():
    assert NAME.fullmatch("test_lab_traps.py") and NAME.fullmatch("test_grade_layers.py")
    assert not any(NAME.fullmatch(n) for n in ("test_traps.py", "test_grading_layers.py", "test_lessons_zero.py"))
