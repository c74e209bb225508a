"""What every lab of ``labs.registry`` must do, one parametrised test per lab: its registry entry says in Korean
what it shows and declares its record and data as TypedDicts, and a test file runs it. What a run of a lab must
keep (every check passes, says in Korean what it compares, and exactly the expected checks are not applicable)
is ``conftest.assert_checks_hold``, which each lab's file calls on its own runs; every parameter of every lab is
walked with bad values in tests/test_engine_params.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import is_typeddict

import pytest
from conftest import assert_checks_hold, has_hangul

import labs
from labs.result import check_equal, not_applicable

TESTS = Path(__file__).resolve().parent
LABS = sorted(labs.all_labs())
TEST_SOURCES = {p.name: p.read_text(encoding="utf-8") for p in sorted(TESTS.glob("test_*.py")) if p.name != Path(__file__).name}


def runs_of(name: str) -> list[str]:
    """The test files that run lab ``name`` (``labs.run("name", …)`` or ``python -m labs run name``)."""
    call = re.compile(rf"""(\brun\(|"run", )"{re.escape(name)}"[,)]""")
    return [file for file, text in TEST_SOURCES.items() if call.search(text)]


def test_the_registry_has_the_labs():
    assert len(LABS) > 20 and "zero" in LABS and "grade" in LABS, LABS  # 빈 목록으로 통과하지 않게


@pytest.mark.parametrize("name", LABS)
def test_every_lab_declares_its_contract(name):
    lab = labs.get_lab(name)
    assert lab.name == name
    assert has_hangul(lab.description), lab.description
    assert is_typeddict(lab.record) and is_typeddict(lab.data), f"{name}: record/data must be TypedDicts"
    assert lab.record_keys and lab.data_keys, name


@pytest.mark.parametrize("name", LABS)
def test_every_lab_is_run_by_a_test(name):
    assert runs_of(name), f"no test file runs the lab {name!r}"


def test_a_lab_no_test_runs_is_seen():
    assert runs_of("no_such_lab") == [] and "test_lab_zero.py" in runs_of("zero")


def test_the_run_contract_can_fail():
    """``assert_checks_hold`` refuses a failing check, an English description, an unexpected or missing
    not-applicable check and a result without checks."""
    def result(*checks):
        return labs.LabResult("x", 2, "gloo", [], {}, {c.name: c for c in checks})

    same, na = check_equal("same", 1, 1, "두 값이 같다"), not_applicable("more", "N=1이면 비교할 랭크가 없다")
    assert_checks_hold(result(same, na), {"more"})
    assert_checks_hold(result(same, na))
    for bad, expected in [(result(check_equal("same", 1, 2, "두 값이 같다")), set()),
                          (result(check_equal("same", 1, 1, "equal")), set()),
                          (result(same, na), set()), (result(same), {"more"}), (result(), set())]:
        with pytest.raises(AssertionError):
            assert_checks_hold(bad, expected)
