"""The parent's summary of a grading run: each class judged by the judge of its interface.

:mod:`labs.grading.judge` judges a DDP (chapter 9), :mod:`labs.grading.zero_judge` a ZeRO-1 optimizer and
:mod:`labs.grading.fsdp_judge` a small FSDP (chapter 13); the two later ones reuse the first one's tools.
A file that could not be graded at all (its import, a change to the grader, a class's shape) is one
input error instead of checks.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict

from ..result import Summary, check_true
from . import fsdp_judge, judge, zero_judge
from .judge import TOLERANCE

JUDGES = {"ddp": judge, "zero": zero_judge, "fsdp": fsdp_judge}  # 인터페이스(source.kind_of)마다 판정 모듈


def checks_of(kind: str) -> tuple[str, ...]:
    """The checks of an interface (:func:`labs.grading.source.kind_of`) in the order of diagnosis."""
    return JUDGES[kind].CHECKS


def input_error(ranks: list[dict]) -> str | None:
    """Why the file could not be graded at all (exit 2): its import, a change to the grader, a class's shape."""
    for r in ranks:
        if r["import_error"]:
            e = r["import_error"]
            advice = ("sys.exit()·exit()·quit()는 랭크를 끝내 버립니다. 파일 맨 위에서 부르지 말고 "
                      "if __name__ == \"__main__\": 아래로 옮기세요." if e["kind"] in ("SystemExit", "KeyboardInterrupt")
                      else "파일 맨 위(함수와 클래스 밖)에서 실행되는 코드를 확인하세요.")
            return (f"파일을 불러오는(import) 동안 랭크 {r['rank']}에서 {e['kind']}이(가) 났습니다: {e['text']}\n"
                    f"채점기는 랭크마다 이 파일을 불러옵니다. {advice}")
    for r in ranks:
        if r["tampered"]:
            return (f"이 파일이 채점기의 값을 바꿨습니다: {', '.join(r['tampered'][:5])}. 채점기 모듈(labs.…)에 값을 "
                    "대입하지 마세요. 판정 기준은 여러분의 코드가 닿지 않는 부모 프로세스에 있어 결과는 바뀌지 않습니다.")
    for cls in ranks[0]["classes"]:
        if cls["input_error"]:
            return cls["input_error"]
    return None


class GradeData(TypedDict):
    """The summary data of the 'grade' lab."""

    classes: list[dict[str, Any]]
    tolerance: float
    input_error: str | None


def summarize(ranks: list[dict], backend: str, params: dict) -> Summary:
    problem = input_error(ranks)
    if problem is not None:
        checks = [check_true(f"{name}.runs_without_error", False, problem, "파일을 불러와 클래스를 만들 수 있다")
                  for name in params["classes"].split()]
        return Summary({"classes": [], "tolerance": TOLERANCE, "input_error": problem}, checks)
    checks, classes = [], []
    for j, first in enumerate(ranks[0]["classes"]):
        mine, facts = JUDGES[first["kind"]].class_checks(ranks, j, params)
        checks += [dataclasses.replace(c, name=f"{first['name']}.{c.name}") for c in mine]
        errors = {}
        for r in ranks:
            for probe, text in r["classes"][j]["errors"].items():
                errors.setdefault(probe, f"랭크 {r['rank']}: {text}")
        classes.append({"name": first["name"], "kind": first["kind"], "bucketed": first["bucketed"], "errors": errors,
                        **facts, "checks": [c.name for c in mine]})
    return Summary({"classes": classes, "tolerance": TOLERANCE, "input_error": None}, checks)
